//! `braid perf`: an nccl-tests style sweep over message sizes (size, count, type, redop,
//! root, time, algbw, busbw, #wrong, with nccl-tests' busbw factors).

use crate::error::CliError;
use crate::plans::LibraryPlans;
use crate::{sizes, topo_arg};
use braid_ir::{Collective, Mode};
use braid_plan::Verified;
use braid_runtime::comm::timeout_from_env;
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::registry::{Origin, Registry};
use braid_runtime::selfcheck::run_checked;
use std::path::PathBuf;
use std::sync::Arc;

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
    /// Timed iterations per size (at least 1; after the checked call and the warm-ups).
    #[arg(short = 'n', long = "iters", default_value_t = 5, value_parser = sizes::parse_positive)]
    pub iters: u32,
    /// Untimed calls per size before timing, besides the checked one (0 for none), for
    /// braid and NCCL alike.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 1)]
    pub warmup: u32,
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
    /// or root, or not valid out of place, is refused.
    #[arg(long)]
    pub plan: Option<PathBuf>,
    /// Also run NCCL on the same buffers and print its time and the ratio (CUDA only).
    #[arg(long)]
    pub vs_nccl: bool,
    /// Replicate the plan on this many channel sets, each on its share of every chunk
    /// (overrides the plan's `channels`; like NCCL_MIN_NCHANNELS). More replicas use more
    /// thread blocks (SMs) per GPU for large messages. Without it, the CUDA backend picks
    /// a count per size for plans that ask for one replica.
    #[arg(long, value_parser = sizes::parse_positive)]
    pub channels: Option<u32>,
    /// Print JSON lines instead of the table.
    #[arg(long)]
    pub json: bool,
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

