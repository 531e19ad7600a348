//! `braid rank`: run one rank of a multi-process job. The ranks find each other through
//! the launcher's environment (torchrun's RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT,
//! Open MPI's and Slurm's variables; `BRAID_SECRET` authenticates them), run a
//! collective on real data with the plan the registry selects, and check the result.
//! `--backend cuda` runs the rank on this process's GPU (the launcher's local rank): the
//! ranks' GPUs exchange FIFOs through CUDA IPC (or shared host memory without
//! peer-to-peer access), as PyTorch's one-process-per-GPU jobs run.

use crate::error::CliError;
use crate::plans::LibraryPlans;
use crate::{sizes, topo_arg};
use braid_ir::Collective;
use braid_runtime::comm::timeout_from_env;
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::geometry::{buffer_elems, count_for_bytes};
use braid_runtime::reference::{first_mismatch, inputs, reference};
use braid_runtime::registry::Registry;
use braid_runtime::{Buffers, Communicator};
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug, Clone, clap::Args)]
pub struct RankArgs {
    /// allreduce, allgather, reduce_scatter, broadcast, reduce or alltoall.
    pub collective: String,
    /// The job's topology (all ranks must give the same).
    #[arg(long)]
    pub topo: String,
    /// Use this shipped algorithm instead of the registry's choice.
    #[arg(long)]
    pub algorithm: Option<String>,
    /// Bytes of the larger of the send and receive buffers.
    #[arg(long, default_value = "1M", value_parser = sizes::parse_size)]
    pub size: u64,
    #[arg(long, default_value = "f32")]
    pub dtype: DType,
    #[arg(long, default_value = "sum")]
    pub op: RedOp,
    #[arg(long, default_value_t = 0)]
    pub root: u32,
    #[arg(long, default_value_t = 1)]
    pub iters: u32,
    /// `host`: the rank's work on CPU threads, links over shared memory or TCP. `cuda`:
    /// on the GPU numbered by the launcher's local rank.
    #[arg(long, value_enum, default_value = "host")]
    pub backend: crate::cmd_run::Backend,
}

pub fn run(args: &RankArgs) -> Result<String, CliError> {
    let collective = Collective::from_name(&args.collective).ok_or_else(|| {
        CliError::Usage(format!("error: unknown collective `{}`", args.collective))
    })?;
    let topo = topo_arg::load(&args.topo)?;
    let library = braid_library::Library::new(topo);
    let root = collective.is_rooted().then_some(args.root);
    let registry = match &args.algorithm {
        None => Registry::new().with_provider(Box::new(LibraryPlans(library))),
        Some(name) => {
            let r = Registry::new();
            crate::plans::register_shipped(&r, &library, collective, root, name, &args.topo)?;
            r
        }
    };
    registry
        .add_env()
        .map_err(|e| CliError::Input(format!("error: {e}")))?;
    let timeout = timeout_from_env();
    if args.backend == crate::cmd_run::Backend::Cuda {
        return run_cuda(args, collective, root, &registry, timeout);
    }
    let comm = Communicator::from_launch_env(Arc::new(registry), timeout)
        .map_err(|e| CliError::Runtime(format!("error: joining the job: {e}")))?;
    let (rank, n) = (comm.rank(), comm.n_ranks());
    let e = args.dtype.size();
    let count = count_for_bytes(collective, n, args.size, e);
    let (in_elems, out_elems) = buffer_elems(collective, n, count);
    for iter in 0..args.iters.max(1) {
        let inputs = inputs(collective, args.dtype, args.op, n, count, iter as u64);
        let mut recv = vec![0u8; out_elems * e];
        let start = Instant::now();
        comm.call(
            collective,
            Buffers::OutOfPlace {
                send: &inputs[rank as usize],
                recv: &mut recv,
            },
            count,
            args.dtype,
            args.op,
            root,
        )
        .map_err(|e| CliError::Runtime(format!("error: rank {rank}: {e}")))?;
        let ms = start.elapsed().as_secs_f64() * 1e3;
        if count > 0 {
            if let Some(expected) =
                &reference(collective, args.dtype, args.op, root, &inputs)[rank as usize]
            {
                if let Some((i, want, got)) = first_mismatch(args.dtype, expected, &recv) {
                    return Err(CliError::Input(format!(
                        "error: rank {rank}: element {i}: expected {want}, got {got}"
                    )));
                }
            }
        }
        // Printed as it happens: a job that fails later has still shown what worked.
        println!("ok rank {rank}/{n}: {collective} {} {}, {} bytes, iteration {iter}: correct; {ms:.3} ms", args.dtype.name(), args.op.name(), in_elems.max(out_elems) * e);
    }
    Ok(String::new())
}

