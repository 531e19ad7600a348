//! The `--topo` presets of `cli.md`: `nvswitch:N`, `pcie:N`, `cluster:MxG`.
//!
//! Every preset node has the same skeleton, an HGX-like board:
//! - one CPU socket for up to 4 GPUs, two sockets (joined by an SMP link) above
//!   that, the GPUs split in halves between them;
//! - one PCIe Gen5 x16 switch per two GPUs of a socket, under that socket;
//! - `nvswitch` and `cluster` add one NVSwitch fabric vertex with 18 NVLink4 to
//!   every GPU (≈ 478 GB/s per direction);
//! - `cluster` adds one NIC per GPU under the GPU's PCIe switch, and one
//!   network vertex linked to every NIC by 400 Gb/s InfiniBand.
//!
//! So in `pcie:8`, GPUs 0 and 1 are PIX (one switch), 0 and 2 are PHB (two
//! switches under CPU 0), 0 and 4 are SYS (across the sockets).

use std::fmt;
use std::str::FromStr;

use crate::builder::MAX_RANKS;
use crate::{
    Cpu, Gpu, Link, LinkKind, Nic, TopoError, Topology, TopologyBuilder, Vertex, VertexId,
    VertexKind,
};

/// A named synthetic topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Preset {
    /// One node, `gpus` GPUs all joined through an NVSwitch fabric.
    NvSwitch { gpus: u32 },
    /// One node, `gpus` GPUs on PCIe only.
    Pcie { gpus: u32 },
    /// `nodes` nodes of `gpus_per_node` NVSwitch-joined GPUs, one NIC per GPU.
    Cluster { nodes: u32, gpus_per_node: u32 },
}

/// Bandwidth of the preset NICs, Gb/s.
pub const PRESET_NIC_GBITS: u32 = 400;

/// NVLinks per GPU in the preset NVSwitch nodes (H100/H200).
pub const PRESET_NVLINKS: u32 = 18;

const PCIE: LinkKind = LinkKind::Pcie { gen: 5, width: 16 };
const NVLINK: LinkKind = LinkKind::NvLink {
    count: PRESET_NVLINKS,
    gen: 4,
};

impl Preset {
    /// The preset `arg` names: `Ok(None)` when `arg` is not of the form
    /// `nvswitch:…`, `pcie:…` or `cluster:…` at all, an error when it is but
    /// its parameters are wrong.
    pub fn parse(arg: &str) -> Result<Option<Preset>, TopoError> {
        let Some((kind, params)) = arg.split_once(':') else {
            return Ok(None);
        };
        let bad = |reason: String| TopoError::BadPreset {
            arg: arg.to_string(),
            reason,
        };
        let preset = match kind {
            "nvswitch" => Preset::NvSwitch {
                gpus: count(params, "N").map_err(bad)?,
            },
            "pcie" => Preset::Pcie {
                gpus: count(params, "N").map_err(bad)?,
            },
            "cluster" => {
                let (m, g) = params
                    .split_once('x')
                    .ok_or_else(|| bad(format!("`{params}` is not MxG, e.g. cluster:2x8")))?;
                Preset::Cluster {
                    nodes: count(m, "M").map_err(bad)?,
                    gpus_per_node: count(g, "G").map_err(bad)?,
                }
            }
            _ => return Ok(None),
        };
        if preset.n_ranks() > u64::from(MAX_RANKS) {
            return Err(bad(format!(
                "{} ranks is more than the {MAX_RANKS} supported",
                preset.n_ranks()
            )));
        }
        Ok(Some(preset))
    }

    /// Total GPUs (as u64: `cluster:MxG` may overflow u32 before it is rejected).
    pub fn n_ranks(&self) -> u64 {
        match *self {
            Preset::NvSwitch { gpus } | Preset::Pcie { gpus } => u64::from(gpus),
            Preset::Cluster {
                nodes,
                gpus_per_node,
            } => u64::from(nodes) * u64::from(gpus_per_node),
        }
    }

