//! The physical chunk locations a move reads and writes on each of its ranks.
//!
//! Dependencies are decided on physical locations (a [`Layout`] merges in-place aliases),
//! exactly as the dataflow graph and the plan verifier decide them.

use crate::moves::{Move, MoveKind};
use braid_ir::{Layout, LocId};
use braid_plan::Slice;

/// What one move does to one rank's memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Access {
    pub reads: Vec<LocId>,
    pub writes: Vec<LocId>,
}

impl Access {
    /// Whether the two touch a common location, at least one of them writing it.
    pub fn conflicts(&self, other: &Access) -> bool {
        let hits = |a: &[LocId], b: &[LocId]| a.iter().any(|l| b.contains(l));
        hits(&self.writes, &other.writes)
            || hits(&self.writes, &other.reads)
            || hits(&self.reads, &other.writes)
    }
}

/// The locations of `s` on `rank`. Instantiation has checked bounds, so a slice outside
/// its buffer is a bug upstream.
pub fn locs(layout: &Layout, rank: u32, s: Slice) -> impl Iterator<Item = LocId> + '_ {
    (0..s.count).map(move |i| {
        layout
            .loc(s.buf, rank, s.offset + i)
            .expect("instantiation keeps references inside existing buffers")
    })
}

/// What `m` reads and writes on `rank` (nothing when it has no step there).
pub fn access(m: &Move, rank: u32, layout: &Layout) -> Access {
    let mut a = Access::default();
    match m.kind {
        MoveKind::Local {
            rank: r,
            reduce,
            src,
            dst,
        } if r == rank => {
            a.reads.extend(locs(layout, rank, src));
            if reduce {
                a.reads.extend(locs(layout, rank, dst));
            }
            a.writes.extend(locs(layout, rank, dst));
        }
        MoveKind::Local { .. } => {}
        MoveKind::Transfer(t) => {
            if t.from == rank {
                a.reads.extend(locs(layout, rank, t.src));
            }
            if t.to == rank {
                if let Some(acc) = &t.acc {
                    a.reads.extend(locs(layout, rank, *acc));
                }
                a.writes.extend(locs(layout, rank, t.dst));
            }
        }
    }
    a
}
