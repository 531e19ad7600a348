//! `braid perf`: an nccl-tests style sweep over message sizes (size, count, type, redop,
//! root, time, algbw, busbw, #wrong, with nccl-tests' busbw factors).

use crate::error::CliError;
use crate::perf_report::{bandwidths, mode_name, Report, Row};
use crate::plans::LibraryPlans;
use crate::{sizes, topo_arg};
use braid_ir::{Collective, Mode};
use braid_plan::Verified;
use braid_runtime::bench::{measure, Case};
use braid_runtime::comm::timeout_from_env;
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::registry::{Origin, Registry};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Which call modes to time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    Inplace,
    Outofplace,
    Both,
}

#[derive(Debug, Clone, clap::Args)]
pub struct PerfArgs {
    /// allreduce, allgather, reduce_scatter, broadcast, reduce or alltoall.
    pub collective: String,
    /// Smallest size (bytes of the larger buffer; default: 8, or the smallest multiple of
    /// one element per rank above it). Sizes that are not a whole number of elements (per
    /// rank, for allgather, reduce_scatter and alltoall) run rounded down, with a notice on
    /// stderr; a smaller -b is refused.
    #[arg(short = 'b', long = "minbytes", value_parser = sizes::parse_size)]
    pub min: Option<u64>,
    /// Largest size.
    #[arg(short = 'e', long = "maxbytes", default_value = "32M", value_parser = sizes::parse_size)]
    pub max: u64,
    /// Multiply the size by this factor at each step.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2)]
    pub factor: u64,
    #[arg(short = 'd', long = "datatype", default_value = "f32")]
    pub dtype: DType,
    #[arg(short = 'o', long = "op", default_value = "sum")]
    pub op: RedOp,
    /// Root rank for broadcast and reduce (default 0, or the root of the --plan; the
    /// other collectives have none and print -1, as nccl-tests).
    #[arg(short = 'r', long = "root")]
    pub root: Option<u32>,
    /// Calls per timed run, issued back to back (at least 1).
    #[arg(short = 'n', long = "iters", default_value_t = 20, value_parser = sizes::parse_positive)]
    pub iters: u32,
    /// Untimed calls per size after the checked one and before timing (0 for none), for
    /// braid and NCCL alike.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5)]
    pub warmup: u32,
    /// Timed runs per size; the median is reported (at least 1).
    #[arg(long, default_value_t = 3, value_parser = sizes::parse_positive)]
    pub runs: u32,
    /// Call modes to time: in place, out of place, or both (one row each; alltoall has
    /// no in-place mode).
    #[arg(long, value_enum, default_value = "both")]
    pub mode: ModeArg,
    /// Also time each call waited for on the host (the old way), as its own column.
    #[arg(long)]
    pub sync: bool,
    /// Capture the `-n` calls of a run in CUDA graphs (one per GPU) and time their replay,
    /// for Braid and NCCL alike (`--backend cuda`).
    #[arg(long)]
    pub graph: bool,
    /// One process per rank, as torchrun runs them.
    #[arg(long)]
    pub procs: bool,
    /// The streams the ranks of this process call on (`--backend cuda`): one each, or one
    /// per GPU shared by the ranks on it (one group call then needs no joins between
    /// streams, as nccl-tests drives one stream per GPU).
    #[arg(long, value_enum, default_value = "rank")]
    pub streams: StreamsArg,
    #[arg(long, value_enum, default_value = "host")]
    pub backend: crate::cmd_run::Backend,
    /// Topology (ranks); the host backend defaults to an 8-GPU NVSwitch node.
    #[arg(long, default_value = "nvswitch:8")]
    pub topo: String,
    /// Use this shipped algorithm, and no other, at every size.
    #[arg(long, conflicts_with = "plan")]
    pub algo: Option<String>,
    /// Use this plan (`.json` or MSCCL `.xml`), and no other, at every size (also outside
    /// a byte range it states, with a notice). A plan for another collective, rank count
    /// or root, or not valid in a mode asked for, is refused.
    #[arg(long)]
    pub plan: Option<PathBuf>,
    /// Also run NCCL on the same buffers and print its time and the ratio (CUDA only).
    #[arg(long)]
    pub vs_nccl: bool,
    /// Replicate the plan on this many channel sets, each on its share of every chunk
    /// (overrides the plan's `channels`; like NCCL_MIN_NCHANNELS). More replicas use more
    /// thread blocks (SMs) per GPU for large messages. Without it, the runtime picks a
    /// count per size for plans that ask for one replica.
    #[arg(long, value_parser = sizes::parse_positive)]
    pub channels: Option<u32>,
    /// Write the report as JSON to FILE (`-` or no FILE: to stdout, instead of the table).
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    pub json: Option<String>,
    /// Draw bus bandwidth against size (every series of the run) into FILE.svg.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Put the cost model's prediction for what ran (plan, replicas, protocol) beside
    /// each row, on `--topo` with `BRAID_PROFILE`'s constants (else the defaults).
    #[arg(long)]
    pub predict: bool,
}

