//! Passes over Braid programs, each a function from one explicit type to the next:
//!
//! * [`instantiate`](mod@instantiate): `ast::Algorithm` + `Shape` → `OpProgram` (the chunk operations of
//!   the sequential execution, each with its span and loop bindings), within a step
//!   [`budget`] charged before the work is done.
//! * [`verify`](mod@verify): `OpProgram` → proof of the postcondition (or diagnostics), by symbolic
//!   execution in program order, for each call mode.
//! * [`dataflow`]: `OpProgram` → petgraph dependency graph (RAW / WAR / WAW on physical
//!   chunk locations), with statistics and Graphviz output.

pub mod bindings;
pub mod budget;
pub mod dataflow;
pub mod eval;
pub mod instantiate;
pub mod verify;

pub use instantiate::{failed_conditions, instantiate, instantiate_within};
pub use verify::verify;
