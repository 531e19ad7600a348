//! Braid's model of a machine: which GPUs there are, how they are wired, and
//! how good the path between any two of them is.
//!
//! A [`Topology`] is a [petgraph] graph whose vertices are GPUs, NVSwitch
//! fabrics, PCIe switches, host bridges, CPUs (NUMA nodes), NICs and network
//! fabrics, and whose edges are [`Link`]s (NVLink, PCIe, SMP, InfiniBand, RoCE,
//! Ethernet) with a bandwidth per direction and a latency per hop.
//!
//! ```text
//!  "nvswitch:8" ─┐                              ┌─> path(a, b): class, GB/s, us, route
//!  "pcie:4"     ─┼─> Topology::from_arg ──> Topology ─┼─> to_text / summary / fingerprint
//!  "cluster:2x8"─┤          ▲                   └─> n_ranks, node_of, ranks_of_node, uniform_g
//!  a file       ─┘   TopologyBuilder (braid-detect, presets, parser)
//! ```
//!
//! **Ranks** are the GPUs, numbered node-major: `rank = first rank of its node +
//! local index` (for a uniform cluster, `node * G + local`).
//!
//! **Paths** are chosen as NCCL chooses them: the widest route (largest
//! bottleneck bandwidth), then the fewest hops, then the least latency; a
//! route never passes through a GPU, stays inside the node between two GPUs of
//! one node, and crosses between nodes only through NICs and network vertices.
//! The [`PathClass`] of a route is the worst of its hops (NVL < PIX < PXB < PHB
//! < SYS < NET), and every cross-node pair is NET.
//!
//! **Architecture invariant:** this crate is plain data. It never touches a GPU,
//! a driver, the file system beyond reading a named file, or the network;
//! detecting the local machine lives in `braid-detect`.
//!
//! `docs/topology.md` describes the model, the presets and the file format.

mod arg;
mod builder;
mod class;
mod error;
mod fingerprint;
pub mod ifname;
mod link;
mod path;
mod preset;
mod routes;
mod search;
mod summary;
pub mod text;
mod topology;
mod vertex;

pub use arg::MAX_FILE_BYTES;
pub use builder::{TopologyBuilder, MAX_LINKS, MAX_RANKS, MAX_VERTICES};
pub use class::PathClass;
pub use error::TopoError;
pub use link::{Link, LinkKind, MAX_BANDWIDTH_GBPS, MAX_LATENCY_US, SMP_GBPS};
pub use path::{Path, LOCAL_BANDWIDTH_GBPS};
pub use preset::{Preset, PRESET_NIC_GBITS, PRESET_NVLINKS};
pub use topology::Topology;
pub use vertex::{Cpu, Gpu, Nic, Vertex, VertexId, VertexKind};

#[cfg(test)]
mod tests;
