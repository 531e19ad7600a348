//! `braid perf --procs`: one process per rank, as torchrun runs them. The command starts
//! itself once per rank on this host (the launcher variables, a fresh `BRAID_SECRET`, a
//! rendezvous port on loopback); each rank joins the group through the bootstrap, runs
//! the same sweep through its own communicator (shared memory between the processes)
//! and prints one JSON line per size and mode; the parent combines the lines as the
//! threads' measurements are combined (each run the slowest rank's, wrong elements
//! summed) into the usual report. With `BRAID_TRACE` each line also carries the steps
//! the rank recorded in its last timed call (on the system clock, which the processes
//! share), and the parent writes the sweep's last call as the threads' run does.

use crate::error::CliError;
use braid_runtime::bench::{combine, measure_rank, Case, RankMeasured};
use braid_runtime::call::CallSpec;
use braid_runtime::reference::{inputs, reference};
use braid_runtime::registry::Registry;
use braid_runtime::Communicator;
use serde::{Deserialize, Serialize};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

/// Set in the environment of the processes `--procs` starts.
pub const CHILD: &str = "BRAID_PERF_PROCS_RANK";

/// What one rank measured of one case.
#[derive(Debug, Serialize, Deserialize)]
pub struct Line {
    pub step: usize,
    pub mode: String,
    pub rank: u32,
    pub wrong: usize,
    pub runs_ns: Vec<u64>,
    pub sync_ns: u64,
    pub plan: String,
    pub replicas: u32,
    pub protocol: String,
    /// With `BRAID_TRACE`, in the sweep's last case: the steps of the rank's last timed
    /// call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<crate::cmd_run::RecordedStep>,
}

/// Whether this process is a rank `--procs` started.
pub fn is_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

/// One case to measure: its place in the sweep and mode.
pub struct Job {
    pub step: usize,
    pub case: Case,
}

/// The rank's side: joins the group, measures every job, prints a line per job.
pub fn run_child(
    registry: Arc<Registry>,
    policy: braid_runtime::policy::Policy,
    jobs: &[Job],
) -> Result<String, CliError> {
    let rt = |e: braid_runtime::RuntimeError| CliError::Runtime(format!("error: {e}"));
    let comm = Communicator::from_launch_env(registry, braid_runtime::comm::timeout_from_env())
        .map_err(rt)?
        .with_policy(policy);
    let (rank, n) = (comm.rank(), comm.n_ranks());
    let mut out = String::new();
    for job in jobs {
        let spec: &CallSpec = &job.case.spec;
        let ins = inputs(
            spec.collective,
            spec.dtype,
            spec.op,
            n,
            spec.count,
            job.case.seed,
        );
        let want = reference(spec.collective, spec.dtype, spec.op, spec.root, &ins);
        let m: RankMeasured = measure_rank(
            &comm,
            &job.case,
            &ins[rank as usize],
            want[rank as usize].as_deref(),
        )
        .map_err(rt)?;
        let (plan, protocol) = comm
            .selection(spec, job.case.mode)
            .map_err(rt)?
            .ok_or_else(|| CliError::Runtime("error: a call of no elements has no plan".into()))?;
        // The trace keeps the sweep's last case: only its steps are sent.
        let last = std::ptr::eq(job, jobs.last().expect("a job"));
        let steps = if last && crate::cmd_run::trace_path().is_some() {
            let mine = comm.step_times(spec, job.case.mode).map_err(rt)?;
            let ranks: Vec<_> = mine.into_iter().map(|(p, t)| (rank, p, t)).collect();
            crate::cmd_run::recorded_steps(&ranks).1
        } else {
            Vec::new()
        };
        let line = Line {
            step: job.step,
            mode: crate::perf_report::mode_name(job.case.mode).into(),
            rank,
            wrong: m.wrong,
            runs_ns: m.runs.iter().map(|t| t.as_nanos() as u64).collect(),
            sync_ns: m.sync.as_nanos() as u64,
            plan: plan.name.clone(),
            replicas: plan.channels,
            protocol: protocol.name().into(),
            steps,
        };
        out.push_str(&serde_json::to_string(&line).expect("a line serialises"));
        out.push('\n');
    }
    Ok(out)
}

