//! `braid run`: execute a program or plan with real data on every rank and compare every
//! rank's result with a reference.

use crate::error::CliError;
use crate::source::Program;
use crate::{sizes, topo_arg};
use braid_ir::Mode;
use braid_plan::{Plan, Verified};
use braid_runtime::comm::timeout_from_env;
use braid_runtime::device_comm::RankSteps;
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::selfcheck::{buffer_elems, run_checked, Checked};
use std::path::PathBuf;

#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// A program (`.braid`), a plan (`.json`) or an MSCCL algorithm (`.xml`).
    pub file: PathBuf,
    /// The algorithm of a `.braid` file (may be omitted when it defines one).
    #[arg(long)]
    pub algorithm: Option<String>,
    /// Topology: nvswitch:N, pcie:N, cluster:MxG, detect, or a topology file.
    #[arg(long)]
    pub topo: String,
    /// Backend: `host` runs every rank as CPU threads (the default without a GPU).
    #[arg(long, value_enum, default_value = "host")]
    pub backend: Backend,
    /// Bytes of the larger of the send and receive buffers (8, 64K, 1M, 1G). A size that
    /// is not a whole number of elements (per rank, for allgather, reduce_scatter and
    /// alltoall) runs rounded down, with a notice on stderr; a smaller one is refused.
    #[arg(long, default_value = "1M", value_parser = sizes::parse_size)]
    pub size: u64,
    /// Element type: f16 bf16 f32 f64 i8 u8 i32 u32 i64 u64 (or NCCL names).
    #[arg(long, default_value = "f32")]
    pub dtype: DType,
    /// Reduction: sum prod min max avg.
    #[arg(long, default_value = "sum")]
    pub op: RedOp,
    /// Iterations per call mode (at least 1).
    #[arg(long, default_value_t = 1, value_parser = sizes::parse_positive)]
    pub iters: u32,
    /// Root rank for broadcast and reduce: the root a program is compiled for (default 0).
    /// A plan (`.json`, `.xml`) is compiled for one root: a different --root is refused.
    #[arg(long)]
    pub root: Option<u32>,
    /// Call modes to run (default: every mode the plan is valid for); a mode the plan is
    /// not valid for is refused.
    #[arg(long, value_enum)]
    pub mode: Option<crate::cmd_check::ModeArg>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    Host,
    Cuda,
}

pub fn run(args: &RunArgs) -> Result<String, CliError> {
    let topo = topo_arg::load(&args.topo)?;
    let n = topo.n_ranks();
    if let Some(r) = args.root.filter(|&r| r >= n) {
        return Err(CliError::Usage(format!(
            "error: --root {r} is not a rank of {} (ranks 0 .. {n})",
            args.topo
        )));
    }
    let plan = load_plan(args, &topo)?;
    check_root(args, &plan)?;
    if plan.n_ranks != n {
        return Err(CliError::Input(format!(
            "error: the plan is for {} ranks but {} has {n}",
            plan.n_ranks, args.topo
        )));
    }
    let modes: Vec<Mode> = match args.mode {
        None => plan.modes.iter().collect(),
        Some(asked) => {
            let missing: Vec<Mode> = asked
                .modes()
                .iter()
                .filter(|m| !plan.modes.contains(*m))
                .collect();
            if let Some(m) = missing.first() {
                let valid: Vec<&str> = plan.modes.iter().map(Mode::name).collect();
                return Err(CliError::Input(format!(
                    "error: the plan `{}` is not valid in the requested mode {m} (it is valid {})",
                    plan.name,
                    valid.join(" and ")
                )));
            }
            asked.modes().iter().collect()
        }
    };
    let fitted = sizes::fit("--size", args.size, plan.collective, n, args.dtype)?;
    sizes::check_memory(
        &format!("--size {}", sizes::show(args.size)),
        &format!(
            "{} on {n} ranks in one process (every rank's input, result and reference)",
            plan.collective
        ),
        sizes::host_need(plan.collective, n, fitted.count, args.dtype),
        sizes::mem_available(),
    )?;
    let count = usize::try_from(fitted.count).map_err(|_| {
        CliError::Usage(format!(
            "error: --size {}: too large for this machine",
            args.size
        ))
    })?;
    if let Some(note) =
        sizes::rounding_notice("--size", args.size, &fitted, plan.collective, n, args.dtype)
    {
        eprintln!("{note}");
    }
    let gpus = match args.backend {
        Backend::Cuda => {
            let registry = braid_runtime::registry::Registry::new();
            registry.add_verified(
                std::sync::Arc::new(plan.any_size()),
                braid_runtime::registry::Origin::User(plan.name.clone()),
            );
            Some(open_cuda(n, std::sync::Arc::new(registry), None, None)?)
        }
        Backend::Host => None,
    };
    let mut out = String::new();
    let mut wrong_total = 0usize;
    for mode in modes {
        for iter in 0..args.iters {
            let r = run_once(&plan, args, count, mode, iter as u64, gpus.as_ref())?;
            wrong_total += r.wrong;
            out.push_str(&r.line);
        }
    }
    if wrong_total > 0 {
        return Err(CliError::Input(format!(
            "{out}error: {wrong_total} wrong element(s)"
        )));
    }
    Ok(out)
}

