//! `braid doctor`: checks this machine (or a described one) the way the troubleshooting
//! guide does and prints each finding with its fix. Exit 0 healthy, 1 with findings.

use crate::error::CliError;
use braid_detect::doctor::{examine, Survey};
use std::path::PathBuf;

#[derive(Debug, Clone, clap::Args)]
pub struct DoctorArgs {
    /// Print the survey, findings and notes as JSON.
    #[arg(long)]
    pub json: bool,
    /// Examine the machine this JSON file describes (a survey `--json` printed, edited
    /// or from another machine) instead of this one.
    #[arg(long, value_name = "FILE")]
    pub machine: Option<PathBuf>,
    /// Skip the GPU bandwidth test (a short copy on each kind of path, against what the
    /// topology expects).
    #[arg(long)]
    pub no_bench: bool,
    /// Under a launcher (`WORLD_SIZE` > 1, every rank running `braid doctor`): do not
    /// join the job's other ranks to check that every pair of them can open a link.
    #[arg(long)]
    pub no_peers: bool,
    /// How long joining the other ranks, and each link between two of them, may take.
    #[arg(long, value_name = "SECONDS", default_value_t = 20.0)]
    pub peer_timeout: f64,
}

#[derive(serde::Serialize)]
struct Report<'a> {
    healthy: bool,
    findings: &'a [braid_detect::doctor::Finding],
    notes: &'a [String],
    survey: &'a Survey,
}

pub fn run(args: &DoctorArgs) -> Result<String, CliError> {
    let mut extra = Vec::new();
    let survey = match &args.machine {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| {
                CliError::Input(format!("error: cannot read --machine {}: {e}", p.display()))
            })?;
            serde_json::from_str::<Survey>(&text).map_err(|e| {
                CliError::Input(format!(
                    "error: --machine {}: not a machine description: {e}",
                    p.display()
                ))
            })?
        }
        None => {
            let detected = braid_detect::doctor::detect();
            let mut s = Survey::gather_with(detected.as_ref().map_err(String::clone));
            if let (Ok(d), false) = (&detected, args.no_bench) {
                match crate::doctor_rates::measure(d) {
                    Ok(r) => s.rates = r,
                    Err(e) => eprintln!("note: the GPU bandwidth test did not run: {e}"),
                }
                extra.extend(ll128_notes());
            }
            s.bootstrap = Some(listen());
            s.peers = peers(args)?;
            s
        }
    };
    let mut d = examine(&survey);
    d.notes.extend(extra);
    let out = if args.json {
        let r = Report {
            healthy: d.findings.is_empty(),
            findings: &d.findings,
            notes: &d.notes,
            survey: &survey,
        };
        serde_json::to_string_pretty(&r).expect("a report serialises") + "\n"
    } else {
        let mut out = String::new();
        for n in &d.notes {
            out.push_str(&format!("note: {n}\n"));
        }
        for f in &d.findings {
            out.push_str(&format!(
                "finding [{}]: {}\n  fix: {}\n",
                f.check, f.what, f.fix
            ));
        }
        out.push_str(&match d.findings.len() {
            0 => "healthy: no findings\n".to_string(),
            k => format!("{k} finding(s)\n"),
        });
        out
    };
    if d.findings.is_empty() {
        Ok(out)
    } else {
        Err(CliError::Findings(out))
    }
}

/// LL128's stress test on this machine's links, one note per link (LL128 runs where
/// `braid tune` recorded a passed verdict in the profile).
fn ll128_notes() -> Vec<String> {
    match braid_cuda::ll128::stress_all(Default::default(), 2) {
        Ok(vs) => vs
            .iter()
            .map(|v| {
                format!(
                    "LL128 stress test on {}: {}",
                    v.describe(),
                    if v.passed() {
                        "128-byte stores arrive whole; `braid tune` records it and LL128 may run there"
                    } else {
                        "LL128 stays off on this link"
                    }
                )
            })
            .collect(),
        Err(e) => vec![format!("the LL128 stress test did not run: {e}")],
    }
}

/// Where a group started here would listen ([`braid_runtime::bootstrap::default_listen`]).
fn listen() -> braid_detect::doctor::Listen {
    match braid_runtime::bootstrap::default_listen() {
        Ok((a, why)) => braid_detect::doctor::Listen {
            addr: Some(a.ip().to_string()),
            why,
        },
        Err(e) => braid_detect::doctor::Listen {
            addr: None,
            why: e.to_string(),
        },
    }
}

/// Under a launcher that started several ranks: this rank joins the others and opens a
/// link to each ([`braid_runtime::bootstrap::reach`]). `None` where no launcher started
/// several ranks, or `--no-peers`; launcher variables that do not parse are a usage error.
fn peers(args: &DoctorArgs) -> Result<Option<braid_detect::doctor::Peers>, CliError> {
    use braid_runtime::bootstrap::{reach, Bootstrap};
    use braid_runtime::launcher::LaunchEnv;
    if args.no_peers {
        return Ok(None);
    }
    if !LaunchEnv::launched() {
        return Ok(None);
    }
    let env = match LaunchEnv::from_env() {
        Ok(env) => env,
        // (No job to join: examine says what is wrong with its variables.)
        Err(e) => {
            return Ok(Some(braid_detect::doctor::Peers {
                error: Some(e.to_string()),
                ..Default::default()
            }))
        }
    };
    if env.world_size <= 1 {
        return Ok(None);
    }
    if !(args.peer_timeout.is_finite() && args.peer_timeout > 0.0) {
        return Err(CliError::Usage(format!(
            "error: --peer-timeout must be a positive number of seconds, not {}",
            args.peer_timeout
        )));
    }
    let timeout = std::time::Duration::from_secs_f64(args.peer_timeout);
    let mut p = braid_detect::doctor::Peers {
        rank: env.rank,
        world: env.world_size,
        root: env
            .root_endpoint()
            .map_or_else(|e| e.to_string(), |(h, port)| format!("{h}:{port}")),
        ..Default::default()
    };
    let probed =
        Bootstrap::from_launch_env(&env, timeout).and_then(|mut b| reach::probe(&mut b, timeout));
    match probed {
        Ok(r) => {
            p.hosts = r.hosts;
            p.addrs = r.addrs.iter().map(ToString::to_string).collect();
            p.failed = r
                .failed
                .into_iter()
                .map(|(from, to, why)| braid_detect::doctor::LinkFailure { from, to, why })
                .collect();
            p.barrier_us = Some(r.barrier_us);
        }
        Err(e) => p.error = Some(e.to_string()),
    }
    Ok(Some(p))
}
