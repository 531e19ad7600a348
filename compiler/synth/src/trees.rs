//! Tree packing for allgather: every rank's block is cut into parts, and each part goes
//! to every other rank along a spanning tree rooted at its owner. Trees are grown one
//! after another against the link loads the earlier ones left (each edge is a pair of
//! ranks, its cost the busiest link on its route after adding the part), so that parts
//! spread over every link in proportion to its bandwidth: on a topology where a rank can
//! receive over several links at once (an NVLink bridge and PCIe), traffic takes all of
//! them, which a ring, one path per hop, cannot.

use braid_topo::Topology;
use std::collections::HashMap;

/// One part's tree: `(parent, child)` edges in an order where every parent already has
/// the part (breadth first from the root).
pub type Tree = Vec<(u32, u32)>;

/// Link loads, in parts crossing each, and bandwidths, by directed link.
struct Loads<'t> {
    topo: &'t Topology,
    load: HashMap<(u32, u32), f64>,
    bw: HashMap<(u32, u32), f64>,
}

impl<'t> Loads<'t> {
    fn new(topo: &'t Topology) -> Self {
        Loads {
            topo,
            load: HashMap::new(),
            bw: topo.directed_bandwidths(),
        }
    }

    /// The busiest link of the route `a -> b` if one more part crossed it (time per byte).
    fn cost(&self, a: u32, b: u32) -> f64 {
        self.topo
            .path(a, b)
            .hops_directed()
            .map(|k| {
                (self.load.get(&k).copied().unwrap_or(0.0) + 1.0)
                    / self.bw.get(&k).copied().unwrap_or(f64::INFINITY)
            })
            .fold(0.0, f64::max)
    }

    fn add(&mut self, a: u32, b: u32) {
        for k in self.topo.path(a, b).hops_directed() {
            *self.load.entry(k).or_insert(0.0) += 1.0;
        }
    }
}

/// The edges of `tree` (rooted at `root`) with the depth of each child: `(depth,
/// parent, child)`, in the tree's order.
pub fn leveled(tree: &Tree, root: u32) -> Vec<(usize, u32, u32)> {
    let mut depth: HashMap<u32, usize> = HashMap::from([(root, 0)]);
    tree.iter()
        .map(|&(a, b)| {
            let d = depth[&a] + 1;
            depth.insert(b, d);
            (d, a, b)
        })
        .collect()
}

/// `parts` trees for every rank's block, `trees[s][j]` the tree of part `j` of rank `s`.
pub fn pack(topo: &Topology, parts: usize) -> Vec<Vec<Tree>> {
    let n = topo.n_ranks();
    let mut loads = Loads::new(topo);
    let mut trees: Vec<Vec<Tree>> = vec![Vec::new(); n as usize];
    // Round robin over sources, so that no rank's parts take the cheap links first.
    for _ in 0..parts {
        for s in 0..n {
            // Depth of each rank in the tree so far (`None`: outside it).
            let mut depth: Vec<Option<usize>> = vec![None; n as usize];
            depth[s as usize] = Some(0);
            let mut tree = Vec::with_capacity(n as usize - 1);
            for _ in 1..n {
                // The cheapest edge from the tree to a rank outside it: the lowest busiest
                // link, then the fewest hops from the root (shallow trees stream sooner).
                let mut best: Option<(f64, usize, u32, u32)> = None;
                for u in 0..n {
                    let Some(du) = depth[u as usize] else {
                        continue;
                    };
                    for v in (0..n).filter(|&v| depth[v as usize].is_none()) {
                        let c = loads.cost(u, v);
                        let better = match best {
                            None => true,
                            Some((bc, bd, _, _)) => {
                                c < bc * (1.0 - 1e-9) || ((c - bc).abs() <= bc * 1e-9 && du < bd)
                            }
                        };
                        if better {
                            best = Some((c, du, u, v));
                        }
                    }
                }
                let (_, du, u, v) = best.expect("a rank outside the tree");
                loads.add(u, v);
                depth[v as usize] = Some(du + 1);
                tree.push((u, v));
            }
            trees[s as usize].push(tree);
        }
    }
    trees
}
