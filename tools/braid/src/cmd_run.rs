//! `braid run`: execute a program or plan with real data on every rank and compare every
//! rank's result with a reference.

use crate::error::CliError;
use crate::source::Program;
use crate::{sizes, topo_arg};
use braid_ir::Mode;
use braid_plan::Plan;
use braid_runtime::comm::timeout_from_env;
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::geometry::count_for_bytes;
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
    /// Bytes of the larger of the send and receive buffers (8, 64K, 1M, 1G).
    #[arg(long, default_value = "1M", value_parser = sizes::parse_size)]
    pub size: u64,
    /// Element type: f16 bf16 f32 f64 i8 u8 i32 u32 i64 u64 (or NCCL names).
    #[arg(long, default_value = "f32")]
    pub dtype: DType,
    /// Reduction: sum prod min max avg.
    #[arg(long, default_value = "sum")]
    pub op: RedOp,
    /// Iterations per call mode.
    #[arg(long, default_value_t = 1)]
    pub iters: u32,
    /// Root rank for broadcast and reduce.
    #[arg(long, default_value_t = 0)]
    pub root: u32,
    /// Call modes to run (default: every mode the plan is valid for).
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
    let plan = load_plan(args, &topo)?;
    if plan.n_ranks != n {
        return Err(CliError::Input(format!(
            "error: the plan is for {} ranks but {} has {n}",
            plan.n_ranks, args.topo
        )));
    }
    let modes: Vec<Mode> = plan
        .modes
        .iter()
        .filter(|m| args.mode.is_none_or(|a| a.modes().contains(*m)))
        .collect();
    if modes.is_empty() {
        return Err(CliError::Input(
            "error: the plan is not valid in the requested mode".into(),
        ));
    }
    let gpus = match args.backend {
        Backend::Cuda => Some(open_gpus(n)?),
        Backend::Host => None,
    };
    let mut out = String::new();
    let mut wrong_total = 0usize;
    for mode in modes {
        for iter in 0..args.iters.max(1) {
            let r = run_once(&plan, args, mode, iter as u64, gpus.as_ref())?;
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

fn load_plan(args: &RunArgs, topo: &braid_topo::Topology) -> Result<Plan, CliError> {
    let ext = args.file.extension().and_then(|e| e.to_str()).unwrap_or("");
    match ext {
        "json" => {
            // Compiled and imported plans arrive verified; a plan file is untrusted input.
            let plan = crate::cmd_verify::load(&args.file).map_err(CliError::from)?;
            match braid_plan::verify(&plan) {
                Ok(_) => Ok(plan),
                Err(d) => Err(CliError::Input(braid_plan::render_diagnostics(&d))),
            }
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
            let root = alg.collective.is_rooted().then_some(args.root);
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

/// Opens one GPU per rank for `--backend cuda`, or says why not (exit 3): no driver,
/// or a GPU count that differs from the topology's ranks (rank `r` runs on GPU `r`).
pub(crate) fn open_gpus(n: u32) -> Result<braid_cuda::Gpus, CliError> {
    // Checked before any other CUDA call: without a driver those panic.
    if !braid_cuda::driver_present() {
        return Err(CliError::Runtime(
            "error: no CUDA driver on this machine; use --backend host".into(),
        ));
    }
    let have = braid_cuda::device_count();
    if have != n as usize {
        return Err(CliError::Runtime(format!(
            "error: --backend cuda runs one rank per GPU: the topology has {n} ranks but \
             this machine has {have} GPUs"
        )));
    }
    braid_cuda::Gpus::open(n).map_err(|e| CliError::Runtime(format!("error: {e}")))
}

/// Every wrong rank of a call as `(rank, wrong elements, first wrong, expected, got)`,
/// as `braid_runtime::selfcheck` reports the host backend's.
pub(crate) fn wrong_elements(
    dtype: DType,
    expected: &[Option<Vec<u8>>],
    outputs: &[Option<Vec<u8>>],
) -> Vec<(u32, usize, usize, String, String)> {
    let e = dtype.size();
    let mut wrong = Vec::new();
    for (r, (want, got)) in expected.iter().zip(outputs).enumerate() {
        let (want, got) = match (want, got) {
            (Some(w), Some(g)) => (w.as_slice(), g.as_slice()),
            (None, None) => continue,
            (Some(w), None) => (w.as_slice(), &[][..]),
            (None, Some(g)) => (&[][..], g.as_slice()),
        };
        if let Some((i, x, y)) = braid_runtime::reference::first_mismatch(dtype, want, got) {
            let len = want.len().max(got.len()) / e;
            let bad = (0..len)
                .filter(|k| want.get(k * e..(k + 1) * e) != got.get(k * e..(k + 1) * e))
                .count();
            wrong.push((r as u32, bad, i, x, y));
        }
    }
    wrong
}

/// One call on the GPUs, checked against the reference like `run_checked` on the host;
/// the time is the kernels' (launch to end of the last rank, no host copies).
fn run_cuda(
    gpus: &braid_cuda::Gpus,
    plan: &Plan,
    args: &RunArgs,
    count: usize,
    mode: Mode,
    seed: u64,
) -> Result<Checked, CliError> {
    use braid_runtime::reference::{inputs, reference};
    let n = plan.n_ranks;
    let (in_elems, out_elems) = buffer_elems(plan.collective, n, count);
    let e = args.dtype.size();
    let inputs = inputs(plan.collective, args.dtype, args.op, n, count, seed);
    let expected = if count == 0 {
        vec![Some(Vec::new()); n as usize]
    } else {
        reference(plan.collective, args.dtype, args.op, plan.root, &inputs)
    };
    let out = gpus
        .run(plan, args.dtype, args.op, count, mode, &inputs)
        .map_err(|e| CliError::Runtime(format!("error: {e}")))?;
    Ok(Checked {
        elapsed: out.kernel_time,
        wrong: wrong_elements(args.dtype, &expected, &out.outputs),
        bytes: in_elems.max(out_elems) * e,
    })
}

fn run_once(
    plan: &Plan,
    args: &RunArgs,
    mode: Mode,
    seed: u64,
    gpus: Option<&braid_cuda::Gpus>,
) -> Result<RunResult, CliError> {
    let count = count_for_bytes(plan.collective, plan.n_ranks, args.size, args.dtype.size());
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
