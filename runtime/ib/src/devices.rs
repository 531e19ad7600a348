//! The machine's RDMA ports and the ones a job may use.
//!
//! With the `verbs` feature, [`discover`] lists the devices libibverbs sees and opens
//! each one's first port (the `ibverbs` crate's safe context queries port 1; adapters with
//! several ports per device are listed by their first); without it, it says that this
//! build has no InfiniBand. [`select`] applies `NCCL_IB_HCA` to what was found. Every
//! error says what to do, `NCCL_IB_DISABLE=1` (sockets instead) among the choices.

use crate::hca::HcaSpec;
use std::fmt;

/// Whether a port can carry traffic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PortState {
    Active,
    /// Not usable, with the reason the verbs library gave.
    Down(String),
}

/// One port of one RDMA device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    pub device: String,
    pub port: u8,
    pub state: PortState,
    /// Entries of the port's GID table (0 when it is not active).
    pub gids: usize,
}

impl fmt::Display for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.device, self.port)?;
        match &self.state {
            PortState::Active => write!(f, " (active, {} GIDs)", self.gids),
            PortState::Down(why) => write!(f, " (not usable: {why})"),
        }
    }
}

/// Why there is no RDMA port to use.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IbError {
    #[error(
        "this build of Braid has no InfiniBand support (build it with the `verbs` feature of \
         braid-ib, which links libibverbs); set NCCL_IB_DISABLE=1 to use sockets"
    )]
    NotBuilt,
    #[error(
        "no RDMA support on this machine: listing the devices failed ({0}); load the kernel's \
         RDMA modules (ib_core, ib_uverbs and the adapter's driver, or rdma_rxe for a \
         software device) or set NCCL_IB_DISABLE=1 to use sockets"
    )]
    Unavailable(String),
    #[error(
        "no RDMA device on this machine (libibverbs lists none); set NCCL_IB_DISABLE=1 to \
         use sockets"
    )]
    NoDevices,
    #[error("{spec} selects no active port; this machine has: {have}")]
    NoneSelected { spec: String, have: String },
}

/// The machine's RDMA ports (see the module docs).
pub fn discover() -> Result<Vec<Port>, IbError> {
    imp::discover()
}

/// The active ports that `spec` (`None`: every one) selects, in the order found.
pub fn select(ports: &[Port], spec: Option<&HcaSpec>) -> Result<Vec<Port>, IbError> {
    if ports.is_empty() {
        return Err(IbError::NoDevices);
    }
    let chosen: Vec<Port> = ports
        .iter()
        .filter(|p| p.state == PortState::Active)
        .filter(|p| spec.is_none_or(|s| s.selects(&p.device, p.port)))
        .cloned()
        .collect();
    if chosen.is_empty() {
        return Err(IbError::NoneSelected {
            spec: spec.map_or("the default (every device)".into(), |s| {
                format!("NCCL_IB_HCA={s}")
            }),
            have: ports
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    Ok(chosen)
}

#[cfg(feature = "verbs")]
mod imp {
    use super::*;

    pub fn discover() -> Result<Vec<Port>, IbError> {
        let list = ibverbs::devices().map_err(|e| IbError::Unavailable(e.to_string()))?;
        let mut ports = Vec::new();
        for d in list.iter() {
            let device = d
                .name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "(unnamed)".into());
            let (state, gids) = match d.open() {
                Ok(ctx) => (PortState::Active, ctx.gid_table().len()),
                Err(e) => (PortState::Down(e.to_string()), 0),
            };
            ports.push(Port {
                device,
                port: 1,
                state,
                gids,
            });
        }
        Ok(ports)
    }
}

#[cfg(not(feature = "verbs"))]
mod imp {
    use super::*;

    pub fn discover() -> Result<Vec<Port>, IbError> {
        Err(IbError::NotBuilt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(device: &str, n: u8, active: bool) -> Port {
        Port {
            device: device.into(),
            port: n,
            state: if active {
                PortState::Active
            } else {
                PortState::Down("port is not ACTIVE or ARMED".into())
            },
            gids: if active { 4 } else { 0 },
        }
    }

    #[test]
    fn selection_keeps_active_ports_the_list_names() {
        let ports = [
            port("mlx5_0", 1, true),
            port("mlx5_1", 1, false),
            port("mlx5_2", 1, true),
        ];
        let all = select(&ports, None).unwrap();
        assert_eq!(all.len(), 2);
        let spec = HcaSpec::parse("NCCL_IB_HCA", "^mlx5_0").unwrap();
        let some = select(&ports, Some(&spec)).unwrap();
        assert_eq!(some, vec![ports[2].clone()]);
        // Naming only a port that is down selects nothing, and the error lists what is there.
        let down = HcaSpec::parse("NCCL_IB_HCA", "=mlx5_1").unwrap();
        let e = select(&ports, Some(&down)).unwrap_err().to_string();
        assert!(
            e.starts_with("NCCL_IB_HCA==mlx5_1 selects no active port"),
            "{e}"
        );
        assert!(
            e.contains("mlx5_1:1 (not usable: port is not ACTIVE or ARMED)"),
            "{e}"
        );
        assert!(e.contains("mlx5_0:1 (active, 4 GIDs)"), "{e}");
        assert_eq!(select(&[], None).unwrap_err(), IbError::NoDevices);
    }

    /// What this machine has, whatever it is, comes back as ports or as an error that
    /// says what to do; on a machine without RDMA (CI), the error, and without the
    /// feature, exactly that the build has none.
    #[test]
    fn discovery_lists_ports_or_explains_why_not() {
        match discover() {
            Ok(ports) => {
                for p in &ports {
                    assert!(!p.device.is_empty() && p.port >= 1, "{p}");
                }
            }
            Err(e) => {
                if cfg!(not(feature = "verbs")) {
                    assert_eq!(e, IbError::NotBuilt);
                }
                assert!(e.to_string().contains("NCCL_IB_DISABLE=1"), "{e}");
            }
        }
    }
}
