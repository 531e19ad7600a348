//! `Communicator::timed`: calls back to back on the rank's stream between two markers the
//! stream records (the host backend's CUDA events), as nccl-tests times.

use braid_ir::Collective;
use braid_library::Library;
use braid_plan::Verified;
use braid_runtime::call::CallSpec;
use braid_runtime::comm::Buffers;
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::reference::{first_mismatch, inputs, reference};
use braid_runtime::registry::{PlanProvider, Registry};
use braid_runtime::Communicator;
use braid_topo::Topology;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Lib(Library);

impl PlanProvider for Lib {
    fn plans(&self, c: Collective, root: Option<u32>) -> Vec<Arc<Verified>> {
        self.0.plans(c, root)
    }
}

#[test]
fn timed_runs_every_call_and_times_them_on_the_stream() {
    let n = 3u32;
    let lib = Library::new(Topology::from_arg("nvswitch:3").unwrap());
    let reg = Arc::new(Registry::new().with_provider(Box::new(Lib(lib))));
    let comms = Communicator::create_local(n, reg, Duration::from_secs(60));
    let spec = CallSpec {
        collective: Collective::Allreduce,
        count: 100_003,
        dtype: DType::I32,
        op: RedOp::Sum,
        root: None,
    };
    let ins = inputs(spec.collective, spec.dtype, spec.op, n, spec.count, 7);
    let want = reference(spec.collective, spec.dtype, spec.op, None, &ins);
    let iters = 6;
    std::thread::scope(|s| {
        for (r, c) in comms.iter().enumerate() {
            let (ins, want) = (&ins, &want);
            s.spawn(move || {
                let before = c.stats().launches;
                let mut recv = vec![0u8; spec.count * 4];
                let start = Instant::now();
                let t = c
                    .timed(
                        &spec,
                        Buffers::OutOfPlace {
                            send: &ins[r],
                            recv: &mut recv,
                        },
                        iters,
                    )
                    .unwrap();
                let wall = start.elapsed();
                // Every call ran (one launch each) and the stream's time lies within the
                // host's, and is not zero.
                assert_eq!(c.stats().launches - before, u64::from(iters));
                assert!(
                    t > Duration::ZERO && t <= wall,
                    "stream time {t:?}, wall {wall:?}"
                );
                // Out of place, every repetition leaves the same right result.
                let w = want[r].as_ref().unwrap();
                assert_eq!(first_mismatch(spec.dtype, w, &recv), None, "rank {r}");
            });
        }
    });
}

#[test]
fn timed_refuses_short_buffers_like_a_call() {
    let lib = Library::new(Topology::from_arg("nvswitch:2").unwrap());
    let reg = Arc::new(Registry::new().with_provider(Box::new(Lib(lib))));
    let comms = Communicator::create_local(2, reg, Duration::from_secs(60));
    let spec = CallSpec {
        collective: Collective::Allgather,
        count: 10,
        dtype: DType::F32,
        op: RedOp::Sum,
        root: None,
    };
    let send = vec![0u8; 40];
    let mut recv = vec![0u8; 40]; // needs 80
    let e = comms[0]
        .timed(
            &spec,
            Buffers::OutOfPlace {
                send: &send,
                recv: &mut recv,
            },
            3,
        )
        .unwrap_err();
    assert!(e.to_string().contains("needs 80"), "{e}");
}

#[test]
fn measure_checks_times_and_names_the_plan_in_both_modes() {
    use braid_ir::Mode;
    use braid_runtime::bench::{measure, Case};
    let n = 4u32;
    let lib = Library::new(Topology::from_arg("nvswitch:4").unwrap());
    let reg = Arc::new(Registry::new().with_provider(Box::new(Lib(lib))));
    let comms = Communicator::create_local(n, reg, Duration::from_secs(60));
    for (c, mode) in [
        (Collective::Allgather, Mode::InPlace),
        (Collective::ReduceScatter, Mode::InPlace),
        (Collective::Allreduce, Mode::OutOfPlace),
        (Collective::Alltoall, Mode::OutOfPlace),
    ] {
        let case = Case {
            spec: CallSpec {
                collective: c,
                count: 1001,
                dtype: DType::F64,
                op: RedOp::Min,
                root: None,
            },
            mode,
            warmup: 1,
            iters: 3,
            runs: 3,
            sync: true,
            seed: 3,
        };
        let before = comms[0].stats().launches;
        let m = measure(&comms, &case).unwrap();
        assert_eq!(m.wrong, 0, "{c} {mode:?}");
        assert_eq!(m.runs.len(), 3);
        assert!(m.time() > Duration::ZERO && m.sync.is_some());
        assert_eq!(m.plan.collective, c);
        // The checked call, the warm-up, three runs of three, three synchronised calls.
        assert_eq!(
            comms[0].stats().launches - before,
            1 + 1 + 9 + 3,
            "{c} {mode:?}"
        );
    }
    let bad = Case {
        spec: CallSpec {
            collective: Collective::Alltoall,
            count: 8,
            dtype: DType::F32,
            op: RedOp::Sum,
            root: None,
        },
        mode: Mode::InPlace,
        warmup: 0,
        iters: 1,
        runs: 1,
        sync: false,
        seed: 1,
    };
    assert!(measure(&comms, &bad).is_err());
}