/// `--streams`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StreamsArg {
    /// One stream per rank.
    Rank,
    /// One stream per GPU, shared by its ranks.
    Gpu,
}

/// The plan with `channels` replicas, proved again (the replica count bounds the
/// connection channels a plan may use).
fn replicated(plan: Arc<Verified>, channels: Option<u32>) -> Result<Arc<Verified>, CliError> {
    let Some(c) = channels.filter(|&c| c != plan.channels) else {
        return Ok(plan);
    };
    plan.with_channels(c)
        .map(Arc::new)
        .map_err(|d| CliError::Input(braid_plan::render_diagnostics(&d)))
}

/// One size of the sweep: the size asked and the call it comes to.
#[derive(Debug, Clone)]
struct Step {
    asked: u64,
    fitted: sizes::Fitted,
}

/// The sizes of the sweep, `min`, `min * f`, ... up to `max` (never past 64 bits), each
/// fitted to the call, and the one-line notice for those that run rounded down.
fn sweep(
    args: &PerfArgs,
    collective: Collective,
    n: u32,
) -> Result<(Vec<Step>, Option<String>), CliError> {
    let g = sizes::granule(collective, n, args.dtype);
    let min = args.min.unwrap_or(8u64.div_ceil(g) * g);
    if args.factor < 2 || min == 0 || min > args.max {
        return Err(CliError::Usage(
            "error: need 0 < -b <= -e and -f >= 2".into(),
        ));
    }
    let mut steps = Vec::new();
    let mut size = min;
    loop {
        let flag = if steps.is_empty() { "-b" } else { "size" };
        steps.push(Step {
            asked: size,
            fitted: sizes::fit(flag, size, collective, n, args.dtype)?,
        });
        match size.checked_mul(args.factor) {
            Some(next) if next <= args.max => size = next,
            _ => break,
        }
    }
    let rounded: Vec<&Step> = steps.iter().filter(|s| s.fitted.bytes != s.asked).collect();
    let notice = rounded.first().map(|first| {
        let t = args.dtype.name();
        let why = if collective.has_k() {
            format!("{collective} on {n} ranks moves whole {t} elements per rank: a multiple of {g} bytes")
        } else {
            format!("a whole number of {t} elements: a multiple of {g} bytes")
        };
        let more = match rounded.len() {
            1 => String::new(),
            k => format!(" and {} more", k - 1),
        };
        format!(
            "note: {} of {} sizes run rounded down ({why}): {} runs as {} bytes{more}; the size column shows the bytes that run",
            rounded.len(),
            steps.len(),
            first.asked,
            first.fitted.bytes
        )
    });
    Ok((steps, notice))
}

/// `--plan`'s plan against the calls of the sweep: refused (never replaced by another
/// plan) when it cannot serve them; its root is the sweep's unless `-r` contradicts it.
/// Returns the root of the calls.
fn plan_serves(
    plan: &Verified,
    path: &std::path::Path,
    args: &PerfArgs,
    collective: Collective,
    n: u32,
    steps: &[Step],
    modes: &[Mode],
) -> Result<Option<u32>, CliError> {
    let file = path.display();
    if plan.collective != collective {
        return Err(CliError::Input(format!(
            "error: --plan {file}: the plan `{}` is {}, so it cannot serve `braid perf {collective}`",
            plan.name,
            crate::cmd_run::a_collective(plan.collective)
        )));
    }
    if plan.n_ranks != n {
        return Err(CliError::Input(format!(
            "error: --plan {file}: the plan `{}` is for {} ranks, but --topo {} has {n}; give a topology of {} ranks",
            plan.name, plan.n_ranks, args.topo, plan.n_ranks
        )));
    }
    for &m in modes {
        if !plan.modes.contains(m) {
            return Err(CliError::Input(format!(
                "error: --plan {file}: the plan `{}` is not valid {}; give --mode {}",
                plan.name,
                if m == Mode::InPlace {
                    "in place"
                } else {
                    "out of place"
                },
                if m == Mode::InPlace {
                    "outofplace"
                } else {
                    "inplace"
                }
            )));
        }
    }
    if let (Some(asked), Some(r)) = (args.root, plan.root) {
        if asked != r {
            return Err(CliError::Usage(format!(
                "error: -r {asked}: the plan `{}` is compiled for root {r}, not root {asked}; \
                 compile it with --root {asked} (or give -r {r})",
                plan.name
            )));
        }
    }
    if let Some(range) = &plan.bytes {
        let outside = steps
            .iter()
            .filter(|s| !range.contains(s.fitted.bytes))
            .count();
        if outside > 0 {
            eprintln!(
                "note: the plan `{}` states it serves {} to {} bytes; {outside} of {} sizes of the sweep are outside that range and run with it all the same",
                plan.name,
                range.min,
                range.max.map_or("any".into(), |m| (m - 1).to_string()),
                steps.len()
            );
        }
    }
    Ok(plan.root)
}

