//! Braid's execution plan: the format every back end runs, and the proof that a plan is
//! right before anything runs it.
//!
//! * [`plan`]: the data model (ranks, blocks, steps, MSCCL's instruction set spelled out).
//! * [`json`]: versioned JSON loading (errors with line and column) and canonical saving.
//! * [`verify()`]: a stand-alone verifier: structure, bounds, connection matching,
//!   deadlock freedom under bounded buffering, race freedom and the collective's
//!   postcondition in every call mode.
//! * [`explain()`] and [`to_dot`]: a plan as text and as a Graphviz graph.
//!
//! `docs/plan-format.md` documents the format and the verifier for users.

pub mod diag;
pub mod direct;
pub mod dot;
pub mod explain;
pub mod flat;
pub mod json;
pub mod plan;
pub mod traffic;
pub mod verified;
pub mod verify;
pub mod wiring;

pub use diag::{render_diagnostics, Check, PlanDiagnostic, Site};
pub use dot::to_dot;
pub use explain::{describe_step, explain};
pub use json::PlanError;
pub use plan::{
    Block, ByteRange, Connection, Dep, Execution, Origin, Plan, RankPlan, Slice, Step, StepId,
    StepKind, Topology, Transport, DEFAULT_SLOTS, FORMAT_VERSION, PATH_CLASSES,
};
pub use verified::Verified;
pub use verify::{verify, VerifyReport};
