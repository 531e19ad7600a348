//! The whole-machine check that every GPU reaches every other GPU by a legal route
//! (the rules of `search.rs`), in time linear in the graph.
//!
//! Searching from every GPU cost one graph traversal per GPU: 24 s for the
//! `nvswitch:4096` preset in a debug build. Instead the graph is cut into pieces once.
//! Routes never pass through a GPU, a NIC is crossed only between its node and the
//! outside, and a route never re-enters the source node, so (writing *transit* for the
//! vertices of a node that are neither GPUs nor NICs, and *islands* for the connected
//! pieces of a node's transit vertices):
//!
//! * inside its node, GPU `a` reaches its neighbours in the node, and the islands it
//!   touches with everything they touch in the node;
//! * a NIC `z` of another node, once a route has entered it, leads to the GPUs it
//!   touches and those touched by the islands it touches (never to another NIC);
//! * a route leaving the node starts at a NIC that `a` reaches inside it, and goes to a
//!   NIC of another node over a direct cable, or into a piece of the network (connected
//!   network vertices) and from there to any NIC the piece touches.
//!
//! Reachable sets are bitsets over ranks, unions of per-piece sets computed once.

use petgraph::graph::{NodeIndex, UnGraph};

use crate::builder::{no_route, Located};
use crate::{Link, Topology, Vertex, VertexKind};

/// A set of ranks; storage grows with the highest rank inserted, so the many pieces that
/// touch no GPU cost nothing.
#[derive(Clone, Default)]
struct Ranks(Vec<u64>);

impl Ranks {
    fn insert(&mut self, r: u32) {
        let w = r as usize / 64;
        if self.0.len() <= w {
            self.0.resize(w + 1, 0);
        }
        self.0[w] |= 1 << (r % 64);
    }

    fn contains(&self, r: u32) -> bool {
        self.0
            .get(r as usize / 64)
            .is_some_and(|w| w & (1 << (r % 64)) != 0)
    }

    fn union(&mut self, other: &Ranks) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a |= b;
        }
    }
}

/// Connected pieces of the subgraph induced by the vertices `member` accepts.
fn pieces(g: &UnGraph<Vertex, Link>, member: impl Fn(&Vertex) -> bool) -> (Vec<u32>, usize) {
    const NONE: u32 = u32::MAX;
    let mut of = vec![NONE; g.node_count()];
    let mut count = 0;
    let mut stack = Vec::new();
    for v in g.node_indices() {
        if of[v.index()] != NONE || !member(&g[v]) {
            continue;
        }
        of[v.index()] = count as u32;
        stack.push(v);
        while let Some(u) = stack.pop() {
            for w in g.neighbors(u) {
                // A piece stays inside one node (network vertices are in none).
                if of[w.index()] == NONE && member(&g[w]) && g[w].node == g[u].node {
                    of[w.index()] = count as u32;
                    stack.push(w);
                }
            }
        }
        count += 1;
    }
    (of, count)
}

fn is_transit(v: &Vertex) -> bool {
    v.node.is_some() && !matches!(v.kind, VertexKind::Gpu(_) | VertexKind::Nic(_))
}

