//! The NCCL grading of how far apart two GPUs are.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How a path between two GPUs travels, graded the way NCCL grades it
/// (`PATH_NVL` … `PATH_NET` in NCCL's `graph.h`).
///
/// The order is NCCL's: a smaller class is a better path, so `max` over the
/// hops of a route gives the class of the route, and `class <= PathClass::Pxb`
/// is NCCL's default test for "peer-to-peer is worth using" (`NCCL_P2P_LEVEL=PXB`).
///
/// NCCL's finer classes are folded in: `LOC` (a GPU to itself) is reported as
/// [`PathClass::Nvl`]; `NVB` (NVLink through a relaying GPU) does not occur because
/// routes never pass through a GPU; `C2C`, `P2C` and `PXN` have no vertex kinds here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum PathClass {
    /// NVLink only, directly or through NVSwitches.
    Nvl,
    /// PCIe through at most one PCIe switch.
    Pix,
    /// PCIe through several PCIe switches, without crossing a host bridge.
    Pxb,
    /// PCIe through a host bridge / CPU root complex.
    Phb,
    /// PCIe plus the SMP interconnect between CPU sockets (UPI, xGMI).
    Sys,
    /// Through a NIC and the network: always the class of a cross-node pair.
    Net,
}

impl PathClass {
    /// Every class, best first.
    pub const ALL: [PathClass; 6] = [
        PathClass::Nvl,
        PathClass::Pix,
        PathClass::Pxb,
        PathClass::Phb,
        PathClass::Sys,
        PathClass::Net,
    ];

    /// NCCL's name for the class (`NVL`, `PIX`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            PathClass::Nvl => "NVL",
            PathClass::Pix => "PIX",
            PathClass::Pxb => "PXB",
            PathClass::Phb => "PHB",
            PathClass::Sys => "SYS",
            PathClass::Net => "NET",
        }
    }

    /// Whether GPUs this far apart can read and write each other's memory
    /// directly: NCCL's default P2P level is PXB ("don't use P2P across CPU host
    /// bridges"), so NVL, PIX and PXB qualify and PHB, SYS and NET do not.
    pub fn is_p2p_direct(self) -> bool {
        self <= PathClass::Pxb
    }
}

impl fmt::Display for PathClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PathClass {
    type Err = String;

    /// Accepts NCCL's names in any case (`nvl`, `PXB`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PathClass::ALL
            .into_iter()
            .find(|c| c.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!("unknown path class `{s}` (expected NVL, PIX, PXB, PHB, SYS or NET)")
            })
    }
}
