//! Streaming messages coupled into chains, for the deadlock phase's simulation.
//!
//! A step that receives and sends (`rcs`, `rrs`, `rrcs`) forwards the slices of the message
//! it receives as they arrive, so that message and the one it sends flow together.
//! Following these couplings from a step that sends without receiving (the head) to one
//! that receives without sending (the tail) gives a chain; where every step receives and
//! sends, the couplings close into a cycle instead.
//!
//! A streaming message is longer than all FIFOs together, so no step of a chain can
//! complete before every step of the chain has started (the slices that fit in the FIFOs
//! up to an idle step are too few), and once every step has started the chain flows to the
//! end whatever else happens (each of its steps waits only on its own FIFOs). A cycle never
//! moves a slice. The simulation uses this to complete a whole chain when its last step
//! starts, instead of moving one FIFO's worth of slices per round trip, which made a
//! message cost as many rounds as the plan has connections.

use super::connections::Wiring;
use super::index::NONE;
use super::Ctx;

pub(crate) struct Chains {
    /// The chain of each global step that sends or receives, else [`NONE`].
    pub of: Vec<u32>,
    /// Steps of each chain, head first, in `members[first[c]..first[c + 1]]`.
    members: Vec<u32>,
    first: Vec<u32>,
    /// Steps a chain has; [`NONE`] for a cycle, which never completes.
    pub size: Vec<u32>,
}

impl Chains {
    pub fn members(&self, chain: u32) -> &[u32] {
        let c = chain as usize;
        &self.members[self.first[c] as usize..self.first[c + 1] as usize]
    }
}

/// The chains of a plan whose connections matched (every send has its receive).
pub(crate) fn chains(cx: &Ctx, w: &Wiring) -> Chains {
    let ix = &cx.ix;
    let ns = ix.n_steps();
    let mut ch = Chains {
        of: vec![NONE; ns],
        members: Vec::new(),
        first: vec![0],
        size: Vec::new(),
    };
    let kind = |g: u32| ix.step(g).kind;
    // Heads first, then whatever is left, which lies on cycles.
    let heads = (0..ns as u32).filter(|&g| kind(g).sends() && !kind(g).receives());
    let rest = (0..ns as u32).filter(|&g| kind(g).sends() && kind(g).receives());
    for start in heads.chain(rest) {
        if ch.of[start as usize] != NONE {
            continue;
        }
        let id = ch.size.len() as u32;
        let mut g = start;
        let mut cycle = false;
        loop {
            ch.of[g as usize] = id;
            ch.members.push(g);
            if !kind(g).sends() {
                break;
            }
            g = w.receiver_of[g as usize];
            if g == NONE {
                break; // unmatched: the connection phase reported it
            }
            if ch.of[g as usize] != NONE {
                cycle = true;
                break;
            }
        }
        let len = ch.members.len() as u32 - ch.first[id as usize];
        ch.first.push(ch.members.len() as u32);
        ch.size.push(if cycle { NONE } else { len });
    }
    ch
}
