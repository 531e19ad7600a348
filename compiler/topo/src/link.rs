//! The links between vertices, and the nominal numbers used when a file or a
//! detector does not give a bandwidth or latency.

use serde::{Deserialize, Serialize};

use crate::PathClass;

/// A link: what it is, how fast it is in each direction, how long a hop takes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Link {
    pub kind: LinkKind,
    /// GB/s (10^9 bytes per second) in each direction.
    pub bandwidth_gbps: f64,
    /// Microseconds for one hop over the link.
    pub latency_us: f64,
}

/// The physical kind of a link, with what determines its speed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LinkKind {
    /// `count` NVLinks of generation `gen` (H100/H200: 18 of gen 4).
    NvLink { count: u32, gen: u32 },
    /// A PCIe link of generation `gen` and `width` lanes.
    Pcie { gen: u32, width: u32 },
    /// The SMP interconnect between CPU sockets (UPI, xGMI).
    Smp,
    /// InfiniBand at `rate_gbps` Gb/s (bits).
    InfiniBand { rate_gbps: u32 },
    /// RDMA over Converged Ethernet at `rate_gbps` Gb/s.
    Roce { rate_gbps: u32 },
    /// Plain Ethernet (TCP) at `rate_gbps` Gb/s.
    Ethernet { rate_gbps: u32 },
}

/// GB/s per direction of one NVLink, by generation (index 0 = gen 1): P100,
/// V100, A100, H100/H200 (`nvidia-smi nvlink -s` shows 26.562 GB/s, so 18 links
/// make the 478 GB/s measured on the H200 machine), B200.
const NVLINK_GBPS: [f64; 5] = [20.0, 25.0, 25.0, 26.5625, 53.125];

/// GB/s per direction of one PCIe lane after line encoding, by generation:
/// 2.5 and 5 GT/s with 8b/10b, 8/16/32 GT/s with 128b/130b, 64 GT/s FLIT.
const PCIE_LANE_GBPS: [f64; 6] = [0.25, 0.5, 0.985, 1.969, 3.938, 7.563];

/// PCIe widths that exist.
const PCIE_WIDTHS: [u32; 6] = [1, 2, 4, 8, 16, 32];

/// Nominal bandwidth of a two-socket SMP interconnect (several UPI/xGMI links),
/// GB/s per direction. A model value: real systems range from ~40 to ~130.
pub const SMP_GBPS: f64 = 64.0;

/// The largest bandwidth a link may have, GB/s per direction (a petabyte per second):
/// sums and products of bandwidths stay finite.
pub const MAX_BANDWIDTH_GBPS: f64 = 1e6;

/// The largest latency a link may have, microseconds (a second): a route's latency, a sum
/// over at most [`crate::MAX_VERTICES`] hops, stays finite.
pub const MAX_LATENCY_US: f64 = 1e6;

