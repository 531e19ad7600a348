//! `braid import-msccl` and `braid export-msccl` (cli.md), and the `.xml` loading that
//! `braid verify` and `braid run` share: import, then verify, with every problem
//! pointed at its XML element and line. (`cmd_verify` stays free of this on purpose: the
//! plan crate compiles it alone; `main` and `cmd_run` route `.xml` here instead.)

use crate::cmd_verify::VerifyCliError;
use crate::error::CliError;
use crate::output;
use braid_plan::{verify, Verified};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, clap::Args)]
pub struct ImportArgs {
    /// The MSCCL algorithm (`.xml`, either dialect).
    pub file: PathBuf,
    /// Where to write the plan JSON (default: standard output).
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Clone, clap::Args)]
pub struct ExportArgs {
    /// The plan (`.json`).
    pub plan: PathBuf,
    /// Where to write the XML (default: standard output).
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
}

fn input(message: String) -> VerifyCliError {
    VerifyCliError {
        message,
        exit_code: 1,
    }
}

/// Imports and verifies `path`; the plan and the verifier's one-line summary.
fn import_verified(path: &Path) -> Result<(Verified, String), VerifyCliError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| input(format!("{shown}: error: cannot read the file: {e}")))?;
    let stem = path
        .file_stem()
        .map_or("msccl".into(), |s| s.to_string_lossy().into_owned());
    let (plan, lines) = braid_msccl::import_with_lines(&text, &stem)
        .map_err(|errs| input(braid_msccl::render_errors(&errs, &shown)))?;
    match Verified::with_report(plan) {
        Ok((plan, report)) => Ok((plan, report.summary())),
        Err(diags) => Err(input(braid_msccl::render_for_xml(&diags, &lines, &shown))),
    }
}

/// Whether `path` names MSCCL XML (by extension, as `braid verify` and `braid run` decide).
pub fn is_xml(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("xml"))
}

/// An MSCCL file as a verified plan (for `braid run`, `braid perf` and `braid verify`).
pub fn load_xml(path: &Path) -> Result<Verified, VerifyCliError> {
    import_verified(path).map(|(p, _)| p)
}

/// `braid verify FILE.xml`.
pub fn verify_xml(path: &Path) -> Result<String, VerifyCliError> {
    import_verified(path).map(|(_, summary)| format!("{}: {summary}\n", path.display()))
}

/// `braid import-msccl FILE.xml [-o PLAN.json]`.
pub fn run_import(args: &ImportArgs) -> Result<String, CliError> {
    let (plan, summary) = import_verified(&args.file)?;
    let json = plan.to_json_pretty();
    match &args.output {
        None => Ok(json),
        Some(out) => {
            output::write_atomically(out, &json)?;
            Ok(format!(
                "{}: {summary}\nwrote {}\n",
                args.file.display(),
                out.display()
            ))
        }
    }
}

/// `braid export-msccl PLAN.json [-o FILE.xml]`: only a plan that verifies is exported.
pub fn run_export(args: &ExportArgs) -> Result<String, CliError> {
    let plan = crate::cmd_verify::load(&args.plan)?;
    if let Err(diags) = verify(&plan) {
        let shown = args.plan.display();
        let mut message = String::new();
        for d in &diags {
            message.push_str(&format!("{shown}: {d}\n"));
        }
        message.push_str(&format!("{shown}: error: plan rejected; not exported\n"));
        return Err(CliError::Input(message));
    }
    let xml = braid_msccl::export(&plan)
        .map_err(|e| CliError::Input(format!("{}: error: {e}", args.plan.display())))?;
    match &args.output {
        None => Ok(xml),
        Some(out) => {
            output::write_atomically(out, &xml)?;
            Ok(format!("wrote {}\n", out.display()))
        }
    }
}
