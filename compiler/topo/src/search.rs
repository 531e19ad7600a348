//! Route search: which routes are legal, and the best one by NCCL's criteria.
//!
//! Legal routes (the rules NCCL's path search implies, written down):
//! - a route never passes *through* a GPU (GPUs do not forward traffic);
//! - a route between two GPUs of one node stays inside that node;
//! - a route between nodes leaves the source node once, through a NIC (or a
//!   direct cross-node cable), crosses network vertices, and enters the
//!   target node once: it never visits a third node, and a NIC is only ever
//!   crossed between its node and the outside.
//!
//! All rules depend only on the source's node and the two ends of a step, so
//! they are the same for every search from that source, and symmetric.
//!
//! "Best" is NCCL's: the widest route (largest bottleneck bandwidth), then the
//! fewest hops, then the least latency. Widest-then-shortest is not a property
//! plain Dijkstra can optimise in one pass (the order is not preserved by
//! extension), so it is two exact passes: a widest-path search gives each
//! target's bottleneck `W`, then a (hops, latency) search over the links of at
//! least `W` finds the route. Targets are grouped by `W`, so a source costs one
//! pass per distinct bottleneck (two in a cluster: NVLink and the NIC).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use petgraph::graph::{EdgeIndex, NodeIndex, UnGraph};
use petgraph::visit::EdgeRef;

use crate::{Link, Vertex};

/// The legal-step rules for searches from one source vertex.
pub(crate) struct Rules<'g> {
    g: &'g UnGraph<Vertex, Link>,
    src: NodeIndex,
    src_node: Option<u32>,
    /// Never leave the source's node: exactly the routes to the source's own
    /// node-mates, which the rules keep inside anyway, found without visiting
    /// the rest of a large cluster.
    inside_only: bool,
}

impl<'g> Rules<'g> {
    pub(crate) fn new(g: &'g UnGraph<Vertex, Link>, src: NodeIndex, inside_only: bool) -> Self {
        Rules {
            g,
            src,
            src_node: g[src].node,
            inside_only,
        }
    }

