//! `BRAID_TRACE` on the host backend: when each step of one rank's plan (its first
//! replica) started and ended in the last call, in nanoseconds of the system clock, as
//! the GPU kernels record it on the device's: a step starts before its waits on the
//! call's first tile and ends after its last tile. The clock is the system's (not a
//! monotonic one of this process) so that ranks in other processes of the host, and on
//! other hosts as far as their clocks agree, land on one timeline.

use braid_plan::Plan;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

pub struct StepClock {
    /// Per block of the rank (by id), the index of its first step in `times`.
    first: Vec<usize>,
    /// Per step, its start and end.
    times: Vec<[AtomicU64; 2]>,
}

impl StepClock {
    /// A clock for `rank`'s steps of `plan`, nothing recorded yet.
    pub fn new(plan: &Plan, rank: u32) -> StepClock {
        let blocks = &plan.ranks[rank as usize].blocks;
        let mut first = Vec::with_capacity(blocks.len());
        let mut n = 0;
        for b in blocks {
            first.push(n);
            n += b.steps.len();
        }
        StepClock {
            first,
            times: (0..n)
                .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
                .collect(),
        }
    }

    /// Step `step` of block `block` starts now.
    pub(crate) fn start(&self, block: u32, step: usize) {
        self.mark(block, step, 0);
    }

    /// Step `step` of block `block` ends now (its last tile's end is what stays).
    pub(crate) fn end(&self, block: u32, step: usize) {
        self.mark(block, step, 1);
    }

    fn mark(&self, block: u32, step: usize, which: usize) {
        if let Some(t) = self
            .first
            .get(block as usize)
            .and_then(|f| self.times.get(f + step))
        {
            t[which].store(now_ns(), Ordering::Relaxed);
        }
    }

    /// Every step's (start, end), the rank's blocks in order, each block's steps in order
    /// (0 where a step has not run). Read after the call completed.
    pub fn read(&self) -> Vec<(u64, u64)> {
        self.times
            .iter()
            .map(|[s, e]| (s.load(Ordering::Relaxed), e.load(Ordering::Relaxed)))
            .collect()
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_kept_by_block_and_the_last_end_stays() {
        let plan = braid_plan::Plan::from_json(include_str!(
            "../../../tests/plans/good/ring_allreduce_4.json"
        ))
        .unwrap();
        let c = StepClock::new(&plan, 1);
        let steps: usize = plan.ranks[1].blocks.iter().map(|b| b.steps.len()).sum();
        assert_eq!(c.read().len(), steps);
        assert!(c.read().iter().all(|&t| t == (0, 0)));
        let last = plan.ranks[1].blocks.len() as u32 - 1;
        c.start(last, 0);
        c.end(last, 0);
        let first_end = c.read()[c.first[last as usize]].1;
        std::thread::sleep(std::time::Duration::from_millis(2));
        c.end(last, 0);
        let (s, e) = c.read()[c.first[last as usize]];
        assert!(s > 0 && e >= first_end + 1_000_000, "{s} {e} {first_end}");
        // A block or step the plan does not have records nothing.
        c.start(last + 1, 0);
        c.end(0, 10_000);
        assert_eq!(c.read().iter().filter(|t| t.0 > 0).count(), 1);
    }
}
