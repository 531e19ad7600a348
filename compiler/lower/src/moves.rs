//! Operations to moves: the first lowering step.
//!
//! A *move* is one unit of data movement that becomes one step on each rank it touches: a
//! local `cpy` / `re` on one rank, or a transfer, which is a send step on the source rank
//! and a receive step (`r`, or `rrc` when it accumulates) on the destination rank. Most
//! operations are one move; the two-source reduce forms that the instruction set cannot do
//! in one step become two (dsl.md: `reduce DST <- A, B` means `DST = A (+) B`):
//!
//! | operation | moves |
//! |---|---|
//! | `copy D <- S`, S local | `cpy D <- S` |
//! | `copy D <- S`, S remote | transfer S -> D |
//! | `reduce D <- D, S`, S local | `re D (+)= S` |
//! | `reduce D <- D, S`, S remote | transfer S -> D accumulating onto D (`rrc src=D`) |
//! | `reduce D <- A, B`, both local | `cpy D <- A`, then `re D (+)= B` |
//! | `reduce D <- A, B`, one remote | transfer of the remote one accumulating onto the local one |
//! | `reduce D <- A, B`, both remote | transfer A -> D, then transfer B -> D accumulating onto D |
//!
//! `(+)` is commutative (dsl.md section 4), so which source is received does not matter.
//! Moves are numbered in program order; an operation's moves are consecutive.

use braid_ir::{Op, OpId, OpKind, OpProgram, Ref};
use braid_plan::Slice;
use std::ops::Range;

/// A transfer between two ranks: `dst = recv` or `dst = acc (+) recv` on `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    pub from: u32,
    pub to: u32,
    /// What `from` sends.
    pub src: Slice,
    /// Where `to` stores the result.
    pub dst: Slice,
    /// What `to` combines the received data with, if anything.
    pub acc: Option<Slice>,
}

/// What a move does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoveKind {
    /// `dst = src` (`reduce: false`) or `dst = dst (+) src` on one rank.
    Local {
        rank: u32,
        reduce: bool,
        src: Slice,
        dst: Slice,
    },
    Transfer(Transfer),
}

/// One move and where it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Move {
    pub op: OpId,
    /// The `@ch` hint, or channel 0.
    pub channel: u32,
    pub kind: MoveKind,
}

impl Move {
    /// The ranks this move has a step on: one for a local move, two for a transfer.
    pub fn ranks(&self) -> impl Iterator<Item = u32> {
        let (a, b) = match self.kind {
            MoveKind::Local { rank, .. } => (rank, None),
            MoveKind::Transfer(t) => (t.from, Some(t.to)),
        };
        std::iter::once(a).chain(b)
    }

    pub fn transfer(&self) -> Option<&Transfer> {
        match &self.kind {
            MoveKind::Transfer(t) => Some(t),
            MoveKind::Local { .. } => None,
        }
    }
}

/// All moves of a program, in program order.
#[derive(Clone, Debug, Default)]
pub struct Moves {
    pub moves: Vec<Move>,
    /// The moves of each operation, by operation index.
    pub of_op: Vec<Range<u32>>,
}

impl Moves {
    pub fn len(&self) -> usize {
        self.moves.len()
    }

    pub fn is_empty(&self) -> bool {
        self.moves.is_empty()
    }

    pub fn get(&self, m: u32) -> &Move {
        &self.moves[m as usize]
    }
}

/// A reference as a plan slice (the rank is implied by the step's rank).
pub fn slice(r: &Ref) -> Slice {
    Slice {
        buf: r.buf,
        offset: r.lo,
        count: r.len(),
    }
}

/// Splits every operation of `prog` into moves (see the module table).
pub fn split(prog: &OpProgram) -> Moves {
    let mut out = Moves::default();
    for (i, op) in prog.ops.iter().enumerate() {
        let start = out.moves.len() as u32;
        for kind in op_moves(op) {
            out.moves.push(Move {
                op: OpId(i as u32),
                channel: op.channel.unwrap_or(0),
                kind,
            });
        }
        out.of_op.push(start..out.moves.len() as u32);
    }
    out
}

