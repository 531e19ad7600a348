//! Part of phase a: the plan is small enough to verify.
//!
//! The later phases do work per step and per chunk each step moves (bounds, races and the
//! symbolic execution visit every chunk of every slice; a tiled plan's simulation moves a
//! slice per chunk). Chunk locations are bounded by [`super::MAX_LOCATIONS`]; these bounds
//! cap the rest, in 64-bit arithmetic and before anything is allocated, so that a short
//! file with huge counts is refused at once instead of running for hours.

use crate::diag::{Check, PlanDiagnostic, Site};
use crate::plan::{Plan, StepId};

/// Steps over all ranks and blocks: twice the compiler's operation budget (an operation
/// between ranks becomes a send and a receive).
pub const MAX_STEPS: u64 = 1 << 27;

/// Chunk accesses over all steps (each step's `src` count plus its `dst` count): four
/// times [`super::MAX_LOCATIONS`], so a plan may touch every location it can have several
/// times over (a ring all-reduce that fills the locations makes about two accesses per
/// location).
pub const MAX_CHUNK_ACCESSES: u64 = 1 << 26;

/// What a slice can count for: no buffer has more than `chunks` or `scratch_chunks`
/// chunks, so a larger count is out of bounds, which the bounds phase reports with the
/// step; here it counts as a whole buffer.
pub(crate) fn counted(plan: &Plan, count: u32) -> u64 {
    u64::from(count).min(u64::from(plan.chunks.max(plan.scratch_chunks)))
}

pub(crate) fn check(plan: &Plan, out: &mut Vec<PlanDiagnostic>) {
    let steps = plan.step_count() as u64;
    if steps > MAX_STEPS {
        out.push(PlanDiagnostic::new(
            Check::Structure,
            Site::Plan,
            format!("the plan has {steps} steps, more than the {MAX_STEPS} the verifier checks"),
        ));
        return;
    }
    let mut total = 0u64;
    let mut largest = (0u64, None);
    for (ri, r) in plan.ranks.iter().enumerate() {
        for (bi, b) in r.blocks.iter().enumerate() {
            for (si, s) in b.steps.iter().enumerate() {
                let n: u64 = [s.src, s.dst]
                    .iter()
                    .flatten()
                    .map(|x| counted(plan, x.count))
                    .sum();
                total = total.saturating_add(n);
                if n > largest.0 {
                    largest = (n, Some((ri, bi, si)));
                }
            }
        }
    }
    if total > MAX_CHUNK_ACCESSES {
        let (n, at) = largest;
        let (ri, bi, si) = at.expect("some step accesses chunks");
        let id = StepId {
            rank: plan.ranks[ri].rank,
            block: bi as u32,
            step: si as u32,
        };
        let origin = plan.ranks[ri].blocks[bi].steps[si].origin.as_ref();
        out.push(
            PlanDiagnostic::new(
                Check::Structure,
                Site::Step(id),
                format!(
                    "the steps access {total} chunks in all (src and dst counts), more than the {MAX_CHUNK_ACCESSES} the verifier checks; this step, the largest, accesses {n}"
                ),
            )
            .with_origin(origin),
        );
    }
}
