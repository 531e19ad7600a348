//! What the runtime's side of a call costs the host (`enqueue_group`: the checks, the
//! lookup of the call's prepared plan, its arguments), for an all-reduce of one element
//! per rank by 2, 4 and 8 ranks of one process in one group, with an engine whose launch
//! does nothing: the backend's own costs (resolving, launching) are not in it.
//! `cargo run --release -p braid-runtime --example group_call_cost`.

use braid_ir::{Collective, Protocol};
use braid_plan::Verified;
use braid_runtime::call::CallSpec;
use braid_runtime::device_comm::{enqueue_group, DeviceComm, Engine, GroupCall, Launch, Stats};
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::policy::{Policy, Target};
use braid_runtime::registry::{PlanProvider, Registry};
use braid_topo::Topology;
use std::sync::Arc;
use std::time::Instant;

struct Shipped(braid_library::Library);

impl PlanProvider for Shipped {
    fn plans(&self, c: Collective, root: Option<u32>) -> Vec<Arc<Verified>> {
        self.0.plans(c, root)
    }
}

/// Prepares nothing, launches nothing.
struct Null {
    rank: u32,
    n: u32,
    stats: Stats,
}

impl Engine for Null {
    type Stream = ();
    type Prepared = ();

    fn rank(&self) -> u32 {
        self.rank
    }
    fn n_ranks(&self) -> u32 {
        self.n
    }
    fn target(&self) -> Target {
        // As the CUDA backend offers ranks sharing one GPU.
        Target {
            block_budget: 66,
            size_replicas: true,
            ll: true,
            ll128: false,
            direct: true,
            flat: true,
        }
    }
    fn scratch_bytes(&self) -> usize {
        1 << 20
    }
    fn stats(&self) -> &Stats {
        &self.stats
    }
    fn prepare(
        &self,
        _: &Arc<Verified>,
        _: DType,
        _: RedOp,
        _: Protocol,
    ) -> braid_runtime::Result<()> {
        Ok(())
    }
    unsafe fn launch(calls: &[Launch<'_, Self>]) -> braid_runtime::Result<()> {
        std::hint::black_box(calls);
        Ok(())
    }
    fn abort(&self, _: &str) {}
    fn failure(&self) -> Option<String> {
        None
    }
}

fn main() {
    println!("{:>5} {:>18}", "ranks", "us per group call");
    for n in [2u32, 4, 8] {
        let topo = Topology::from_arg(&format!("nvswitch:{n}")).expect("a preset");
        let reg = Arc::new(
            Registry::new()
                .with_provider(Box::new(Shipped(braid_library::Library::new(topo.clone())))),
        );
        let comms: Vec<DeviceComm<Null>> = (0..n)
            .map(|rank| {
                let policy = Policy::default().with_model(topo.clone(), Default::default());
                let engine = Null {
                    rank,
                    n,
                    stats: Stats::default(),
                };
                DeviceComm::new(engine, reg.clone(), policy)
            })
            .collect();
        let spec = CallSpec {
            collective: Collective::Allreduce,
            count: n as usize,
            dtype: DType::F32,
            op: RedOp::Sum,
            root: None,
        };
        // Addresses the null engine never touches.
        let calls: Vec<GroupCall<'_, Null>> = comms
            .iter()
            .enumerate()
            .map(|(r, comm)| GroupCall {
                comm,
                spec,
                send: 0x1000 + r as u64 * 0x10_0000,
                recv: 0x800_0000 + r as u64 * 0x10_0000,
                stream: &(),
            })
            .collect();
        // SAFETY: the null engine reads no memory.
        unsafe { enqueue_group(&calls) }.expect("a valid call");
        let k = 200_000;
        let t = Instant::now();
        for _ in 0..k {
            // SAFETY: as above.
            unsafe { enqueue_group(&calls) }.expect("a valid call");
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / f64::from(k);
        println!("{n:>5} {us:>18.3}");
    }
}
