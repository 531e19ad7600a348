//! `braid verify PLAN.json`: load a plan and prove it (cli.md), or say precisely why not.
//!
//! Self-contained on purpose (it needs only `braid_plan` and std), so the plan crate's
//! tests can exercise it too.

use braid_plan::{verify, Plan, PlanError};
use std::fmt;
use std::path::Path;

/// Why `braid verify` failed: the full text for stderr and the exit code of cli.md.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyCliError {
    /// Ready to print: every diagnostic (each naming the file, rank, block and step) and a
    /// closing count line. Needs no further prefix.
    pub message: String,
    /// 1: the input is wrong (unreadable, malformed, or a plan that fails a check).
    pub exit_code: i32,
}

impl VerifyCliError {
    fn input(message: String) -> VerifyCliError {
        VerifyCliError {
            message,
            exit_code: 1,
        }
    }
}

impl fmt::Display for VerifyCliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message.trim_end())
    }
}

impl std::error::Error for VerifyCliError {}

/// Read and parse a plan file; errors are rendered with `file:line:col` where known.
/// MSCCL XML is recognised by its extension and refused until the importer exists.
pub fn load(path: &Path) -> Result<Plan, VerifyCliError> {
    let shown = path.display();
    let is_xml = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("xml"));
    if is_xml {
        return Err(VerifyCliError::input(format!(
            "{shown}: error: MSCCL XML import is not available yet; only Braid plan JSON can be verified for now"
        )));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| VerifyCliError::input(format!("{shown}: error: cannot read the plan: {e}")))?;
    Plan::from_json(&text).map_err(|e| {
        VerifyCliError::input(match e {
            PlanError::Json {
                line,
                column,
                message,
            } => format!("{shown}:{line}:{column}: error: malformed plan: {message}"),
            other => format!("{shown}: error: {other}"),
        })
    })
}

/// `braid verify PATH`: the one-line success text (ending in a newline), or every problem
/// the verifier found.
pub fn run(path: &Path) -> Result<String, VerifyCliError> {
    let plan = load(path)?;
    let shown = path.display();
    match verify(&plan) {
        Ok(report) => Ok(format!("{shown}: {}\n", report.summary())),
        Err(diags) => {
            let mut message = String::new();
            for d in &diags {
                message.push_str(&format!("{shown}: {d}\n"));
            }
            message.push_str(&format!(
                "{shown}: error: plan rejected: {} problem{} found\n",
                diags.len(),
                if diags.len() == 1 { "" } else { "s" }
            ));
            Err(VerifyCliError::input(message))
        }
    }
}