fn local(rank: u32, reduce: bool, src: &Ref, dst: &Ref) -> MoveKind {
    MoveKind::Local {
        rank,
        reduce,
        src: slice(src),
        dst: slice(dst),
    }
}

fn transfer(src: &Ref, dst: &Ref, acc: Option<&Ref>) -> MoveKind {
    MoveKind::Transfer(Transfer {
        from: src.rank,
        to: dst.rank,
        src: slice(src),
        dst: slice(dst),
        acc: acc.map(slice),
    })
}

fn op_moves(op: &Op) -> Vec<MoveKind> {
    let d = &op.dst;
    let is_local = |r: &Ref| r.rank == d.rank;
    match op.kind {
        OpKind::Copy => {
            let s = &op.srcs[0];
            if is_local(s) {
                vec![local(d.rank, false, s, d)]
            } else {
                vec![transfer(s, d, None)]
            }
        }
        OpKind::Reduce => {
            let (a, b) = (&op.srcs[0], &op.srcs[1]);
            if a == d {
                if is_local(b) {
                    vec![local(d.rank, true, b, d)]
                } else {
                    vec![transfer(b, d, Some(d))]
                }
            } else {
                match (is_local(a), is_local(b)) {
                    (true, true) => vec![local(d.rank, false, a, d), local(d.rank, true, b, d)],
                    (true, false) => vec![transfer(b, d, Some(a))],
                    (false, true) => vec![transfer(a, d, Some(b))],
                    (false, false) => vec![transfer(a, d, None), transfer(b, d, Some(d))],
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_ir::{Buf, Span};

    fn r(buf: Buf, rank: u32, lo: u32) -> Ref {
        Ref {
            buf,
            rank,
            lo,
            hi: lo + 1,
        }
    }

    fn op(kind: OpKind, dst: Ref, srcs: Vec<Ref>) -> Op {
        Op {
            kind,
            dst,
            srcs,
            channel: None,
            span: Span::default(),
            bindings: Vec::new(),
        }
    }

    #[test]
    fn two_remote_sources_receive_then_accumulate() {
        let d = r(Buf::Scratch, 0, 0);
        let m = op_moves(&op(
            OpKind::Reduce,
            d,
            vec![r(Buf::In, 1, 0), r(Buf::In, 2, 0)],
        ));
        assert_eq!(m.len(), 2);
        let MoveKind::Transfer(first) = m[0] else {
            panic!("{m:?}")
        };
        let MoveKind::Transfer(second) = m[1] else {
            panic!("{m:?}")
        };
        assert_eq!((first.from, first.acc), (1, None));
        assert_eq!((second.from, second.acc), (2, Some(slice(&d))));
    }

    #[test]
    fn local_three_operand_reduce_is_copy_then_reduce() {
        let d = r(Buf::Out, 0, 0);
        let m = op_moves(&op(
            OpKind::Reduce,
            d,
            vec![r(Buf::In, 0, 0), r(Buf::Scratch, 0, 0)],
        ));
        assert!(matches!(m[0], MoveKind::Local { reduce: false, .. }));
        assert!(matches!(m[1], MoveKind::Local { reduce: true, .. }));
    }

    #[test]
    fn remote_first_source_accumulates_onto_the_local_one() {
        let d = r(Buf::Out, 0, 0);
        let local_src = r(Buf::In, 0, 0);
        let m = op_moves(&op(OpKind::Reduce, d, vec![r(Buf::Out, 3, 0), local_src]));
        assert_eq!(
            m,
            vec![MoveKind::Transfer(Transfer {
                from: 3,
                to: 0,
                src: slice(&r(Buf::Out, 3, 0)),
                dst: slice(&d),
                acc: Some(slice(&local_src)),
            })]
        );
    }
}