impl LinkKind {
    /// The keyword of this kind in the file format (`kind=…`).
    pub fn keyword(&self) -> &'static str {
        match self {
            LinkKind::NvLink { .. } => "nvlink",
            LinkKind::Pcie { .. } => "pcie",
            LinkKind::Smp => "smp",
            LinkKind::InfiniBand { .. } => "ib",
            LinkKind::Roce { .. } => "roce",
            LinkKind::Ethernet { .. } => "eth",
        }
    }

    /// The best path class a route using this link can have.
    pub fn class(&self) -> PathClass {
        match self {
            LinkKind::NvLink { .. } => PathClass::Nvl,
            LinkKind::Pcie { .. } => PathClass::Pix,
            LinkKind::Smp => PathClass::Sys,
            LinkKind::InfiniBand { .. } | LinkKind::Roce { .. } | LinkKind::Ethernet { .. } => {
                PathClass::Net
            }
        }
    }

    /// Whether the link is a network link (between a NIC and the network).
    pub fn is_network(&self) -> bool {
        self.class() == PathClass::Net
    }

    /// Checks the parameters (`gen`, `width`, `count`, `rate`) are ones that exist.
    pub fn validate(&self) -> Result<(), String> {
        match *self {
            LinkKind::NvLink { count, gen } => {
                if count == 0 {
                    return Err("an NVLink link needs count >= 1".into());
                }
                if gen == 0 || gen as usize > NVLINK_GBPS.len() {
                    return Err(format!("NVLink generation {gen} is unknown (1 to 5)"));
                }
            }
            LinkKind::Pcie { gen, width } => {
                if gen == 0 || gen as usize > PCIE_LANE_GBPS.len() {
                    return Err(format!("PCIe generation {gen} is unknown (1 to 6)"));
                }
                if !PCIE_WIDTHS.contains(&width) {
                    return Err(format!(
                        "PCIe width x{width} does not exist (1, 2, 4, 8, 16 or 32)"
                    ));
                }
            }
            LinkKind::Smp => {}
            LinkKind::InfiniBand { rate_gbps }
            | LinkKind::Roce { rate_gbps }
            | LinkKind::Ethernet { rate_gbps } => {
                if rate_gbps == 0 {
                    return Err("a network link needs rate >= 1 (Gb/s)".into());
                }
            }
        }
        Ok(())
    }

    /// The bandwidth a link of this kind nominally has, GB/s per direction.
    /// `None` when [`LinkKind::validate`] fails.
    pub fn nominal_bandwidth_gbps(&self) -> Option<f64> {
        self.validate().ok()?;
        Some(match *self {
            LinkKind::NvLink { count, gen } => f64::from(count) * NVLINK_GBPS[gen as usize - 1],
            LinkKind::Pcie { gen, width } => f64::from(width) * PCIE_LANE_GBPS[gen as usize - 1],
            LinkKind::Smp => SMP_GBPS,
            LinkKind::InfiniBand { rate_gbps }
            | LinkKind::Roce { rate_gbps }
            | LinkKind::Ethernet { rate_gbps } => f64::from(rate_gbps) / 8.0,
        })
    }

    /// A nominal one-hop latency in microseconds: order-of-magnitude model values
    /// (NCCL's own per-hop constants are 0.6 us NVLink, 1 us PCI, 2.7+ us network),
    /// meant to rank paths, not to predict timings.
    pub fn nominal_latency_us(&self) -> f64 {
        match self {
            LinkKind::NvLink { .. } => 0.35,
            LinkKind::Pcie { .. } => 0.25,
            LinkKind::Smp => 0.3,
            LinkKind::InfiniBand { .. } => 1.0,
            LinkKind::Roce { .. } => 1.5,
            LinkKind::Ethernet { .. } => 5.0,
        }
    }
}

impl Link {
    /// A link of `kind` with its nominal bandwidth and latency.
    ///
    /// # Panics
    /// If `kind` fails [`LinkKind::validate`].
    pub fn nominal(kind: LinkKind) -> Link {
        let bandwidth_gbps = kind
            .nominal_bandwidth_gbps()
            .unwrap_or_else(|| panic!("invalid link kind {kind:?}"));
        Link {
            kind,
            bandwidth_gbps,
            latency_us: kind.nominal_latency_us(),
        }
    }

    /// Checks the kind and that bandwidth is positive and latency non-negative.
    pub fn validate(&self) -> Result<(), String> {
        self.kind.validate()?;
        let bw = self.bandwidth_gbps;
        if !(bw.is_finite() && bw > 0.0 && bw <= MAX_BANDWIDTH_GBPS) {
            return Err(format!(
                "bandwidth must be a positive number of GB/s up to {MAX_BANDWIDTH_GBPS}, not {bw}"
            ));
        }
        let lat = self.latency_us;
        if !(lat.is_finite() && (0.0..=MAX_LATENCY_US).contains(&lat)) {
            return Err(format!(
                "latency must be a non-negative number of microseconds up to {MAX_LATENCY_US}, not {lat}"
            ));
        }
        Ok(())
    }
}