    /// The topology, named by the preset's text.
    pub fn build(&self) -> Topology {
        let mut b = TopologyBuilder::new();
        match *self {
            Preset::NvSwitch { gpus } => {
                add_board(&mut b, gpus, 0, true, false);
            }
            Preset::Pcie { gpus } => {
                add_board(&mut b, gpus, 0, false, false);
            }
            Preset::Cluster {
                nodes,
                gpus_per_node,
            } => {
                let nics: Vec<VertexId> = (0..nodes)
                    .flat_map(|k| add_board(&mut b, gpus_per_node, k * gpus_per_node, true, true))
                    .collect();
                let net = add(&mut b, "net".into(), None, VertexKind::Network);
                let ib = LinkKind::InfiniBand {
                    rate_gbps: PRESET_NIC_GBITS,
                };
                for nic in nics {
                    link(&mut b, nic, net, ib);
                }
            }
        }
        b.build(self.to_string())
            .unwrap_or_else(|e| panic!("preset {self} is invalid: {e}"))
    }
}

/// Adds one node of `g` GPUs (ranks from `first_rank`); returns its NICs.
fn add_board(
    b: &mut TopologyBuilder,
    g: u32,
    first_rank: u32,
    nvswitch: bool,
    nics: bool,
) -> Vec<VertexId> {
    let node = b.add_node();
    let p = format!("n{node}");
    let sockets = if g > 4 { 2 } else { 1 };
    let per_socket = g.div_ceil(sockets);
    let cpus: Vec<VertexId> = (0..sockets)
        .map(|s| {
            let cpu = VertexKind::Cpu(Cpu {
                numa: s,
                model: None,
            });
            add(b, format!("{p}.cpu{s}"), Some(node), cpu)
        })
        .collect();
    if sockets == 2 {
        link(b, cpus[0], cpus[1], LinkKind::Smp);
    }
    let nvs = nvswitch.then(|| add(b, format!("{p}.nvswitch"), Some(node), VertexKind::NvSwitch));
    let mut node_nics = Vec::new();
    let mut switch = None;
    let mut n_switches = 0;
    for local in 0..g {
        let socket = local / per_socket;
        // A new switch for every second GPU of a socket.
        if (local - socket * per_socket) % 2 == 0 {
            let name = format!("{p}.pcisw{n_switches}");
            n_switches += 1;
            let sw = add(b, name, Some(node), VertexKind::PcieSwitch { bus: None });
            link(b, sw, cpus[socket as usize], PCIE);
            switch = Some(sw);
        }
        let sw = switch.expect("a switch precedes its GPUs");
        let gpu = VertexKind::Gpu(Gpu {
            rank: first_rank + local,
            numa: Some(socket),
            bus: None,
            model: None,
        });
        let gpu = add(b, format!("{p}.gpu{local}"), Some(node), gpu);
        link(b, gpu, sw, PCIE);
        if let Some(nvs) = nvs {
            link(b, gpu, nvs, NVLINK);
        }
        if nics {
            let nic = VertexKind::Nic(Nic {
                device: None,
                numa: Some(socket),
                bus: None,
            });
            let nic = add(b, format!("{p}.nic{local}"), Some(node), nic);
            link(b, nic, sw, PCIE);
            node_nics.push(nic);
        }
    }
    node_nics
}

fn add(b: &mut TopologyBuilder, name: String, node: Option<u32>, kind: VertexKind) -> VertexId {
    b.add_vertex(Vertex { name, node, kind })
        .expect("preset vertices are valid")
}

fn link(b: &mut TopologyBuilder, x: VertexId, y: VertexId, kind: LinkKind) {
    b.add_link(x, y, Link::nominal(kind))
        .expect("preset links are valid");
}

/// A positive count written in plain decimal digits.
fn count(text: &str, what: &str) -> Result<u32, String> {
    if text.is_empty() {
        return Err(format!("{what} is missing"));
    }
    if !text.bytes().all(|c| c.is_ascii_digit()) {
        return Err(format!("{what} = `{text}` is not a number"));
    }
    match text.parse::<u32>() {
        Ok(0) => Err(format!("{what} must be at least 1")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{what} = {text} is too large")),
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Preset::NvSwitch { gpus } => write!(f, "nvswitch:{gpus}"),
            Preset::Pcie { gpus } => write!(f, "pcie:{gpus}"),
            Preset::Cluster {
                nodes,
                gpus_per_node,
            } => write!(f, "cluster:{nodes}x{gpus_per_node}"),
        }
    }
}

impl FromStr for Preset {
    type Err = TopoError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Preset::parse(s)?.ok_or_else(|| TopoError::BadPreset {
            arg: s.to_string(),
            reason: "not a preset".into(),
        })
    }
}
