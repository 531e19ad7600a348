//! Bandwidth bounds. [`cut_bound_us`] is the time no schedule can beat on a topology:
//! for a set of ranks S, the data the collective must bring into (or out of) S divided by
//! the bandwidth of the links crossing the cut that some rank-to-rank route uses (Braid
//! moves data between two ranks along their route), maximised over the cuts tried (every
//! single rank, every node, and their complements). Allreduce counts as a reduce-scatter
//! followed by an allgather, which is how schedules that reduce at the ranks run. [`bottleneck_us`] is what a given plan needs: the
//! bytes it puts on every directed link (its connections' traffic over their routes)
//! divided by the link's bandwidth, maximised over links. The two are computed
//! independently: the bottleneck from the plan alone, so a generator's mistake cannot
//! report a time its plan does not achieve.

use braid_ir::Collective;
use braid_plan::Plan;
use braid_topo::Topology;
use std::collections::{BTreeSet, HashMap};

/// The lower bound for `collective` with `bytes` in one rank's larger buffer, µs, and
/// the cut that gives it (its ranks).
pub fn cut_bound_us(topo: &Topology, collective: Collective, bytes: u64) -> (f64, Vec<u32>) {
    cut_bound_rooted_us(topo, collective, bytes, Some(0))
}

/// [`cut_bound_us`] for a rooted collective's `root` (ignored by the others).
pub fn cut_bound_rooted_us(
    topo: &Topology,
    collective: Collective,
    bytes: u64,
    root: Option<u32>,
) -> (f64, Vec<u32>) {
    let n = topo.n_ranks();
    if n < 2 {
        return (0.0, Vec::new());
    }
    let mut cuts: Vec<BTreeSet<u32>> = (0..n).map(|r| BTreeSet::from([r])).collect();
    for node in 0..topo.n_nodes() {
        let s: BTreeSet<u32> = topo.ranks_of_node(node).collect();
        if s.len() < n as usize && s.len() > 1 {
            cuts.push(s);
        }
    }
    // Pairs of ranks (two GPUs behind one bridge or switch share what enters them); up to
    // 64 ranks, where the pairs are few enough to try them all.
    if n <= 64 {
        for a in 0..n {
            for b in a + 1..n {
                cuts.push(BTreeSet::from([a, b]));
            }
        }
    }
    let complements: Vec<BTreeSet<u32>> = cuts
        .iter()
        .map(|s| (0..n).filter(|r| !s.contains(r)).collect())
        .filter(|c: &BTreeSet<u32>| c.len() > 1)
        .collect();
    cuts.extend(complements);
    let b = bytes as f64;
    let routed = routed_links(topo);
    let mut best = (0.0, Vec::new());
    for s in cuts {
        let k = s.len() as f64;
        let outside = f64::from(n) - k;
        // Blocks of B/N each rank must receive from outside S (allgather), or partial
        // sums S must send out (reduce-scatter); allreduce does both.
        let (inward, outward) = match collective {
            Collective::Allgather => (outside / f64::from(n) * b, 0.0),
            Collective::ReduceScatter => (0.0, outside / f64::from(n) * b),
            Collective::Allreduce => (outside / f64::from(n) * b, outside / f64::from(n) * b),
            // The root's data must reach every rank outside a cut holding the root, and
            // enter a cut without it; reduce is the same the other way.
            Collective::Broadcast | Collective::Reduce => {
                let has_root = s.contains(&root.unwrap_or(0));
                let (into, out_of) = match (has_root, outside > 0.0) {
                    (true, true) => (0.0, b),
                    (false, _) => (b, 0.0),
                    (true, false) => (0.0, 0.0),
                };
                if collective == Collective::Broadcast {
                    (into, out_of)
                } else {
                    (out_of, into)
                }
            }
            Collective::Alltoall => (
                k * outside / f64::from(n) * b,
                k * outside / f64::from(n) * b,
            ),
        };
        let (cap_in, cap_out) = cut_capacity(topo, &s, &routed);
        let time = |bytes: f64, cap: f64| {
            if bytes > 0.0 && cap > 0.0 {
                bytes / cap
            } else {
                0.0
            }
        };
        // Allreduce is priced as its two phases, a reduce-scatter then an allgather, one
        // after the other (the schedules the language writes reduce at the ranks); the
        // others move one way.
        let t = if collective == Collective::Allreduce {
            time(inward, cap_in) + time(outward, cap_out)
        } else {
            time(inward, cap_in).max(time(outward, cap_out))
        } / 1e3;
        if t > best.0 {
            best = (t, s.into_iter().collect());
        }
    }
    best
}

