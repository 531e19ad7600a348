//! `braid explain COLLECTIVE --size S`: which plan the cost model picks for a call, and
//! every candidate's predicted time with why it won, lost or was excluded. The first
//! line is exactly `selected: PLAN xREPLICAS PROTOCOL`; `--trace FILE.json` writes the
//! selected plan's predicted timeline as a Chrome trace.
//!
//! It prices the call as the runtime would in this environment: with the profile
//! `BRAID_PROFILE` names (unless `--profile`), among the plans `BRAID_ALGO` / `NCCL_ALGO`
//! allow (the others are listed as excluded, with the variable), with the protocol, the
//! replicas and the block budget `BRAID_PROTO` / `NCCL_PROTO`, `BRAID_CHANNELS` and
//! `BRAID_MAX_CTAS` / `NCCL_MAX_CTAS` force, where the options do not say otherwise.

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
    /// The model's constants (a profile file; default: the one BRAID_PROFILE names, as
    /// the runtime reads it, else the documented defaults).
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// Price every plan with this many replicas (default: BRAID_CHANNELS, else each
    /// plan's best).
    #[arg(long, value_parser = sizes::parse_positive)]
    pub replicas: Option<u32>,
    /// Price every plan with this protocol: simple, ll or ll128 (default: the one
    /// BRAID_PROTO / NCCL_PROTO forces, else each plan's best).
    #[arg(long)]
    pub proto: Option<String>,
    /// Thread blocks one rank may use at once, as the runtime grants them (default:
    /// BRAID_MAX_CTAS / NCCL_MAX_CTAS, else 66: half of a 132-SM H100/H200, one rank on
    /// it).
    #[arg(long, value_parser = sizes::parse_positive)]
    pub blocks: Option<u32>,
}

