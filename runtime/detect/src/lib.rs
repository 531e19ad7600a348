//! Detects the local machine into a [`braid_topo::Topology`]: what `--topo
//! detect` and `braid topo` with no argument use.
//!
//! ```text
//!  cuda.rs  (cudarc: GPUs, bus ids, peer access) ─┐
//!  nvml.rs  (nvml-wrapper: active NVLinks)        ├─> MachineFacts ── assemble.rs ──> Topology
//!  sysfs.rs (PCI tree, NUMA, InfiniBand, net)     ─┘   (plain data)    (pure)
//! ```
//!
//! Every library is loaded at run time: this crate builds, and its tests run,
//! on a machine without CUDA, where [`detect`] returns
//! [`DetectError::NoDriver`] instead of panicking. NVML and sysfs are optional:
//! without them detection still succeeds and says what it assumed
//! ([`Detection::notes`]).
//!
//! The detected machine is one node; GPU `i` (CUDA ordinal `i`, after
//! `CUDA_VISIBLE_DEVICES`) is rank `i`.

mod assemble;
mod cuda;
pub mod doctor;
mod error;
mod facts;
mod nvml;
pub mod sysfs;

pub use assemble::assemble;
pub use error::DetectError;
pub use facts::{
    GpuFacts, MachineFacts, NicFacts, NicKind, NvLinkFacts, PciHop, PciPlacement, PcieLink,
};

use braid_topo::Topology;

/// What detection found.
#[derive(Debug, Clone)]
pub struct Detection {
    pub topology: Topology,
    /// `peer_access[i][j]`: `cuDeviceCanAccessPeer(i, j)`.
    pub peer_access: Vec<Vec<bool>>,
    /// What could not be detected and was assumed instead, for the user.
    pub notes: Vec<String>,
}

/// Whether the CUDA driver library loads here: tests that need a GPU can skip
/// themselves with this instead of failing.
pub fn cuda_driver_present() -> bool {
    // SAFETY: only tries to load the library; no symbol is called.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// The local machine as a topology named `detect`.
pub fn detect() -> Result<Topology, DetectError> {
    detect_report().map(|d| d.topology)
}

/// The local machine, with peer access and notes on what was assumed.
pub fn detect_report() -> Result<Detection, DetectError> {
    let (gpus, peer_access) = cuda::gpus()?;
    let sysfs = sysfs::Sysfs::system();
    let buses: Vec<String> = gpus.iter().map(|g| g.bus.clone()).collect();
    let mut notes = Vec::new();
    let nvlinks = nvml::nvlinks(&buses).unwrap_or_else(|why| {
        notes.push(format!(
            "{why}: NVLinks not detected, GPU pairs are shown by their PCIe path"
        ));
        vec![Vec::new(); gpus.len()]
    });
    let facts = MachineFacts {
        gpus: gpus
            .into_iter()
            .zip(nvlinks)
            .map(|(g, nvlinks)| GpuFacts {
                pci: sysfs.placement(&g.bus),
                model: g.model,
                bus: g.bus,
                nvlinks,
            })
            .collect(),
        nics: sysfs.nics(),
        numa_nodes: sysfs.numa_nodes(),
    };
    let (topology, assumed) = assemble("detect", &facts)?;
    notes.extend(assumed);
    notes.extend(peer_notes(&topology, &peer_access));
    Ok(Detection {
        topology,
        peer_access,
        notes,
    })
}

/// Pairs whose path says "direct" but whose driver says "no peer access".
fn peer_notes(topo: &Topology, peer: &[Vec<bool>]) -> Vec<String> {
    let mut notes = Vec::new();
    for a in 0..topo.n_ranks() {
        for b in a + 1..topo.n_ranks() {
            let (i, j) = (a as usize, b as usize);
            if topo.p2p_direct(a, b) && !(peer[i][j] && peer[j][i]) {
                notes.push(format!(
                    "GPUs {a} and {b} are {} apart but the driver denies peer access between them",
                    topo.path(a, b).class
                ));
            }
        }
    }
    notes
}

#[cfg(test)]
mod tests;
