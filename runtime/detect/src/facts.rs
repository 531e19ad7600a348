//! What detection found, as plain data: the seam between the probes (CUDA,
//! NVML, sysfs) and the assembly of a topology, so assembly is testable on
//! any machine.

/// Everything assembly needs about the local machine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachineFacts {
    /// In CUDA ordinal order: GPU `i` becomes rank `i`.
    pub gpus: Vec<GpuFacts>,
    pub nics: Vec<NicFacts>,
    /// The online NUMA nodes (empty when unknown).
    pub numa_nodes: Vec<u32>,
}

/// One GPU.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuFacts {
    /// The driver's name for it, e.g. `NVIDIA H200`.
    pub model: String,
    /// PCI bus id in sysfs form (`0000:19:00.0`).
    pub bus: String,
    pub pci: PciPlacement,
    /// One entry per active NVLink.
    pub nvlinks: Vec<NvLinkFacts>,
}

/// Where a PCI device sits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PciPlacement {
    pub numa: Option<u32>,
    /// The PCI path from the root complex (`pci0000:15`) down to the device
    /// itself (last); empty when sysfs does not show it.
    pub chain: Vec<PciHop>,
}

/// One element of a PCI path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciHop {
    /// `pci0000:15` for the root complex, else a bus id (`0000:16:00.0`).
    pub addr: String,
    /// The upstream link of this device or port (`max_link_speed/width`).
    pub link: Option<PcieLink>,
}

/// A PCIe link's generation and lane count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcieLink {
    pub gen: u32,
    pub width: u32,
}

/// One active NVLink of a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvLinkFacts {
    /// The PCI bus id of the far end (another GPU's, or an NVSwitch's); `None`
    /// when NVML does not say (treated as an NVSwitch, as NCCL does).
    pub remote_bus: Option<String>,
    pub gen: u32,
}

/// One network adapter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicFacts {
    /// The OS name: `mlx5_0` for RDMA devices, `eth0` for plain interfaces.
    pub device: String,
    pub bus: String,
    pub pci: PciPlacement,
    pub kind: NicKind,
    /// Gb/s.
    pub rate_gbps: u32,
}

/// What a NIC speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NicKind {
    InfiniBand,
    Roce,
    Ethernet,
}
