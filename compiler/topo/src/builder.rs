//! Assembling a [`Topology`] vertex by vertex, with every check in one place:
//! presets, the file parser and the detector all go through here.

use std::collections::HashMap;

use petgraph::graph::{NodeIndex, UnGraph};
use petgraph::visit::EdgeRef;

use crate::routes::check_routes;
use crate::vertex::is_valid_name;
use crate::{Link, LinkKind, TopoError, Topology, Vertex, VertexId, VertexKind};

/// The most ranks a topology may have: the lazily cached paths grow with the
/// square of this.
pub const MAX_RANKS: u32 = 4096;

/// The most vertices a topology may have: 16 per rank at the most ranks, far above any
/// machine, and low enough that a path search from every rank stays cheap.
pub const MAX_VERTICES: u32 = 1 << 16;

/// The most links a topology may have (four per vertex on average).
pub const MAX_LINKS: u32 = 1 << 18;

/// Builds a [`Topology`]; see the `add_*` methods for what each checks, and
/// [`TopologyBuilder::build`] for the whole-machine checks.
#[derive(Debug, Default, Clone)]
pub struct TopologyBuilder {
    n_nodes: u32,
    graph: UnGraph<Vertex, Link>,
    names: HashMap<String, VertexId>,
}

/// A failed whole-machine check, pointing at the vertex to blame if there is
/// one (the parser turns it into a line number).
pub(crate) struct Located {
    pub message: String,
    pub at: Blame,
}

/// What a [`Located`] error is about.
pub(crate) enum Blame {
    /// The vertex of that name.
    Vertex(String),
    Node(u32),
    Nothing,
}

