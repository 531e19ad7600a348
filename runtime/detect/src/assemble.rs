//! [`MachineFacts`] to a [`Topology`]: one node, its CPUs (NUMA nodes), the
//! PCIe switches on the way to each device, the GPUs with their NVLinks, the
//! NICs and, when there are NICs, a network vertex.
//!
//! PCIe is modelled as NCCL models it: the PCI tree hangs under the CPU of its
//! NUMA node, root complexes and root ports are part of that CPU, and each
//! further (upstream port, downstream port) pair of bridges is one switch.

use std::collections::{BTreeSet, HashMap};

use braid_topo::{
    Cpu, Gpu, Link, LinkKind, Nic, TopoError, Topology, TopologyBuilder, Vertex, VertexId,
    VertexKind,
};

use crate::facts::{MachineFacts, NicKind, NvLinkFacts, PciPlacement, PcieLink};

/// Assumed for a PCIe link sysfs does not describe.
const UNKNOWN_PCIE: PcieLink = PcieLink { gen: 4, width: 16 };

/// NVLink generation assumed when NVML does not report one: the H100/H200 one.
const UNKNOWN_NVLINK_GEN: u32 = 4;

/// The topology of the machine `facts` describe, named `name`, and notes on
/// what had to be assumed.
pub fn assemble(name: &str, facts: &MachineFacts) -> Result<(Topology, Vec<String>), TopoError> {
    let mut a = Assembler {
        b: TopologyBuilder::new(),
        cpus: HashMap::new(),
        switches: HashMap::new(),
        notes: Vec::new(),
        assumed_pcie: false,
    };
    a.b.add_node();
    a.add_cpus(facts);
    let gpus: Vec<VertexId> = facts
        .gpus
        .iter()
        .enumerate()
        .map(|(rank, g)| {
            let gpu = Gpu {
                rank: rank as u32,
                numa: g.pci.numa,
                bus: Some(g.bus.clone()),
                model: Some(g.model.clone()).filter(|m| !m.is_empty()),
            };
            a.add_device(format!("n0.gpu{rank}"), VertexKind::Gpu(gpu), &g.pci)
        })
        .collect::<Result<_, _>>()?;
    a.add_nvlinks(facts, &gpus)?;
    a.add_nics(facts)?;
    let topo = a.b.build(name)?;
    Ok((topo, a.notes))
}

struct Assembler {
    b: TopologyBuilder,
    /// CPU vertex by NUMA node.
    cpus: HashMap<u32, VertexId>,
    /// PCIe switch vertex by upstream-port address.
    switches: HashMap<String, VertexId>,
    notes: Vec<String>,
    /// Whether a PCIe link had to be assumed already (noted once).
    assumed_pcie: bool,
}

impl Assembler {
    /// One CPU per NUMA node (the online ones and any a device names), all
    /// pairs joined by SMP links.
    fn add_cpus(&mut self, facts: &MachineFacts) {
        let mut numa: BTreeSet<u32> = facts.numa_nodes.iter().copied().collect();
        let placements = facts
            .gpus
            .iter()
            .map(|g| &g.pci)
            .chain(facts.nics.iter().map(|n| &n.pci));
        numa.extend(placements.map(|p| p.numa.unwrap_or(0)));
        numa.insert(0);
        for &n in &numa {
            let cpu = VertexKind::Cpu(Cpu {
                numa: n,
                model: None,
            });
            let v = self
                .vertex(format!("n0.cpu{n}"), cpu)
                .expect("distinct CPU names");
            self.cpus.insert(n, v);
        }
        let list: Vec<u32> = numa.into_iter().collect();
        for (i, &x) in list.iter().enumerate() {
            for &y in &list[i + 1..] {
                let (a, b) = (self.cpus[&x], self.cpus[&y]);
                self.b
                    .add_link(a, b, Link::nominal(LinkKind::Smp))
                    .expect("CPUs link once");
            }
        }
    }

    /// Adds a PCI device under its CPU, through its switches.
    fn add_device(
        &mut self,
        name: String,
        kind: VertexKind,
        pci: &PciPlacement,
    ) -> Result<VertexId, TopoError> {
        let mut parent = self.cpus[&pci.numa.unwrap_or(0)];
        let chain = &pci.chain;
        // chain = [root complex, root port, (switch up, switch down)*, device].
        if chain.len() > 3 {
            for pair in chain[2..chain.len() - 1].chunks(2) {
                let up = &pair[0];
                parent = match self.switches.get(&up.addr) {
                    Some(&sw) => sw,
                    None => {
                        let sw_name = format!("n0.pcisw{}", self.switches.len());
                        let sw = self.vertex(
                            sw_name,
                            VertexKind::PcieSwitch {
                                bus: Some(up.addr.clone()),
                            },
                        )?;
                        self.pcie(sw, parent, up.link, &up.addr)?;
                        self.switches.insert(up.addr.clone(), sw);
                        sw
                    }
                };
            }
        }
        let dev = self.vertex(name.clone(), kind)?;
        // The device's link, capped by the port above it (as NCCL does).
        let own = chain.last().and_then(|h| h.link);
        let above = chain.len().checked_sub(2).and_then(|i| chain[i].link);
        let link = match (own, above) {
            (Some(a), Some(b)) => Some(PcieLink {
                gen: a.gen.min(b.gen),
                width: a.width.min(b.width),
            }),
            (a, b) => a.or(b),
        };
        self.pcie(dev, parent, link, &name)?;
        Ok(dev)
    }

