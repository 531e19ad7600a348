//! Fusion: a receive and the send that forwards its data become one step.
//!
//! Candidates are two consecutive steps of one block: a receive (`r` or `rrc`) and a send
//! (`s`) of exactly the slice the receive stored. They fuse to
//!
//! * `rcs` (receive, store, forward) from `r` + `s`;
//! * `rrs` (receive, reduce, forward without storing) from `rrc` + `s` when the stored
//!   value is dead: in every call mode nothing but that send reads it before it is
//!   overwritten, and it is not output (see [`crate::liveness`]);
//! * `rrcs` (receive, reduce, store, forward) from `rrc` + `s` otherwise.
//!
//! **Why a check is needed.** The unfused plan is deadlock-free because all its steps
//! follow one global order (program order): whatever step is earliest among the unfinished
//! ones can always run, and a send and its receive run together. A fused step streams: it
//! forwards each slice as it arrives, so the send it absorbed now runs at the time of the
//! receive. That is harmless when no step ordered after the receive must finish before the
//! send; otherwise the fused step can wait on a step that waits on it, which the plan
//! verifier reports as a deadlock (a FIFO holds less than a message).
//!
//! So every move has a *time*, initially its program-order index. A candidate (receive of
//! move `i`, send of move `j`) is accepted when `i` can be delayed to just before `j`:
//! every step that must follow `i` (its move-graph successors and the next step of its
//! sending block) is already later than `j`, or is part of `j`'s own fused chain. Then `i`
//! takes the time just before `j`. Candidates are decided latest send first, so times only
//! ever grow and a chain of forwards (`i` into `j` into `k`) packs into consecutive times.
//! The result is one global order in which every dependency and block order goes forward
//! and every fused step is a single point, which is the deadlock argument again.

use crate::graph::MoveGraph;
use crate::liveness::Liveness;
use crate::moves::Moves;
use crate::steps::{Draft, Programs, StepPos};
use braid_plan::StepKind;

/// A move's place in the global order: program index, then (negative) position in a chain
/// of fused moves packed just before it.
pub type Time = (u32, i32);

/// What fusion decided.
#[derive(Clone, Debug, Default)]
pub struct Fused {
    /// The final time of every move: a global order in which every dependency and block
    /// order goes forward and every fused step is one point.
    pub times: Vec<Time>,
    /// Fused steps created.
    pub count: usize,
}

/// A candidate: the receive at `recv` (of move `i`) and the send after it (of move `j`).
struct Candidate {
    recv: StepPos,
    i: u32,
    j: u32,
}

/// Fuses what can be fused in `programs` (in place) and returns the final move times.
/// `unchecked`: accept every candidate (a plan for tiled execution, which the plan
/// verifier proves).
pub fn fuse(
    programs: &mut Programs,
    moves: &Moves,
    graph: &MoveGraph,
    live: &Liveness,
    unchecked: bool,
) -> Fused {
    let n = moves.len();
    let mut times: Vec<Time> = (0..n as u32).map(|m| (m, 0)).collect();
    // Chains of fused moves: every member points at the chain's last move; the first
    // member's time is the chain's start.
    let mut chain: Vec<u32> = (0..n as u32).collect();
    let mut start: Vec<Time> = times.clone();
    let pos = programs.positions();

    let mut cands = candidates(programs);
    cands.sort_by_key(|c| std::cmp::Reverse(c.j));
    let mut accepted = Vec::new();
    for c in cands {
        let (i, j) = (c.i, c.j);
        let tj = times[j as usize];
        let cj = chain[j as usize];
        let later = |m: u32| chain[m as usize] == cj || start[chain[m as usize] as usize] > tj;
        let graph_ok = graph.successors(i).all(|e| e.to == j || later(e.to));
        let from = moves
            .get(i)
            .transfer()
            .expect("a receive is a transfer")
            .from;
        let block_ok = programs
            .next(pos[&(i, from)])
            .is_none_or(|p| programs.step(p).moves.iter().all(|&m| later(m)));
        if !(unchecked || graph_ok && block_ok) {
            continue;
        }
        let ti = (tj.0, tj.1 - 1);
        times[i as usize] = ti;
        chain[i as usize] = cj;
        start[cj as usize] = ti;
        accepted.push(c.recv);
    }
    let count = accepted.len();
    apply(programs, live, accepted);
    Fused { times, count }
}

