//! Braid's CUDA backend, first part: one process drives every local GPU, one rank per
//! GPU, peers joined by peer-to-peer access (NVLink or PCIe).
//!
//! A verified plan becomes one CUDA kernel per rank ([`codegen`]): one thread block per
//! plan block (per replica), the block's steps as straight-line calls of the device
//! primitives in `kernels_templates/braid_prims.cuh`. NVRTC compiles it for the device's
//! architecture, with an on-disk cache ([`cache`], [`compile`]). [`exec`] checks the
//! plan against the call's buffers before anything reaches a GPU ([`validate`]),
//! allocates buffers and connection FIFOs, launches all ranks concurrently and copies
//! the results back. `docs/cuda.md` describes the design and what was measured.
//!
//! Everything except [`exec`]'s GPU path is pure Rust and runs without a driver; builds
//! need no CUDA installation (cudarc loads the libraries at run time).

pub mod cache;
pub mod codegen;
pub mod compile;
pub mod device;
pub mod error;
pub mod exec;
pub mod layout;
pub mod nccl;
pub mod process;
pub mod protocol;
pub mod rank_mem;
mod settings;
pub mod shared_host;
pub mod table;
pub mod tune;
pub mod validate;

pub use error::{CudaError, Result};
pub use exec::{device_count, driver_present, Gpus, Resident};

/// Bytes of one FIFO slot: the unit of flow control, as on the host backend.
pub const SLICE_BYTES: usize = braid_runtime::exec::SLICE_BYTES;

/// Threads of every generated thread block.
pub const THREADS: u32 = 512;