/// The block budget without `--blocks` or `BRAID_MAX_CTAS`.
const DEFAULT_BLOCKS: u32 = 66;

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
    // What the environment forces on the runtime's choice, read as the runtime reads it.
    let policy = braid_runtime::policy::Policy::from_env()
        .map_err(|e| CliError::Usage(format!("error: {e}")))?;
    let topo = topo_arg::load(&args.topo)?;
    let profile = match &args.profile {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| {
                CliError::Input(format!("error: cannot read --profile {}: {e}", p.display()))
            })?;
            Profile::from_json(&text)
                .map_err(|e| CliError::Input(format!("error: --profile {}: {e}", p.display())))?
        }
        None => Profile::from_env(&topo.fingerprint())
            .map_err(|e| CliError::Input(format!("error: {e}")))?,
    };
    let blocks = args.blocks.or(policy.max_blocks).unwrap_or(DEFAULT_BLOCKS);
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
    let mut all: Vec<Candidate> = user
        .iter()
        .map(|(p, origin)| Candidate {
            plan: p,
            origin: match origin {
                braid_runtime::registry::Origin::User(f) => format!("user {f}"),
                braid_runtime::registry::Origin::Library => "shipped".into(),
            },
        })
        .collect();
    all.extend(shipped.iter().map(|p| Candidate {
        plan: p,
        origin: "shipped".into(),
    }));
    if all.is_empty() {
        return Err(CliError::Runtime(format!(
            "error: no plan for {collective} on {}",
            args.topo
        )));
    }
    // The plans BRAID_ALGO / NCCL_ALGO leave out are not priced.
    let (cands, filtered): (Vec<Candidate>, Vec<Candidate>) = all.into_iter().partition(|c| {
        policy
            .algo
            .as_ref()
            .is_none_or(|f| f.allows(collective, &c.plan.name))
    });
    // LL128 where the profile's stress tests passed on the links the topology's ranks
    // use (never across nodes).
    let link = if profile.one_gpu() {
        braid_cost::LinkKind::SameGpu
    } else {
        braid_cost::LinkKind::Peer
    };
    let ll128 = topo.n_nodes() <= 1
        && !policy.no_ll128_of(collective)
        && braid_cost::ll128_allowed(&profile.ll128, &[link]);
    let req = Request {
        collective,
        root,
        mode,
        bytes: args.size,
        elem: args.dtype.size() as u64,
        direct: profile.one_gpu(),
        ll128,
        excluded: policy.excluded_of(collective),
    };
    let proto = match args.proto.as_deref() {
        None => policy
            .protocol_of(collective)
            .filter(|&p| p != Protocol::Auto),
        Some(v) => match braid_runtime::policy::parse_protocol(v) {
            Ok(Protocol::Auto) | Err(_) => {
                return Err(CliError::Usage(format!(
                    "error: --proto {v}: expected simple, ll or ll128"
                )))
            }
            Ok(p) => Some(p),
        },
    };
    let replicas = args.replicas.or(policy.replicas);
    // The runtime's own pricing and choice (runtime/core/src/selection.rs): every replica
    // count within the block budget and every protocol, near ties to the fewest blocks.
    let target = braid_runtime::policy::Target {
        block_budget: blocks,
        size_replicas: true,
        ll: true,
        ll128,
        direct: profile.one_gpu(),
        // The CUDA backend runs flat launches where its ranks launch together.
        flat: profile.one_gpu(),
    };
    let plans: Vec<&braid_plan::Plan> = cands.iter().map(|c| c.plan).collect();
    let options = braid_runtime::selection::price(
        &topo, &profile, &plans, &req, replicas, proto, &target, None,
    );
    let pick = braid_runtime::selection::pick;
    // Why candidate `i` has no priced choice: the model's reason, else the block budget.
    let why_not = |i: usize| -> String {
        braid_cost::rank_with(
            std::slice::from_ref(&cands[i]),
            &topo,
            &profile,
            &req,
            replicas,
            proto,
        )
        .into_iter()
        .find_map(|r| r.result.err())
        .unwrap_or_else(|| format!("it needs more than the {blocks} thread blocks a rank may use"))
    };
    let left_out = policy
        .algo
        .as_ref()
        .map_or_else(String::new, |f| format!("{} excludes it", f.source));
    let Some((best_us, best_i, best_r, best_p, best_blocks)) = pick(&options) else {
        let why: Vec<String> = (0..cands.len())
            .map(|i| format!("  {}: {}", cands[i].plan.name, why_not(i)))
            .chain(
                filtered
                    .iter()
                    .map(|c| format!("  {}: {left_out}", c.plan.name)),
            )
            .collect();
        return Err(CliError::Runtime(format!(
            "error: no plan can serve this call:\n{}",
            why.join("\n")
        )));
    };
    let best_name = &cands[best_i].plan.name;
    let mut out = format!("selected: {best_name} x{best_r} {}\n", best_p.name());
    // Each plan as it would run (its own choice by the same rule), the selected one first,
    // then the others fastest first, then those that cannot serve the call.
    let mut rows: Vec<(usize, braid_runtime::selection::Priced)> = (0..cands.len())
        .filter_map(|i| {
            let mine: Vec<_> = options.iter().copied().filter(|o| o.1 == i).collect();
            pick(&mine).map(|o| (i, o))
        })
        .collect();
    rows.sort_by(|a, b| {
        (a.0 != best_i)
            .cmp(&(b.0 != best_i))
            .then(a.1 .0.total_cmp(&b.1 .0))
    });
    let fastest = options.iter().map(|o| o.0).fold(f64::INFINITY, f64::min);
    for (i, (t, _, r, p, blocks)) in &rows {
        let c = &cands[*i];
        let what = format!("{} x{r} {}", c.plan.name, p.name());
        if *i == best_i {
            let why = if *t <= fastest {
                "the fastest".to_string()
            } else {
                format!(
                    "within {:.0}% of the fastest, with the fewest blocks ({blocks})",
                    braid_runtime::selection::TIE * 100.0
                )
            };
            out.push_str(&format!(
                "  {what:<48} {t:>12.2} us  selected: {why} ({})\n",
                c.origin
            ));
        } else if *t <= fastest * (1.0 + braid_runtime::selection::TIE) && *blocks > best_blocks {
            // A near tie that lost to the selection's fewer blocks.
            let d = (t / best_us - 1.0) * 100.0;
            let than = if d.abs() < 0.05 {
                format!("as fast as {best_name}")
            } else if d < 0.0 {
                format!("{:.1}% faster than {best_name}", -d)
            } else {
                format!("+{d:.1}% slower than {best_name}")
            };
            out.push_str(&format!(
                "  {what:<48} {t:>12.2} us  {than}, within {:.0}% of the fastest, but with more blocks ({blocks} against {best_blocks}) ({})\n",
                braid_runtime::selection::TIE * 100.0,
                c.origin
            ));
        } else if (t / best_us - 1.0).abs() < 5e-4 && *blocks == best_blocks {
            out.push_str(&format!(
                "  {what:<48} {t:>12.2} us  as fast as {best_name}, with as many blocks ({blocks}): the first of equal choices is taken ({})\n",
                c.origin
            ));
        } else {
            out.push_str(&format!(
                "  {what:<48} {t:>12.2} us  {:+.1}% slower than {best_name} ({})\n",
                (t / best_us - 1.0) * 100.0,
                c.origin
            ));
        }
    }
    for (i, c) in cands.iter().enumerate() {
        if rows.iter().any(|(j, _)| *j == i) {
            continue;
        }
        out.push_str(&format!(
            "  {:<48} {:>12} ---  excluded: {} ({})\n",
            c.plan.name,
            "-",
            why_not(i),
            c.origin
        ));
    }
    for c in &filtered {
        out.push_str(&format!(
            "  {:<48} {:>12} ---  excluded: {} ({})\n",
            c.plan.name, "-", left_out, c.origin
        ));
    }
    if policy.rules_only {
        eprintln!(
            "note: BRAID_SELECT=rules: the runtime in this environment chooses by its rules, not by the prices below"
        );
    }
    eprintln!(
        "note: predicted by the cost model (constants: {}; docs/costmodel.md) for {collective} of {} bytes of {} on {} ({n} ranks), {}; each plan with the replica count and protocol the runtime would run it with (within {} thread blocks per rank; near ties to the fewest blocks){}",
        profile.source,
        args.size,
        args.dtype.name(),
        args.topo,
        if mode == Mode::InPlace { "in place" } else { "out of place" },
        blocks,
        if req.direct_reads() {
            "; the ranks share one GPU (as the profile was measured), so receivers that may read their senders' input directly, and chains of such reductions run as one pass, are priced so (docs/cuda.md)"
        } else {
            ""
        }
    );
    if let Some(path) = &args.trace {
        let plan = cands[best_i].plan;
        let call = req.call(best_r, best_p);
        let pred = braid_cost::predict(plan, &topo, &profile, &call)
            .map_err(|e| CliError::Runtime(format!("error: {e}")))?;
        crate::output::write_atomically(path, &braid_cost::trace::chrome_trace(best_name, &pred))?;
        if let Some(b) = pred.bound {
            eprintln!(
                "note: --trace: the steps of {best_name} end at {:.1} us as simulated, but the call is priced {:.1} us, bound by {}: the trace shows the steps' order, not that longer span (docs/costmodel.md, \"The call\")",
                pred.steps_end_us(),
                pred.total_us,
                b.describe(),
            );
        }
    }
    Ok(out)
}
