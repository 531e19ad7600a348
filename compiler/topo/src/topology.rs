//! The [`Topology`] type: the graph plus the rank/node bookkeeping and the
//! lazily computed paths.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::sync::OnceLock;

use petgraph::graph::{NodeIndex, UnGraph};
use petgraph::visit::EdgeRef;

use crate::path::{self, Path};
use crate::{Gpu, Link, PathClass, Vertex, VertexId, VertexKind};

/// A machine (or cluster of machines) as a graph of GPUs, switches, CPUs, NICs
/// and links, with ranks numbered node-major.
///
/// Built by [`crate::TopologyBuilder`], a preset ([`Topology::from_arg`]), or a
/// file ([`Topology::parse_text`]); always valid once built: ranks are `0..n`
/// node-major, every node has a GPU, and every pair of GPUs has a legal route.
///
/// Paths are computed on first use, one source rank at a time, and cached; a
/// `Topology` is `Send + Sync`, so the cache may be filled from several threads.
#[derive(Clone)]
pub struct Topology {
    name: String,
    graph: UnGraph<Vertex, Link>,
    n_nodes: u32,
    /// The GPU vertex of each rank.
    gpus: Vec<VertexId>,
    /// `node_starts[k]` is the first rank of node `k`; one extra entry holds `n_ranks`.
    node_starts: Vec<u32>,
    names: HashMap<String, VertexId>,
    /// Paths from each source rank, filled on demand.
    paths: Vec<SourcePaths>,
}

/// The cached paths from one rank, in two parts so that questions about a
/// rank's node-mates never search the rest of a large cluster.
#[derive(Clone, Default)]
struct SourcePaths {
    /// To the ranks of its own node, by local index.
    local: OnceLock<Box<[Path]>>,
    /// To every rank, by rank.
    all: OnceLock<Box<[Path]>>,
}

impl Topology {
    /// Wraps a validated, canonically ordered graph (see `builder.rs`).
    pub(crate) fn from_valid_graph(
        name: String,
        graph: UnGraph<Vertex, Link>,
        n_nodes: u32,
    ) -> Self {
        let mut gpus: Vec<(u32, VertexId)> = graph
            .node_indices()
            .filter_map(|i| match &graph[i].kind {
                VertexKind::Gpu(g) => Some((g.rank, VertexId(i.index() as u32))),
                _ => None,
            })
            .collect();
        gpus.sort();
        let gpus: Vec<VertexId> = gpus.into_iter().map(|(_, v)| v).collect();
        let mut node_starts = vec![0u32; n_nodes as usize + 1];
        for &v in &gpus {
            let node = graph[NodeIndex::new(v.index())]
                .node
                .expect("GPUs sit in nodes");
            node_starts[node as usize + 1] += 1;
        }
        for k in 1..node_starts.len() {
            node_starts[k] += node_starts[k - 1];
        }
        let names = graph
            .node_indices()
            .map(|i| (graph[i].name.clone(), VertexId(i.index() as u32)))
            .collect();
        let paths = vec![SourcePaths::default(); gpus.len()];
        Topology {
            name,
            graph,
            n_nodes,
            gpus,
            node_starts,
            names,
            paths,
        }
    }

    /// Where the topology came from: the preset text or the file path given.
    /// Not part of equality, the text form or the fingerprint.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same topology under another name.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Number of ranks (GPUs).
    pub fn n_ranks(&self) -> u32 {
        self.gpus.len() as u32
    }

    /// Number of nodes (machines).
    pub fn n_nodes(&self) -> u32 {
        self.n_nodes
    }

    /// The node of `rank`.
    ///
    /// # Panics
    /// If `rank >= n_ranks()`.
    pub fn node_of(&self, rank: u32) -> u32 {
        self.check_rank(rank);
        // The last node whose first rank is <= rank (every node is non-empty).
        (self.node_starts.partition_point(|&start| start <= rank) - 1) as u32
    }

    /// The index of `rank` within its node: `rank - ranks_of_node(node_of(rank)).start`.
    pub fn local_of(&self, rank: u32) -> u32 {
        rank - self.node_starts[self.node_of(rank) as usize]
    }

    /// The ranks of `node`, contiguous because ranks are node-major.
    ///
    /// # Panics
    /// If `node >= n_nodes()`.
    pub fn ranks_of_node(&self, node: u32) -> Range<u32> {
        assert!(
            node < self.n_nodes,
            "node {node} out of range: the topology has {} nodes",
            self.n_nodes
        );
        self.node_starts[node as usize]..self.node_starts[node as usize + 1]
    }

    /// GPUs per node, in node order.
    pub fn node_sizes(&self) -> Vec<u32> {
        self.node_starts.windows(2).map(|w| w[1] - w[0]).collect()
    }

    /// `G`, the number of GPUs per node, when every node has the same number;
    /// `None` for a non-uniform cluster.
    pub fn uniform_g(&self) -> Option<u32> {
        let sizes = self.node_sizes();
        let g = sizes[0];
        sizes.iter().all(|&s| s == g).then_some(g)
    }

    /// The GPU vertex of `rank`.
    pub fn gpu_vertex(&self, rank: u32) -> VertexId {
        self.check_rank(rank);
        self.gpus[rank as usize]
    }

