//! Why detection failed.

use thiserror::Error;

/// Detection failed; the message says what was looked for.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DetectError {
    /// The CUDA driver library could not be loaded.
    #[error(
        "no CUDA driver found: could not load the NVIDIA driver library (looked for {searched}); \
         detecting a machine needs an NVIDIA GPU and its driver. Without one, pass a preset \
         (nvswitch:N, pcie:N, cluster:MxG) or a topology file instead of `detect`"
    )]
    NoDriver { searched: String },

    /// The driver loaded but reports no GPU.
    #[error(
        "no GPU found: the CUDA driver loaded but {reason}. Check the GPUs are visible to this \
         process (CUDA_VISIBLE_DEVICES, container device flags), or pass a preset or a topology \
         file instead of `detect`"
    )]
    NoGpu { reason: String },

    /// A driver call failed.
    #[error("CUDA driver call {call} failed: {message}")]
    Driver { call: String, message: String },

    /// What was detected does not make a valid topology (a bug, or a very odd machine).
    #[error("the detected machine is not a valid topology: {0}")]
    Topology(#[from] braid_topo::TopoError),
}