/// `--backend cuda`: bootstrap from the launcher, open this rank's GPU, prepare the
/// call once and run it `iters` times, checking every result.
fn run_cuda(
    args: &RankArgs,
    collective: Collective,
    root: Option<u32>,
    registry: &Registry,
    timeout: std::time::Duration,
) -> Result<String, CliError> {
    use braid_runtime::bootstrap::Bootstrap;
    use braid_runtime::launcher::LaunchEnv;
    let join =
        |e: braid_runtime::RuntimeError| CliError::Runtime(format!("error: joining the job: {e}"));
    let env = LaunchEnv::from_env().map_err(join)?;
    if !braid_cuda::driver_present() {
        return Err(CliError::Runtime(
            "error: --backend cuda: no CUDA driver on this machine".into(),
        ));
    }
    let boot = Arc::new(Bootstrap::from_launch_env(&env, timeout).map_err(join)?);
    let (rank, n) = (boot.rank(), boot.n_ranks());
    let device = env.local_rank.unwrap_or(rank) as usize;
    let cuda = |e: braid_cuda::CudaError| CliError::Runtime(format!("error: rank {rank}: {e}"));
    let gpu =
        braid_cuda::process::RankGpu::open(device, boot, braid_cuda::exec::p2p_disabled_by_env())
            .map_err(cuda)?;
    let e = args.dtype.size();
    let count = count_for_bytes(collective, n, args.size, e);
    let (in_elems, out_elems) = buffer_elems(collective, n, count);
    let bytes = in_elems.max(out_elems) * e;
    if count == 0 {
        println!("ok rank {rank}/{n}: {collective}, 0 elements: nothing to do");
        return Ok(String::new());
    }
    let mut plan = (*registry
        .select(collective, n, root, braid_ir::Mode::OutOfPlace, bytes)
        .map_err(|e| CliError::Runtime(format!("error: {e}")))?)
    .clone();
    if plan.channels == 1 {
        plan.channels = braid_cuda::tune::replicas(&plan, bytes, gpu.multiprocessors());
    }
    // Every rank's input: each process computes them all, to know the expected result.
    let inputs = inputs(collective, args.dtype, args.op, n, count, 0);
    let resident = gpu
        .prepare(
            &plan,
            args.dtype,
            args.op,
            count,
            braid_ir::Mode::OutOfPlace,
            &inputs[rank as usize],
        )
        .map_err(cuda)?;
    let expected = &reference(collective, args.dtype, args.op, root, &inputs)[rank as usize];
    let link = if gpu.p2p() { "p2p" } else { "host-staged" };
    let proto = if resident.wire().ll { "ll" } else { "simple" };
    for iter in 0..args.iters.max(1) {
        let t = resident.launch().map_err(cuda)?;
        if let (Some(want), Some(got)) = (expected, resident.output().map_err(cuda)?) {
            if let Some((i, w, g)) = first_mismatch(args.dtype, want, &got) {
                return Err(CliError::Input(format!(
                    "error: rank {rank}: element {i}: expected {w}, got {g}"
                )));
            }
        }
        println!(
            "ok rank {rank}/{n} (GPU {device}, {link}, {proto}, {} x{}): {collective} {} {}, {bytes} bytes, iteration {iter}: correct; {:.3} ms",
            plan.name,
            plan.channels,
            args.dtype.name(),
            args.op.name(),
            t.as_secs_f64() * 1e3
        );
    }
    Ok(String::new())
}