    /// The legal steps out of `u`: (neighbour, edge, link).
    fn steps(&self, u: NodeIndex) -> impl Iterator<Item = (NodeIndex, EdgeIndex, &'g Link)> + '_ {
        let expands = u == self.src || !self.g[u].kind.is_gpu();
        self.g
            .edges(u)
            .filter(move |_| expands)
            .map(move |e| {
                let v = if e.source() == u {
                    e.target()
                } else {
                    e.source()
                };
                (v, e.id(), e.weight())
            })
            .filter(move |&(v, _, _)| self.may_step(u, v))
            .filter(move |&(v, _, _)| !self.inside_only || self.g[v].node == self.src_node)
    }

    /// The node rules of the module doc, for one step `u -> v`.
    fn may_step(&self, u: NodeIndex, v: NodeIndex) -> bool {
        let (a, b) = (&self.g[u], &self.g[v]);
        let s = self.src_node;
        match (a.node, b.node) {
            // Inside the source node a NIC only leads out; inside another node
            // one never walks onto a NIC (it is entered from the network only).
            (Some(x), Some(y)) if x == y => {
                if Some(x) == s {
                    !a.kind.is_nic()
                } else {
                    !b.kind.is_nic()
                }
            }
            // Leaving a node (to another node or to the network): only the source's.
            (Some(x), _) => Some(x) == s,
            (None, None) => true,
            // Entering a node from the network: never back into the source node.
            (None, Some(y)) => Some(y) != s,
        }
    }
}

/// Which vertices legal routes from `src` reach, when routes start at
/// `starts` (`src` itself, or some vertices such routes reach) and, with
/// `inside_only`, never leave `src`'s node. The reference `routes.rs` is tested
/// against.
#[cfg(test)]
pub(crate) fn reachable(
    g: &UnGraph<Vertex, Link>,
    src: NodeIndex,
    starts: &[NodeIndex],
    inside_only: bool,
) -> Vec<bool> {
    let rules = Rules::new(g, src, inside_only);
    let mut seen = vec![false; g.node_count()];
    let mut queue = std::collections::VecDeque::new();
    for &s in starts {
        seen[s.index()] = true;
        queue.push_back(s);
    }
    while let Some(u) = queue.pop_front() {
        for (v, _, _) in rules.steps(u) {
            if !seen[v.index()] {
                seen[v.index()] = true;
                queue.push_back(v);
            }
        }
    }
    seen
}

/// The bottleneck bandwidth of the widest legal route from `src` to every
/// vertex (0 when unreachable, infinite for `src` itself).
pub(crate) fn widest(g: &UnGraph<Vertex, Link>, src: NodeIndex, inside_only: bool) -> Vec<f64> {
    let rules = Rules::new(g, src, inside_only);
    let mut best = vec![0.0_f64; g.node_count()];
    let mut done = vec![false; g.node_count()];
    best[src.index()] = f64::INFINITY;
    let mut heap = BinaryHeap::from([Widest(f64::INFINITY, src)]);
    while let Some(Widest(bw, u)) = heap.pop() {
        if done[u.index()] {
            continue;
        }
        done[u.index()] = true;
        for (v, _, link) in rules.steps(u) {
            let through = bw.min(link.bandwidth_gbps);
            if !done[v.index()] && through > best[v.index()] {
                best[v.index()] = through;
                heap.push(Widest(through, v));
            }
        }
    }
    best
}

/// For each vertex, the edge that reaches it on the (fewest hops, least
/// latency) legal route from `src` using only links of at least `min_bw`.
/// Stops once every vertex of `targets` is settled.
pub(crate) fn shortest(
    g: &UnGraph<Vertex, Link>,
    src: NodeIndex,
    inside_only: bool,
    min_bw: f64,
    targets: &[NodeIndex],
) -> Vec<Option<EdgeIndex>> {
    let rules = Rules::new(g, src, inside_only);
    let n = g.node_count();
    let mut dist = vec![(u32::MAX, f64::INFINITY); n];
    let mut pred = vec![None; n];
    let mut done = vec![false; n];
    let mut left = targets.iter().filter(|t| **t != src).count();
    let mut is_target = vec![false; n];
    for t in targets {
        is_target[t.index()] = true;
    }
    dist[src.index()] = (0, 0.0);
    let mut heap = BinaryHeap::from([Shortest(0, 0.0, src)]);
    while let Some(Shortest(hops, lat, u)) = heap.pop() {
        if done[u.index()] {
            continue;
        }
        done[u.index()] = true;
        if u != src && is_target[u.index()] {
            left -= 1;
            if left == 0 {
                break;
            }
        }
        for (v, e, link) in rules.steps(u) {
            if link.bandwidth_gbps < min_bw || done[v.index()] {
                continue;
            }
            let cand = (hops + 1, lat + link.latency_us);
            let old = dist[v.index()];
            if cand.0 < old.0 || (cand.0 == old.0 && cand.1 < old.1) {
                dist[v.index()] = cand;
                pred[v.index()] = Some(e);
                heap.push(Shortest(cand.0, cand.1, v));
            }
        }
    }
    pred
}

/// Max-heap entry by bandwidth; ties broken by lower vertex index, so that
/// searches are deterministic.
struct Widest(f64, NodeIndex);

impl Ord for Widest {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0
            .total_cmp(&other.0)
            .then_with(|| other.1.cmp(&self.1))
    }
}
impl PartialOrd for Widest {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Widest {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Widest {}

/// Min-heap entry by (hops, latency, vertex index).
struct Shortest(u32, f64, NodeIndex);

impl Ord for Shortest {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .0
            .cmp(&self.0)
            .then_with(|| other.1.total_cmp(&self.1))
            .then_with(|| other.2.cmp(&self.2))
    }
}
impl PartialOrd for Shortest {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Shortest {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Shortest {}
