//! One broadcast timed by `braid perf` (this executable) in a process of its own: what
//! the tunes measure that depends on the process it runs in (a call of ranks in several
//! processes; a flat launch, whose host share differs from process to process).

use crate::error::CliError;
use braid_ir::Mode;
use braid_plan::Verified;
use std::sync::atomic::{AtomicU64, Ordering};

/// A broadcast of `plan` to time in a child process.
pub struct Child<'a> {
    /// The plan, forced (`--plan`): the model has nothing to choose.
    pub plan: &'a Verified,
    /// Ranks (`--topo nvswitch:N`).
    pub ranks: u32,
    /// Bytes of the call (`-b`, `-e`).
    pub bytes: usize,
    pub mode: Mode,
    /// Calls a timed run (`-n`); the child takes 3 warm-up calls and 5 runs.
    pub iters: u32,
    /// Further arguments of `braid perf` (`--procs`, `--backend cuda`).
    pub args: &'a [&'a str],
    /// Environment the child gets beyond this process's, without the variables that
    /// would choose for it (`BRAID_PROFILE`, `BRAID_ALGO`, `BRAID_PROTO`,
    /// `BRAID_CHANNELS`, `BRAID_TRACE`, `NCCL_ALGO`, `NCCL_PROTO`).
    pub env: &'a [(&'a str, &'a str)],
}

/// What the child's report says of its call.
#[derive(Debug, Clone, PartialEq)]
pub struct Timed {
    /// The median of its runs' time per call.
    pub us: f64,
    pub plan: String,
    pub replicas: u64,
    pub protocol: String,
}

/// Why a child gave no time.
#[derive(Debug)]
pub enum ChildError {
    /// The child did not run the call: it could not start, or `braid perf` failed (on a
    /// GPU in exclusive-process mode, for one, a second process gets no context).
    Failed(CliError),
    /// It ran and its report is wrong or missing (a wrong result among them).
    Invalid(CliError),
}

impl From<ChildError> for CliError {
    fn from(e: ChildError) -> CliError {
        match e {
            ChildError::Failed(e) | ChildError::Invalid(e) => e,
        }
    }
}

/// Runs `braid perf` on `c` in a child process; `what` prefixes its errors
/// (`braid tune --procs`).
pub fn time(c: &Child<'_>, what: &str) -> Result<Timed, ChildError> {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let rt = |e: String| CliError::Runtime(format!("error: {what}: {e}"));
    let dir = std::env::temp_dir().join(format!(
        "braid-tune-{}-{}",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir)
        .map_err(|e| ChildError::Failed(rt(format!("{}: {e}", dir.display()))))?;
    let result = run_in(c, &dir, &rt);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn run_in(
    c: &Child<'_>,
    dir: &std::path::Path,
    rt: &dyn Fn(String) -> CliError,
) -> Result<Timed, ChildError> {
    let failed = |e: String| ChildError::Failed(rt(e));
    let report = dir.join("report.json");
    let plan = dir.join("plan.json");
    std::fs::write(&plan, c.plan.to_json_pretty())
        .map_err(|e| failed(format!("{}: {e}", plan.display())))?;
    let bytes = c.bytes.to_string();
    let exe = std::env::current_exe().map_err(|e| failed(format!("this executable: {e}")))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["perf", "broadcast"])
        .args(c.args)
        .args(["--mode", c.mode.name(), "-w", "3", "--runs", "5"])
        .args(["--topo", &format!("nvswitch:{}", c.ranks)])
        .args(["-b", &bytes, "-e", &bytes])
        .args(["-n", &c.iters.to_string(), "--json"])
        .arg(&report)
        .arg("--plan")
        .arg(&plan);
    for v in [
        "BRAID_PROFILE",
        "BRAID_ALGO",
        "BRAID_PROTO",
        "BRAID_CHANNELS",
        "BRAID_TRACE",
        "NCCL_ALGO",
        "NCCL_PROTO",
    ] {
        cmd.env_remove(v);
    }
    cmd.envs(c.env.iter().copied());
    let out = cmd
        .output()
        .map_err(|e| failed(format!("starting braid perf: {e}")))?;
    if !out.status.success() {
        return Err(failed(format!(
            "braid perf failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let text = std::fs::read_to_string(&report).ok();
    read_report(text.as_deref(), rt).map_err(ChildError::Invalid)
}

/// The first row of a `braid perf --json` report.
fn read_report(text: Option<&str>, rt: &dyn Fn(String) -> CliError) -> Result<Timed, CliError> {
    let v: serde_json::Value = text
        .and_then(|t| serde_json::from_str(t).ok())
        .ok_or_else(|| rt("braid perf wrote no report".into()))?;
    let row = &v["rows"][0];
    if row["wrong"].as_u64() != Some(0) {
        return Err(rt("a calibration call gave a wrong result".into()));
    }
    let field = |k: &str| row[k].as_str().unwrap_or_default().to_string();
    Ok(Timed {
        us: row["time_us"]
            .as_f64()
            .ok_or_else(|| rt("braid perf's report has no time".into()))?,
        plan: field("plan"),
        replicas: row["replicas"].as_u64().unwrap_or(0),
        protocol: field("protocol"),
    })
}

#[cfg(test)]
mod tests {
    use super::read_report;
    use crate::error::CliError;

    fn rt(e: String) -> CliError {
        CliError::Runtime(e)
    }

    #[test]
    fn a_report_gives_its_first_rows_time_and_what_ran() {
        let t = read_report(
            Some(
                r#"{"rows": [{"time_us": 5.5, "wrong": 0, "plan": "direct_broadcast",
                   "replicas": 1, "protocol": "simple"}, {"time_us": 9.0, "wrong": 0}]}"#,
            ),
            &rt,
        )
        .unwrap();
        assert_eq!(t.us, 5.5);
        assert_eq!(t.plan, "direct_broadcast");
        assert_eq!((t.replicas, t.protocol.as_str()), (1, "simple"));
    }

    #[test]
    fn a_wrong_result_or_no_report_is_an_error() {
        let wrong = read_report(Some(r#"{"rows": [{"time_us": 5.5, "wrong": 3}]}"#), &rt);
        assert!(wrong.unwrap_err().to_string().contains("wrong result"));
        assert!(read_report(None, &rt)
            .unwrap_err()
            .to_string()
            .contains("no report"));
        assert!(read_report(Some("{"), &rt).is_err());
        let untimed = read_report(Some(r#"{"rows": [{"wrong": 0}]}"#), &rt);
        assert!(untimed.unwrap_err().to_string().contains("no time"));
    }
}
