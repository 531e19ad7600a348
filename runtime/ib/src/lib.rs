//! InfiniBand and RoCE for Braid's network transport (docs/multinode.md).
//!
//! What lives here: which host channel adapters (HCAs) and ports a job may use, in NCCL's
//! syntax (`NCCL_IB_HCA` / `BRAID_IB_HCA`, `NCCL_IB_DISABLE` / `BRAID_IB_DISABLE`,
//! [`hca`]), and what the machine has ([`devices`]): through `ibverbs` when the crate is
//! built with its `verbs` feature, else an error saying so. The selection is pure logic;
//! the device list is the only part that touches the verbs library.
//!
//! Must not know: plans, GPUs, the bootstrap. The transport that moves data over queue
//! pairs builds on this; it is not here yet.

pub mod devices;
pub mod hca;

pub use devices::{discover, select, IbError, Port, PortState};
pub use hca::{ib_disabled, HcaSpec};