/// The modes `--mode` asks for, in order; alltoall has only out of place.
fn modes(args: &PerfArgs, collective: Collective) -> Result<Vec<Mode>, CliError> {
    let alltoall = collective == Collective::Alltoall;
    Ok(match args.mode {
        ModeArg::Outofplace => vec![Mode::OutOfPlace],
        ModeArg::Inplace if alltoall => {
            return Err(CliError::Usage(
                "error: --mode inplace: alltoall has no in-place mode".into(),
            ))
        }
        ModeArg::Inplace => vec![Mode::InPlace],
        ModeArg::Both if alltoall => vec![Mode::OutOfPlace],
        ModeArg::Both => vec![Mode::OutOfPlace, Mode::InPlace],
    })
}

pub fn run(args: &PerfArgs) -> Result<String, CliError> {
    let collective = Collective::from_name(&args.collective).ok_or_else(|| {
        CliError::Usage(format!("error: unknown collective `{}`", args.collective))
    })?;
    let cuda = args.backend == crate::cmd_run::Backend::Cuda;
    if args.vs_nccl && !cuda {
        return Err(CliError::Runtime(
            "error: --vs-nccl needs --backend cuda (NCCL runs on the same GPUs)".into(),
        ));
    }
    if args.graph && !cuda {
        return Err(CliError::Usage(
            "error: --graph captures the timed calls in CUDA graphs: it needs --backend cuda"
                .into(),
        ));
    }
    if args.procs && cuda {
        return Err(CliError::Usage(
            "error: --procs runs on the host backend only so far; with --backend cuda, run \
             `braid rank --backend cuda` under torchrun or mpirun for multi-process jobs"
                .into(),
        ));
    }
    let modes = modes(args, collective)?;
    let topo = topo_arg::load(&args.topo)?;
    let model = if args.predict {
        let profile = braid_cost::Profile::from_env(&topo.fingerprint())
            .map_err(|e| CliError::Input(format!("error: {e}")))?;
        Some((topo.clone(), profile))
    } else {
        None
    };
    let n = topo.n_ranks();
    if let Some(r) = args.root.filter(|&r| collective.is_rooted() && r >= n) {
        return Err(CliError::Usage(format!(
            "error: -r {r} is not a rank of {} (ranks 0 .. {n})",
            args.topo
        )));
    }
    let (steps, rounding) = sweep(args, collective, n)?;
    let largest = steps.last().expect("a sweep has a size");
    sizes::check_memory(
        &format!("-e {}", sizes::show(args.max)),
        &format!(
            "{collective} of {} bytes on {n} ranks in one process (every rank's input, result and reference)",
            largest.fitted.bytes
        ),
        sizes::host_need(collective, n, largest.fitted.count, args.dtype),
        sizes::mem_available(),
    )?;
    if cuda && !braid_cuda::driver_present() {
        return Err(CliError::Runtime(
            "error: --backend cuda: no CUDA driver on this machine (use --backend host)".into(),
        ));
    }
    if let Some(note) = rounding {
        eprintln!("{note}");
    }
    let chosen_by = match (&args.plan, &args.algo) {
        (Some(_), _) => Some("--plan"),
        (None, Some(_)) => Some("--algo"),
        (None, None) => None,
    };
    if let (Some(flag), Some(_)) = (chosen_by, std::env::var_os("BRAID_PLANS")) {
        eprintln!("note: BRAID_PLANS is not used: {flag} chooses the plan");
    }
    let registry = Registry::new();
    let mut root = collective.is_rooted().then_some(args.root.unwrap_or(0));
    let registry = if let Some(path) = &args.plan {
        let plan = match path.extension().and_then(|e| e.to_str()) {
            Some("xml") => crate::cmd_msccl::load_xml(path)?,
            _ => Verified::new(crate::cmd_verify::load(path).map_err(CliError::from)?)
                .map_err(|d| CliError::Input(braid_plan::render_diagnostics(&d)))?,
        };
        root = plan_serves(&plan, path, args, collective, n, &steps, &modes)?;
        let plan = Arc::new(plan.any_size());
        // The plan and no other: nothing falls back to a shipped plan.
        registry.add_verified(plan, Origin::User(path.display().to_string()));
        registry
    } else if let Some(name) = &args.algo {
        let library = braid_library::Library::new(topo);
        let plan = crate::plans::register_shipped(
            &registry, &library, collective, root, name, &args.topo,
        )?;
        for &m in &modes {
            if !plan.modes.contains(m) {
                return Err(CliError::Input(format!(
                    "error: --algo {name}: the algorithm is not valid {}; give --mode {}",
                    if m == Mode::InPlace {
                        "in place"
                    } else {
                        "out of place"
                    },
                    if m == Mode::InPlace {
                        "outofplace"
                    } else {
                        "inplace"
                    }
                )));
            }
        }
        registry
    } else {
        crate::plans::register_env(&registry, &topo)?;
        registry.with_provider(Box::new(LibraryPlans(braid_library::Library::new(topo))))
    };
    // A replica count the plans cannot take is refused before anything runs.
    if args.channels.is_some() {
        for step in [&steps[0], largest] {
            let plan = registry
                .select(collective, n, root, modes[0], step.fitted.bytes as usize)
                .map_err(|err| CliError::Runtime(format!("error: {err}")))?;
            replicated(plan, args.channels)?;
        }
    }
    let registry = Arc::new(registry);
    let mut report = Report {
        collective: collective.to_string(),
        topology: args.topo.clone(),
        ranks: n,
        backend: if cuda { "cuda" } else { "host" },
        timing: if args.graph {
            "cuda graph"
        } else {
            "back-to-back"
        },
        iters: args.iters,
        warmup: args.warmup,
        runs: args.runs,
        roofline: None,
        nccl: None,
        streams: (cuda && !args.procs).then(|| {
            match args.streams {
                StreamsArg::Rank => "one per rank",
                StreamsArg::Gpu => "one per GPU, shared by its ranks",
            }
            .to_string()
        }),
        model: model.as_ref().map(|(_, p)| p.source.clone()),
        rows: Vec::new(),
    };
    let sweep = Sweep {
        args,
        collective,
        n,
        root,
        steps: &steps,
        modes: &modes,
        model: model.as_ref(),
    };
    if args.procs {
        report.timing = "back-to-back, one process per rank";
        return match run_procs(&sweep, registry, &mut report) {
            // A rank started by --procs: its lines are its whole output.
            Ok(Some(lines)) => Ok(lines),
            Ok(None) => finish(args, &report, Ok(())),
            Err(e) => finish(args, &report, Err(e)),
        };
    }
    let measured = if cuda {
        run_cuda(&sweep, registry, &mut report)
    } else {
        run_host(&sweep, registry, &mut report)
    };
    finish(args, &report, measured)
}

