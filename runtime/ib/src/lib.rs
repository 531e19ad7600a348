//! InfiniBand and RoCE for Braid's network transport (docs/multinode.md).
//!
//! What lives here: which host channel adapters (HCAs) and ports a job may use, in NCCL's
//! syntax (`NCCL_IB_HCA` / `BRAID_IB_HCA`, `NCCL_IB_DISABLE` / `BRAID_IB_DISABLE`,
//! [`hca`]), and what the machine has ([`devices`]): through `ibverbs` when the crate is
//! built with its `verbs` feature, else an error saying so. The selection is pure logic;
//! the device list and `verbs_qp` are the only parts that touch the verbs library.
//!
//! Must not know: plans, GPUs, the bootstrap. The queue-pair layer lives here: the verbs
//! a transport needs ([`rdma`]), a software device that implements them ([`soft`]), and,
//! with the `verbs` feature, `verbs_qp` over libibverbs; [`open`] picks the device a job
//! uses, the one nearest its GPU where there are several ([`affinity`]). The transport that moves data over
//! those queue pairs lives in braid-cuda's `net/`.

pub mod affinity;
pub mod devices;
pub mod hca;
pub mod open;
pub mod rdma;
pub mod soft;
#[cfg(feature = "verbs")]
pub mod verbs_qp;

pub use devices::{discover, select, IbError, Port, PortState};
pub use hca::{ib_disabled, HcaSpec};
