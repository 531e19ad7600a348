//! Steps that ranks of one launch can do without the FIFO. When a sender's step sends
//! chunks of its `in` (which an out-of-place call never writes) and the matching receive
//! only stores or reduces them (`recv`, `rrc`), the receiver can read the sender's `in`
//! where the sender would have read it: one pass over the bytes instead of a copy into
//! the FIFO and a copy out of it, and no flag round trip. Whether a call may do so is for
//! the backend to decide when it runs (the CUDA kernel decides per launch, from what both
//! ends see alike); this module marks the pairs of steps that qualify, from the plan
//! alone, and the cost model prices them. Pure data.
//!
//! Pairs come from [`crate::wiring::links`] (the k-th sending step of a connection meets
//! its k-th receiving step). Only connections whose two sequences pair up step by step,
//! each pair moving the same number of chunks, are considered: both ends then cut each
//! pair into the same slices, and leaving a pair out of the FIFO on both ends keeps every
//! other slice where it was.

use crate::plan::{Plan, StepKind};
use crate::wiring::Link;
use braid_ir::{Buf, Collective};
use std::collections::{BTreeMap, BTreeSet};

/// A step of a plan: (rank, block, step), each an index.
pub type At = (u32, u32, u32);

/// The steps that may go without the FIFO.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Direct {
    /// Sending steps the sender skips when its receiver reads them itself.
    pub sends: BTreeSet<At>,
    /// Receiving steps that read the sender's `in`, from its chunk `value` on.
    pub recvs: BTreeMap<At, u32>,
}

impl Direct {
    /// Whether step `at` is either end of a direct pair.
    pub fn contains(&self, at: At) -> bool {
        self.sends.contains(&at) || self.recvs.contains_key(&at)
    }
}

/// Whether rank index `rank` of `plan` has an `in` it never writes (else no peer may
/// read it while the call runs).
fn lends_in(plan: &Plan, rank: usize) -> bool {
    let rp = &plan.ranks[rank];
    let has_in = !(plan.collective == Collective::Broadcast && plan.root != Some(rp.rank));
    has_in
        && !rp
            .blocks
            .iter()
            .flat_map(|b| &b.steps)
            .any(|s| s.dst.is_some_and(|d| d.buf == Buf::In))
}

/// The pairs of `plan` that qualify (see the module docs).
pub fn direct(plan: &Plan) -> Direct {
    direct_over(plan, &crate::wiring::links(plan))
}

/// [`direct`], for a caller that has the plan's links already.
pub fn direct_over(plan: &Plan, links: &[Link]) -> Direct {
    let mut out = Direct::default();
    for l in links {
        let (Some((sr, sb)), Some((rr, rb))) = (l.sender, l.receiver) else {
            continue;
        };
        if !lends_in(plan, sr) || l.sends.len() != l.recvs.len() {
            continue;
        }
        let sblock = &plan.ranks[sr].blocks[sb];
        let rblock = &plan.ranks[rr].blocks[rb];
        let pairs: Vec<_> = l
            .sends
            .iter()
            .zip(&l.recvs)
            .map(|(&s, &r)| (s, &sblock.steps[s], r, &rblock.steps[r]))
            .collect();
        if pairs.iter().any(|(_, s, _, r)| s.count() != r.count()) {
            continue;
        }
        for (si, s, ri, r) in pairs {
            let Some(src) = s.src else { continue };
            let inside = u64::from(src.offset) + u64::from(src.count) <= u64::from(plan.in_chunks);
            let reads_only = matches!(r.kind, StepKind::Recv | StepKind::RecvReduceCopy);
            if s.kind == StepKind::Send && src.buf == Buf::In && inside && reads_only {
                out.sends.insert((sr as u32, sb as u32, si as u32));
                out.recvs
                    .insert((rr as u32, rb as u32, ri as u32), src.offset);
            }
        }
    }
    out
}
