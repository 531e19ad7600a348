//! The dataflow graph: chunk operations as nodes, dependencies on physical chunk locations
//! as edges. Any schedule that respects these edges, skipping the copies of locations onto
//! themselves, computes what the sequential program computes; lowering schedules this
//! graph onto the topology.

use crate::verify::layout;
use braid_ir::{Mode, OpId, OpProgram};
use petgraph::graph::{DiGraph, NodeIndex};
use std::collections::HashMap;
use std::fmt::Write;

/// Why one operation must follow another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dep {
    /// Read after write: the later op reads what the earlier one wrote.
    Raw,
    /// Write after read: the later op overwrites what the earlier one still reads.
    War,
    /// Write after write: the later op's result must be the one that remains.
    Waw,
}

/// The dependency graph of one program in one call mode. Node `i` is operation `i`.
#[derive(Clone, Debug)]
pub struct Dataflow {
    pub mode: Mode,
    pub graph: DiGraph<OpId, Dep>,
}

/// Summary figures printed by `braid check --stats`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    pub ops: usize,
    /// Operations that move data between ranks.
    pub transfers: usize,
    pub edges: usize,
    /// Operations on the longest dependency chain.
    pub critical_path: usize,
    /// The most operations at one depth of the as-soon-as-possible schedule.
    pub max_width: usize,
}

impl Dataflow {
    /// Builds the graph from read/write sets: each location remembers its last writer
    /// and the readers since, so the graph has no redundant transitive WAW/WAR edges
    /// beyond one per location. A copy of locations onto themselves in `mode`
    /// ([`braid_ir::Op::is_identity_in`]) gets no edges: the schedules of this graph are
    /// meant for executors that skip it.
    pub fn build(prog: &OpProgram, mode: Mode) -> Dataflow {
        let layout = layout(prog, mode);
        let mut graph = DiGraph::with_capacity(prog.ops.len(), prog.ops.len() * 2);
        let nodes: Vec<NodeIndex> = (0..prog.ops.len())
            .map(|i| graph.add_node(OpId(i as u32)))
            .collect();
        let mut last_writer: Vec<Option<u32>> = vec![None; layout.num_locs()];
        let mut readers: HashMap<usize, Vec<u32>> = HashMap::new();
        let mut preds: HashMap<u32, Dep> = HashMap::new();
        let layout = &layout;
        let locs = |r: &braid_ir::Ref| {
            let r = *r;
            (r.lo..r.hi).map(move |c| layout.loc(r.buf, r.rank, c).expect("in bounds").index())
        };
        for (i, op) in prog.ops.iter().enumerate() {
            if op.is_identity_in(layout) {
                // Changes nothing in this mode and is skipped there: no edges, so a read
                // of these locations after it is not held up by it.
                continue;
            }
            preds.clear();
            let add = |from: u32, dep: Dep, preds: &mut HashMap<u32, Dep>| {
                if from != i as u32 {
                    // Keep the strongest reason: a RAW edge carries data.
                    let e = preds.entry(from).or_insert(dep);
                    if dep == Dep::Raw {
                        *e = Dep::Raw;
                    }
                }
            };
            for loc in op.srcs.iter().flat_map(locs) {
                if let Some(w) = last_writer[loc] {
                    add(w, Dep::Raw, &mut preds);
                }
            }
            for loc in locs(&op.dst) {
                if let Some(w) = last_writer[loc] {
                    add(w, Dep::Waw, &mut preds);
                }
                if let Some(rs) = readers.remove(&loc) {
                    for r in rs {
                        add(r, Dep::War, &mut preds);
                    }
                }
            }
            // Record this op's reads after its own writes are accounted for, then its
            // writes (a reduce reads and writes its destination).
            for loc in op.srcs.iter().flat_map(locs) {
                readers.entry(loc).or_default().push(i as u32);
            }
            for loc in locs(&op.dst) {
                last_writer[loc] = Some(i as u32);
                readers.remove(&loc);
            }
            let mut sorted: Vec<(u32, Dep)> = preds.iter().map(|(k, v)| (*k, *v)).collect();
            sorted.sort_by_key(|p| p.0);
            for (from, dep) in sorted {
                graph.add_edge(nodes[from as usize], nodes[i], dep);
            }
        }
        Dataflow { mode, graph }
    }

    /// Depth of each op in the as-soon-as-possible schedule (0 for ops with no
    /// predecessor). Node indices are program order, a topological order.
    pub fn depths(&self) -> Vec<usize> {
        let mut depth = vec![0usize; self.graph.node_count()];
        for n in self.graph.node_indices() {
            let d = self
                .graph
                .neighbors_directed(n, petgraph::Direction::Incoming)
                .map(|p| depth[p.index()] + 1)
                .max()
                .unwrap_or(0);
            depth[n.index()] = d;
        }
        depth
    }

    pub fn stats(&self, prog: &OpProgram) -> Stats {
        let depths = self.depths();
        let mut width: HashMap<usize, usize> = HashMap::new();
        for &d in &depths {
            *width.entry(d).or_default() += 1;
        }
        Stats {
            ops: prog.ops.len(),
            transfers: prog.ops.iter().filter(|o| o.is_transfer()).count(),
            edges: self.graph.edge_count(),
            critical_path: depths.iter().max().map_or(0, |d| d + 1),
            max_width: width.values().copied().max().unwrap_or(0),
        }
    }

    /// Graphviz text: one node per operation (labelled with the operation and its source
    /// line), solid edges for data (RAW), dashed for WAR, dotted for WAW.
    pub fn to_dot(&self, prog: &OpProgram, line_of: impl Fn(u32) -> usize) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "digraph \"{}\" {{", prog.algorithm);
        let _ = writeln!(
            out,
            "  label=\"{} ({}, {})\";",
            prog.algorithm, prog.shape, self.mode
        );
        let _ = writeln!(out, "  node [shape=box, fontname=monospace];");
        for n in self.graph.node_indices() {
            let op = prog.op(self.graph[n]);
            let color = if op.is_transfer() {
                "lightblue"
            } else {
                "white"
            };
            let _ = writeln!(
                out,
                "  op{} [label=\"{}\\nline {}\", style=filled, fillcolor={color}];",
                n.index(),
                op.to_string().replace('"', "\\\""),
                line_of(op.span.start)
            );
        }
        for e in self.graph.edge_indices() {
            let (a, b) = self.graph.edge_endpoints(e).expect("edge");
            let style = match self.graph[e] {
                Dep::Raw => "solid",
                Dep::War => "dashed",
                Dep::Waw => "dotted",
            };
            let _ = writeln!(out, "  op{} -> op{} [style={style}];", a.index(), b.index());
        }
        out.push_str("}\n");
        out
    }
}