/// A port free now on loopback for rank 0's rendezvous.
fn free_port() -> Result<u16, CliError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| CliError::Runtime(format!("error: --procs: no free port on loopback: {e}")))
}

/// The parent's side: starts `n` ranks of this same command and collects their lines.
/// A rank that fails ends the run with its message (the first rank's that names a cause).
pub fn run_parent(n: u32, channels: Option<u32>) -> Result<Vec<Line>, CliError> {
    let exe = std::env::current_exe()
        .map_err(|e| CliError::Runtime(format!("error: --procs: cannot find this program: {e}")))?;
    let port = free_port()?.to_string();
    let secret = braid_runtime::bootstrap::Secret::random().to_hex();
    let mut children = Vec::new();
    for r in 0..n {
        let mut cmd = Command::new(&exe);
        cmd.args(std::env::args_os().skip(1))
            .env(CHILD, r.to_string())
            .env("RANK", r.to_string())
            .env("LOCAL_RANK", r.to_string())
            .env("WORLD_SIZE", n.to_string())
            .env("LOCAL_WORLD_SIZE", n.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", &port)
            .env("BRAID_BOOTSTRAP_PORT", &port)
            .env("BRAID_SECRET", &secret)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(c) = channels {
            cmd.env("BRAID_CHANNELS", c.to_string());
        }
        let child = cmd.spawn().map_err(|e| {
            CliError::Runtime(format!("error: --procs: cannot start rank {r}: {e}"))
        })?;
        children.push(child);
    }
    let mut lines = Vec::new();
    let mut failures = Vec::new();
    for (r, c) in children.into_iter().enumerate() {
        let out = c
            .wait_with_output()
            .map_err(|e| CliError::Runtime(format!("error: --procs: rank {r}: {e}")))?;
        if !out.status.success() {
            let text = String::from_utf8_lossy(&out.stderr).trim().to_string();
            failures.push((r, out.status.code(), text));
            continue;
        }
        for l in String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with('{'))
        {
            let line: Line = serde_json::from_str(l).map_err(|e| {
                CliError::Runtime(format!(
                    "error: --procs: rank {r} printed an unreadable line ({e}): {l}"
                ))
            })?;
            lines.push(line);
        }
    }
    if !failures.is_empty() {
        // The ranks that only saw another fail say "aborted"; show a cause first.
        failures.sort_by_key(|(_, _, t)| t.contains("aborted"));
        let (r, code, text) = &failures[0];
        return Err(CliError::Runtime(format!(
            "error: --procs: rank {r} failed (exit {}): {text}",
            code.map_or("signal".into(), |c| c.to_string())
        )));
    }
    Ok(lines)
}

/// A case as the ranks measured it together: wrong elements, each run's time per call,
/// the host-synchronised time per call, and rank 0's line (which plan ran).
pub type Merged<'l> = (usize, Vec<Duration>, Option<Duration>, &'l Line);

/// The ranks' lines of one case as one measurement.
pub fn merge<'l>(
    case: &Case,
    step: usize,
    mode: &str,
    lines: &'l [Line],
    n: u32,
) -> Result<Merged<'l>, CliError> {
    let mine: Vec<&Line> = lines
        .iter()
        .filter(|l| l.step == step && l.mode == mode)
        .collect();
    if mine.len() != n as usize {
        return Err(CliError::Runtime(format!(
            "error: --procs: {} of {n} ranks reported size #{step} {mode}",
            mine.len()
        )));
    }
    let per_rank: Vec<RankMeasured> = mine
        .iter()
        .map(|l| RankMeasured {
            wrong: l.wrong,
            runs: l.runs_ns.iter().map(|&t| Duration::from_nanos(t)).collect(),
            sync: Duration::from_nanos(l.sync_ns),
        })
        .collect();
    let (wrong, runs, sync) = combine(case, &per_rank);
    let first = mine
        .iter()
        .find(|l| l.rank == 0)
        .copied()
        .unwrap_or(mine[0]);
    Ok((wrong, runs, sync, first))
}
