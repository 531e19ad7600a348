//! A program instantiated for one shape: the flat list of chunk operations its sequential
//! execution performs, in program order.

use crate::collective::{Collective, ModeSet, Protocol};
use crate::layout::{Buf, Shape};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

/// A byte range in the program's source text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Span {
        Span {
            start: start as u32,
            end: end as u32,
        }
    }

    pub fn len(self) -> usize {
        (self.end - self.start) as usize
    }

    pub fn is_empty(self) -> bool {
        self.start == self.end
    }
}

/// A contiguous range of chunks `buf[rank][lo .. hi]` (`hi` exclusive). Ranks are already
/// wrapped modulo `N` and ranges are known to lie inside existing buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Ref {
    pub buf: Buf,
    pub rank: u32,
    pub lo: u32,
    pub hi: u32,
}

impl Ref {
    pub fn len(&self) -> u32 {
        self.hi - self.lo
    }

    pub fn is_empty(&self) -> bool {
        self.hi == self.lo
    }

    /// The single chunk at offset `i` of the range.
    pub fn at(&self, i: u32) -> Ref {
        Ref {
            lo: self.lo + i,
            hi: self.lo + i + 1,
            ..*self
        }
    }
}

impl fmt::Display for Ref {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.hi == self.lo + 1 {
            write!(f, "{}[{}][{}]", self.buf, self.rank, self.lo)
        } else {
            write!(f, "{}[{}][{}..{}]", self.buf, self.rank, self.lo, self.hi)
        }
    }
}

/// Whether an operation overwrites or accumulates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// `dst = srcs[0]`.
    Copy,
    /// `dst = srcs[0] (+) srcs[1]`; the source form `reduce D <- S` is stored as
    /// `srcs = [D, S]`, so every reduce has two sources.
    Reduce,
}

/// Index of an operation in [`OpProgram::ops`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct OpId(pub u32);

impl OpId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A loop variable or `let` binding in force when an operation was produced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    pub name: Arc<str>,
    pub value: i64,
}

/// One chunk operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    pub kind: OpKind,
    pub dst: Ref,
    /// One source for a copy, two for a reduce; all of `dst`'s length.
    pub srcs: Vec<Ref>,
    /// The `@ch(k)` hint, if any.
    pub channel: Option<u32>,
    /// The statement that produced this operation.
    pub span: Span,
    /// Loop variables in force (outermost first), for diagnostics and provenance.
    pub bindings: Vec<Binding>,
}

impl Op {
    /// Whether any source lives on another rank than the destination.
    pub fn is_transfer(&self) -> bool {
        self.srcs.iter().any(|s| s.rank != self.dst.rank)
    }

    /// Whether this is a copy of locations onto themselves in `layout` (a broadcast root's
    /// `out <- in` in place). Such a copy changes nothing, every executor skips it, and the
    /// plan verifier reads it as touching nothing: it neither orders nor is ordered in that
    /// mode.
    pub fn is_identity_in(&self, layout: &crate::Layout) -> bool {
        let ([src], OpKind::Copy) = (self.srcs.as_slice(), self.kind) else {
            return false;
        };
        src.rank == self.dst.rank
            && src.len() == self.dst.len()
            && (0..src.len()).all(|i| {
                let at = |r: &Ref| layout.loc(r.buf, r.rank, r.lo + i);
                at(src).is_some() && at(src) == at(&self.dst)
            })
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            OpKind::Copy => write!(f, "copy {} <- {}", self.dst, self.srcs[0]),
            OpKind::Reduce if self.srcs[0] == self.dst => {
                write!(f, "reduce {} <- {}", self.dst, self.srcs[1])
            }
            OpKind::Reduce => write!(
                f,
                "reduce {} <- {}, {}",
                self.dst, self.srcs[0], self.srcs[1]
            ),
        }
    }
}

/// An algorithm instantiated for one shape (and root).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpProgram {
    pub algorithm: String,
    pub collective: Collective,
    pub shape: Shape,
    pub root: Option<u32>,
    /// `C`.
    pub chunks: u32,
    pub scratch: u32,
    pub channels: u32,
    pub protocol: Protocol,
    pub modes: ModeSet,
    /// The span of the `algorithm` line, blamed when no operation is.
    pub decl_span: Span,
    pub ops: Vec<Op>,
}

impl OpProgram {
    pub fn op(&self, id: OpId) -> &Op {
        &self.ops[id.index()]
    }
}
