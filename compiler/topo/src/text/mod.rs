//! The topology file format: what `braid topo` prints and `--topo FILE` reads.
//!
//! Line-oriented text, one statement per line, `#` starts a comment. The first
//! comment of the form `# braid topology vN` is the header; it must come before
//! any statement, and this build reads version 1. Statements:
//!
//! ```text
//! node <k>                                          nodes are declared 0, 1, 2, … in order
//! gpu <name> node=<k> rank=<r> [numa=<n>] [bus=<pci>] [model=<text>]
//! nvswitch <name> node=<k>
//! pcie-switch <name> node=<k> [bus=<pci>]
//! host-bridge <name> node=<k> [bus=<pci>]
//! cpu <name> node=<k> numa=<n> [model=<text>]
//! nic <name> node=<k> [numa=<n>] [bus=<pci>] [dev=<os name>]
//! network <name>
//! link <a> <b> kind=nvlink count=<links> gen=<1-5> [bw=<GB/s>] [lat=<us>]
//! link <a> <b> kind=pcie gen=<1-6> width=<lanes> [bw=] [lat=]
//! link <a> <b> kind=smp [bw=] [lat=]
//! link <a> <b> kind=ib|roce|eth rate=<Gb/s> [bw=] [lat=]
//! ```
//!
//! A vertex is declared before a link names it. `bw` (GB/s per direction) and
//! `lat` (microseconds per hop) default to the kind's nominal values; the writer
//! always prints them, so printing and reading back is exact. Values containing
//! spaces, `#`, `"` or `\` are written in double quotes with `\"`, `\\`, `\n`,
//! `\t` escapes.
//!
//! The writer prints the canonical order: the header, then per node its `node`
//! line, its vertices and its links, then the network vertices and the links
//! between nodes. Reading any valid file and writing it gives that order.

mod lex;
mod parse;
mod write;

/// The header line of the current format version.
pub const HEADER: &str = "# braid topology v1";

/// The header's prefix, before the version.
const HEADER_PREFIX: &str = "# braid topology ";
