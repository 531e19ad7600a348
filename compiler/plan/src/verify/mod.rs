//! The stand-alone plan verifier.
//!
//! A plan may come from our compiler, a hand-edited file or an MSCCL import, so nothing is
//! taken on trust. Phases run in order and each collects every problem it finds; a phase
//! runs only when the phases it relies on passed, so one mistake is not reported five
//! times:
//!
//! | phase | needs |
//! |---|---|
//! | a. structure | — |
//! | b. bounds | structure |
//! | c. connections | structure |
//! | d. deadlock (cycles, bounded-buffer simulation) | connections |
//! | e. races | bounds, deadlock |
//! | f. postcondition | races |

mod annotations;
mod bounds;
mod chains;
mod connections;
mod deadlock;
mod index;
mod limits;
mod race;
mod semantics;
mod structure;

pub use limits::{MAX_CHUNK_ACCESSES, MAX_STEPS};
pub use structure::{MAX_CHANNELS, MAX_LOCATIONS};

use crate::diag::{Check, PlanDiagnostic, Site};
use crate::plan::Plan;
use braid_ir::{Collective, Layout, Mode};
use index::Index;

/// Diagnostics kept per phase; the rest are counted in one closing line.
const MAX_PER_PHASE: usize = 50;

/// What the later phases share: the dense index and the layout of each mode in order.
pub(crate) struct Ctx<'p> {
    pub ix: Index<'p>,
    pub layouts: Vec<(Mode, Layout)>,
}

/// What a successful verification proved, for the one-line summary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyReport {
    pub name: String,
    pub collective: Collective,
    pub ranks: u32,
    pub blocks: usize,
    pub steps: usize,
    /// Connections that carry at least one declared end on both sides.
    pub connections: usize,
    pub messages: usize,
    pub slots: u32,
    /// The modes the postcondition was proven in, in checking order.
    pub modes: Vec<Mode>,
}

impl VerifyReport {
    /// One line: `ok: ...` with the sizes and what was proven.
    pub fn summary(&self) -> String {
        let modes: Vec<&str> = self.modes.iter().map(|m| m.name()).collect();
        format!(
            "ok: plan `{}` ({}, {} ranks, {} blocks, {} steps, {} connections, {} messages): proved in-bounds buffers, matching send/receive order on every connection, no deadlock with {}-slot FIFOs, no races, and the {} postcondition on every rank ({})",
            self.name,
            self.collective,
            self.ranks,
            self.blocks,
            self.steps,
            self.connections,
            self.messages,
            self.slots,
            self.collective,
            modes.join(", ")
        )
    }
}

/// Keep at most [`MAX_PER_PHASE`] diagnostics of one phase, counting the rest.
fn capped(mut diags: Vec<PlanDiagnostic>, check: Check) -> Vec<PlanDiagnostic> {
    if diags.len() > MAX_PER_PHASE {
        let more = diags.len() - MAX_PER_PHASE;
        diags.truncate(MAX_PER_PHASE);
        diags.push(PlanDiagnostic::new(
            check,
            Site::Plan,
            format!("{more} more {} problem(s) not shown", check.name()),
        ));
    }
    diags
}

/// Prove `plan` correct, or list everything found wrong with it.
pub fn verify(plan: &Plan) -> Result<VerifyReport, Vec<PlanDiagnostic>> {
    let structure = structure::check(plan);
    if !structure.is_empty() {
        return Err(capped(structure, Check::Structure));
    }
    let cx = Ctx {
        ix: Index::new(plan),
        layouts: plan.modes.iter().map(|m| (m, plan.layout(m))).collect(),
    };
    let mut all = Vec::new();
    let bounds = bounds::check(&cx);
    let bounds_ok = bounds.is_empty();
    all.extend(capped(bounds, Check::Bounds));
    let (wiring, conn) = connections::check(&cx);
    if !conn.is_empty() {
        all.extend(capped(conn, Check::Connection));
        return Err(all);
    }
    let order = match deadlock::check(&cx, &wiring) {
        Ok(order) => order,
        Err(d) => {
            all.extend(capped(d, Check::Deadlock));
            return Err(all);
        }
    };
    if !bounds_ok {
        return Err(all);
    }
    let races = race::check(&cx, &wiring, &order);
    if !races.is_empty() {
        return Err(capped(races, Check::Race));
    }
    let post = semantics::check(&cx, &wiring, &order);
    if !post.is_empty() {
        return Err(capped(post, Check::Postcondition));
    }
    Ok(VerifyReport {
        name: plan.name.clone(),
        collective: plan.collective,
        ranks: plan.n_ranks,
        blocks: cx.ix.n_blocks(),
        steps: cx.ix.n_steps(),
        connections: wiring.connections,
        messages: wiring.messages,
        slots: plan.slots,
        modes: plan.modes.iter().collect(),
    })
}
