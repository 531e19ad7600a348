//! `braid rank`: run one rank of a multi-process job. The ranks find each other through
//! the launcher's environment (torchrun's RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT,
//! Open MPI's and Slurm's variables; `BRAID_SECRET` authenticates them), run a
//! collective on real data with the plan the registry selects, and check the result.

use crate::error::CliError;
use crate::plans::LibraryPlans;
use crate::{sizes, topo_arg};
use braid_ir::Collective;
use braid_runtime::comm::timeout_from_env;
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::geometry::{buffer_elems, count_for_bytes};
use braid_runtime::reference::{fill_input, first_mismatch, reference};
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
    let comm = Communicator::from_launch_env(Arc::new(registry), timeout)
        .map_err(|e| CliError::Runtime(format!("error: joining the job: {e}")))?;
    let (rank, n) = (comm.rank(), comm.n_ranks());
    let e = args.dtype.size();
    let count = count_for_bytes(collective, n, args.size, e);
    let (in_elems, out_elems) = buffer_elems(collective, n, count);
    for iter in 0..args.iters.max(1) {
        let inputs: Vec<Vec<u8>> = (0..n)
            .map(|r| {
                let mut b = vec![0u8; in_elems * e];
                fill_input(args.dtype, args.op, r, n, iter as u64, &mut b);
                b
            })
            .collect();
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