/// Renders and writes what was measured (also when a failure ended the sweep early: the
/// rows so far come first).
fn finish(
    args: &PerfArgs,
    report: &Report,
    measured: Result<(), CliError>,
) -> Result<String, CliError> {
    let to_stdout = args.json.as_deref() == Some("-");
    let mut out = if to_stdout {
        report.json()
    } else {
        report.table()
    };
    if let Some(file) = args.json.as_deref().filter(|f| *f != "-") {
        std::fs::write(file, report.json()).map_err(|e| {
            CliError::Runtime(format!("{out}error: cannot write --json {file}: {e}"))
        })?;
    }
    if let Some(path) = &args.plot {
        if !report.rows.is_empty() {
            crate::perf_plot::write(report, path)
                .map_err(|e| CliError::Runtime(format!("{out}error: {e}")))?;
        }
    }
    match measured {
        Err(CliError::Runtime(m)) => return Err(CliError::Runtime(format!("{out}{m}"))),
        Err(e) => return Err(e),
        Ok(()) => {}
    }
    let wrong = report.wrong();
    if wrong > 0 {
        out.push_str(&format!("error: {wrong} wrong element(s)"));
        return Err(CliError::Input(out));
    }
    Ok(out)
}

/// What every size of a sweep shares, for the backends' measuring loops.
#[derive(Clone, Copy)]
struct Sweep<'a> {
    args: &'a PerfArgs,
    collective: Collective,
    n: u32,
    root: Option<u32>,
    steps: &'a [Step],
    modes: &'a [Mode],
    /// `--predict`: the topology and constants the model prices rows with.
    model: Option<&'a (braid_topo::Topology, braid_cost::Profile)>,
}

/// With `--predict`, the model's time for the row's call: `plan` (replicated as it ran)
/// with `protocol`, for the row's size; `together`: the ranks ran in one launch;
/// `direct`: and out of place (receivers read their senders' `in` where the plan allows).
fn predict_row(
    sweep: &Sweep,
    r: &mut Row,
    plan: &braid_plan::Plan,
    protocol: braid_ir::Protocol,
    (direct, together): (bool, bool),
) {
    let Some((topo, profile)) = sweep.model else {
        return;
    };
    let call = braid_cost::Call {
        bytes: r.size as u64,
        elem: sweep.args.dtype.size() as u64,
        protocol,
        replicas: plan.channels.max(1),
        direct,
        together,
        // What ran: every rank's mode is this row's (one process drives them all), so a
        // rooted collective's in-place root skips its own copy here too.
        in_place: r.mode == mode_name(Mode::InPlace),
    };
    // As the runtime prices it: ranks of one launch without a measured profile with the
    // built-in constants for a shared GPU.
    match braid_cost::predict(plan, topo, &profile.for_launch(together), &call) {
        Ok(p) => r.set_predicted(p.total_us),
        Err(e) => tracing::info!(plan = %plan.name, "the model cannot price it: {e}"),
    }
}

