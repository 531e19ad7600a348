//! `braid perf`: an nccl-tests style sweep over message sizes (size, count, type, redop,
//! root, time, algbw, busbw, #wrong, with nccl-tests' busbw factors).

use crate::error::CliError;
use crate::plans::LibraryPlans;
use crate::{sizes, topo_arg};
use braid_ir::{Collective, Mode};
use braid_plan::Plan;
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
    /// Smallest size (bytes of the larger buffer).
    #[arg(short = 'b', long = "minbytes", default_value = "8", value_parser = sizes::parse_size)]
    pub min: u64,
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
    /// Root rank for broadcast and reduce.
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    pub root: u32,
    /// Timed iterations per size (after one checked warm-up).
    #[arg(short = 'n', long = "iters", default_value_t = 5)]
    pub iters: u32,
    #[arg(long, value_enum, default_value = "host")]
    pub backend: crate::cmd_run::Backend,
    /// Topology (ranks); the host backend defaults to an 8-GPU NVSwitch node.
    #[arg(long, default_value = "nvswitch:8")]
    pub topo: String,
    /// Use this shipped algorithm.
    #[arg(long, conflicts_with = "plan")]
    pub algo: Option<String>,
    /// Use this plan (`.json` or MSCCL `.xml`).
    #[arg(long)]
    pub plan: Option<PathBuf>,
    /// Also run NCCL on the same buffers and print its time and the ratio (CUDA only).
    #[arg(long)]
    pub vs_nccl: bool,
    /// Print JSON lines instead of the table.
    #[arg(long)]
    pub json: bool,
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

pub fn run(args: &PerfArgs) -> Result<String, CliError> {
    let collective = Collective::from_name(&args.collective).ok_or_else(|| {
        CliError::Usage(format!("error: unknown collective `{}`", args.collective))
    })?;
    if args.backend == crate::cmd_run::Backend::Cuda || args.vs_nccl {
        return Err(CliError::Runtime(
            "error: the CUDA backend and --vs-nccl are not available in this build yet; use --backend host".into(),
        ));
    }
    if args.factor < 2 || args.min == 0 || args.min > args.max {
        return Err(CliError::Usage(
            "error: need 0 < -b <= -e and -f >= 2".into(),
        ));
    }
    let topo = topo_arg::load(&args.topo)?;
    let n = topo.n_ranks();
    let root = collective.is_rooted().then_some(args.root);
    let library = braid_library::Library::new(topo);
    let registry = Registry::new();
    if let Some(path) = &args.plan {
        let plan = match path.extension().and_then(|e| e.to_str()) {
            Some("xml") => crate::cmd_msccl::load_xml(path)?,
            _ => crate::cmd_verify::load(path).map_err(CliError::from)?,
        };
        registry
            .add(plan, Origin::User(path.display().to_string()))
            .map_err(|e| CliError::Input(format!("error: {e}")))?;
    } else if let Some(name) = &args.algo {
        let plan = library
            .plans(collective, root)
            .into_iter()
            .find(|p| &p.name == name)
            .ok_or_else(|| {
                CliError::Input(format!(
                    "error: no shipped {collective} algorithm `{name}` applies to {}",
                    args.topo
                ))
            })?;
        registry
            .add((*plan).clone(), Origin::User(name.clone()))
            .map_err(|e| CliError::Input(format!("error: {e}")))?;
    }
    let registry = registry.with_provider(Box::new(LibraryPlans(library)));
    let e = args.dtype.size() as u64;
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
    let mut size = args.min;
    let mut wrong_total = 0usize;
    while size <= args.max {
        let elems = size / e;
        let count = (if collective.has_k() {
            elems / u64::from(n)
        } else {
            elems
        }) as usize;
        let plan: Arc<Plan> = registry
            .select(collective, n, root, Mode::OutOfPlace, size as usize)
            .map_err(|err| CliError::Runtime(format!("error: {err}")))?;
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
        let mut total = 0.0;
        for i in 0..args.iters.max(1) {
            total += check(u64::from(i) + 1)?.elapsed.as_secs_f64();
        }
        let secs = total / f64::from(args.iters.max(1));
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
        size = size.saturating_mul(args.factor);
    }
    if wrong_total > 0 {
        return Err(CliError::Input(format!(
            "{out}error: {wrong_total} wrong element(s)"
        )));
    }
    Ok(out)
}
