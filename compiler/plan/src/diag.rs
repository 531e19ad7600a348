//! Verifier diagnostics: what is wrong, where (rank, block, step and source line), and
//! which other steps are involved.

use crate::plan::{Origin, StepId};
use std::fmt;

/// The verifier phase that found a problem; also the order phases run in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Check {
    /// Header, ranks, blocks, peers, step fields, dependency targets.
    Structure,
    /// Every slice inside an existing buffer, counts, overlaps, writes to `in`.
    Bounds,
    /// Send and receive sequences agree on every connection.
    Connection,
    /// Dependency cycles, and deadlock under bounded buffering.
    Deadlock,
    /// Unordered conflicting accesses on one rank.
    Race,
    /// Undefined reads and the collective's postcondition.
    Postcondition,
}

impl Check {
    pub fn name(self) -> &'static str {
        match self {
            Check::Structure => "structure",
            Check::Bounds => "bounds",
            Check::Connection => "connection",
            Check::Deadlock => "deadlock",
            Check::Race => "race",
            Check::Postcondition => "postcondition",
        }
    }
}

/// Where a problem is. Most problems belong to a step; header problems belong to the plan,
/// a missing rank to that rank, a bad peer to a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Site {
    Plan,
    Rank(u32),
    Block { rank: u32, block: u32 },
    Step(StepId),
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Site::Plan => f.write_str("plan"),
            Site::Rank(r) => write!(f, "rank {r}"),
            Site::Block { rank, block } => write!(f, "rank {rank}, block {block}"),
            Site::Step(id) => id.fmt(f),
        }
    }
}

/// One problem found by [`crate::verify()`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanDiagnostic {
    pub check: Check,
    pub site: Site,
    /// One sentence, without the site.
    pub message: String,
    /// The source statement of the step at `site`, when the plan records one.
    pub origin: Option<Origin>,
    /// Further lines: the other steps involved (each with its own origin), hints.
    pub notes: Vec<String>,
}

impl PlanDiagnostic {
    pub fn new(check: Check, site: Site, message: impl Into<String>) -> PlanDiagnostic {
        PlanDiagnostic {
            check,
            site,
            message: message.into(),
            origin: None,
            notes: Vec::new(),
        }
    }

    pub fn with_origin(mut self, origin: Option<&Origin>) -> PlanDiagnostic {
        self.origin = origin.cloned();
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> PlanDiagnostic {
        self.notes.push(note.into());
        self
    }
}

impl fmt::Display for PlanDiagnostic {
    /// ```text
    /// error[bounds]: rank 3, block 1, step 2: src out[5] lies outside out (4 chunks on rank 3)
    ///   --> line 5:30: reduce out[r + 1][(r - s) % N] <- out[r][(r - s) % N]; (s = 2, r = 3)
    ///   = note: ...
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "error[{}]: {}: {}",
            self.check.name(),
            self.site,
            self.message
        )?;
        if let Some(o) = &self.origin {
            write!(f, "\n  --> {o}")?;
        }
        for n in &self.notes {
            write!(f, "\n  = note: {n}")?;
        }
        Ok(())
    }
}

/// All diagnostics, one block each, with a closing count line.
pub fn render_diagnostics(diags: &[PlanDiagnostic]) -> String {
    let mut out = String::new();
    for d in diags {
        out.push_str(&d.to_string());
        out.push('\n');
    }
    out.push_str(&format!(
        "error: plan rejected: {} problem{} found\n",
        diags.len(),
        if diags.len() == 1 { "" } else { "s" }
    ));
    out
}
