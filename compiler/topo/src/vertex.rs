//! The things a topology connects: GPUs, switches, CPUs, NICs, the network.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A vertex of a [`crate::Topology`]: its index in [`crate::Topology::graph`].
///
/// Indices are canonical (vertices sorted by node, network vertices last), so
/// the same machine always numbers its vertices the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct VertexId(pub u32);

impl VertexId {
    /// The index as a `usize`, for slices indexed by vertex.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for VertexId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}

/// One vertex: a unique name (used by the file format), the node (machine) it
/// sits in, and what it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Vertex {
    /// Unique in the topology; letters, digits and `_ . : -` only, so that it
    /// needs no quoting in the file format.
    pub name: String,
    /// The node (machine) index; `None` exactly for [`VertexKind::Network`],
    /// which sits between nodes.
    pub node: Option<u32>,
    pub kind: VertexKind,
}

/// What a vertex is. Routes may pass *through* switches, host bridges and CPUs;
/// they never pass through a GPU, and pass through a NIC only between its node
/// and the network (see `docs/topology.md`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum VertexKind {
    Gpu(Gpu),
    /// An NVSwitch fabric. HGX boards have four NVSwitch chips, but every GPU
    /// spreads its 18 links over all of them, so (as NCCL does) the fabric is one
    /// vertex and a GPU's link to it carries all of the GPU's NVLinks.
    NvSwitch,
    /// A PCIe switch (its upstream and downstream ports together).
    PcieSwitch {
        bus: Option<String>,
    },
    /// A PCIe host bridge / root complex, between PCIe devices and a CPU.
    HostBridge {
        bus: Option<String>,
    },
    /// A CPU socket or NUMA node.
    Cpu(Cpu),
    Nic(Nic),
    /// The network fabric joining the nodes' NICs.
    Network,
}

/// A GPU; its rank is its position in the collective.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    /// Ranks are node-major: the ranks of node `k` follow those of node `k-1`.
    pub rank: u32,
    /// The NUMA node whose CPU is closest.
    pub numa: Option<u32>,
    /// PCI bus id in sysfs form, `0000:19:00.0`.
    pub bus: Option<String>,
    /// Marketing name, e.g. `NVIDIA H200`.
    pub model: Option<String>,
}

/// A CPU socket / NUMA node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cpu {
    pub numa: u32,
    pub model: Option<String>,
}

/// A network adapter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nic {
    /// The OS device name, e.g. `mlx5_0` or `eth0`.
    pub device: Option<String>,
    pub numa: Option<u32>,
    pub bus: Option<String>,
}

impl VertexKind {
    /// The statement keyword of this kind in the file format.
    pub fn keyword(&self) -> &'static str {
        match self {
            VertexKind::Gpu(_) => "gpu",
            VertexKind::NvSwitch => "nvswitch",
            VertexKind::PcieSwitch { .. } => "pcie-switch",
            VertexKind::HostBridge { .. } => "host-bridge",
            VertexKind::Cpu(_) => "cpu",
            VertexKind::Nic(_) => "nic",
            VertexKind::Network => "network",
        }
    }

    pub fn is_gpu(&self) -> bool {
        matches!(self, VertexKind::Gpu(_))
    }

    pub fn is_nic(&self) -> bool {
        matches!(self, VertexKind::Nic(_))
    }
}

/// Whether `name` is a legal vertex name (see [`Vertex::name`]).
pub(crate) fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'))
}