    /// The GPU of `rank`.
    pub fn gpu(&self, rank: u32) -> &Gpu {
        match &self.vertex(self.gpu_vertex(rank)).kind {
            VertexKind::Gpu(gpu) => gpu,
            _ => unreachable!("gpus[] holds GPU vertices"),
        }
    }

    /// A vertex by id.
    ///
    /// # Panics
    /// If `id` is not a vertex of this topology.
    pub fn vertex(&self, id: VertexId) -> &Vertex {
        &self.graph[NodeIndex::new(id.index())]
    }

    /// A vertex id by name.
    pub fn vertex_id(&self, name: &str) -> Option<VertexId> {
        self.names.get(name).copied()
    }

    /// Every vertex in canonical order.
    pub fn vertices(&self) -> impl Iterator<Item = (VertexId, &Vertex)> + '_ {
        self.graph
            .node_indices()
            .map(move |i| (VertexId(i.index() as u32), &self.graph[i]))
    }

    /// Every link in canonical order, with its two ends as written in the file.
    pub fn links(&self) -> impl Iterator<Item = (VertexId, VertexId, &Link)> + '_ {
        self.graph.edge_references().map(|e| {
            (
                VertexId(e.source().index() as u32),
                VertexId(e.target().index() as u32),
                e.weight(),
            )
        })
    }

    /// Every link's bandwidth in both directions, GB/s, keyed by directed vertex pair
    /// `(from, to)` (vertex indices; links are full duplex).
    pub fn directed_bandwidths(&self) -> std::collections::HashMap<(u32, u32), f64> {
        let mut bw = std::collections::HashMap::new();
        for (a, b, l) in self.links() {
            bw.insert((a.0, b.0), l.bandwidth_gbps);
            bw.insert((b.0, a.0), l.bandwidth_gbps);
        }
        bw
    }

    /// The underlying graph; `NodeIndex::new(id.index())` is the vertex `id`.
    pub fn graph(&self) -> &UnGraph<Vertex, Link> {
        &self.graph
    }

    /// The best path from rank `a` to rank `b` (see the crate doc for "best").
    /// `path(a, a)` is the local path: class NVL, [`crate::LOCAL_BANDWIDTH_GBPS`],
    /// zero latency, a one-vertex route.
    ///
    /// Computed on first use and cached: the first call from `a` to a rank of
    /// its own node searches that node only; the first call from `a` to another
    /// node searches the whole graph once for all ranks (about a millisecond
    /// per source rank in a 1024-rank cluster, in a release build).
    ///
    /// # Panics
    /// If either rank is out of range.
    pub fn path(&self, a: u32, b: u32) -> &Path {
        self.check_rank(a);
        self.check_rank(b);
        let cache = &self.paths[a as usize];
        let node = self.node_of(a);
        if node == self.node_of(b) {
            let local = cache.local.get_or_init(|| {
                let range = self.ranks_of_node(node);
                let mates = &self.gpus[range.start as usize..range.end as usize];
                path::paths_from(&self.graph, mates, self.local_of(a) as usize, true)
            });
            &local[self.local_of(b) as usize]
        } else {
            let all = cache
                .all
                .get_or_init(|| path::paths_from(&self.graph, &self.gpus, a as usize, false));
            &all[b as usize]
        }
    }

    /// The class of the path from `a` to `b`; `Net` for ranks on different
    /// nodes, without searching.
    pub fn class(&self, a: u32, b: u32) -> PathClass {
        if self.node_of(a) != self.node_of(b) {
            return PathClass::Net;
        }
        self.path(a, b).class
    }

    /// Whether ranks `a` and `b` can access each other's memory directly:
    /// false when their path is PHB, SYS or NET (through a host bridge, across
    /// CPU sockets, or across nodes), as NCCL's default `NCCL_P2P_LEVEL=PXB`.
    pub fn p2p_direct(&self, a: u32, b: u32) -> bool {
        self.class(a, b).is_p2p_direct()
    }

    fn check_rank(&self, rank: u32) {
        assert!(
            rank < self.n_ranks(),
            "rank {rank} out of range: the topology has {} ranks",
            self.n_ranks()
        );
    }
}

/// Two topologies are equal when they describe the same machine the same way:
/// same nodes, vertices and links in canonical order. The name is not compared.
impl PartialEq for Topology {
    fn eq(&self, other: &Self) -> bool {
        self.n_nodes == other.n_nodes
            && self.graph.node_count() == other.graph.node_count()
            && self.graph.edge_count() == other.graph.edge_count()
            && self.graph.node_weights().eq(other.graph.node_weights())
            && self.links().eq(other.links())
    }
}

impl fmt::Debug for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Topology")
            .field("name", &self.name)
            .field("n_ranks", &self.n_ranks())
            .field("n_nodes", &self.n_nodes)
            .field("n_vertices", &self.graph.node_count())
            .field("n_links", &self.graph.edge_count())
            .finish_non_exhaustive()
    }
}

/// Serialised as its text form, so plans and caches that embed a topology
/// store exactly what `braid topo` prints.
impl serde::Serialize for Topology {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_text())
    }
}

impl<'de> serde::Deserialize<'de> for Topology {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <String as serde::Deserialize>::deserialize(d)?;
        Topology::parse_text("<embedded topology>", &text).map_err(serde::de::Error::custom)
    }
}
