//! Per-block step lists before fusion: every move's step on each of its ranks, appended
//! to its block in program order.

use crate::blocks::{BlockKey, Blocks};
use crate::moves::{MoveKind, Moves};
use braid_plan::{Slice, StepKind};

/// A step under construction: what it does and which moves it carries out (two once a
/// receive is fused with the send that forwards its data, receive first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Draft {
    pub kind: StepKind,
    pub src: Option<Slice>,
    pub dst: Option<Slice>,
    pub moves: Vec<u32>,
}

/// One block's steps.
#[derive(Clone, Debug)]
pub struct BlockSteps {
    pub key: BlockKey,
    pub steps: Vec<Draft>,
}

/// Every rank's blocks with their steps.
#[derive(Clone, Debug, Default)]
pub struct Programs {
    pub ranks: Vec<Vec<BlockSteps>>,
}

/// Where a step lives: `(rank, block, index)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StepPos {
    pub rank: u32,
    pub block: u32,
    pub index: u32,
}

impl Programs {
    pub fn step(&self, p: StepPos) -> &Draft {
        &self.ranks[p.rank as usize][p.block as usize].steps[p.index as usize]
    }

    /// The step after `p` in its block, if any.
    pub fn next(&self, p: StepPos) -> Option<StepPos> {
        let len = self.ranks[p.rank as usize][p.block as usize].steps.len() as u32;
        (p.index + 1 < len).then_some(StepPos {
            index: p.index + 1,
            ..p
        })
    }

    /// Where each move's step on each rank is: `(move, rank)` -> position.
    pub fn positions(&self) -> std::collections::HashMap<(u32, u32), StepPos> {
        let mut at = std::collections::HashMap::new();
        for (r, blocks) in self.ranks.iter().enumerate() {
            for (b, block) in blocks.iter().enumerate() {
                for (i, s) in block.steps.iter().enumerate() {
                    let pos = StepPos {
                        rank: r as u32,
                        block: b as u32,
                        index: i as u32,
                    };
                    for &m in &s.moves {
                        at.insert((m, r as u32), pos);
                    }
                }
            }
        }
        at
    }
}

/// The unfused step of move `m` on `rank`.
fn draft(moves: &Moves, m: u32, rank: u32) -> Draft {
    let (kind, src, dst) = match moves.get(m).kind {
        MoveKind::Local {
            reduce, src, dst, ..
        } => {
            let kind = if reduce {
                StepKind::Reduce
            } else {
                StepKind::Copy
            };
            (kind, Some(src), Some(dst))
        }
        MoveKind::Transfer(t) if t.from == rank => (StepKind::Send, Some(t.src), None),
        MoveKind::Transfer(t) => match t.acc {
            None => (StepKind::Recv, None, Some(t.dst)),
            Some(acc) => (StepKind::RecvReduceCopy, Some(acc), Some(t.dst)),
        },
    };
    Draft {
        kind,
        src,
        dst,
        moves: vec![m],
    }
}

/// Lays every move's steps into the blocks `blocks` assigned, in program order.
pub fn build(moves: &Moves, blocks: &Blocks) -> Programs {
    let mut ranks: Vec<Vec<BlockSteps>> = blocks
        .keys
        .iter()
        .map(|keys| {
            keys.iter()
                .map(|&key| BlockSteps {
                    key,
                    steps: Vec::new(),
                })
                .collect()
        })
        .collect();
    for m in 0..moves.len() as u32 {
        for rank in moves.get(m).ranks() {
            let b = blocks.block_of(moves, m, rank);
            ranks[rank as usize][b as usize]
                .steps
                .push(draft(moves, m, rank));
        }
    }
    Programs { ranks }
}

/// Whether slices `a` and `b` share a chunk.
fn overlap(a: &Slice, b: &Slice) -> bool {
    a.buf == b.buf && u64::from(a.offset) < b.end() && u64::from(b.offset) < a.end()
}

/// Moves each send of every block up to just after the step before it that it must
/// follow: one writing a chunk it reads, or another send (a connection's order stays).
/// A forward then follows the receive it forwards, where fusion finds it.
pub fn hoist_sends(programs: &mut Programs) {
    for block in programs.ranks.iter_mut().flatten() {
        let steps = &mut block.steps;
        for i in 0..steps.len() {
            if steps[i].kind != StepKind::Send {
                continue;
            }
            let src = steps[i].src.expect("a send reads");
            let mut to = i;
            while to > 0 {
                let before = &steps[to - 1];
                let writes = before.dst.is_some_and(|d| overlap(&d, &src));
                if before.kind.sends() || writes {
                    break;
                }
                to -= 1;
            }
            if to < i {
                let s = steps.remove(i);
                steps.insert(to, s);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_ir::Buf;

    fn step(kind: StepKind, chunk: u32) -> Draft {
        let s = Some(Slice {
            buf: Buf::Out,
            offset: chunk,
            count: 1,
        });
        let (src, dst) = if kind == StepKind::Send {
            (s, None)
        } else {
            (None, s)
        };
        Draft {
            kind,
            src,
            dst,
            moves: vec![chunk],
        }
    }

    fn hoisted(steps: Vec<Draft>) -> Vec<(StepKind, u32)> {
        let key = BlockKey {
            rank: 0,
            channel: 0,
            send_peer: Some(1),
            recv_peer: Some(2),
        };
        let mut p = Programs {
            ranks: vec![vec![BlockSteps { key, steps }]],
        };
        hoist_sends(&mut p);
        p.ranks[0][0]
            .steps
            .iter()
            .map(|s| (s.kind, s.src.or(s.dst).unwrap().offset))
            .collect()
    }

    /// A send moves up past receives of other chunks, never past one that writes what it
    /// sends nor past another send.
    #[test]
    fn sends_move_up_to_what_they_must_follow() {
        use StepKind::{Recv as R, Send as S};
        let got = hoisted(vec![
            step(R, 0),
            step(S, 1),
            step(R, 2),
            step(S, 0),
            step(S, 2),
        ]);
        assert_eq!(got, vec![(S, 1), (R, 0), (S, 0), (R, 2), (S, 2)]);
        let got = hoisted(vec![step(S, 1), step(R, 0), step(S, 2)]);
        assert_eq!(got, vec![(S, 1), (S, 2), (R, 0)]);
    }
}
