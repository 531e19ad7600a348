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
use braid_runtime::geometry::buffer_elems;
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
    /// Use this shipped algorithm, and no other, instead of the registry's choice
    /// (BRAID_PLANS is then not used).
    #[arg(long)]
    pub algorithm: Option<String>,
    /// Bytes of the larger of the send and receive buffers. A size that is not a whole
    /// number of elements (per rank, for allgather, reduce_scatter and alltoall) runs
    /// rounded down, with a notice on stderr; a smaller one is refused.
    #[arg(long, default_value = "1M", value_parser = sizes::parse_size)]
    pub size: u64,
    #[arg(long, default_value = "f32")]
    pub dtype: DType,
    #[arg(long, default_value = "sum")]
    pub op: RedOp,
    /// Root rank for broadcast and reduce (default 0; the other collectives have none).
    #[arg(long)]
    pub root: Option<u32>,
    /// Calls to run and check (at least 1).
    #[arg(long, default_value_t = 1, value_parser = sizes::parse_positive)]
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
    let root = match (collective.is_rooted(), args.root) {
        (true, Some(r)) if r >= topo.n_ranks() => {
            return Err(CliError::Usage(format!(
                "error: --root {r} is not a rank of {} (ranks 0 .. {})",
                args.topo,
                topo.n_ranks()
            )))
        }
        (true, r) => Some(r.unwrap_or(0)),
        (false, Some(r)) => {
            return Err(CliError::Usage(format!(
                "error: --root {r}: {} has no root",
                crate::cmd_run::a_collective(collective)
            )))
        }
        (false, None) => None,
    };
    // The job's size comes from the launcher: sizes are checked before joining, so every
    // rank refuses the same size the same way.
    let job = braid_runtime::launcher::LaunchEnv::from_env()
        .map_err(|e| CliError::Runtime(format!("error: joining the job: {e}")))?;
    let fitted = sizes::fit("--size", args.size, collective, job.world_size, args.dtype)?;
    let (need, largest) = sizes::rank_need(collective, job.world_size, fitted.count, args.dtype);
    let local = u128::from(job.local_world_size.unwrap_or(1));
    sizes::check_memory(
        &format!("--size {}", sizes::show(args.size)),
        &format!(
            "{collective} on {} ranks ({local} process(es) on this host, each with every rank's input and reference)",
            job.world_size
        ),
        (need * local, largest),
        sizes::mem_available(),
    )?;
    let count = usize::try_from(fitted.count).map_err(|_| {
        CliError::Usage(format!(
            "error: --size {}: too large for this machine",
            args.size
        ))
    })?;
    if let Some(note) = sizes::rounding_notice(
        "--size",
        args.size,
        &fitted,
        collective,
        job.world_size,
        args.dtype,
    ) {
        eprintln!("{note}");
    }
    let registry = Registry::new();
    let registry = match &args.algorithm {
        None => {
            crate::plans::register_env(&registry, &topo)?;
            registry.with_provider(Box::new(LibraryPlans(braid_library::Library::new(topo))))
        }
        Some(name) => {
            if std::env::var_os("BRAID_PLANS").is_some() {
                eprintln!("note: BRAID_PLANS is not used: --algorithm chooses the plan");
            }
            let library = braid_library::Library::new(topo);
            crate::plans::register_shipped(
                &registry, &library, collective, root, name, &args.topo,
            )?;
            registry
        }
    };
    let timeout = timeout_from_env();
    if args.backend == crate::cmd_run::Backend::Cuda {
        return run_cuda(args, collective, root, registry, count, timeout);
    }
    let policy = crate::cmd_run::host_policy(&args.topo, None)?;
    let comm = Communicator::from_launch_env(Arc::new(registry), timeout)
        .map_err(|e| CliError::Runtime(format!("error: joining the job: {e}")))?
        .with_policy(policy);
    let (rank, n) = (comm.rank(), comm.n_ranks());
    let e = args.dtype.size();
    let (in_elems, out_elems) = buffer_elems(collective, n, count);
    for iter in 0..args.iters {
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

/// `--backend cuda`: this process's rank of the launcher's job, as a device communicator
/// on the GPU of its local rank (several processes may share one GPU); each iteration is
/// one call on device buffers through the communicator, its result checked.
fn run_cuda(
    args: &RankArgs,
    collective: Collective,
    root: Option<u32>,
    registry: Registry,
    count: usize,
    timeout: std::time::Duration,
) -> Result<String, CliError> {
    // The launcher's variables first: without them there is no job to join.
    braid_runtime::launcher::LaunchEnv::from_env()
        .map_err(|e| CliError::Runtime(format!("error: joining the job: {e}")))?;
    if !braid_cuda::driver_present() {
        return Err(CliError::Runtime(
            "error: --backend cuda: no CUDA driver on this machine".into(),
        ));
    }
    let mut opts = crate::cmd_run::cuda_options(Some(&topo_arg::load(&args.topo)?))?;
    opts.timeout = timeout;
    let comm = braid_cuda::CudaComm::from_launch_env(Arc::new(registry), &opts)
        .map_err(|e| CliError::Runtime(format!("error: joining the job: {e}")))?;
    let (rank, n) = (comm.rank(), comm.n_ranks());
    let device = comm.device();
    let cuda = |e: braid_cuda::CudaError| CliError::Runtime(format!("error: rank {rank}: {e}"));
    let stream = braid_cuda::Stream::new(comm.context()).map_err(cuda)?;
    let e = args.dtype.size();
    let (in_elems, out_elems) = buffer_elems(collective, n, count);
    let bytes = in_elems.max(out_elems) * e;
    let link = match comm.network_carrier() {
        Some(carrier) => format!("{} over {carrier}", comm.links()),
        None => comm.links().to_string(),
    };
    for iter in 0..args.iters {
        let case = braid_cuda::check::Case {
            collective,
            dtype: args.dtype,
            op: args.op,
            count,
            mode: braid_ir::Mode::OutOfPlace,
            root,
            seed: u64::from(iter),
        };
        let (t, wrong) =
            braid_cuda::check::run_checked_rank(&comm, &stream, &case).map_err(cuda)?;
        if let Some((_, bad, i, w, g)) = wrong {
            return Err(CliError::Input(format!(
                "error: rank {rank}: {bad} wrong element(s), first at element {i}: expected {w}, got {g}"
            )));
        }
        let what = match braid_cuda::check::selection(&comm, &case).map_err(cuda)? {
            Some((plan, proto)) => format!(
                "{} x{} {}",
                plan.name,
                plan.channels,
                if proto == braid_ir::Protocol::Ll {
                    "ll"
                } else {
                    "simple"
                }
            ),
            None => "nothing to do".to_string(),
        };
        println!(
            "ok rank {rank}/{n} (GPU {device}, {link}, {what}): {collective} {} {}, {bytes} bytes, iteration {iter}: correct; {:.3} ms",
            args.dtype.name(),
            args.op.name(),
            t.as_secs_f64() * 1e3
        );
    }
    Ok(String::new())
}