/// One row from what a backend measured.
fn row(
    sweep: &Sweep,
    mode: Mode,
    (bytes, count): (usize, usize),
    runs: &[Duration],
    sync: Option<Duration>,
    wrong: usize,
    (plan, replicas, protocol): (String, u32, &'static str),
) -> Row {
    let Sweep {
        args,
        collective,
        n,
        root,
        ..
    } = *sweep;
    let secs = braid_runtime::bench::median(runs).as_secs_f64();
    let (algbw, busbw) = bandwidths(collective, n, bytes, secs);
    Row {
        size: bytes,
        count,
        dtype: args.dtype.name(),
        redop: args.op.name(),
        root: root.map_or(-1, i64::from),
        mode: mode_name(mode),
        time_us: secs * 1e6,
        algbw,
        busbw,
        wrong,
        runs_us: runs.iter().map(|t| t.as_secs_f64() * 1e6).collect(),
        sync_time_us: sync.map(|t| t.as_secs_f64() * 1e6),
        roofline_us: None,
        efficiency: None,
        nccl_time_us: None,
        nccl_busbw: None,
        ratio: None,
        plan,
        replicas,
        protocol,
        predicted_us: None,
        model_error: None,
    }
}

/// Bytes every rank together sends over links in one call of `count` elements with
/// `plan` (padding included: what crosses the links), and out of place (`mode`) what
/// its local copies move too.
fn bytes_moved(plan: &Verified, dtype: DType, count: usize, mode: Mode) -> f64 {
    path_bytes(plan, dtype, count, mode, |_| 0).values().sum()
}

/// Bytes `plan` moves in one call of `count` elements from the ranks on one GPU to those
/// on another (or the same) GPU, for ranks placed on GPU `gpu_of(rank)`: per
/// `(from, to)` path. Out of place, a rank's local copies (`cpy` steps) count on its own
/// GPU's path: they move bytes through that GPU's memory as transfers between its ranks
/// do. In place they may copy a chunk onto itself, which moves nothing, so they are left
/// out there (the roofline stays a lower bound).
fn path_bytes(
    plan: &Verified,
    dtype: DType,
    count: usize,
    mode: Mode,
    gpu_of: impl Fn(u32) -> usize,
) -> std::collections::BTreeMap<(usize, usize), f64> {
    let g = braid_runtime::geometry::Geometry::new(
        plan.collective,
        plan.n_ranks,
        plan.chunks,
        0,
        count,
        dtype.size(),
        1,
        0,
    );
    let chunk = (g.chunk_elems * dtype.size()) as f64;
    let mut paths = std::collections::BTreeMap::new();
    let traffic = braid_plan::traffic::traffic(plan);
    for (rank, sent) in traffic.sent.iter().enumerate() {
        for (&peer, &chunks) in sent {
            *paths
                .entry((gpu_of(rank as u32), gpu_of(peer)))
                .or_insert(0.0) += chunks as f64 * chunk;
        }
    }
    if mode == Mode::OutOfPlace {
        for (rank, &chunks) in traffic.copied.iter().enumerate() {
            if chunks > 0 {
                let g = gpu_of(rank as u32);
                *paths.entry((g, g)).or_insert(0.0) += chunks as f64 * chunk;
            }
        }
    }
    paths
}

/// The host backend: every rank a communicator of this process (threads), each size
/// and mode measured by [`braid_runtime::bench::measure`]; the roofline is the bytes the
/// plan moves at the copy rate this machine shows with as many copies at once as ranks
/// can run in parallel (its cores), measured beside each size.
fn run_host(sweep: &Sweep, registry: Arc<Registry>, report: &mut Report) -> Result<(), CliError> {
    let Sweep {
        args,
        collective,
        n,
        root,
        steps,
        modes,
        ..
    } = *sweep;
    let rt = |e: braid_runtime::RuntimeError| CliError::Runtime(format!("error: {e}"));
    let policy = crate::cmd_run::host_policy(&args.topo, args.channels)?;
    let comms =
        braid_runtime::Communicator::create_local_with(n, registry, timeout_from_env(), policy);
    let threads = std::thread::available_parallelism()
        .map_or(1, |p| p.get())
        .min(n as usize);
    report.roofline = Some(format!(
        "bytes the plan sends over its links at this machine's memory copy rate, {threads} copies at once"
    ));
    for step in steps {
        let count = step.fitted.count as usize;
        let mut rate = None;
        for &mode in modes {
            let case = Case {
                spec: braid_runtime::call::CallSpec {
                    collective,
                    count,
                    dtype: args.dtype,
                    op: args.op,
                    root,
                },
                mode,
                warmup: args.warmup,
                iters: args.iters,
                runs: args.runs,
                sync: args.sync,
                seed: 1,
            };
            let m = measure(&comms, &case).map_err(rt)?;
            if let Some(path) = crate::cmd_run::trace_path() {
                // The last timed call's steps (each size and mode overwrites the file:
                // what stays is the sweep's last).
                let ranks = braid_runtime::Communicator::step_times_of(&comms, &case.spec, mode)
                    .map_err(rt)?;
                crate::cmd_run::write_trace(&ranks, std::path::Path::new(&path))?;
            }
            let mut r = row(
                sweep,
                mode,
                (m.bytes, count),
                &m.runs,
                m.sync,
                m.wrong,
                (m.plan.name.clone(), m.plan.channels, m.protocol.name()),
            );
            let rate =
                *rate.get_or_insert_with(|| braid_runtime::bench::copy_rate(m.bytes, threads));
            let roof = bytes_moved(&m.plan, args.dtype, count, mode) / rate;
            r.set_roofline(roof * 1e6);
            predict_row(sweep, &mut r, &m.plan, m.protocol, (false, false));
            report.rows.push(r);
        }
    }
    Ok(())
}

/// `--procs` on the host backend (see `perf_procs.rs`): in a rank the command started,
/// the rank's lines; in the command itself, the ranks' measurements as rows of `report`.
fn run_procs(
    sweep: &Sweep,
    registry: Arc<Registry>,
    report: &mut Report,
) -> Result<Option<String>, CliError> {
    let Sweep {
        args,
        collective,
        n,
        root,
        steps,
        modes,
        ..
    } = *sweep;
    let jobs: Vec<crate::perf_procs::Job> = steps
        .iter()
        .enumerate()
        .flat_map(|(i, step)| {
            modes.iter().map(move |&mode| crate::perf_procs::Job {
                step: i,
                case: Case {
                    spec: braid_runtime::call::CallSpec {
                        collective,
                        count: step.fitted.count as usize,
                        dtype: args.dtype,
                        op: args.op,
                        root,
                    },
                    mode,
                    warmup: args.warmup,
                    iters: args.iters,
                    runs: args.runs,
                    sync: args.sync,
                    seed: 1,
                },
            })
        })
        .collect();
    if crate::perf_procs::is_child() {
        return crate::perf_procs::run_child(
            registry,
            crate::cmd_run::host_policy(&args.topo, args.channels)?,
            &jobs,
        )
        .map(Some);
    }
    let lines = crate::perf_procs::run_parent(n, args.channels)?;
    let threads = std::thread::available_parallelism()
        .map_or(1, |p| p.get())
        .min(n as usize);
    report.roofline = Some(format!(
        "bytes the plan sends over its links at this machine's memory copy rate, {threads} copies at once"
    ));
    for job in &jobs {
        let mode = mode_name(job.case.mode);
        let (wrong, runs, sync, first) =
            crate::perf_procs::merge(&job.case, job.step, mode, &lines, n)?;
        if let Some(path) = crate::cmd_run::trace_path() {
            // Every rank's steps of the sweep's last case, the only one they sent (as with
            // threads, where each case overwrites the file).
            if std::ptr::eq(job, jobs.last().expect("a job")) {
                let steps: Vec<crate::cmd_run::RecordedStep> = lines
                    .iter()
                    .filter(|l| l.step == job.step && l.mode == mode)
                    .flat_map(|l| l.steps.iter().cloned())
                    .collect();
                crate::cmd_run::write_recorded(&first.plan, &steps, std::path::Path::new(&path))?;
            }
        }
        let count = job.case.spec.count;
        let bytes = job.case.spec.sizes(0, n).larger;
        let proto = if first.protocol == "ll" {
            braid_ir::Protocol::Ll
        } else {
            braid_ir::Protocol::Simple
        };
        let protocol = proto.name();
        let mut r = row(
            sweep,
            job.case.mode,
            (bytes, count),
            &runs,
            sync,
            wrong,
            (first.plan.clone(), first.replicas, protocol),
        );
        // The plan the ranks ran, found again in the registry: its roofline, and the
        // model's price for it with the replicas and protocol they reported.
        let ran = registry
            .candidates(collective, n, root, job.case.mode, bytes, None)
            .ok()
            .and_then(|c| c.into_iter().find(|(p, _)| p.name == first.plan))
            .map(|(p, _)| p);
        if let Some(plan) = ran {
            let roof = bytes_moved(&plan, args.dtype, count, job.case.mode)
                / braid_runtime::bench::copy_rate(bytes, threads);
            r.set_roofline(roof * 1e6);
            if let Ok(plan) = replicated(plan, Some(first.replicas)) {
                predict_row(sweep, &mut r, &plan, proto, (false, false));
            }
        }
        report.rows.push(r);
    }
    Ok(None)
}

/// `--backend cuda`: the ranks as one communicator of this process (rank `r` on GPU
/// `r % GPUs`), each size and mode through the communicator like any application: inputs
/// on device buffers, one checked call, `-w` warm-ups, then `--runs` runs of `-n` calls
/// back to back between CUDA events on every rank's stream (the slowest stream's time);
/// the plan, replicas and protocol are the runtime's choice (or `--algo`, `--plan`,
/// `--channels`, `BRAID_PROTO`). With `--vs-nccl` NCCL's same collective runs, timed the
/// same way, on buffers of the same size on the same GPUs and streams in this process.
fn run_cuda(sweep: &Sweep, registry: Arc<Registry>, report: &mut Report) -> Result<(), CliError> {
    let Sweep {
        args,
        collective,
        n,
        root,
        steps,
        modes,
        ..
    } = *sweep;
    let rt = |e: braid_cuda::CudaError| CliError::Runtime(format!("error: {e}"));
    let topo = topo_arg::load(&args.topo)?;
    let (comms, mut streams) = crate::cmd_run::open_cuda(n, registry, args.channels, Some(&topo))?;
    // Rank r is on GPU r % GPUs (open_cuda's placement).
    let gpus = braid_cuda::device_count().min(n as usize).max(1);
    if args.streams == StreamsArg::Gpu {
        for r in gpus..streams.len() {
            streams[r] = streams[r % gpus].clone();
        }
    }
    let mut copier = braid_cuda::roofline::Copier::new(gpus).map_err(rt)?;
    let mut copies: std::collections::HashMap<(usize, usize, usize), Duration> =
        std::collections::HashMap::new();
    let network = comms.first().is_some_and(|c| c.network());
    let mut streamed: std::collections::HashMap<usize, Duration> = std::collections::HashMap::new();
    report.roofline = Some(
        "the bytes of the plan's busiest path (GPU to GPU; within one GPU, all its ranks' \
         bytes, out of place their local copies too) at this machine's rate for it: the faster of a copy-engine copy and an SM \
         copy kernel of those bytes, timed back to back in this run"
            .into(),
    );
    if network {
        report.roofline = report.roofline.take().map(|r| {
            format!(
                "{r}; over the network transport, also the bytes of the busiest pair of \
                 ranks through one TCP stream on the loopback interface, sent back to back \
                 in this run"
            )
        });
    }
    let nccl = if args.vs_nccl {
        if !braid_cuda::nccl::present() {
            return Err(CliError::Runtime(
                "error: --vs-nccl: NCCL cannot be loaded (libnccl.so not found on the \
                 library path)"
                    .into(),
            ));
        }
        if braid_cuda::device_count() < n as usize {
            return Err(CliError::Runtime(format!(
                "error: --vs-nccl: NCCL needs one GPU per rank ({n} ranks, {} GPU(s) here)",
                braid_cuda::device_count()
            )));
        }
        // Which library, and never Braid's own (it is called libnccl.so.2 too).
        report.nccl = Some(braid_cuda::nccl::describe().map_err(rt)?);
        Some(braid_cuda::nccl::Nccl::new(&streams).map_err(rt)?)
    } else {
        None
    };
    for step in steps {
        // At least one element per rank: `sweep` refuses smaller sizes.
        let count = step.fitted.count as usize;
        for &mode in modes {
            let case = braid_cuda::check::Case {
                collective,
                dtype: args.dtype,
                op: args.op,
                count,
                mode,
                root,
                seed: 1,
            };
            let p = braid_cuda::check::Prepared::new(&comms, &streams, &case).map_err(rt)?;
            p.run().map_err(rt)?;
            let wrong = p.wrong().map_err(rt)?.iter().map(|w| w.1).sum();
            let runs = p
                .time_runs(args.warmup, args.iters, args.runs, args.graph)
                .map_err(rt)?;
            let sync = if args.sync {
                let mut total = Duration::ZERO;
                for _ in 0..args.iters {
                    total += p.run().map_err(rt)?;
                }
                Some(total / args.iters)
            } else {
                None
            };
            let (plan, proto) = braid_cuda::check::selection(&comms[0], &case)
                .map_err(rt)?
                .expect("a positive count has a plan");
            let bytes = p.bytes();
            drop(p);
            let mut r = row(
                sweep,
                mode,
                (bytes, count),
                &runs,
                sync,
                wrong,
                if n == 1 {
                    // The communicator copies (out of place) or does nothing (in place).
                    let what = if mode == Mode::InPlace {
                        "nothing"
                    } else {
                        "copy"
                    };
                    (what.to_string(), 1, "-")
                } else {
                    (plan.name.clone(), plan.channels, proto.name())
                },
            );
            let mut roof = Duration::ZERO;
            let mut paths = path_bytes(&plan, args.dtype, count, mode, |r| r as usize % gpus);
            if paths.is_empty() && mode == Mode::OutOfPlace {
                // One rank, out of place: the data still has to reach the output.
                paths.insert((0, 0), bytes as f64);
            }
            for ((from, to), b) in paths {
                let key = (from, to, b as usize);
                let t = match copies.get(&key) {
                    Some(&t) => t,
                    None => {
                        let t = copier
                            .time(from, to, b as usize, args.iters, args.runs)
                            .map_err(rt)?
                            .best();
                        copies.insert(key, t);
                        t
                    }
                };
                roof = roof.max(t);
            }
            if network && n > 1 {
                // Pairs of ranks only: a rank's local copies cross no network.
                let pairs = path_bytes(&plan, args.dtype, count, mode, |r| r as usize);
                let busiest = pairs
                    .iter()
                    .filter(|((a, b), _)| a != b)
                    .fold(0.0f64, |a, (_, &b)| a.max(b)) as usize;
                let t = match streamed.get(&busiest) {
                    Some(&t) => t,
                    None => {
                        let t = braid_cuda::net::stream_time(busiest, args.iters, args.runs)
                            .map_err(|e| {
                                CliError::Runtime(format!("error: timing a loopback stream: {e}"))
                            })?;
                        streamed.insert(busiest, t);
                        t
                    }
                };
                roof = roof.max(t);
            }
            r.set_roofline(roof.as_secs_f64() * 1e6);
            if n > 1 {
                let together = comms[0].launches_together();
                let direct = mode == Mode::OutOfPlace && together;
                predict_row(sweep, &mut r, &plan, proto, (direct, together));
            }
            if let Some(nc) = &nccl {
                let t = nc
                    .time(
                        collective,
                        root,
                        args.dtype,
                        args.op,
                        count,
                        mode,
                        args.warmup,
                        args.iters,
                        args.runs,
                        false,
                        if args.graph {
                            braid_cuda::timing::Timing::Graph
                        } else {
                            braid_cuda::timing::Timing::BackToBack
                        },
                    )
                    .map_err(rt)?;
                let secs = braid_runtime::bench::median(&t.runs).as_secs_f64();
                r.nccl_time_us = Some(secs * 1e6);
                r.nccl_busbw = Some(bandwidths(collective, n, bytes, secs).1);
                r.ratio = Some(if r.time_us > 0.0 {
                    secs * 1e6 / r.time_us
                } else {
                    0.0
                });
            }
            report.rows.push(r);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        perf: PerfArgs,
    }

    fn args(extra: &[&str]) -> PerfArgs {
        let mut v = vec![
            "perf",
            "allreduce",
            "--backend",
            "cuda",
            "--topo",
            "nvswitch:2",
        ];
        v.extend_from_slice(extra);
        Cli::parse_from(v).perf
    }

    #[test]
    fn cuda_without_a_driver_is_a_runtime_error() {
        if braid_cuda::driver_present() {
            return;
        }
        match run(&args(&["--vs-nccl", "-e", "1K"])) {
            Err(CliError::Runtime(m)) => assert!(m.contains("no CUDA driver"), "{m}"),
            other => panic!("expected a runtime error, got {other:?}"),
        }
    }

    /// The shipped plan `name` of `c` on `nvswitch:4`.
    fn shipped_on_4(c: Collective, name: &str) -> Arc<Verified> {
        let topo = crate::topo_arg::load("nvswitch:4").unwrap();
        braid_library::Library::new(topo)
            .plans(c, None)
            .into_iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("{name} applies to 4 ranks"))
    }

    /// The roofline's paths: a ring's bytes split by GPU pair, summing to what the plan
    /// sends; with ranks alternating over two GPUs a ring only crosses between them.
    #[test]
    fn path_bytes_split_a_ring_by_gpu_pair() {
        let ring = shipped_on_4(Collective::Allreduce, "ring_allreduce");
        let count = 1 << 20;
        let total = bytes_moved(&ring, DType::F32, count, Mode::InPlace);
        // 2 (N - 1) / N of every rank's 4 MiB leave it, padding aside.
        assert!(total >= 4.0 * 2.0 * 3.0 / 4.0 * 4.0 * 1048576.0, "{total}");
        let two = path_bytes(&ring, DType::F32, count, Mode::InPlace, |r| r as usize % 2);
        assert!(two.keys().all(|(a, b)| a != b), "{two:?}");
        assert_eq!(two.values().sum::<f64>(), total);
        let pairs = path_bytes(&ring, DType::F32, count, Mode::InPlace, |r| r as usize / 2);
        assert!(
            pairs.contains_key(&(0, 0)) && pairs.contains_key(&(0, 1)),
            "{pairs:?}"
        );
        assert_eq!(pairs.values().sum::<f64>(), total);
    }

    /// Out of place, an alltoall's own blocks (local copies) count on the rank's GPU:
    /// with every rank on one GPU the path carries all N blocks of every rank, not only
    /// the N - 1 that go to peers; in place (which moves nothing locally) they do not.
    #[test]
    fn path_bytes_count_local_copies_out_of_place() {
        let a2a = shipped_on_4(Collective::Alltoall, "direct_alltoall");
        // Alltoall's count is per peer (NCCL's): a rank's block for each peer.
        let count = 1 << 20;
        let block = 4.0 * count as f64;
        let one_gpu = path_bytes(&a2a, DType::F32, count, Mode::OutOfPlace, |_| 0);
        assert_eq!(
            one_gpu.get(&(0, 0)),
            Some(&(4.0 * 4.0 * block)),
            "{one_gpu:?}"
        );
        let links = path_bytes(&a2a, DType::F32, count, Mode::InPlace, |_| 0);
        assert_eq!(links.get(&(0, 0)), Some(&(4.0 * 3.0 * block)), "{links:?}");
        // A rank per GPU: each GPU's own path carries its one local block.
        let apart = path_bytes(&a2a, DType::F32, count, Mode::OutOfPlace, |r| r as usize);
        assert_eq!(apart.get(&(2, 2)), Some(&block), "{apart:?}");
        assert_eq!(apart.get(&(2, 3)), Some(&block), "{apart:?}");
    }
}