/// Every GPU reaches every other GPU by a legal route; the first failure (by source rank,
/// then target rank) otherwise.
pub(crate) fn check_routes(topo: &Topology) -> Result<(), Located> {
    let g = topo.graph();
    let n = topo.n_ranks();
    let rank_of = |v: NodeIndex| match &g[v].kind {
        VertexKind::Gpu(gpu) => Some(gpu.rank),
        _ => None,
    };
    let (island, n_islands) = pieces(g, is_transit);
    // GPUs each island touches (in its node, as islands lie in one node).
    let mut island_gpus = vec![Ranks::default(); n_islands];
    for v in g.node_indices() {
        let Some(i) = Some(island[v.index()]).filter(|&i| i != u32::MAX) else {
            continue;
        };
        for w in g.neighbors(v) {
            if let Some(r) = rank_of(w).filter(|_| g[w].node == g[v].node) {
                island_gpus[i as usize].insert(r);
            }
        }
    }
    // What a route that has entered NIC `z` reaches in z's node.
    let nic_gpus = |z: NodeIndex| {
        let mut s = Ranks::default();
        for w in g.neighbors(z).filter(|&w| g[w].node == g[z].node) {
            if let Some(r) = rank_of(w) {
                s.insert(r);
            } else if let Some(&i) = Some(&island[w.index()]).filter(|&&i| i != u32::MAX) {
                s.union(&island_gpus[i as usize]);
            }
        }
        s
    };
    let nic_reach: Vec<Option<Ranks>> = g
        .node_indices()
        .map(|v| g[v].kind.is_nic().then(|| nic_gpus(v)))
        .collect();
    // What each network piece leads to: the GPUs behind every NIC it touches.
    let (net, n_nets) = pieces(g, |v| v.node.is_none());
    let mut net_reach = vec![Ranks::default(); n_nets];
    for v in g.node_indices().filter(|&v| net[v.index()] != u32::MAX) {
        for w in g.neighbors(v) {
            if let Some(s) = &nic_reach[w.index()] {
                net_reach[net[v.index()] as usize].union(s);
            }
        }
    }
    // What leaving through NIC `x` reaches (GPUs of its own node included, which the
    // check ignores: a route never re-enters its source node).
    let leave = |x: NodeIndex| {
        let mut s = Ranks::default();
        for w in g.neighbors(x).filter(|&w| g[w].node != g[x].node) {
            match (&nic_reach[w.index()], net[w.index()]) {
                (Some(z), _) => s.union(z),
                (None, p) if p != u32::MAX => s.union(&net_reach[p as usize]),
                _ => {}
            }
        }
        s
    };
    let out_of: Vec<Option<Ranks>> = g
        .node_indices()
        .map(|v| g[v].kind.is_nic().then(|| leave(v)))
        .collect();
    // Per island: the GPUs it touches and where the NICs it touches lead.
    let mut island_out = vec![Ranks::default(); n_islands];
    for v in g.node_indices().filter(|&v| island[v.index()] != u32::MAX) {
        for w in g.neighbors(v).filter(|&w| g[w].node == g[v].node) {
            if let Some(o) = &out_of[w.index()] {
                island_out[island[v.index()] as usize].union(o);
            }
        }
    }
    for a in 0..n {
        let va = NodeIndex::new(topo.gpu_vertex(a).index());
        let node = g[va].node;
        let (mut inside, mut outside) = (Ranks::default(), Ranks::default());
        inside.insert(a);
        for w in g.neighbors(va).filter(|&w| g[w].node == node) {
            if let Some(r) = rank_of(w) {
                inside.insert(r);
            } else if let Some(o) = &out_of[w.index()] {
                outside.union(o);
            } else if island[w.index()] != u32::MAX {
                inside.union(&island_gpus[island[w.index()] as usize]);
                outside.union(&island_out[island[w.index()] as usize]);
            }
        }
        let k = topo.node_of(a);
        let local = topo.ranks_of_node(k);
        if let Some(b) = local.clone().find(|&b| !inside.contains(b)) {
            return Err(no_route(topo, a, b));
        }
        if topo.n_nodes() > 1 {
            if let Some(b) = (0..n).find(|&b| !local.contains(&b) && !outside.contains(b)) {
                return Err(no_route(topo, a, b));
            }
        }
    }
    Ok(())
}

/// The search the check above replaces, one traversal per GPU, kept to test it against.
#[cfg(test)]
pub(crate) fn check_routes_by_search(topo: &Topology) -> Result<(), Located> {
    use crate::search;
    let g = topo.graph();
    let gpu = |rank: u32| NodeIndex::new(topo.gpu_vertex(rank).index());
    for k in 0..topo.n_nodes() {
        let local = topo.ranks_of_node(k);
        let mut exits_tried: Vec<Vec<NodeIndex>> = Vec::new();
        for a in local.clone() {
            let inside = search::reachable(g, gpu(a), &[gpu(a)], true);
            if let Some(b) = local.clone().find(|&b| !inside[gpu(b).index()]) {
                return Err(no_route(topo, a, b));
            }
            if topo.n_nodes() == 1 {
                continue;
            }
            let exits: Vec<NodeIndex> = g
                .node_indices()
                .filter(|&v| inside[v.index()] && g[v].kind.is_nic())
                .collect();
            if exits_tried.contains(&exits) {
                continue;
            }
            let outside = search::reachable(g, gpu(a), &exits, false);
            let unreached =
                (0..topo.n_ranks()).find(|&b| !local.contains(&b) && !outside[gpu(b).index()]);
            if let Some(b) = unreached {
                return Err(no_route(topo, a, b));
            }
            exits_tried.push(exits);
        }
    }
    Ok(())
}
