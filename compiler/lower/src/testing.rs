//! Small hand-written programs for the unit tests of the lowering stages.

use crate::graph::{self, MoveGraph};
use crate::moves::{self, Moves};
use braid_ir::{Buf, Collective, Mode, ModeSet, Op, OpKind, OpProgram, Protocol, Ref, Shape, Span};
use braid_passes::dataflow::Dataflow;
use braid_passes::verify::layout;

pub fn at(buf: Buf, rank: u32, chunk: u32) -> Ref {
    Ref {
        buf,
        rank,
        lo: chunk,
        hi: chunk + 1,
    }
}

pub fn copy(dst: Ref, src: Ref) -> Op {
    Op {
        kind: OpKind::Copy,
        dst,
        srcs: vec![src],
        channel: None,
        span: Span::default(),
        bindings: Vec::new(),
    }
}

/// An out-of-place allreduce-shaped program on `n` ranks with `chunks` chunks.
pub fn program(n: u32, chunks: u32, scratch: u32, ops: Vec<Op>) -> OpProgram {
    OpProgram {
        algorithm: "test".into(),
        collective: Collective::Allreduce,
        shape: Shape::single_node(n),
        root: None,
        chunks,
        scratch,
        channels: 1,
        protocol: Protocol::Simple,
        modes: ModeSet::OUT_OF_PLACE,
        decl_span: Span::default(),
        ops,
    }
}

/// The moves and move graph of `prog`, out of place.
pub fn analyse(prog: &OpProgram) -> (Moves, MoveGraph) {
    let flow = Dataflow::build(prog, Mode::OutOfPlace);
    let moves = moves::split(prog);
    let g = graph::build(&moves, &[(&flow, &layout(prog, Mode::OutOfPlace))]);
    (moves, g)
}
