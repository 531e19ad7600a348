//! The `<algo>` element: dialect, collective, sizes, modes, protocol and byte range.
//!
//! Dialect rule: a file is in the **executor dialect** (Azure/msccl-executor-nccl, written
//! by Azure/msccl-tools) exactly when `<algo>` has an `outofplace` attribute, which that
//! runtime requires and the v1 runtime never reads. Otherwise it is **v1**
//! (microsoft/msccl, microsoft/msccl-tools, TACCL). The spelling of reduce-scatter
//! (`reduce_scatter` / `reducescatter`) is accepted in both: emitters mix them up, and
//! the spelling alone says nothing the `outofplace` rule does not.

use crate::attrs::Attrs;
use crate::error::{shorten, XmlError};
use crate::parse::Elem;
use braid_ir::{Collective, ModeSet, Protocol};
use braid_plan::verify::{MAX_CHANNELS, MAX_LOCATIONS};
use braid_plan::ByteRange;

/// v1's default `maxBytes` when absent: 128 MB, exclusive.
pub const V1_DEFAULT_MAX_BYTES: u64 = 1 << 27;

/// The two XML dialects (see the module documentation for how they are told apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// microsoft/msccl: `reduce_scatter`, no `outofplace`, optional `[minBytes, maxBytes)`.
    V1,
    /// Azure/msccl-executor-nccl: `reducescatter`, `outofplace`, required
    /// `[minBytes, maxBytes]` with `maxBytes = 0` unbounded.
    Executor,
}

/// What `<algo>` says, converted to braid's terms.
#[derive(Clone, Debug)]
pub(crate) struct Header {
    pub name: String,
    pub collective: Collective,
    pub root: Option<u32>,
    pub n_ranks: u32,
    pub chunks: u32,
    pub nchannels: u32,
    pub protocol: Protocol,
    pub modes: ModeSet,
    pub bytes: Option<ByteRange>,
}

fn collective(name: &str) -> Option<Collective> {
    Some(match name {
        "allreduce" => Collective::Allreduce,
        "allgather" => Collective::Allgather,
        "reduce_scatter" | "reducescatter" => Collective::ReduceScatter,
        "alltoall" => Collective::Alltoall,
        "broadcast" => Collective::Broadcast,
        "reduce" => Collective::Reduce,
        _ => return None,
    })
}

