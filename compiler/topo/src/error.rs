//! What can go wrong when a topology is named, read or assembled.

use thiserror::Error;

/// The one error type of this crate.
///
/// Every variant is plain data (`Clone + Eq`) so callers can match on it and tests
/// can compare it; `Display` gives the message a user should see.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TopoError {
    /// `detect` was passed to [`crate::Topology::from_arg`]: this crate never
    /// touches the machine, so the caller must run the detector (`braid-detect`).
    #[error(
        "`detect` names this machine, which braid-topo cannot look at: \
         call braid_detect::detect() instead of Topology::from_arg"
    )]
    DetectRequested,

    /// A preset whose kind is known but whose parameters are wrong (`nvswitch:0`,
    /// `cluster:2x`), or a `word:…` argument whose kind is unknown.
    #[error("bad topology `{arg}`: {reason} ({PRESET_HELP})")]
    BadPreset { arg: String, reason: String },

    /// Neither a preset, `detect`, nor a file that exists.
    #[error("`{arg}` is not a topology: no such file, and not a preset ({PRESET_HELP})")]
    Unrecognized { arg: String },

    /// The file exists but could not be read.
    #[error("cannot read topology file `{path}`: {message}")]
    Io { path: String, message: String },

    /// A topology file is malformed or describes an impossible machine; the
    /// position is 1-based, `col` counting characters.
    #[error("{file}:{line}:{col}: {message}")]
    Parse {
        file: String,
        line: usize,
        col: usize,
        message: String,
    },

    /// A topology assembled in code (the builder, the detector) is not valid.
    #[error("invalid topology: {0}")]
    Invalid(String),
}

/// What `--topo` accepts, for error messages.
pub(crate) const PRESET_HELP: &str =
    "expected nvswitch:N, pcie:N, cluster:MxG, detect, or the path of a topology file";