/// nccl-tests' bus-bandwidth factor for `n` ranks.
pub fn busbw_factor(c: Collective, n: u32) -> f64 {
    let n = f64::from(n);
    match c {
        Collective::Allreduce => 2.0 * (n - 1.0) / n,
        Collective::Allgather | Collective::ReduceScatter | Collective::Alltoall => (n - 1.0) / n,
        Collective::Broadcast | Collective::Reduce => 1.0,
    }
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
    if !plan.modes.contains(Mode::OutOfPlace) {
        return Err(CliError::Input(format!(
            "error: --plan {file}: the plan `{}` is not valid out of place, and braid perf calls out of place",
            plan.name
        )));
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
    let topo = topo_arg::load(&args.topo)?;
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
        root = plan_serves(&plan, path, args, collective, n, &steps)?;
        // The plan and no other: nothing falls back to a shipped plan.
        registry.add_verified(
            Arc::new(plan.any_size()),
            Origin::User(path.display().to_string()),
        );
        registry
    } else if let Some(name) = &args.algo {
        let library = braid_library::Library::new(topo);
        let plan = crate::plans::register_shipped(
            &registry, &library, collective, root, name, &args.topo,
        )?;
        if !plan.modes.contains(Mode::OutOfPlace) {
            return Err(CliError::Input(format!(
                "error: --algo {name}: the algorithm is not valid out of place, and braid perf calls out of place"
            )));
        }
        registry
    } else {
        crate::plans::register_env(&registry, &topo)?;
        registry.with_provider(Box::new(LibraryPlans(braid_library::Library::new(topo))))
    };
    let registry = Arc::new(registry);
    if cuda {
        return run_cuda(args, collective, registry, n, root, &steps);
    }
    let mut out = String::new();
    if !args.json {
        out.push_str(&format!(
            "# braid perf {collective} on {} ({n} ranks), host backend\n",
            args.topo
        ));
        out.push_str(&format!(
            "#{:>12} {:>12} {:>6} {:>6} {:>5} {:>10} {:>9} {:>9} {:>7}  {}\n",
            "size(B)",
            "count",
            "type",
            "redop",
            "root",
            "time(us)",
            "algbw",
            "busbw",
            "#wrong",
            "plan"
        ));
    }
    let mut wrong_total = 0usize;
    for step in &steps {
        let count = step.fitted.count as usize;
        let size = step.fitted.bytes as usize;
        let plan: Arc<Verified> = registry
            .select(collective, n, root, Mode::OutOfPlace, size)
            .map_err(|err| CliError::Runtime(format!("error: {err}")))?;
        let plan = replicated(plan, args.channels)?;
        let timeout = timeout_from_env();
        let check = |seed| {
            run_checked(
                &plan,
                args.dtype,
                args.op,
                count,
                Mode::OutOfPlace,
                seed,
                timeout,
            )
            .map_err(|err| CliError::Runtime(format!("error: {err}")))
        };
        let first = check(0)?;
        let wrong: usize = first.wrong.iter().map(|w| w.1).sum();
        wrong_total += wrong;
        for i in 0..args.warmup {
            check(u64::from(args.iters) + 1 + u64::from(i))?;
        }
        let mut total = 0.0;
        for i in 0..args.iters {
            total += check(u64::from(i) + 1)?.elapsed.as_secs_f64();
        }
        let secs = total / f64::from(args.iters);
        let bytes = first.bytes as f64;
        let algbw = if secs > 0.0 { bytes / secs / 1e9 } else { 0.0 };
        let busbw = algbw * busbw_factor(collective, n);
        let root_col = root.map_or("-1".to_string(), |r| r.to_string());
        if args.json {
            out.push_str(&format!(
                "{{\"size\": {}, \"count\": {count}, \"type\": \"{}\", \"redop\": \"{}\", \"root\": {root_col}, \"time_us\": {:.2}, \"algbw\": {algbw:.4}, \"busbw\": {busbw:.4}, \"wrong\": {wrong}, \"plan\": \"{}\"}}\n",
                first.bytes, args.dtype.name(), args.op.name(), secs * 1e6, plan.name
            ));
        } else {
            out.push_str(&format!(
                " {:>12} {:>12} {:>6} {:>6} {:>5} {:>10.1} {:>9.3} {:>9.3} {:>7}  {}\n",
                first.bytes,
                count,
                args.dtype.name(),
                args.op.name(),
                root_col,
                secs * 1e6,
                algbw,
                busbw,
                wrong,
                plan.name
            ));
        }
    }
    if wrong_total > 0 {
        return Err(CliError::Input(format!(
            "{out}error: {wrong_total} wrong element(s)"
        )));
    }
    Ok(out)
}

/// One row of the CUDA sweep.
struct CudaRow {
    bytes: usize,
    count: usize,
    secs: f64,
    wrong: usize,
    plan: String,
    /// Replicas (channel sets) the plan ran with.
    replicas: u32,
    /// Wire protocol: `simple` or `ll`.
    protocol: &'static str,
    /// NCCL's mean time for the same call, with `--vs-nccl`.
    nccl_secs: Option<f64>,
}

/// `--backend cuda`: the ranks as one communicator of this process (rank `r` on GPU
/// `r % GPUs`), each size through the communicator like any application: inputs on
/// device buffers, one checked call, `-w` warm-ups, `-n` timed calls; the plan, replicas
/// and protocol are the runtime's choice (or `--algo`, `--plan`, `--channels`,
/// `BRAID_PROTO`). With `--vs-nccl` NCCL's same collective runs on buffers of the same
/// size on the same GPUs and streams in this process. Both are timed the same way: host
/// clock around issuing every rank's call and synchronising, mean over the iterations.
fn run_cuda(
    args: &PerfArgs,
    collective: Collective,
    registry: Arc<Registry>,
    n: u32,
    root: Option<u32>,
    steps: &[Step],
) -> Result<String, CliError> {
    let rt = |e: braid_cuda::CudaError| CliError::Runtime(format!("error: {e}"));
    let (comms, streams) = crate::cmd_run::open_cuda(n, registry, args.channels)?;
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
        Some(braid_cuda::nccl::Nccl::new(&streams).map_err(rt)?)
    } else {
        None
    };
    let nccl_version = match &nccl {
        Some(_) => braid_cuda::nccl::version().map_err(rt)?,
        None => String::new(),
    };
    let mut rows = Vec::new();
    let swept = sweep_cuda(
        args,
        collective,
        &comms,
        &streams,
        root,
        steps,
        nccl.as_ref(),
        &mut rows,
    );
    drop(nccl);
    let out = format_cuda(args, collective, n, root, &nccl_version, &rows);
    // A failure part-way keeps the rows measured so far.
    if let Err(CliError::Runtime(m)) = swept {
        return Err(CliError::Runtime(format!("{out}{m}")));
    }
    swept?;
    let wrong_total: usize = rows.iter().map(|r| r.wrong).sum();
    if wrong_total > 0 {
        return Err(CliError::Input(format!(
            "{out}error: {wrong_total} wrong element(s)"
        )));
    }
    Ok(out)
}