/// The links (as vertex pairs, smaller first) some rank-to-rank route uses: Braid moves
/// data between two ranks along their route, so the others can carry none of it.
fn routed_links(topo: &Topology) -> BTreeSet<(u32, u32)> {
    let n = topo.n_ranks();
    let mut routed = BTreeSet::new();
    for a in 0..n {
        for b in 0..n {
            if a != b {
                for (x, y) in topo.path(a, b).hops_directed() {
                    routed.insert((x.min(y), x.max(y)));
                }
            }
        }
    }
    routed
}

/// GB/s into and out of the set of ranks `s`: the links between the vertices of S's
/// side and the rest. A single rank's side is its GPU; a node's side is every vertex
/// of that node.
fn cut_capacity(topo: &Topology, s: &BTreeSet<u32>, routed: &BTreeSet<(u32, u32)>) -> (f64, f64) {
    let n = topo.n_ranks();
    let whole_nodes: BTreeSet<u32> = (0..topo.n_nodes())
        .filter(|&node| topo.ranks_of_node(node).all(|r| s.contains(&r)))
        .collect();
    let gpus: HashMap<u32, u32> = (0..n).map(|r| (topo.gpu_vertex(r).0, r)).collect();
    let inside = |v: braid_topo::VertexId| -> bool {
        if let Some(r) = gpus.get(&v.0) {
            return s.contains(r);
        }
        // A switch, bridge, CPU or NIC belongs to S when S holds its whole node.
        topo.vertex(v)
            .node
            .is_some_and(|node| whole_nodes.contains(&node) && s.len() > 1)
    };
    let mut cap = 0.0;
    for (a, b, l) in topo.links() {
        if inside(a) != inside(b) && routed.contains(&(a.0.min(b.0), a.0.max(b.0))) {
            cap += l.bandwidth_gbps;
        }
    }
    // Links are full duplex: the same capacity in each direction.
    (cap, cap)
}

/// The time `plan` needs on its busiest directed link for a call of `bytes` (one rank's
/// larger buffer) of `elem`-byte elements, µs, and that link's end vertices' names.
pub fn bottleneck_us(plan: &Plan, topo: &Topology, bytes: u64, elem: u64) -> (f64, String) {
    let chunk = crate::sim::chunk_bytes(plan, bytes, elem) as f64;
    let traffic = braid_plan::traffic::traffic(plan);
    let mut load: HashMap<(u32, u32), f64> = HashMap::new();
    for (r, peers) in traffic.sent.iter().enumerate() {
        for (&peer, &chunks) in peers {
            for hop in topo.path(r as u32, peer).hops_directed() {
                *load.entry(hop).or_insert(0.0) += chunks as f64 * chunk;
            }
        }
    }
    let bw = topo.directed_bandwidths();
    let mut worst = (0.0, String::new());
    for ((a, b), bytes) in load {
        let t = bytes / (bw.get(&(a, b)).copied().unwrap_or(f64::INFINITY) * 1e3);
        if t > worst.0 {
            let name = |v: u32| topo.vertex(braid_topo::VertexId(v)).name.clone();
            worst = (t, format!("{} -> {}", name(a), name(b)));
        }
    }
    worst
}
