//! `braid explain COLLECTIVE --size S`: which plan the cost model picks for a call, and
//! every candidate's predicted time with why it won, lost or was excluded. The first
//! line is exactly `selected: PLAN xREPLICAS PROTOCOL`; `--trace FILE.json` writes the
//! selected plan's predicted timeline as a Chrome trace.

use crate::error::CliError;
use crate::{sizes, topo_arg};
use braid_cost::{Candidate, Profile, Request};
use braid_ir::{Collective, Mode, Protocol};
use braid_runtime::dtype::DType;
use std::path::PathBuf;

#[derive(Debug, Clone, clap::Args)]
pub struct ExplainArgs {
    /// allreduce, allgather, reduce_scatter, broadcast, reduce or alltoall.
    pub collective: String,
    /// Bytes of one rank's larger buffer (as `braid perf`'s size column).
    #[arg(long, value_parser = sizes::parse_size)]
    pub size: u64,
    /// Topology (presets, a file, or `detect`).
    #[arg(long, default_value = "nvswitch:8")]
    pub topo: String,
    #[arg(long, default_value = "f32")]
    pub dtype: DType,
    /// outofplace or inplace.
    #[arg(long, value_enum, default_value = "outofplace")]
    pub mode: crate::cmd_perf::ModeArg,
    /// Root rank of broadcast and reduce (default 0).
    #[arg(long)]
    pub root: Option<u32>,
    /// Write the selected plan's predicted timeline (Chrome trace JSON) to this file.
    #[arg(long, value_name = "FILE.json")]
    pub trace: Option<PathBuf>,
    /// The model's constants (a profile file; default: the documented defaults).
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// Price every plan with this many replicas (default: each plan's best).
    #[arg(long, value_parser = sizes::parse_positive)]
    pub replicas: Option<u32>,
    /// Price every plan with this protocol: simple or ll (default: each plan's best).
    #[arg(long)]
    pub proto: Option<String>,
}

fn protocol_name(p: Protocol) -> &'static str {
    match p {
        Protocol::Ll => "ll",
        Protocol::Ll128 => "ll128",
        Protocol::Auto => "auto",
        Protocol::Simple => "simple",
    }
}

