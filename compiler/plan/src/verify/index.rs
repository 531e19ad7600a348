//! Dense numbering of blocks and steps across the whole plan, so the later phases can keep
//! their state in flat vectors instead of nested maps.
//!
//! Built only after the structure phase has accepted the plan: ranks are listed in order,
//! block ids equal their positions, and every index fits in a `u32`.

use crate::diag::{Check, PlanDiagnostic, Site};
use crate::explain::step_summary;
use crate::plan::{Block, Plan, Step, StepId};

/// "No step" / "no block" in the flat vectors.
pub(crate) const NONE: u32 = u32::MAX;

pub(crate) struct Index<'p> {
    pub plan: &'p Plan,
    /// Global id of block 0 of each rank, plus the total at the end.
    rank_first_block: Vec<u32>,
    /// Global id of step 0 of each global block, plus the total at the end.
    block_first_step: Vec<u32>,
    /// Rank of each global block.
    block_rank: Vec<u32>,
    /// Global block of each global step.
    step_block: Vec<u32>,
}

impl<'p> Index<'p> {
    pub fn new(plan: &'p Plan) -> Index<'p> {
        let mut rank_first_block = Vec::with_capacity(plan.ranks.len() + 1);
        let mut block_first_step = Vec::new();
        let mut block_rank = Vec::new();
        let mut step_block = Vec::with_capacity(plan.step_count());
        for r in &plan.ranks {
            rank_first_block.push(block_rank.len() as u32);
            for b in &r.blocks {
                let g = block_rank.len() as u32;
                block_first_step.push(step_block.len() as u32);
                block_rank.push(r.rank);
                step_block.extend(std::iter::repeat_n(g, b.steps.len()));
            }
        }
        rank_first_block.push(block_rank.len() as u32);
        block_first_step.push(step_block.len() as u32);
        Index {
            plan,
            rank_first_block,
            block_first_step,
            block_rank,
            step_block,
        }
    }

    pub fn n_steps(&self) -> usize {
        self.step_block.len()
    }

    pub fn n_blocks(&self) -> usize {
        self.block_rank.len()
    }

    /// The global id of `(rank, block)`.
    pub fn gblock(&self, rank: u32, block: u32) -> u32 {
        self.rank_first_block[rank as usize] + block
    }

    /// The global id of `(rank, block, step)`.
    pub fn gid(&self, rank: u32, block: u32, step: u32) -> u32 {
        self.block_first_step[self.gblock(rank, block) as usize] + step
    }

    /// Global step ids of a global block, in program order.
    pub fn block_steps(&self, gblock: u32) -> std::ops::Range<u32> {
        self.block_first_step[gblock as usize]..self.block_first_step[gblock as usize + 1]
    }

    /// The global block a step belongs to.
    pub fn block_of(&self, gid: u32) -> u32 {
        self.step_block[gid as usize]
    }

    /// The step's index within its block.
    pub fn index_in_block(&self, gid: u32) -> u32 {
        gid - self.block_first_step[self.block_of(gid) as usize]
    }

    pub fn id(&self, gid: u32) -> StepId {
        let gb = self.block_of(gid);
        let rank = self.block_rank[gb as usize];
        StepId {
            rank,
            block: gb - self.rank_first_block[rank as usize],
            step: self.index_in_block(gid),
        }
    }

    /// `(rank, block index within the rank)` of a global block.
    pub fn block_id(&self, gblock: u32) -> (u32, u32) {
        let rank = self.block_rank[gblock as usize];
        (rank, gblock - self.rank_first_block[rank as usize])
    }

    pub fn block(&self, gblock: u32) -> &'p Block {
        let (rank, b) = self.block_id(gblock);
        &self.plan.ranks[rank as usize].blocks[b as usize]
    }

    pub fn step(&self, gid: u32) -> &'p Step {
        let id = self.id(gid);
        &self.plan.ranks[id.rank as usize].blocks[id.block as usize].steps[id.step as usize]
    }

    /// `rank 1, block 2, step 0 [rrc: recv from 0, out[0] = out[0] (+) recv]`, followed by
    /// `from line L:C: ...` when the step records its origin. Used in notes.
    pub fn describe(&self, gid: u32) -> String {
        let id = self.id(gid);
        let step = self.step(gid);
        let mut s = format!(
            "{id} [{}]",
            step_summary(self.block(self.block_of(gid)), step)
        );
        if let Some(o) = &step.origin {
            s.push_str(&format!(" from {o}"));
        }
        s
    }

    /// A diagnostic sited at a step, carrying the step's origin.
    pub fn at(&self, check: Check, gid: u32, message: impl Into<String>) -> PlanDiagnostic {
        PlanDiagnostic::new(check, Site::Step(self.id(gid)), message)
            .with_origin(self.step(gid).origin.as_ref())
    }
}