/// Measures every size of the sweep into `rows` (see [`run_cuda`]).
#[allow(clippy::too_many_arguments)]
fn sweep_cuda(
    args: &PerfArgs,
    collective: Collective,
    comms: &[braid_cuda::CudaComm],
    streams: &[braid_cuda::Stream],
    root: Option<u32>,
    steps: &[Step],
    nccl: Option<&braid_cuda::nccl::Nccl>,
    rows: &mut Vec<CudaRow>,
) -> Result<(), CliError> {
    let rt = |e: braid_cuda::CudaError| CliError::Runtime(format!("error: {e}"));
    let iters = args.iters;
    for step in steps {
        // At least one element per rank: `sweep` refuses smaller sizes.
        let count = step.fitted.count as usize;
        let case = braid_cuda::check::Case {
            collective,
            dtype: args.dtype,
            op: args.op,
            count,
            mode: Mode::OutOfPlace,
            root,
            seed: 1,
        };
        let p = braid_cuda::check::Prepared::new(comms, streams, &case).map_err(rt)?;
        p.run().map_err(rt)?;
        let wrong = p.wrong().map_err(rt)?.iter().map(|w| w.1).sum();
        for _ in 0..args.warmup {
            p.run().map_err(rt)?;
        }
        let mut total = 0.0;
        for _ in 0..iters {
            total += p.run().map_err(rt)?.as_secs_f64();
        }
        let (plan, proto) = braid_cuda::check::selection(&comms[0], &case)
            .map_err(rt)?
            .expect("a positive count has a plan");
        let bytes = p.bytes();
        drop(p);
        let nccl_secs = match nccl {
            Some(nc) => Some(
                nc.time(
                    collective,
                    root,
                    args.dtype,
                    args.op,
                    count,
                    args.warmup,
                    iters,
                )
                .map_err(rt)?
                .as_secs_f64(),
            ),
            None => None,
        };
        rows.push(CudaRow {
            bytes,
            count,
            secs: total / f64::from(iters),
            wrong,
            plan: plan.name.clone(),
            replicas: plan.channels,
            protocol: if proto == braid_ir::Protocol::Ll {
                "ll"
            } else {
                "simple"
            },
            nccl_secs,
        });
    }
    Ok(())
}

