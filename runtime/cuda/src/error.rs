//! Errors of the CUDA backend.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum CudaError {
    /// No CUDA driver library could be loaded on this machine.
    #[error("no CUDA driver on this machine (libcuda could not be loaded)")]
    NoDriver,
    /// The plan or the call was refused before anything was launched.
    #[error("refused before launch: {0}")]
    Invalid(String),
    /// A CUDA driver call failed.
    #[error("CUDA driver: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
    /// NVRTC rejected the generated source (a bug in the templates) or is missing.
    #[error("NVRTC: {0}")]
    Compile(String),
    /// NCCL (the yardstick `braid perf --vs-nccl` runs) could not be loaded or failed.
    #[error("NCCL: {0}")]
    Nccl(String),
    /// The communicator's own errors: a call refused, a mismatched call, a failed or
    /// aborted one, the bootstrap.
    #[error(transparent)]
    Runtime(#[from] braid_runtime::RuntimeError),
}

pub type Result<T> = std::result::Result<T, CudaError>;
