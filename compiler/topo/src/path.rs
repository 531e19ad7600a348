//! The path between two ranks: its class, speed and route.

use petgraph::graph::{EdgeIndex, NodeIndex, UnGraph};
use serde::{Deserialize, Serialize};

use crate::search;
use crate::{Link, PathClass, Vertex, VertexId, VertexKind};

/// Bandwidth reported for a rank's path to itself, GB/s: NCCL's `LOC_BW`, about
/// what one GPU's HBM copies at.
pub const LOCAL_BANDWIDTH_GBPS: f64 = 5000.0;

/// The best route between two GPUs and what it is worth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Path {
    /// The worst hop on the route, as NCCL grades it; `Net` for any cross-node pair.
    pub class: PathClass,
    /// The bottleneck: the smallest link bandwidth on the route, GB/s per direction.
    pub bandwidth_gbps: f64,
    /// The sum of the links' latencies, microseconds.
    pub latency_us: f64,
    /// The vertices from the source GPU to the target GPU, both included.
    pub route: Vec<VertexId>,
}

impl Path {
    /// Number of links on the route.
    pub fn hops(&self) -> usize {
        self.route.len().saturating_sub(1)
    }

    /// See [`PathClass::is_p2p_direct`].
    pub fn is_p2p_direct(&self) -> bool {
        self.class.is_p2p_direct()
    }

    /// The route's hops as directed links `(from, to)` (vertex indices).
    pub fn hops_directed(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.route.windows(2).map(|w| (w[0].0, w[1].0))
    }
}

/// The paths from the GPU `gpus[src]` to every GPU of `gpus`, in the order of
/// `gpus`. With `inside_only`, `gpus` must all be in the source's node.
///
/// # Panics
/// If a GPU is unreachable: [`crate::TopologyBuilder::build`] rules that out.
pub(crate) fn paths_from(
    g: &UnGraph<Vertex, Link>,
    gpus: &[VertexId],
    src: usize,
    inside_only: bool,
) -> Box<[Path]> {
    let s = node(gpus[src]);
    let widest = search::widest(g, s, inside_only);

    // Group the targets by bottleneck, widest first; bits compare exactly since
    // every bottleneck is one of the links' own bandwidths.
    let mut groups: Vec<(f64, Vec<usize>)> = Vec::new();
    for (rank, &t) in gpus.iter().enumerate() {
        if rank == src {
            continue;
        }
        let w = widest[t.index()];
        assert!(w > 0.0, "rank {rank} unreachable from rank {src}");
        match groups
            .iter_mut()
            .find(|(gw, _)| gw.to_bits() == w.to_bits())
        {
            Some((_, ranks)) => ranks.push(rank),
            None => groups.push((w, vec![rank])),
        }
    }

    let mut out: Vec<Option<Path>> = vec![None; gpus.len()];
    out[src] = Some(Path {
        class: PathClass::Nvl,
        bandwidth_gbps: LOCAL_BANDWIDTH_GBPS,
        latency_us: 0.0,
        route: vec![gpus[src]],
    });
    for (w, ranks) in groups {
        let targets: Vec<NodeIndex> = ranks.iter().map(|&r| node(gpus[r])).collect();
        let pred = search::shortest(g, s, inside_only, w, &targets);
        for (rank, t) in ranks.into_iter().zip(targets) {
            let edges = walk_back(g, &pred, s, t);
            out[rank] = Some(describe(g, s, &edges, w));
        }
    }
    out.into_iter()
        .map(|p| p.expect("every rank has a path"))
        .collect()
}

/// The edges from `s` to `t` in route order, following `pred` back from `t`.
fn walk_back(
    g: &UnGraph<Vertex, Link>,
    pred: &[Option<EdgeIndex>],
    s: NodeIndex,
    t: NodeIndex,
) -> Vec<EdgeIndex> {
    let mut edges = Vec::new();
    let mut at = t;
    while at != s {
        let e = pred[at.index()].expect("shortest() reached every target");
        let (a, b) = g.edge_endpoints(e).expect("edge exists");
        at = if a == at { b } else { a };
        edges.push(e);
    }
    edges.reverse();
    edges
}

/// The [`Path`] over `edges` starting at `s`, whose bottleneck is `bw`.
fn describe(g: &UnGraph<Vertex, Link>, s: NodeIndex, edges: &[EdgeIndex], bw: f64) -> Path {
    let mut route = vec![s];
    let mut latency_us = 0.0;
    for &e in edges {
        let (a, b) = g.edge_endpoints(e).expect("edge exists");
        let last = *route.last().expect("route starts at s");
        route.push(if a == last { b } else { a });
        latency_us += g[e].latency_us;
    }
    let class = classify(g, &route, edges);
    Path {
        class,
        bandwidth_gbps: bw,
        latency_us,
        route: route
            .into_iter()
            .map(|v| VertexId(v.index() as u32))
            .collect(),
    }
}

/// NCCL's class of a route: the worst of its links' classes, PHB when it
/// crosses a host bridge or CPU, PXB when it crosses two PCIe switches or more,
/// and NET whenever it joins two nodes.
fn classify(g: &UnGraph<Vertex, Link>, route: &[NodeIndex], edges: &[EdgeIndex]) -> PathClass {
    let (first, last) = (route[0], route[route.len() - 1]);
    if g[first].node != g[last].node {
        return PathClass::Net;
    }
    let mut class = edges
        .iter()
        .map(|&e| g[e].kind.class())
        .max()
        .unwrap_or(PathClass::Nvl);
    let mut pcie_switches = 0;
    for &v in &route[1..route.len() - 1] {
        let hop = match g[v].kind {
            VertexKind::PcieSwitch { .. } => {
                pcie_switches += 1;
                PathClass::Pix
            }
            VertexKind::HostBridge { .. } | VertexKind::Cpu(_) => PathClass::Phb,
            VertexKind::Nic(_) | VertexKind::Network => PathClass::Net,
            VertexKind::NvSwitch | VertexKind::Gpu(_) => PathClass::Nvl,
        };
        class = class.max(hop);
    }
    if pcie_switches >= 2 {
        class = class.max(PathClass::Pxb);
    }
    class
}

fn node(v: VertexId) -> NodeIndex {
    NodeIndex::new(v.index())
}
