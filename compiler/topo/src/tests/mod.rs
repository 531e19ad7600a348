//! Unit tests, one file per feature. Each goes through the public API.

mod errors;
mod hostile;
mod never_panics;
mod paths;
mod presets;
mod props;
mod routes;
mod text;

use crate::Topology;

/// The topology `arg` names, which must be valid.
#[track_caller]
fn topo(arg: &str) -> Topology {
    Topology::from_arg(arg).unwrap_or_else(|e| panic!("{arg}: {e}"))
}

/// A topology file, which must parse.
#[track_caller]
fn file(text: &str) -> Topology {
    Topology::parse_text("test.topo", text).unwrap_or_else(|e| panic!("{e}"))
}
