//! The order of the ranks on a ring. A ring moves the same amount over each of its hops
//! at once, so its speed is set by the directed link that the most hops cross, relative
//! to that link's bandwidth; among orders equally good there, the one whose hops add up
//! to the least latency wins. On one node the search is a local search over the whole
//! cycle; across nodes each node's ranks are ordered as a path and the nodes follow each
//! other, so the ring crosses the network once per node.

use braid_topo::Topology;
use std::collections::HashMap;

/// How good a ring order is: the time per byte on its busiest link (lower is better),
/// then its total hop latency.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Score {
    pub per_byte: f64,
    pub latency_us: f64,
}

/// Scores the rings `orders` running at once, each carrying the same amount, in the
/// direction `forward` (`true`: position i sends to i + 1).
pub fn score(topo: &Topology, orders: &[(Vec<u32>, bool)]) -> Score {
    let mut load: HashMap<(u32, u32), f64> = HashMap::new();
    let mut latency = 0.0;
    for (order, forward) in orders {
        let n = order.len();
        for i in 0..n {
            let (a, b) = (order[i], order[(i + 1) % n]);
            let (a, b) = if *forward { (a, b) } else { (b, a) };
            if a == b {
                continue;
            }
            let path = topo.path(a, b);
            latency += path.latency_us;
            for hop in path.hops_directed() {
                *load.entry(hop).or_insert(0.0) += 1.0;
            }
        }
    }
    let bw = topo.directed_bandwidths();
    let per_byte = load
        .iter()
        .map(|(k, &units)| units / bw.get(k).copied().unwrap_or(f64::INFINITY))
        .fold(0.0, f64::max);
    Score {
        per_byte,
        latency_us: latency,
    }
}

fn better(a: Score, b: Score) -> bool {
    let tol = 1e-9 * b.per_byte.max(1e-12);
    a.per_byte < b.per_byte - tol
        || ((a.per_byte - b.per_byte).abs() <= tol && a.latency_us < b.latency_us - 1e-9)
}

/// Improves `order` (a cycle when `cycle`, else a path with fixed ends) by reversing
/// segments while that helps, up to `rounds` passes.
fn two_opt(
    mut order: Vec<u32>,
    cycle: bool,
    rounds: usize,
    eval: &dyn Fn(&[u32]) -> Score,
) -> Vec<u32> {
    let n = order.len();
    if n < 4 {
        return order;
    }
    let mut best = eval(&order);
    for _ in 0..rounds {
        let mut improved = false;
        let (lo, hi) = if cycle { (1, n) } else { (1, n - 1) };
        for i in lo..hi {
            for j in i + 1..hi {
                order[i..=j].reverse();
                let s = eval(&order);
                if better(s, best) {
                    best = s;
                    improved = true;
                } else {
                    order[i..=j].reverse();
                }
            }
        }
        if !improved {
            break;
        }
    }
    order
}

/// A ring order of every rank of `topo`, good for bandwidth.
pub fn ring(topo: &Topology) -> Vec<u32> {
    let n = topo.n_ranks();
    if topo.n_nodes() <= 1 {
        let eval = |o: &[u32]| score(topo, &[(o.to_vec(), true)]);
        let rounds = if n <= 64 { 8 } else { 1 };
        return two_opt((0..n).collect(), true, rounds, &eval);
    }
    // Node by node: each node's ranks as a path (entered at its first rank, left at its
    // last), scored inside the node alone; the nodes in order.
    let mut order = Vec::with_capacity(n as usize);
    for node in 0..topo.n_nodes() {
        let ranks: Vec<u32> = topo.ranks_of_node(node).collect();
        let eval = |o: &[u32]| {
            let mut path = score(topo, &[(o.to_vec(), true)]);
            // The closing hop of a path does not exist: score the open path by removing
            // it from the latency (its load share is small against the ring's).
            if o.len() > 1 {
                path.latency_us -= topo.path(o[o.len() - 1], o[0]).latency_us;
            }
            path
        };
        let rounds = if ranks.len() <= 64 { 4 } else { 1 };
        order.extend(two_opt(ranks, false, rounds, &eval));
    }
    order
}
