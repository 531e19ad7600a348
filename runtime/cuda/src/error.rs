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
    /// The plan failed `braid_plan::verify`.
    #[error("plan `{plan}` does not verify:\n{diagnostics}")]
    Unverified { plan: String, diagnostics: String },
    /// A CUDA driver call failed.
    #[error("CUDA driver: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
    /// NVRTC rejected the generated source (a bug in codegen or the primitives).
    #[error("NVRTC: {0}")]
    Compile(String),
    /// NCCL (the yardstick `braid perf --vs-nccl` runs) could not be loaded or failed.
    #[error("NCCL: {0}")]
    Nccl(String),
    /// The group's bootstrap failed (a peer process died, mismatched calls, timeout).
    #[error("bootstrap: {0}")]
    Bootstrap(#[from] braid_runtime::RuntimeError),
    /// A kernel stopped early: a rank waited too long for a peer, a FIFO or a block.
    #[error("rank {rank} failed on the GPU: {what}")]
    Kernel { rank: u32, what: String },
}

pub type Result<T> = std::result::Result<T, CudaError>;