pub fn run(args: &ExplainArgs) -> Result<String, CliError> {
    let collective = Collective::from_name(&args.collective).ok_or_else(|| {
        CliError::Usage(format!("error: unknown collective `{}`", args.collective))
    })?;
    let mode = match args.mode {
        crate::cmd_perf::ModeArg::Outofplace => Mode::OutOfPlace,
        crate::cmd_perf::ModeArg::Inplace => Mode::InPlace,
        crate::cmd_perf::ModeArg::Both => {
            return Err(CliError::Usage(
                "error: --mode: explain prices one mode: inplace or outofplace".into(),
            ))
        }
    };
    if mode == Mode::InPlace && collective == Collective::Alltoall {
        return Err(CliError::Usage(
            "error: --mode inplace: alltoall has no in-place mode".into(),
        ));
    }
    if args.size == 0 {
        return Err(CliError::Usage(
            "error: --size must be at least one element".into(),
        ));
    }
    let profile = match &args.profile {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| {
                CliError::Input(format!("error: cannot read --profile {}: {e}", p.display()))
            })?;
            Profile::from_json(&text)
                .map_err(|e| CliError::Input(format!("error: --profile {}: {e}", p.display())))?
        }
        None => Profile::default(),
    };
    let topo = topo_arg::load(&args.topo)?;
    let n = topo.n_ranks();
    let root = match (collective.is_rooted(), args.root) {
        (true, r) => {
            let r = r.unwrap_or(0);
            if r >= n {
                return Err(CliError::Usage(format!(
                    "error: --root {r} is not a rank of {} (ranks 0 .. {n})",
                    args.topo
                )));
            }
            Some(r)
        }
        (false, Some(_)) => {
            return Err(CliError::Usage(format!(
                "error: --root: {collective} has no root"
            )));
        }
        (false, None) => None,
    };
    // Candidates: the user's plans (BRAID_PLANS) and the shipped ones that apply.
    let registry = braid_runtime::registry::Registry::new();
    crate::plans::register_env(&registry, &topo)?;
    let user = registry.entries();
    let library = braid_library::Library::new(topo.clone());
    let shipped = library.plans(collective, root);
    let mut cands: Vec<Candidate> = user
        .iter()
        .map(|(p, origin)| Candidate {
            plan: p,
            origin: match origin {
                braid_runtime::registry::Origin::User(f) => format!("user {f}"),
                braid_runtime::registry::Origin::Library => "shipped".into(),
            },
        })
        .collect();
    cands.extend(shipped.iter().map(|p| Candidate {
        plan: p,
        origin: "shipped".into(),
    }));
    if cands.is_empty() {
        return Err(CliError::Runtime(format!(
            "error: no plan for {collective} on {}",
            args.topo
        )));
    }
    let req = Request {
        collective,
        root,
        mode,
        bytes: args.size,
        elem: args.dtype.size() as u64,
    };
    let proto = match args.proto.as_deref() {
        None => None,
        Some(v) => match braid_runtime::policy::parse_protocol(v) {
            Ok(Protocol::Auto) | Err(_) => {
                return Err(CliError::Usage(format!(
                    "error: --proto {v}: expected simple or ll"
                )))
            }
            Ok(p) => Some(p),
        },
    };
    let ranked = braid_cost::rank_with(&cands, &topo, &profile, &req, args.replicas, proto);
    let best = ranked.iter().find(|r| r.result.is_ok()).ok_or_else(|| {
        let why: Vec<String> = ranked
            .iter()
            .map(|r| format!("  {}: {}", r.name, r.result.as_ref().unwrap_err()))
            .collect();
        CliError::Runtime(format!(
            "error: no plan can serve this call:\n{}",
            why.join("\n")
        ))
    })?;
    let best_us = *best.result.as_ref().expect("found ok");
    let mut out = format!(
        "selected: {} x{} {}\n",
        best.name,
        best.replicas,
        protocol_name(best.protocol)
    );
    for r in &ranked {
        let what = format!("{} x{} {}", r.name, r.replicas, protocol_name(r.protocol));
        match &r.result {
            Ok(t) if std::ptr::eq(r, best) => {
                out.push_str(&format!(
                    "  {what:<48} {t:>12.2} us  selected: the fastest ({})\n",
                    r.origin
                ));
            }
            Ok(t) => out.push_str(&format!(
                "  {what:<48} {t:>12.2} us  {:+.1}% slower than {} ({})\n",
                (t / best_us - 1.0) * 100.0,
                best.name,
                r.origin
            )),
            Err(why) => out.push_str(&format!(
                "  {:<48} {:>12} ---  excluded: {why} ({})\n",
                r.name, "-", r.origin
            )),
        }
    }
    eprintln!(
        "note: predicted by the cost model (constants: {}; docs/costmodel.md) for {collective} of {} bytes of {} on {} ({n} ranks), {}; each plan with the replica count and protocol it runs fastest with",
        profile.source,
        args.size,
        args.dtype.name(),
        args.topo,
        if mode == Mode::InPlace { "in place" } else { "out of place" }
    );
    if let Some(path) = &args.trace {
        let plan = cands
            .iter()
            .find(|c| c.plan.name == best.name && c.origin == best.origin)
            .expect("a ranked candidate")
            .plan;
        let call = braid_cost::Call {
            bytes: args.size,
            elem: args.dtype.size() as u64,
            protocol: best.protocol,
            replicas: best.replicas,
        };
        let pred = braid_cost::predict(plan, &topo, &profile, &call)
            .map_err(|e| CliError::Runtime(format!("error: {e}")))?;
        crate::output::write_atomically(path, &braid_cost::trace::chrome_trace(&best.name, &pred))?;
    }
    Ok(out)
}
