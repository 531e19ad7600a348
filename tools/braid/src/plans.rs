//! Plans for the runtime's registry: the shipped library compiled for a topology.

use braid_ir::Collective;
use braid_plan::Plan;
use braid_runtime::registry::PlanProvider;
use std::sync::Arc;

pub struct LibraryPlans(pub braid_library::Library);

impl PlanProvider for LibraryPlans {
    fn plans(&self, collective: Collective, root: Option<u32>) -> Vec<Arc<Plan>> {
        self.0.plans(collective, root)
    }
}
