//! The runtime's error type. Every failure that can happen during a call (a dead peer, a
//! mismatched call, a timeout, an abort) ends the call with one of these on every
//! surviving rank; nothing hangs.

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Error)]
pub enum RuntimeError {
    /// A peer closed its connection or died.
    #[error("rank {peer} failed: {reason}")]
    PeerFailed { peer: u32, reason: String },
    /// Ranks called different collectives, counts, dtypes or ops.
    #[error("mismatched call: {0}")]
    Mismatch(String),
    /// Nothing moved for longer than BRAID_TIMEOUT.
    #[error("timed out after {seconds:.1} s waiting for {what}")]
    Timeout { seconds: f64, what: String },
    /// The communicator was aborted (by the application or because another rank failed).
    #[error("communicator aborted: {0}")]
    Aborted(String),
    /// The call is invalid (buffer sizes, no plan serves it, bad arguments).
    #[error("invalid call: {0}")]
    Invalid(String),
    /// Bootstrap or transport setup failed.
    #[error("bootstrap failed: {0}")]
    Bootstrap(String),
    /// Operating-system I/O error.
    #[error("I/O error: {0}")]
    Io(String),
}

impl From<std::io::Error> for RuntimeError {
    fn from(e: std::io::Error) -> Self {
        RuntimeError::Io(e.to_string())
    }
}

pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