/// `--root` against the root the plan is for: a plan is compiled for one root (or none),
/// so a different one is refused rather than ignored (exit 2).
fn check_root(args: &RunArgs, plan: &Plan) -> Result<(), CliError> {
    let Some(asked) = args.root else {
        return Ok(());
    };
    match plan.root {
        None => Err(CliError::Usage(format!(
            "error: --root {asked}: the plan `{}` is {}, which has no root",
            plan.name,
            a_collective(plan.collective)
        ))),
        Some(r) if r != asked => Err(CliError::Usage(format!(
            "error: --root {asked}: the plan `{}` is compiled for root {r}, not root {asked}; \
             compile it with --root {asked} (or give --root {r})",
            plan.name
        ))),
        Some(_) => Ok(()),
    }
}

/// `an allreduce`, `a broadcast`.
pub(crate) fn a_collective(c: braid_ir::Collective) -> String {
    let name = c.name();
    let article = if name.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {name}")
}

fn load_plan(args: &RunArgs, topo: &braid_topo::Topology) -> Result<Verified, CliError> {
    let ext = args.file.extension().and_then(|e| e.to_str()).unwrap_or("");
    match ext {
        "json" | "xml" if args.algorithm.is_some() => Err(CliError::Usage(format!(
            "error: --algorithm selects an algorithm of a `.braid` program; {} is one plan",
            args.file.display()
        ))),
        "json" => {
            // A plan file is untrusted input: it runs only once proved.
            let plan = crate::cmd_verify::load(&args.file).map_err(CliError::from)?;
            Verified::new(plan).map_err(|d| CliError::Input(braid_plan::render_diagnostics(&d)))
        }
        "xml" => crate::cmd_msccl::load_xml(&args.file).map_err(CliError::from),
        _ => {
            let program = Program::load(&args.file)?;
            let algs = program.select(args.algorithm.as_deref())?;
            let [alg] = algs.as_slice() else {
                return Err(CliError::Usage(format!(
                    "error: {} defines several algorithms; choose one with --algorithm",
                    program.source.name
                )));
            };
            let shape = topo_arg::shape(topo);
            let root = alg.collective.is_rooted().then_some(args.root.unwrap_or(0));
            match braid_library::compile(&program.source, alg, &shape, root, topo) {
                Ok(Some(p)) => Ok(p),
                Ok(None) => Err(CliError::Input(format!(
                    "error: `{}` does not apply to {} ({shape})",
                    alg.name.name, args.topo
                ))),
                Err(rendered) => Err(CliError::Input(rendered)),
            }
        }
    }
}

struct RunResult {
    line: String,
    wrong: usize,
}

/// The communicator `--backend cuda` runs on: `n` ranks in this process, rank `r` on
/// GPU `r % GPUs` (several ranks share a GPU when the machine has fewer than the
/// topology), each with its own stream; or says why not (exit 3: no driver). With
/// `model`, calls choose by the cost model on that topology ([`cuda_options`]).
pub(crate) fn open_cuda(
    n: u32,
    registry: std::sync::Arc<braid_runtime::registry::Registry>,
    replicas: Option<u32>,
    model: Option<&braid_topo::Topology>,
) -> Result<(Vec<braid_cuda::CudaComm>, Vec<braid_cuda::Stream>), CliError> {
    let mut opts = cuda_options(model)?;
    if replicas.is_some() {
        opts.policy.replicas = replicas;
    }
    open_cuda_with(n, registry, &opts)
}

