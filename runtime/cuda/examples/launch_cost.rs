//! Where a small call's time goes when calls are issued back to back on one GPU: the
//! host's time to issue each call against the GPU's time per call.
//!
//! 1. The flat kernel's three entry points, each launched back to back with a launch that
//!    does nothing (`braid_cuda::arg_cost`): what a launch with that size of argument
//!    costs.
//! 2. An all-reduce of 8 B and of 4 KiB out of place by 2, 4 and 8 ranks sharing GPU 0 (one stream,
//!    as `braid perf --streams gpu`), the plan the cost model selects: the host's time
//!    per group call (issue only), the GPU's time per call back to back, and from a CUDA
//!    graph.
//!
//! Without a driver it says so and does nothing. `cargo run --release -p braid-cuda
//! --example launch_cost`.

use braid_cuda::check::{Case, Prepared};
use braid_cuda::timing::{time_calls, Timing};
use braid_cuda::{CudaComm, Options, Stream};
use braid_ir::{Collective, Mode};
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::registry::{PlanProvider, Registry};
use braid_topo::Topology;
use cudarc::driver::CudaContext;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Lib(braid_library::Library);

impl PlanProvider for Lib {
    fn plans(&self, c: Collective, root: Option<u32>) -> Vec<Arc<braid_plan::Verified>> {
        self.0.plans(c, root)
    }
}

const CALLS: u32 = 400;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if !braid_cuda::driver_present() || braid_cuda::device_count() == 0 {
        println!("no CUDA driver or no GPU here: nothing to measure");
        return Ok(());
    }
    let ctx = CudaContext::new(0)?;
    empty_kernels(&ctx)?;
    for n in [2u32, 4, 8] {
        for count in [2, 1024] {
            small_calls(n, count)?;
        }
    }
    Ok(())
}

/// Median of `runs` timings.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn empty_kernels(ctx: &Arc<CudaContext>) -> Result<(), Box<dyn std::error::Error>> {
    println!("the flat kernel launched empty, {CALLS} launches back to back, median of 5:");
    println!("{:>8} {:>14}", "bytes", "gpu us/launch");
    for t in braid_cuda::arg_cost::flat_arg_times(ctx.ordinal(), CALLS, 5)? {
        println!("{:>8} {:>14.2}", t.bytes, t.us);
    }
    Ok(())
}

fn small_calls(n: u32, count: usize) -> Result<(), Box<dyn std::error::Error>> {
    let topo = Topology::from_arg(&format!("nvswitch:{n}"))?;
    let registry = Arc::new(
        Registry::new().with_provider(Box::new(Lib(braid_library::Library::new(topo.clone())))),
    );
    let mut opts = Options::from_env()?;
    let profile = braid_cost::Profile::from_env(&topo.fingerprint())?;
    opts.policy = opts.policy.with_model(topo, profile);
    let comms = CudaComm::init_all(&vec![0; n as usize], registry, &opts)?;
    let one = Stream::new(comms[0].context())?;
    let streams = vec![one; n as usize];
    let case = Case {
        collective: Collective::Allreduce,
        dtype: DType::F32,
        op: RedOp::Sum,
        count,
        mode: Mode::OutOfPlace,
        root: None,
        seed: 1,
    };
    let p = Prepared::new(&comms, &streams, &case)?;
    p.run()?;
    let wrong = p.wrong()?.len();
    let plan = braid_cuda::check::selection(&comms[0], &case)?
        .map(|(v, proto)| format!("{} {proto:?}", v.name))
        .unwrap_or_default();
    let flat_before = comms[0].stats().flat_launches;
    let mut host = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..CALLS {
            p.enqueue()?;
        }
        host.push(t.elapsed().as_secs_f64() * 1e6 / f64::from(CALLS));
        p.synchronize()?;
    }
    let flat = comms[0].stats().flat_launches - flat_before;
    let time = |how| -> Result<f64, braid_cuda::CudaError> {
        let runs = (0..5)
            .map(|_| {
                time_calls(&streams, &|| p.enqueue(), CALLS, how)
                    .map(|d: Duration| d.as_secs_f64() * 1e6)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(median(runs))
    };
    let b2b = time(Timing::BackToBack)?;
    let graph = time(Timing::Graph)?;
    println!(
        "all-reduce {} B, {n} ranks on GPU 0, one stream, {plan}: host {:.2} us/call to issue \
         ({flat} of {} launches flat), GPU {b2b:.2} us/call back to back, {graph:.2} from a graph; \
         {wrong} ranks wrong",
        4 * count,
        median(host),
        5 * CALLS
    );
    Ok(())
}
