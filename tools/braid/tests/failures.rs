//! Failures end calls with errors on every surviving rank, never a hang: a mismatched
//! call, a rank that never calls (timeout), an abort in the middle of a collective.

use braid_ir::{Collective, Shape};
use braid_runtime::comm::Buffers;
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::registry::{Origin, Registry};
use braid_runtime::{Communicator, RuntimeError};
use braid_topo::Topology;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn ring_registry(n: u32) -> Arc<Registry> {
    let topo = Topology::from_arg(&format!("nvswitch:{n}")).unwrap();
    let lib = braid_library::Library::new(topo);
    let registry = Registry::new();
    for p in lib.plans(Collective::Allreduce, None) {
        if p.name == "ring_allreduce" {
            registry
                .add(p.plan().clone(), Origin::User("ring".into()))
                .unwrap();
        }
    }
    let _ = Shape::single_node(n);
    Arc::new(registry)
}

/// Runs `f(rank, comm)` on one thread per rank and returns each rank's result.
fn on_all<T: Send>(comms: &[Communicator], f: impl Fn(u32, &Communicator) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter()
            .enumerate()
            .map(|(r, c)| {
                let f = &f;
                s.spawn(move || f(r as u32, c))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn allreduce(comm: &Communicator, count: usize) -> Result<(), RuntimeError> {
    let send = vec![1u8; count * 4];
    let mut recv = vec![0u8; count * 4];
    comm.all_reduce(
        Buffers::OutOfPlace {
            send: &send,
            recv: &mut recv,
        },
        count,
        DType::F32,
        RedOp::Sum,
    )
}

#[test]
fn a_mismatched_count_fails_on_every_rank() {
    let comms = Communicator::create_local(4, ring_registry(4), Duration::from_secs(10));
    let results = on_all(&comms, |r, c| {
        allreduce(c, if r == 2 { 1000 } else { 1024 })
    });
    for (r, res) in results.iter().enumerate() {
        match res {
            Err(RuntimeError::Mismatch(m)) => assert!(m.contains("count="), "rank {r}: {m}"),
            other => panic!("rank {r}: expected a mismatch error, got {other:?}"),
        }
    }
    // The communicators are unusable afterwards, like NCCL's after an error.
    assert!(allreduce(&comms[0], 1024).is_err());
}

#[test]
fn a_mismatched_dtype_or_collective_fails_on_every_rank() {
    let comms = Communicator::create_local(3, ring_registry(3), Duration::from_secs(10));
    let results = on_all(&comms, |r, c| {
        let send = vec![0u8; 3 * 64 * 8];
        let mut recv = vec![0u8; 3 * 64 * 8];
        if r == 1 {
            c.all_reduce(
                Buffers::OutOfPlace {
                    send: &send,
                    recv: &mut recv,
                },
                64,
                DType::F64,
                RedOp::Sum,
            )
        } else {
            c.all_reduce(
                Buffers::OutOfPlace {
                    send: &send,
                    recv: &mut recv,
                },
                64,
                DType::F32,
                RedOp::Sum,
            )
        }
    });
    assert!(
        results
            .iter()
            .all(|r| matches!(r, Err(RuntimeError::Mismatch(_)))),
        "{results:?}"
    );
}

#[test]
fn a_rank_that_never_calls_makes_the_others_time_out() {
    let timeout = Duration::from_millis(800);
    let comms = Communicator::create_local(3, ring_registry(3), timeout);
    let start = Instant::now();
    let results = on_all(
        &comms,
        |r, c| if r == 1 { Ok(()) } else { allreduce(c, 4096) },
    );
    let elapsed = start.elapsed();
    for r in [0usize, 2] {
        assert!(
            matches!(results[r], Err(RuntimeError::Timeout { .. })),
            "rank {r}: {:?}",
            results[r]
        );
    }
    assert!(
        elapsed < timeout + Duration::from_secs(3),
        "took {elapsed:?}"
    );
}

#[test]
fn aborting_one_rank_mid_collective_ends_the_call_everywhere() {
    // Every rank is inside large allreduces, moving data, when rank 3 is aborted (calls
    // back to back, so that however fast one call is, one is running then).
    let timeout = Duration::from_secs(30);
    let comms = Communicator::create_local(4, ring_registry(4), timeout);
    let start = Instant::now();
    let results = std::thread::scope(|s| {
        let killer = s.spawn(|| {
            std::thread::sleep(Duration::from_millis(150));
            comms[3].abort("rank 3 killed by the test");
        });
        let r = on_all(&comms, |_, c| {
            while start.elapsed() < Duration::from_secs(20) {
                allreduce(c, 1 << 23)?;
            }
            Ok(())
        });
        killer.join().unwrap();
        r
    });
    let elapsed = start.elapsed();
    for (r, res) in results.iter().enumerate() {
        match res {
            Err(RuntimeError::Aborted(m)) => assert!(m.contains("rank 3 killed"), "rank {r}: {m}"),
            other => panic!("rank {r}: expected an abort, got {other:?}"),
        }
    }
    assert!(
        elapsed < Duration::from_secs(10),
        "the abort took {elapsed:?}: it must not wait for the timeout"
    );
}

#[test]
fn no_plan_for_the_call_is_an_error_not_a_hang() {
    let comms = Communicator::create_local(2, Arc::new(Registry::new()), Duration::from_secs(5));
    let results = on_all(&comms, |_, c| allreduce(c, 16));
    for r in results {
        match r {
            Err(RuntimeError::Invalid(m)) => assert!(m.contains("no plan serves allreduce"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn short_buffers_are_refused_before_anything_runs() {
    let comms = Communicator::create_local(2, ring_registry(2), Duration::from_secs(5));
    let send = vec![0u8; 10];
    let mut recv = vec![0u8; 100];
    let err = comms[0]
        .all_reduce(
            Buffers::OutOfPlace {
                send: &send,
                recv: &mut recv,
            },
            16,
            DType::F32,
            RedOp::Sum,
        )
        .unwrap_err();
    assert!(
        matches!(err, RuntimeError::Invalid(ref m) if m.contains("send buffer has 10 bytes")),
        "{err}"
    );
}