/// [`open_cuda`] with the communicator's options given.
pub(crate) fn open_cuda_with(
    n: u32,
    registry: std::sync::Arc<braid_runtime::registry::Registry>,
    opts: &braid_cuda::Options,
) -> Result<(Vec<braid_cuda::CudaComm>, Vec<braid_cuda::Stream>), CliError> {
    // Checked before any other CUDA call: without a driver those panic.
    if !braid_cuda::driver_present() {
        return Err(CliError::Runtime(
            "error: no CUDA driver on this machine; use --backend host".into(),
        ));
    }
    let have = braid_cuda::device_count();
    if have == 0 {
        return Err(CliError::Runtime("error: this machine has no GPU".into()));
    }
    let rt = |e: braid_cuda::CudaError| CliError::Runtime(format!("error: {e}"));
    let devices: Vec<usize> = (0..n as usize).map(|r| r % have).collect();
    let comms = braid_cuda::CudaComm::init_all(&devices, registry, opts).map_err(rt)?;
    let streams = comms
        .iter()
        .map(|c| braid_cuda::Stream::new(c.context()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(rt)?;
    Ok((comms, streams))
}

/// The CUDA communicator's options from the environment; with `model`, its calls choose
/// by the cost model on that topology with `BRAID_PROFILE`'s constants (or the defaults),
/// unless `BRAID_SELECT=rules`.
pub(crate) fn cuda_options(
    model: Option<&braid_topo::Topology>,
) -> Result<braid_cuda::Options, CliError> {
    let mut opts =
        braid_cuda::Options::from_env().map_err(|e| CliError::Usage(format!("error: {e}")))?;
    if let Some(topo) = model {
        let profile = braid_cost::Profile::from_env(&topo.fingerprint())
            .map_err(|e| CliError::Input(format!("error: {e}")))?;
        // LL128 only over links the profile's stress tests passed on.
        opts.ll128 = profile.ll128.clone();
        opts.policy = opts.policy.with_model(topo.clone(), profile);
    }
    Ok(opts)
}

/// The host backend's policy: the environment's (`channels` forcing replicas), choosing
/// by the cost model on `topo` where `BRAID_PROFILE` names a profile (what `braid tune`
/// measured on this machine; the built-in constants describe GPUs, not threads), else by
/// the rules.
pub(crate) fn host_policy(
    topo: &str,
    channels: Option<u32>,
) -> Result<braid_runtime::policy::Policy, CliError> {
    let policy = braid_runtime::policy::Policy::from_env()
        .map_err(|e| CliError::Usage(format!("error: {e}")))?;
    let policy = braid_runtime::policy::Policy {
        replicas: channels.or(policy.replicas),
        ..policy
    };
    if std::env::var_os("BRAID_PROFILE").is_none_or(|p| p.is_empty()) {
        return Ok(policy);
    }
    let topo = crate::topo_arg::load(topo)?;
    let profile = braid_cost::Profile::from_env(&topo.fingerprint())
        .map_err(|e| CliError::Input(format!("error: {e}")))?;
    Ok(policy.with_model(topo, profile))
}

/// One call on the GPUs through the communicator, checked against the reference like
/// `run_checked` on the host; the time is from enqueueing to the end of every stream.
fn run_cuda(
    cuda: &(Vec<braid_cuda::CudaComm>, Vec<braid_cuda::Stream>),
    plan: &Plan,
    args: &RunArgs,
    count: usize,
    mode: Mode,
    seed: u64,
) -> Result<Checked, CliError> {
    let case = braid_cuda::check::Case {
        collective: plan.collective,
        dtype: args.dtype,
        op: args.op,
        count,
        mode,
        root: plan.root,
        seed,
    };
    let (elapsed, wrong) = braid_cuda::check::run_checked(&cuda.0, &cuda.1, &case)
        .map_err(|e| CliError::Runtime(format!("error: {e}")))?;
    let (in_elems, out_elems) = buffer_elems(plan.collective, plan.n_ranks, count);
    Ok(Checked {
        elapsed,
        wrong,
        bytes: in_elems.max(out_elems) * args.dtype.size(),
        steps: cuda_steps(&cuda.0, &case)?,
    })
}

/// The step times every rank's GPU recorded for `case` (its last call), where
/// `BRAID_TRACE` asked for them.
fn cuda_steps(
    comms: &[braid_cuda::CudaComm],
    case: &braid_cuda::check::Case,
) -> Result<Vec<RankSteps>, CliError> {
    let mut ranks = Vec::new();
    for (r, comm) in comms.iter().enumerate() {
        if let Some((plan, times)) = comm
            .step_times(&case.spec(), case.mode)
            .map_err(|e| CliError::Runtime(format!("error: BRAID_TRACE: {e}")))?
        {
            ranks.push((r as u32, plan, times));
        }
    }
    Ok(ranks)
}

/// One step as a rank recorded it: rank, block id, step index, kind, and its start and
/// end on the recording clock (ns). Ranks in other processes send theirs as these.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct RecordedStep {
    pub rank: u32,
    pub block: u32,
    pub step: u32,
    pub kind: braid_plan::StepKind,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// The steps `ranks` recorded in their last call (those that ran), and the plan's name.
pub(crate) fn recorded_steps(ranks: &[RankSteps]) -> (String, Vec<RecordedStep>) {
    let mut raw = Vec::new();
    let mut name = String::new();
    for (r, plan, times) in ranks {
        name = plan.name.clone();
        for (b, block_times) in plan.ranks[*r as usize].blocks.iter().zip(times) {
            for ((i, s), &(start, end)) in b.steps.iter().enumerate().zip(block_times) {
                if start != 0 && end >= start {
                    raw.push(RecordedStep {
                        rank: *r,
                        block: b.id,
                        step: i as u32,
                        kind: s.kind,
                        start_ns: start,
                        end_ns: end,
                    });
                }
            }
        }
    }
    (name, raw)
}

/// Where `BRAID_TRACE` asks the measured steps to be written; `None` when unset or empty.
pub(crate) fn trace_path() -> Option<std::ffi::OsString> {
    std::env::var_os("BRAID_TRACE").filter(|p| !p.is_empty())
}

/// `BRAID_TRACE=FILE`: each rank's recorded step times of its last call (the GPU's
/// clock, or the host's on the host backend) as a Chrome trace like `braid explain
/// --trace` writes for a prediction: one process per rank, one thread per block, one
/// slice per step, microseconds from the earliest step's start.
pub(crate) fn write_trace(ranks: &[RankSteps], path: &std::path::Path) -> Result<(), CliError> {
    let (name, raw) = recorded_steps(ranks);
    write_recorded(&name, &raw, path)
}

/// [`write_trace`] of steps recorded by ranks of `name` (any processes of the host).
pub(crate) fn write_recorded(
    name: &str,
    raw: &[RecordedStep],
    path: &std::path::Path,
) -> Result<(), CliError> {
    let t0 = raw.iter().map(|x| x.start_ns).min().unwrap_or(0);
    let us = |ns: u64| ns.saturating_sub(t0) as f64 / 1e3;
    let timeline: Vec<braid_cost::sim::StepTime> = raw
        .iter()
        .map(|x| braid_cost::sim::StepTime {
            rank: x.rank,
            block: x.block,
            step: x.step,
            kind: braid_cost::sim::kind_name(x.kind),
            start_us: us(x.start_ns),
            end_us: us(x.end_ns),
        })
        .collect();
    crate::output::write_atomically(
        path,
        &braid_cost::trace::chrome_trace_measured(name, &timeline),
    )?;
    eprintln!(
        "note: BRAID_TRACE: {} step times of {name} written to {}",
        timeline.len(),
        path.display()
    );
    Ok(())
}

fn run_once(
    plan: &Plan,
    args: &RunArgs,
    count: usize,
    mode: Mode,
    seed: u64,
    gpus: Option<&(Vec<braid_cuda::CudaComm>, Vec<braid_cuda::Stream>)>,
) -> Result<RunResult, CliError> {
    let checked = match gpus {
        Some(g) => run_cuda(g, plan, args, count, mode, seed)?,
        None => run_checked(
            plan,
            args.dtype,
            args.op,
            count,
            mode,
            seed,
            timeout_from_env(),
        )
        .map_err(|e| CliError::Runtime(format!("error: {e}")))?,
    };
    if let Some(path) = trace_path() {
        write_trace(&checked.steps, std::path::Path::new(&path))?;
    }
    let mut notes = String::new();
    let mut wrong = 0;
    for (r, bad, i, want, got) in &checked.wrong {
        wrong += bad;
        notes.push_str(&format!("  rank {r}: {bad} wrong element(s), first at element {i}: expected {want}, got {got}\n"));
    }
    let secs = checked.elapsed.as_secs_f64();
    let status = if wrong == 0 { "correct" } else { "WRONG" };
    let line = format!(
        "{} {} {} {} {}, {} ranks, {} bytes, {mode}: {status} on every rank; {:.3} ms, algbw {:.2} GB/s\n{notes}",
        if wrong == 0 { "ok" } else { "FAILED" },
        plan.name,
        plan.collective,
        args.dtype.name(),
        args.op.name(),
        plan.n_ranks,
        checked.bytes,
        secs * 1e3,
        if secs > 0.0 { checked.bytes as f64 / secs / 1e9 } else { 0.0 },
    );
    Ok(RunResult { line, wrong })
}