/// Reads `<algo>`; `None` when any attribute was wrong (the errors say which).
pub(crate) fn read(elem: &Elem, fallback_name: &str, errors: &mut Vec<XmlError>) -> Option<Header> {
    let before = errors.len();
    let label = || "<algo>".to_string();
    let mut a = Attrs {
        elem,
        label: &label,
        errors,
    };
    let dialect = if elem.get("outofplace").is_some() {
        Dialect::Executor
    } else {
        Dialect::V1
    };
    let name = elem
        .get("name")
        .map_or_else(|| fallback_name.to_string(), str::to_string);
    let n_ranks = a.int_in("ngpus", 1, 1 << 16).map(|v| v as u32);
    let chunks = a
        .int_in("nchunksperloop", 1, i64::from(u32::MAX))
        .map(|v| v as u32);
    // MSCCL runtimes have 32 channels (NCCL's MAXCHANNELS), as does braid.
    let nchannels = a
        .int_in("nchannels", 1, MAX_CHANNELS as i64)
        .map(|v| v as u32);
    // Refused before anything is sized by them: the verifier tracks at most
    // MAX_LOCATIONS chunks over all ranks and buffers (`in` and `out` are at most C each).
    if let (Some(n), Some(c)) = (n_ranks, chunks) {
        let total = u64::from(n) * 2 * u64::from(c);
        if total > MAX_LOCATIONS {
            a.error(format!(
                "ngpus=\"{n}\" and nchunksperloop=\"{c}\" make {total} chunk locations of in and out, more than the {MAX_LOCATIONS} braid verifies"
            ));
        }
    }
    let protocol = a.text("proto").and_then(|p| match p {
        "Simple" => Some(Protocol::Simple),
        "LL" => Some(Protocol::Ll),
        "LL128" => Some(Protocol::Ll128),
        other => {
            a.error(format!(
                "proto=\"{}\" is not a protocol (expected Simple, LL or LL128)",
                shorten(other)
            ));
            None
        }
    });
    let coll = a.text("coll").and_then(|c| {
        let found = collective(c);
        if found.is_none() {
            a.error(format!(
                "coll=\"{}\" is not a collective braid imports (allreduce, allgather, reduce_scatter/reducescatter, alltoall, broadcast, reduce)",
                shorten(c)
            ));
        }
        found
    });
    // MSCCL has no root attribute (the root is a call argument); braid's exporter writes
    // one, which the runtimes ignore. A rooted import without it is for root 0.
    let root = match coll {
        Some(c) if c.is_rooted() => a
            .opt_int_in("root", 0, i64::from(u32::MAX))
            .map(|r| Some(r.unwrap_or(0) as u32)),
        _ => Some(None),
    };
    let inplace = a.flag("inplace");
    let modes = match dialect {
        // v1 selects an algorithm only for calls whose in-place-ness matches `inplace`.
        Dialect::V1 => inplace.map(|ip| {
            if ip {
                ModeSet::IN_PLACE
            } else {
                ModeSet::OUT_OF_PLACE
            }
        }),
        Dialect::Executor => match (inplace, a.flag("outofplace")) {
            (Some(ip), Some(oop)) => {
                if !ip && !oop {
                    a.error(
                        "inplace=\"0\" and outofplace=\"0\": the algorithm would never be used",
                    );
                    None
                } else {
                    Some(ModeSet {
                        in_place: ip,
                        out_of_place: oop,
                    })
                }
            }
            _ => None,
        },
    };
    if coll == Some(Collective::Alltoall) && modes.is_some_and(|m| m.in_place) {
        a.error("alltoall has no in-place mode, but the algorithm declares inplace=\"1\"");
    }
    let bytes = match dialect {
        Dialect::V1 => {
            let min = a.opt_int_in("minBytes", 0, i64::MAX);
            let max = a.opt_int_in("maxBytes", 0, i64::MAX);
            match (min, max) {
                (Some(min), Some(max)) => Some(ByteRange {
                    min: min.unwrap_or(0) as u64,
                    max: Some(max.map_or(V1_DEFAULT_MAX_BYTES, |m| m as u64)),
                }),
                _ => None,
            }
        }
        Dialect::Executor => {
            let min = a.int_in("minBytes", 0, i64::MAX);
            let max = a.int_in("maxBytes", 0, i64::MAX - 1);
            match (min, max) {
                // Inclusive in the executor; braid's bound is exclusive.
                (Some(min), Some(max)) => Some(ByteRange {
                    min: min as u64,
                    max: (max != 0).then_some(max as u64 + 1),
                }),
                _ => None,
            }
        }
    };
    if let Some(r) = bytes {
        if r.max.is_some_and(|m| m <= r.min) {
            a.error(format!(
                "the byte range is empty: minBytes is {} but the largest size served is {}",
                r.min,
                r.max.unwrap_or(0).saturating_sub(1)
            ));
        }
    }
    if let (Some(c), Some(n), Some(ch)) = (coll, n_ranks, chunks) {
        if c.has_k() && ch % n != 0 {
            a.error(format!(
                "nchunksperloop=\"{ch}\" is not a multiple of ngpus=\"{n}\", which {c} needs"
            ));
        }
    }
    if a.errors.len() != before {
        return None;
    }
    // Every size is the same as no range at all; keep one spelling of it.
    let bytes = bytes.filter(|r| r.min != 0 || r.max.is_some());
    Some(Header {
        name,
        collective: coll?,
        root: root?,
        n_ranks: n_ranks?,
        chunks: chunks?,
        nchannels: nchannels?,
        protocol: protocol?,
        modes: modes?,
        bytes,
    })
}
