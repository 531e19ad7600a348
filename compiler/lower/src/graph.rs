//! Move-level dependencies, derived from the operation-level dataflow graph.
//!
//! A dataflow edge `a -> b` says the two operations touch a common location, so both have
//! a step on that location's rank. The edge becomes a move edge `(ma, mb, rank)` for every
//! move of `a` and move of `b` whose accesses on `rank` conflict; moves of one operation are
//! ordered among themselves the same way. Every edge goes forward in program order.
//!
//! Why the dataflow edges are enough: the graph links each location's writers in a chain
//! (with each reader between two of them), and all the links of that chain are on the
//! location's own rank, so every pair of conflicting steps on a rank is ordered by a chain
//! of edges on that same rank.

use crate::access::{access, Access};
use crate::moves::Moves;
use braid_ir::Layout;
use braid_passes::dataflow::Dataflow;

/// "Move `to`'s step on `rank` must follow move `from`'s step on `rank`."
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MoveEdge {
    pub from: u32,
    pub to: u32,
    pub rank: u32,
}

/// The move edges, with each move's outgoing edges.
#[derive(Clone, Debug, Default)]
pub struct MoveGraph {
    pub edges: Vec<MoveEdge>,
    /// Indices into `edges` of the edges leaving each move.
    pub out: Vec<Vec<u32>>,
}

impl MoveGraph {
    /// The moves that must follow `m`, with the rank of each constraint.
    pub fn successors(&self, m: u32) -> impl Iterator<Item = &MoveEdge> + '_ {
        self.out[m as usize]
            .iter()
            .map(move |&e| &self.edges[e as usize])
    }
}

/// Builds the move edges of `moves` from each dataflow graph, deciding its conflicts in
/// the layout given with it (the layout of its mode): the union orders what each mode
/// needs ordered. One graph is enough unless a copy is the identity in one mode (see
/// [`crate::flow_mode`]).
pub fn build(moves: &Moves, flows: &[(&Dataflow, &Layout)]) -> MoveGraph {
    let mut edges = Vec::new();
    for &(flow, layout) in flows {
        add_edges(moves, flow, layout, &mut edges);
    }
    edges.sort_unstable();
    edges.dedup();
    let mut out = vec![Vec::new(); moves.len()];
    for (i, e) in edges.iter().enumerate() {
        out[e.from as usize].push(i as u32);
    }
    MoveGraph { edges, out }
}

/// The move edges of one mode's graph.
fn add_edges(moves: &Moves, flow: &Dataflow, layout: &Layout, edges: &mut Vec<MoveEdge>) {
    let link = |from: u32, to: u32, edges: &mut Vec<MoveEdge>| {
        let (a, b) = (moves.get(from), moves.get(to));
        for rank in a.ranks() {
            if !b.ranks().any(|r| r == rank) {
                continue;
            }
            let (x, y): (Access, Access) = (access(a, rank, layout), access(b, rank, layout));
            if x.conflicts(&y) {
                edges.push(MoveEdge { from, to, rank });
            }
        }
    };
    for range in &moves.of_op {
        for a in range.clone() {
            for b in a + 1..range.end {
                link(a, b, edges);
            }
        }
    }
    for e in flow.graph.raw_edges() {
        let (oa, ob) = (e.source().index(), e.target().index());
        for a in moves.of_op[oa].clone() {
            for b in moves.of_op[ob].clone() {
                link(a, b, edges);
            }
        }
    }
}
