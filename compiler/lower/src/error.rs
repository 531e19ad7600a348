//! Why lowering refused a program.
//!
//! Every error here means the caller passed inconsistent inputs (a program instantiated for
//! another shape, a dataflow graph of another program) or a program the plan format cannot
//! express (too many channels); a correct program and matching inputs always lower.

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LowerError {
    /// The program was instantiated for a different rank count than the topology has.
    #[error("the program is instantiated for {program} ranks, but the topology has {topology}")]
    RankCount { program: u32, topology: u32 },
    /// The dataflow graph does not belong to this program.
    #[error("the dataflow graph has {graph} nodes, but the program has {ops} operations")]
    FlowSize { graph: usize, ops: usize },
    /// The dataflow graph was built for out-of-place calls, but the plan must also be valid
    /// in place, where aliasing creates dependencies the out-of-place graph lacks.
    #[error(
        "the plan is valid in place, so it needs the in-place dataflow graph (got the {got} one)"
    )]
    FlowMode { got: braid_ir::Mode },
    /// The plan would be valid in no call mode.
    #[error(
        "no call mode is left: the program declares {declared}, the caller asked for {requested}"
    )]
    NoMode { declared: String, requested: String },
    /// A channel hint, times the replica count, exceeds what the runtime can open.
    /// `span` is the statement carrying the hint, for a diagnostic with a source excerpt.
    #[error("@ch({channel}) with `channels {replicas}` needs {needed} connection channels, but at most {max} exist")]
    TooManyChannels {
        channel: u32,
        replicas: u32,
        needed: u64,
        max: u64,
        span: braid_ir::Span,
    },
}