impl TopologyBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares the next node (machine) and returns its index (0, 1, …).
    pub fn add_node(&mut self) -> u32 {
        self.n_nodes += 1;
        self.n_nodes - 1
    }

    /// Number of nodes declared so far.
    pub fn n_nodes(&self) -> u32 {
        self.n_nodes
    }

    /// Adds a vertex. Checks: the name is legal and unused, and the vertex sits in
    /// a declared node (a network vertex in none).
    pub fn add_vertex(&mut self, vertex: Vertex) -> Result<VertexId, TopoError> {
        if !is_valid_name(&vertex.name) {
            return invalid(format!(
                "bad vertex name `{}`: use letters, digits and `_ . : -`",
                vertex.name
            ));
        }
        if self.names.contains_key(&vertex.name) {
            return invalid(format!("vertex `{}` is declared twice", vertex.name));
        }
        if self.graph.node_count() as u32 >= MAX_VERTICES {
            return invalid(format!(
                "`{}` would be vertex {}: a topology has at most {MAX_VERTICES}",
                vertex.name,
                MAX_VERTICES as u64 + 1
            ));
        }
        match (&vertex.kind, vertex.node) {
            (VertexKind::Network, None) => {}
            (VertexKind::Network, Some(_)) => {
                return invalid(format!(
                    "network `{}` sits between nodes and cannot belong to one",
                    vertex.name
                ))
            }
            (kind, None) => {
                return invalid(format!("{} `{}` needs a node", kind.keyword(), vertex.name))
            }
            (_, Some(node)) if node >= self.n_nodes => {
                return invalid(format!(
                    "`{}` is on node {node}, which is not declared ({} nodes so far)",
                    vertex.name, self.n_nodes
                ))
            }
            _ => {}
        }
        let id = VertexId(self.graph.node_count() as u32);
        self.names.insert(vertex.name.clone(), id);
        self.graph.add_node(vertex);
        Ok(id)
    }

    /// The id of a vertex added earlier.
    pub fn vertex_id(&self, name: &str) -> Option<VertexId> {
        self.names.get(name).copied()
    }

    /// Adds a link. Checks: both ends exist and differ, are not linked already,
    /// the link's numbers are sane, its kind fits its ends (NVLink between GPUs
    /// and NVSwitches, SMP between CPUs, network links between NICs and
    /// networks, PCIe among the rest), and a link between two nodes is a
    /// network link.
    pub fn add_link(&mut self, a: VertexId, b: VertexId, link: Link) -> Result<(), TopoError> {
        let n = self.graph.node_count() as u32;
        if a.0 >= n || b.0 >= n {
            return invalid(format!(
                "link end {} is not a vertex",
                if a.0 >= n { a } else { b }
            ));
        }
        let (va, vb) = (self.graph[node(a)].clone(), self.graph[node(b)].clone());
        if a == b {
            return invalid(format!("`{}` is linked to itself", va.name));
        }
        if self.graph.edge_count() as u32 >= MAX_LINKS {
            return invalid(format!(
                "this would be link {}: a topology has at most {MAX_LINKS}",
                MAX_LINKS as u64 + 1
            ));
        }
        if self.graph.find_edge(node(a), node(b)).is_some() {
            return invalid(format!(
                "`{}` and `{}` are linked twice (describe parallel links with one link, e.g. count= or width=)",
                va.name, vb.name
            ));
        }
        link.validate().map_err(TopoError::Invalid)?;
        let fits = |v: &Vertex| match link.kind {
            LinkKind::NvLink { .. } => matches!(v.kind, VertexKind::Gpu(_) | VertexKind::NvSwitch),
            LinkKind::Smp => matches!(v.kind, VertexKind::Cpu(_)),
            LinkKind::Pcie { .. } => !matches!(v.kind, VertexKind::NvSwitch | VertexKind::Network),
            LinkKind::InfiniBand { .. } | LinkKind::Roce { .. } | LinkKind::Ethernet { .. } => {
                matches!(v.kind, VertexKind::Nic(_) | VertexKind::Network)
            }
        };
        for v in [&va, &vb] {
            if !fits(v) {
                return invalid(format!(
                    "a {} link cannot attach to {} `{}`",
                    link.kind.keyword(),
                    v.kind.keyword(),
                    v.name
                ));
            }
        }
        if let (Some(x), Some(y)) = (va.node, vb.node) {
            if x != y && !link.kind.is_network() {
                return invalid(format!(
                    "`{}` (node {x}) and `{}` (node {y}) are on different nodes: only a network link (ib, roce, eth) may join them",
                    va.name, vb.name
                ));
            }
        }
        self.graph.add_edge(node(a), node(b), link);
        Ok(())
    }

    /// Checks the whole machine and returns it in canonical order. Checks: at
    /// least one GPU and at most [`MAX_RANKS`]; ranks are `0..n`, each once,
    /// node-major; every node has a GPU; every GPU reaches every other one by a
    /// legal route.
    pub fn build(self, name: impl Into<String>) -> Result<Topology, TopoError> {
        self.build_located(name.into())
            .map_err(|e| TopoError::Invalid(e.message))
    }

    pub(crate) fn build_located(self, name: String) -> Result<Topology, Located> {
        self.check_ranks()?;
        let topo = self.canonical(name);
        check_routes(&topo)?;
        Ok(topo)
    }

    /// The topology without the route check, for testing it; `None` when the ranks are
    /// wrong.
    #[cfg(test)]
    pub(crate) fn build_without_routes(self, name: &str) -> Option<Topology> {
        self.check_ranks().ok()?;
        Some(self.canonical(name.to_string()))
    }

    /// Ranks `0..n`, each once, node-major, every node with a GPU.
    fn check_ranks(&self) -> Result<(), Located> {
        let mut by_rank: Vec<(u32, u32, VertexId)> = Vec::new();
        for i in self.graph.node_indices() {
            if let VertexKind::Gpu(g) = &self.graph[i].kind {
                let node = self.graph[i].node.expect("checked by add_vertex");
                by_rank.push((g.rank, node, VertexId(i.index() as u32)));
            }
        }
        if by_rank.is_empty() {
            return Err(Located {
                message: "the topology has no GPU".into(),
                at: Blame::Nothing,
            });
        }
        if by_rank.len() > MAX_RANKS as usize {
            return Err(Located {
                message: format!(
                    "{} GPUs is more than the {MAX_RANKS} supported",
                    by_rank.len()
                ),
                at: Blame::Nothing,
            });
        }
        by_rank.sort();
        let mut has_gpu = vec![false; self.n_nodes as usize];
        for &(_, node, _) in &by_rank {
            has_gpu[node as usize] = true;
        }
        if let Some(empty) = has_gpu.iter().position(|&h| !h) {
            return Err(Located {
                message: format!("node {empty} has no GPU (every node needs at least one)"),
                at: Blame::Node(empty as u32),
            });
        }
        for (i, &(rank, node, at)) in by_rank.iter().enumerate() {
            let name = &self.graph[NodeIndex::new(at.index())].name;
            if rank as usize != i {
                let message = if i > 0 && by_rank[i - 1].0 == rank {
                    format!("rank {rank} is given to two GPUs (`{name}` is the second)")
                } else {
                    format!(
                        "rank {i} is missing: ranks must be 0..{} without gaps",
                        by_rank.len()
                    )
                };
                return Err(Located {
                    message,
                    at: Blame::Vertex(name.clone()),
                });
            }
            if i > 0 && node < by_rank[i - 1].1 {
                return Err(Located {
                    message: format!(
                        "`{name}` has rank {rank} on node {node}, after a rank of node {}: ranks must be \
                         node-major (all of node 0, then all of node 1, …)",
                        by_rank[i - 1].1
                    ),
                    at: Blame::Vertex(name.clone()),
                });
            }
        }
        Ok(())
    }

    /// The same graph with vertices sorted by node (network vertices last) and
    /// links sorted by the node they lie in (cross-node links last), each sort
    /// stable, so equal machines get equal ids whatever order they were given in.
    fn canonical(self, name: String) -> Topology {
        let g = self.graph;
        let node_key = |v: &Vertex| v.node.unwrap_or(u32::MAX);
        let mut order: Vec<NodeIndex> = g.node_indices().collect();
        order.sort_by_key(|&i| node_key(&g[i]));
        let mut new_of = vec![NodeIndex::new(0); g.node_count()];
        let mut out: UnGraph<Vertex, Link> = UnGraph::with_capacity(g.node_count(), g.edge_count());
        for &old in &order {
            new_of[old.index()] = out.add_node(g[old].clone());
        }
        let link_key = |e: &petgraph::graph::EdgeReference<'_, Link>| {
            let (a, b) = (&g[e.source()], &g[e.target()]);
            if a.node == b.node {
                node_key(a)
            } else {
                u32::MAX
            }
        };
        let mut edges: Vec<_> = g.edge_references().collect();
        edges.sort_by_key(|e| link_key(e));
        for e in edges {
            out.add_edge(
                new_of[e.source().index()],
                new_of[e.target().index()],
                e.weight().clone(),
            );
        }
        Topology::from_valid_graph(name, out, self.n_nodes)
    }
}

pub(crate) fn no_route(topo: &Topology, a: u32, b: u32) -> Located {
    let (va, vb) = (
        topo.vertex(topo.gpu_vertex(a)),
        topo.vertex(topo.gpu_vertex(b)),
    );
    Located {
        message: format!(
            "rank {a} (`{}`) has no route to rank {b} (`{}`): routes never pass through a GPU, \
             stay inside a node between its GPUs, and join nodes only through NICs and a network",
            va.name, vb.name
        ),
        at: Blame::Vertex(va.name.clone()),
    }
}

fn node(v: VertexId) -> NodeIndex {
    NodeIndex::new(v.index())
}

fn invalid<T>(message: String) -> Result<T, TopoError> {
    Err(TopoError::Invalid(message))
}