    /// NVLinks: a GPU's links to another GPU become one GPU-GPU link; links to
    /// anything else (an NVSwitch, or an end NVML cannot name) go to one
    /// NVSwitch fabric vertex.
    fn add_nvlinks(&mut self, facts: &MachineFacts, gpus: &[VertexId]) -> Result<(), TopoError> {
        let index: HashMap<&str, usize> = facts
            .gpus
            .iter()
            .enumerate()
            .map(|(i, g)| (g.bus.as_str(), i))
            .collect();
        let mut fabric = None;
        for (i, g) in facts.gpus.iter().enumerate() {
            let mut to_gpu: Vec<(usize, u32)> = Vec::new();
            let mut to_switch = 0;
            for l in &g.nvlinks {
                match l.remote_bus.as_deref().and_then(|b| index.get(b)) {
                    Some(&j) if j != i => match to_gpu.iter_mut().find(|(k, _)| *k == j) {
                        Some((_, n)) => *n += 1,
                        None => to_gpu.push((j, 1)),
                    },
                    _ => to_switch += 1,
                }
            }
            let gen = self.nvlink_gen(&g.nvlinks);
            for (j, count) in to_gpu.into_iter().filter(|&(j, _)| j > i) {
                self.b.add_link(
                    gpus[i],
                    gpus[j],
                    Link::nominal(LinkKind::NvLink { count, gen }),
                )?;
            }
            if to_switch > 0 {
                let nvs = match fabric {
                    Some(v) => v,
                    None => {
                        *fabric.insert(self.vertex("n0.nvswitch".into(), VertexKind::NvSwitch)?)
                    }
                };
                let kind = LinkKind::NvLink {
                    count: to_switch,
                    gen,
                };
                self.b.add_link(gpus[i], nvs, Link::nominal(kind))?;
            }
        }
        Ok(())
    }

    /// The NVLink generation of a GPU's links. NVML reports
    /// `nvmlNvlinkVersion_t`: 1 = 1.0, 2 = 2.0, 3 = 2.2, 4 = 3.0, 5 = 3.1,
    /// 6 = 4.0, 7 = 5.0.
    fn nvlink_gen(&mut self, links: &[NvLinkFacts]) -> u32 {
        let version = links.iter().map(|l| l.gen).max().unwrap_or(0);
        match version {
            1 => 1,
            2 | 3 => 2,
            4 | 5 => 3,
            6 => 4,
            7 => 5,
            _ => {
                if !links.is_empty() {
                    self.notes.push(format!(
                        "NVML reported NVLink version {version}, which is unknown: assumed NVLink{UNKNOWN_NVLINK_GEN}"
                    ));
                }
                UNKNOWN_NVLINK_GEN
            }
        }
    }

    fn add_nics(&mut self, facts: &MachineFacts) -> Result<(), TopoError> {
        if facts.nics.is_empty() {
            return Ok(());
        }
        let mut nics = Vec::new();
        for (k, n) in facts.nics.iter().enumerate() {
            let nic = Nic {
                device: Some(n.device.clone()),
                numa: n.pci.numa,
                bus: Some(n.bus.clone()),
            };
            nics.push(self.add_device(format!("n0.nic{k}"), VertexKind::Nic(nic), &n.pci)?);
        }
        let net = self.b.add_vertex(Vertex {
            name: "net".into(),
            node: None,
            kind: VertexKind::Network,
        })?;
        for (v, n) in nics.into_iter().zip(&facts.nics) {
            let rate_gbps = n.rate_gbps;
            let kind = match n.kind {
                NicKind::InfiniBand => LinkKind::InfiniBand { rate_gbps },
                NicKind::Roce => LinkKind::Roce { rate_gbps },
                NicKind::Ethernet => LinkKind::Ethernet { rate_gbps },
            };
            self.b.add_link(v, net, Link::nominal(kind))?;
        }
        Ok(())
    }

    fn vertex(&mut self, name: String, kind: VertexKind) -> Result<VertexId, TopoError> {
        self.b.add_vertex(Vertex {
            name,
            node: Some(0),
            kind,
        })
    }

    /// A PCIe link; an unknown or impossible one is assumed Gen4 x16, with a note.
    fn pcie(
        &mut self,
        a: VertexId,
        b: VertexId,
        link: Option<PcieLink>,
        what: &str,
    ) -> Result<(), TopoError> {
        let kind = link
            .map(|l| LinkKind::Pcie {
                gen: l.gen,
                width: l.width,
            })
            .filter(|k| k.validate().is_ok());
        let kind = kind.unwrap_or_else(|| {
            if !self.assumed_pcie {
                self.assumed_pcie = true;
                self.notes.push(format!(
                    "PCIe links not described by sysfs (the first: {what}) are assumed Gen{} x{}",
                    UNKNOWN_PCIE.gen, UNKNOWN_PCIE.width
                ));
            }
            LinkKind::Pcie {
                gen: UNKNOWN_PCIE.gen,
                width: UNKNOWN_PCIE.width,
            }
        });
        self.b.add_link(a, b, Link::nominal(kind))
    }
}
