//! Braid's CUDA backend: the device communicator ([`CudaComm`]) on the caller's GPU
//! memory and streams, one rank per GPU or several, one process driving every GPU or one
//! process per rank.
//!
//! A plan becomes data ([`program`]): each rank's step programs laid out in device memory
//! once. One kernel per (element type, reduction, wire protocol) interprets any plan
//! ([`kernel`], `kernels_templates/`); NVRTC compiles it once ([`compile`], with an
//! on-disk [`cache`]) and every communicator of the process shares it ([`modules`]).
//! Connections are made once per communicator, through one [`transport::Transport`]
//! interface ([`clique`]); a call is one kernel launch ([`engine`]). `docs/cuda.md`
//! describes the design and what was measured.
//!
//! Everything builds without a CUDA installation (cudarc loads the libraries at run
//! time); without a driver, nothing touches cudarc beyond the presence check.

pub mod arg_cost;
pub mod cache;
pub mod check;
pub mod clique;
pub mod comm;
pub mod compile;
pub mod device;
pub mod engine;
pub mod error;
pub mod flat;
pub mod graph;
pub mod kernel;
pub mod ll128;
pub mod modules;
pub mod nccl;
pub mod net;
pub mod p2p;
pub mod premul;
pub mod program;
pub mod roofline;
pub mod shared_host;
pub mod stream;
pub mod timing;
pub mod transport;

pub use comm::{
    device_count, driver_present, group, Bufs, CudaComm, DeviceBuffer, DeviceMemory, GroupItem,
    Options, RawDeviceMemory,
};
pub use engine::CudaEngine;
pub use error::{CudaError, Result};
pub use p2p::P2pOp;
pub use premul::PremulCall;
pub use stream::Stream;

/// `docs/api.md`, compiled (and, where no GPU is needed, run) as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/api.md")]
pub struct ApiDocs;