/// The CUDA sweep as nccl-tests-style columns (or JSON lines), NCCL's time, busbw and
/// the ratio NCCL time / braid time (above 1: braid is faster) when measured.
fn format_cuda(
    args: &PerfArgs,
    collective: Collective,
    n: u32,
    root: Option<u32>,
    nccl_version: &str,
    rows: &[CudaRow],
) -> String {
    let vs = args.vs_nccl;
    let factor = busbw_factor(collective, n);
    let root_col = root.map_or("-1".to_string(), |r| r.to_string());
    let mut out = String::new();
    if !args.json {
        out.push_str(&format!(
            "# braid perf {collective} on {} ({n} ranks), cuda backend, out of place, {} iters{}\n",
            args.topo,
            args.iters,
            if vs {
                format!(", vs NCCL {nccl_version} (ratio = NCCL time / braid time)")
            } else {
                String::new()
            }
        ));
        out.push_str(&format!(
            "#{:>12} {:>12} {:>6} {:>6} {:>5} {:>10} {:>9} {:>9} {:>7}",
            "size(B)", "count", "type", "redop", "root", "time(us)", "algbw", "busbw", "#wrong"
        ));
        if vs {
            out.push_str(&format!(
                " {:>10} {:>9} {:>6}",
                "nccl(us)", "nccl_bus", "ratio"
            ));
        }
        out.push_str("  plan\n");
    }
    for r in rows {
        let algbw = r.bytes as f64 / r.secs / 1e9;
        let busbw = algbw * factor;
        let nccl = r
            .nccl_secs
            .map(|t| (t, r.bytes as f64 / t / 1e9 * factor, t / r.secs));
        if args.json {
            let extra = nccl.map_or(String::new(), |(t, bw, ratio)| {
                format!(
                    ", \"nccl_time_us\": {:.2}, \"nccl_busbw\": {bw:.4}, \"ratio\": {ratio:.3}",
                    t * 1e6
                )
            });
            out.push_str(&format!(
                "{{\"backend\": \"cuda\", \"size\": {}, \"count\": {}, \"type\": \"{}\", \"redop\": \"{}\", \"root\": {root_col}, \"time_us\": {:.2}, \"algbw\": {algbw:.4}, \"busbw\": {busbw:.4}, \"wrong\": {}{extra}, \"plan\": \"{}\", \"replicas\": {}, \"protocol\": \"{}\"}}\n",
                r.bytes, r.count, args.dtype.name(), args.op.name(), r.secs * 1e6, r.wrong, r.plan, r.replicas, r.protocol
            ));
        } else {
            out.push_str(&format!(
                " {:>12} {:>12} {:>6} {:>6} {:>5} {:>10.1} {:>9.3} {:>9.3} {:>7}",
                r.bytes,
                r.count,
                args.dtype.name(),
                args.op.name(),
                root_col,
                r.secs * 1e6,
                algbw,
                busbw,
                r.wrong
            ));
            if let Some((t, bw, ratio)) = nccl {
                out.push_str(&format!(" {:>10.1} {bw:>9.3} {ratio:>6.2}", t * 1e6));
            }
            // What ran: plan, replicas, protocol.
            out.push_str(&format!("  {} x{} {}\n", r.plan, r.replicas, r.protocol));
        }
    }
    out
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
    fn cuda_rows_carry_nccl_time_busbw_and_ratio() {
        let rows = [CudaRow {
            bytes: 1 << 20,
            count: 1 << 18,
            secs: 20e-6,
            wrong: 0,
            plan: "ring_allreduce".into(),
            replicas: 16,
            protocol: "simple",
            nccl_secs: Some(30e-6),
        }];
        let a = args(&["--vs-nccl"]);
        let t = format_cuda(&a, Collective::Allreduce, 2, None, "2.28.9", &rows);
        assert!(t.contains("nccl(us)") && t.contains("ratio") && t.contains("NCCL 2.28.9"));
        // 1 MiB in 30 us: algbw 34.95 GB/s, busbw x 2(n-1)/n = 1; ratio 30/20.
        assert!(
            t.contains("30.0") && t.contains("34.953") && t.contains("1.50"),
            "{t}"
        );
        assert!(t.contains("ring_allreduce x16 simple"), "{t}");
        let j = format_cuda(
            &args(&["--vs-nccl", "--json"]),
            Collective::Allreduce,
            2,
            None,
            "",
            &rows,
        );
        assert!(
            j.contains("\"ratio\": 1.500") && j.contains("\"wrong\": 0"),
            "{j}"
        );
        assert!(
            j.contains("\"plan\": \"ring_allreduce\", \"replicas\": 16, \"protocol\": \"simple\""),
            "{j}"
        );
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
}
