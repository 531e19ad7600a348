//! Plans for the runtime's registry: the shipped library compiled for a topology.

use crate::error::CliError;
use braid_ir::Collective;
use braid_plan::Plan;
use braid_runtime::registry::{Origin, PlanProvider, Registry};
use std::sync::Arc;

pub struct LibraryPlans(pub braid_library::Library);

impl PlanProvider for LibraryPlans {
    fn plans(&self, collective: Collective, root: Option<u32>) -> Vec<Arc<Plan>> {
        self.0.plans(collective, root)
    }
}

/// Registers the shipped algorithm `name` as a user plan, so the registry selects it
/// before any other (`--algo` / `--algorithm`).
pub fn register_shipped(
    registry: &Registry,
    library: &braid_library::Library,
    collective: Collective,
    root: Option<u32>,
    name: &str,
    topo: &str,
) -> Result<(), CliError> {
    let plan = library
        .plans(collective, root)
        .into_iter()
        .find(|p| p.name == name)
        .ok_or_else(|| {
            CliError::Input(format!(
                "error: no shipped {collective} algorithm `{name}` applies to {topo}"
            ))
        })?;
    registry
        .add((*plan).clone(), Origin::User(name.to_string()))
        .map_err(|e| CliError::Input(format!("error: {e}")))
}