/// Consecutive receive / send pairs of one block over the same slice.
fn candidates(programs: &Programs) -> Vec<Candidate> {
    let mut out = Vec::new();
    for (r, blocks) in programs.ranks.iter().enumerate() {
        for (b, block) in blocks.iter().enumerate() {
            for (k, w) in block.steps.windows(2).enumerate() {
                let (x, y) = (&w[0], &w[1]);
                let recv = matches!(x.kind, StepKind::Recv | StepKind::RecvReduceCopy);
                if recv && y.kind == StepKind::Send && x.dst.is_some() && x.dst == y.src {
                    out.push(Candidate {
                        recv: StepPos {
                            rank: r as u32,
                            block: b as u32,
                            index: k as u32,
                        },
                        i: x.moves[0],
                        j: y.moves[0],
                    });
                }
            }
        }
    }
    out
}

/// The fused step of receive `x` (of move `i`) and send `y` (of move `j`) on `rank`.
fn merge(x: &Draft, y: &Draft, rank: u32, live: &Liveness) -> Draft {
    let (i, j) = (x.moves[0], y.moves[0]);
    let dst = x.dst.expect("a receive stores");
    let (kind, src, dst) = match x.kind {
        StepKind::Recv => (StepKind::RecvCopySend, None, Some(dst)),
        _ if live.dead_after(i, j, rank, &dst) => (StepKind::RecvReduceSend, x.src, None),
        _ => (StepKind::RecvReduceCopySend, x.src, Some(dst)),
    };
    Draft {
        kind,
        src,
        dst,
        moves: vec![i, j],
    }
}

/// Replaces every accepted receive and the send after it by their fused step.
fn apply(programs: &mut Programs, live: &Liveness, mut accepted: Vec<StepPos>) {
    // Highest index first inside a block, so earlier positions stay valid.
    accepted.sort_unstable_by(|a, b| b.cmp(a));
    for p in accepted {
        let steps = &mut programs.ranks[p.rank as usize][p.block as usize].steps;
        let k = p.index as usize;
        let fused = merge(&steps[k], &steps[k + 1], p.rank, live);
        steps[k] = fused;
        steps.remove(k + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::liveness::Liveness;
    use crate::testing::{analyse, at, copy, program};
    use crate::{blocks, steps};
    use braid_ir::Buf::{In, Out};
    use braid_ir::{Mode, Op};
    use braid_passes::verify::layout;

    fn fused_kinds(ops: Vec<Op>, n: u32) -> Vec<StepKind> {
        let prog = program(n, n, 0, ops);
        let (moves, g) = analyse(&prog);
        let b = blocks::assign(&moves, &g, n, &|_| true);
        let mut programs = steps::build(&moves, &b);
        let live = Liveness::new(&moves, &[layout(&prog, Mode::OutOfPlace)]);
        let fused = fuse(&mut programs, &moves, &g, &live, false);
        for e in &g.edges {
            let (a, b) = (fused.times[e.from as usize], fused.times[e.to as usize]);
            assert!(a < b, "edge {e:?} goes backwards: {a:?} -> {b:?}");
        }
        programs
            .ranks
            .iter()
            .flatten()
            .flat_map(|b| &b.steps)
            .map(|s| s.kind)
            .filter(|k| k.sends() && k.receives())
            .collect()
    }

    #[test]
    fn a_chain_forwards_with_rcs() {
        // Two chunks down the chain 0 -> 1 -> 2 -> 3, one after the other: every middle
        // rank forwards each chunk right after receiving it.
        let mut ops = Vec::new();
        for c in 0..2 {
            ops.push(copy(at(Out, 1, c), at(In, 0, c)));
            ops.push(copy(at(Out, 2, c), at(Out, 1, c)));
            ops.push(copy(at(Out, 3, c), at(Out, 2, c)));
        }
        assert_eq!(fused_kinds(ops, 4), vec![StepKind::RecvCopySend; 4]);
    }

    #[test]
    fn forwards_that_would_close_a_cycle_of_sends_are_not_fused() {
        // Two steps of a ring r -> r - 1 on 3 ranks: every rank sends first, then receives
        // and forwards what it received. Fused, every rank would start with a send that
        // no rank is ready to receive.
        let mut ops = Vec::new();
        for s in 0..2u32 {
            for r in 0..3u32 {
                let c = (r + s) % 3;
                let src = if s == 0 { at(In, r, c) } else { at(Out, r, c) };
                ops.push(copy(at(Out, (r + 2) % 3, c), src));
            }
        }
        assert_eq!(fused_kinds(ops, 3), vec![]);
    }
}
