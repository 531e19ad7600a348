//! Blocks, step lists and fusion together, repeated until every shared block pays off.
//!
//! A receive connection and a send connection share a block so that forwards can fuse
//! ([`crate::blocks`]). Whether they do fuse is only known after fusion has checked that
//! each one keeps the plan deadlock-free ([`crate::fuse`]). A shared block whose steps
//! mostly stayed unfused only serialises its two connections, so its pairing is withdrawn
//! and the assignment redone. The withdrawn set only grows, so this ends; in practice after
//! one or two rounds. Without fusion nothing is ever paired.

use crate::blocks::{self, BlockKey};
use crate::fuse;
use crate::graph::MoveGraph;
use crate::liveness::Liveness;
use crate::moves::Moves;
use crate::steps::{self, BlockSteps, Programs};
use std::collections::HashSet;

/// Whether a shared block earns its keep: at least as many fused steps as unfused ones.
fn pays(b: &BlockSteps) -> bool {
    let fused = b.steps.iter().filter(|s| s.moves.len() > 1).count();
    fused >= b.steps.len() - fused
}

/// The per-block step lists of `moves` on `n` ranks, fused where `live` is given.
pub fn schedule(
    moves: &Moves,
    graph: &MoveGraph,
    n: u32,
    live: Option<&Liveness>,
    tiled: bool,
) -> Programs {
    let mut withdrawn: HashSet<BlockKey> = HashSet::new();
    loop {
        let may_pair = |k: &BlockKey| live.is_some() && !withdrawn.contains(k);
        let assigned = blocks::assign(moves, graph, n, &may_pair);
        let mut programs = steps::build(moves, &assigned);
        let Some(live) = live else {
            return programs;
        };
        if tiled {
            steps::hoist_sends(&mut programs);
        }
        fuse::fuse(&mut programs, moves, graph, live, tiled);
        let weak: Vec<BlockKey> = programs
            .ranks
            .iter()
            .flatten()
            .filter(|b| b.key.send_peer.is_some() && b.key.recv_peer.is_some() && !pays(b))
            .map(|b| b.key)
            .collect();
        if weak.is_empty() {
            return programs;
        }
        withdrawn.extend(weak);
    }
}
