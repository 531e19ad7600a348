//! The plans a communicator can run: every one verified once, when it is registered.
//!
//! Plans come from providers (the shipped library compiled for the communicator's
//! topology, supplied by the application: the runtime never parses source), from files,
//! and from `BRAID_PLANS` (a `:`-separated list of plan files, like MSCCL_XML_FILES; an
//! application with the compiler, such as the `braid` command, also loads `.braid` and
//! MSCCL `.xml` files from it). Which plan serves a call is [`crate::policy`]'s choice;
//! the registry says which plans can: those for the call's collective, rank count, root,
//! call mode and (where the plan states one, as MSCCL's minBytes / maxBytes) message
//! size. Every plan passed over is logged with its reason at `BRAID_DEBUG=INFO`.

use crate::error::{Result, RuntimeError};
use braid_ir::{Collective, Mode};
use braid_plan::{Plan, Verified};
use std::sync::{Arc, Mutex};

pub use crate::policy::{preference, SMALL_MESSAGE};

/// Where a plan came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    User(String),
    Library,
}

/// Supplies plans on demand (for instance, compiles the shipped library for a root).
pub trait PlanProvider: Send + Sync {
    fn plans(&self, collective: Collective, root: Option<u32>) -> Vec<Arc<Verified>>;
}

#[derive(Default)]
pub struct Registry {
    entries: Mutex<Vec<(Arc<Verified>, Origin)>>,
    providers: Vec<Box<dyn PlanProvider>>,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    pub fn with_provider(mut self, p: Box<dyn PlanProvider>) -> Registry {
        self.providers.push(p);
        self
    }

    /// Verifies and registers a plan.
    pub fn add(&self, plan: Plan, origin: Origin) -> Result<()> {
        let name = plan.name.clone();
        let verified = Verified::new(plan).map_err(|diags| {
            RuntimeError::Invalid(format!(
                "plan `{name}` from {origin:?} fails verification:\n{}",
                braid_plan::render_diagnostics(&diags)
            ))
        })?;
        self.add_verified(Arc::new(verified), origin);
        Ok(())
    }

    /// Registers a plan proved elsewhere (it carries the proof in its type).
    pub fn add_verified(&self, plan: Arc<Verified>, origin: Origin) {
        self.entries.lock().unwrap().push((plan, origin));
    }

    /// The plans registered directly (user plans, in order), without the providers'.
    pub fn entries(&self) -> Vec<(Arc<Verified>, Origin)> {
        self.entries.lock().unwrap().clone()
    }

    /// Loads a plan file (JSON) and registers it as a user plan.
    pub fn add_file(&self, path: &std::path::Path) -> Result<()> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            RuntimeError::Invalid(format!("cannot read plan {}: {e}", path.display()))
        })?;
        let plan = Plan::from_json(&text)
            .map_err(|e| RuntimeError::Invalid(format!("{}: {e}", path.display())))?;
        self.add(plan, Origin::User(path.display().to_string()))
    }

    /// Registers every file of `BRAID_PLANS`.
    pub fn add_env(&self) -> Result<()> {
        match std::env::var("BRAID_PLANS") {
            Ok(list) => self.add_list(&list),
            Err(_) => Ok(()),
        }
    }

    /// Registers every file of a `:`-separated list (`BRAID_PLANS`' syntax).
    pub fn add_list(&self, list: &str) -> Result<()> {
        for p in list.split(':').filter(|p| !p.is_empty()) {
            self.add_file(std::path::Path::new(p))?;
        }
        Ok(())
    }

    /// Picks the plan for a call: the first user plan that fits, else the first shipped
    /// plan that fits in [`preference`] order, else any that fits.
    pub fn select(
        &self,
        collective: Collective,
        n: u32,
        root: Option<u32>,
        mode: Mode,
        bytes: usize,
    ) -> Result<Arc<Verified>> {
        self.select_with(collective, n, root, mode, bytes, None)
    }

    /// [`Registry::select`] among the plans `filter` allows (`BRAID_ALGO`).
    pub fn select_with(
        &self,
        collective: Collective,
        n: u32,
        root: Option<u32>,
        mode: Mode,
        bytes: usize,
        filter: Option<&crate::policy::AlgoFilter>,
    ) -> Result<Arc<Verified>> {
        let fitting = self.candidates(collective, n, root, mode, bytes, filter)?;
        if let Some((p, origin)) = fitting.iter().find(|(_, o)| matches!(o, Origin::User(_))) {
            tracing::info!(plan = %p.name, ?origin, "{collective} of {bytes} bytes: user plan selected");
            return Ok(p.clone());
        }
        for name in preference(collective, n, bytes) {
            if let Some((p, _)) = fitting.iter().find(|(p, _)| p.name == *name) {
                tracing::info!(plan = %p.name, "{collective} of {bytes} bytes: shipped plan selected by preference");
                return Ok(p.clone());
            }
            tracing::info!(
                "{collective} of {bytes} bytes: preferred plan {name} unavailable for {n} ranks"
            );
        }
        Ok(fitting[0].0.clone())
    }

    /// Every plan that can serve the call (user plans first, in order, then the
    /// providers'), those `filter` excludes left out; an error naming why when none can.
    pub fn candidates(
        &self,
        collective: Collective,
        n: u32,
        root: Option<u32>,
        mode: Mode,
        bytes: usize,
        filter: Option<&crate::policy::AlgoFilter>,
    ) -> Result<Vec<(Arc<Verified>, Origin)>> {
        let mut filtered_out = Vec::new();
        let mut candidates: Vec<(Arc<Verified>, Origin)> = self.entries.lock().unwrap().clone();
        for p in &self.providers {
            candidates.extend(
                p.plans(collective, root)
                    .into_iter()
                    .map(|p| (p, Origin::Library)),
            );
        }
        let mut fitting = Vec::new();
        for (plan, origin) in candidates {
            let why_not = if plan.collective != collective {
                None // other collectives are not worth a log line
            } else if let Some(f) = filter.filter(|f| !f.allows(collective, &plan.name)) {
                filtered_out.push(plan.name.clone());
                Some(format!("{} excludes it", f.source))
            } else if plan.n_ranks != n {
                Some(format!("it is for {} ranks, not {n}", plan.n_ranks))
            } else if plan.root != root {
                Some(format!("its root is {:?}, not {root:?}", plan.root))
            } else if !plan.modes.contains(mode) {
                Some(format!("it is not valid {mode}"))
            } else if let Some(r) = plan.bytes.filter(|r| !r.contains(bytes as u64)) {
                Some(format!(
                    "it serves {} to {} bytes, not {bytes}",
                    r.min,
                    r.max.map_or("any".into(), |m| (m - 1).to_string())
                ))
            } else {
                fitting.push((plan, origin));
                continue;
            };
            if let Some(reason) = why_not {
                tracing::info!(plan = %plan.name, ?origin, "plan not used for {collective}: {reason}");
            }
        }
        if fitting.is_empty() {
            let by_filter = match filter {
                Some(f) if !filtered_out.is_empty() => {
                    format!("; {} excludes {}", f.source, filtered_out.join(", "))
                }
                _ => String::new(),
            };
            return Err(RuntimeError::Invalid(format!(
                "no plan serves {collective} on {n} ranks ({mode}, root {root:?}){by_filter}"
            )));
        }
        Ok(fitting)
    }
}
