//! Plans for the runtime's registry: the shipped library compiled for a topology, and
//! the user's own plans from `BRAID_PLANS`.

use crate::error::CliError;
use braid_ir::Collective;
use braid_plan::Verified;
use braid_runtime::registry::{Origin, PlanProvider, Registry};
use std::sync::Arc;

pub struct LibraryPlans(pub braid_library::Library);

impl PlanProvider for LibraryPlans {
    fn plans(&self, collective: Collective, root: Option<u32>) -> Vec<Arc<Verified>> {
        self.0.plans(collective, root)
    }
}

/// Registers the shipped algorithm `name` as a user plan (`--algo` / `--algorithm`), and
/// returns it. The caller registers no other plan, so nothing falls back to another.
pub fn register_shipped(
    registry: &Registry,
    library: &braid_library::Library,
    collective: Collective,
    root: Option<u32>,
    name: &str,
    topo: &str,
) -> Result<Arc<Verified>, CliError> {
    let plan = library
        .plans(collective, root)
        .into_iter()
        .find(|p| p.name == name)
        .ok_or_else(|| {
            CliError::Input(format!(
                "error: no shipped {collective} algorithm `{name}` applies to {topo}"
            ))
        })?;
    registry.add_verified(plan.clone(), Origin::User(name.to_string()));
    Ok(plan)
}

/// Registers every plan of the files `BRAID_PLANS` lists (`:`-separated): plans
/// (`.json`), MSCCL algorithms (`.xml`) and programs (`.braid`, compiled for `topo`),
/// each proved once here; a file that does not load or prove is an input error.
pub fn register_env(registry: &Registry, topo: &braid_topo::Topology) -> Result<(), CliError> {
    let Ok(list) = std::env::var("BRAID_PLANS") else {
        return Ok(());
    };
    for p in list.split(':').filter(|p| !p.is_empty()) {
        let path = std::path::Path::new(p);
        let plans = braid_library::user_plans(path, topo).map_err(CliError::Input)?;
        for plan in plans {
            tracing::info!(plan = %plan.name, file = %path.display(), "user plan from BRAID_PLANS");
            registry.add_verified(Arc::new(plan), Origin::User(path.display().to_string()));
        }
    }
    Ok(())
}
