//! The RDMA device a job's network connections use: of the active ports that
//! `NCCL_IB_HCA` / `BRAID_IB_HCA` selects (every active port when unset), the one nearest
//! the rank's device (its GPU) on the PCI tree, equally near ones dealt out by the
//! device's ordinal ([`crate::affinity`]), opened for queue pairs; or why there is none
//! (disabled, not built, no device, none selected), so that the caller can fall back to
//! sockets and say why.

use crate::devices::{discover, select, IbError};
use crate::hca::{ib_disabled_in, HcaSpec};
use crate::rdma::Device;
use std::sync::Arc;

/// Why [`open_from_env`] gave no device.
#[derive(Debug, thiserror::Error)]
pub enum NoDevice {
    #[error("InfiniBand is disabled (NCCL_IB_DISABLE / BRAID_IB_DISABLE)")]
    Disabled,
    #[error("{0}")]
    Ib(#[from] IbError),
    #[error("{0}")]
    Spec(String),
    #[error("opening {port}: {why}")]
    Open { port: String, why: String },
}

/// Where a rank's connections start: the PCI address of the device whose memory they
/// carry (a GPU, as CUDA writes it) and its ordinal among such devices, which pick the
/// nearest port.
#[derive(Clone, Copy, Debug, Default)]
pub struct Near<'a> {
    pub pci: Option<&'a str>,
    pub ordinal: usize,
}

/// The device network connections should use, from the environment.
pub fn open_from_env() -> Result<Arc<dyn Device>, NoDevice> {
    open_near(Near::default())
}

/// [`open_from_env`] for a rank whose data starts at the device `near` names.
pub fn open_near(near: Near) -> Result<Arc<dyn Device>, NoDevice> {
    open_in(|k| std::env::var(k).ok(), near)
}

/// [`open_near`] over any source of variables.
pub fn open_in(
    get: impl Fn(&str) -> Option<String>,
    near: Near,
) -> Result<Arc<dyn Device>, NoDevice> {
    if ib_disabled_in(&get) {
        return Err(NoDevice::Disabled);
    }
    let spec = HcaSpec::from_vars(&get).map_err(NoDevice::Spec)?;
    let ports = select(&discover()?, spec.as_ref())?;
    let sysfs = std::path::Path::new(crate::affinity::SYSFS);
    let port = &ports[crate::affinity::nearest(sysfs, &ports, near.pci, near.ordinal)];
    tracing::info!(
        "network connections from PCI device {} use RDMA port {port}",
        near.pci.unwrap_or("(unknown)")
    );
    open_port(port)
}

#[cfg(feature = "verbs")]
fn open_port(port: &crate::devices::Port) -> Result<Arc<dyn Device>, NoDevice> {
    // GID index 0 where the port has GIDs (RoCE needs one; InfiniBand routes by LID).
    let gid = (port.gids > 0).then_some(0u8);
    crate::verbs_qp::VerbsDevice::open(port, gid)
        .map(|d| Arc::new(d) as Arc<dyn Device>)
        .map_err(|e| NoDevice::Open {
            port: port.to_string(),
            why: e.0,
        })
}

#[cfg(not(feature = "verbs"))]
fn open_port(_port: &crate::devices::Port) -> Result<Arc<dyn Device>, NoDevice> {
    Err(NoDevice::Ib(IbError::NotBuilt))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disabled_or_a_malformed_list_gives_no_device_and_says_why() {
        let var =
            |name: &'static str, v: &'static str| move |k: &str| (k == name).then(|| v.to_string());
        let e = open_in(var("NCCL_IB_DISABLE", "1"), Near::default())
            .err()
            .expect("disabled");
        assert!(matches!(e, NoDevice::Disabled), "{e}");
        let e = open_in(var("NCCL_IB_HCA", "mlx5_0:x"), Near::default())
            .err()
            .expect("malformed");
        assert!(e.to_string().contains("NCCL_IB_HCA"), "{e}");
    }
}
