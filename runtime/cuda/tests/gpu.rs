//! The CUDA backend on real GPUs, one process driving both: every shipped algorithm for
//! two ranks, computed on two GPUs and compared element for element with the reference,
//! which the host backend must also match bit for bit on the same inputs (checked for
//! every case up to 1 MiB), over both wire protocols, peer to peer and host-staged, from
//! zero elements to 1 GiB. Without a CUDA driver every test prints why it skips and
//! passes, so CI stays green on machines without GPUs. (`gpu_procs.rs`: one process per
//! GPU.)
//!
//! `BRAID_CUDA_QUICK=1` runs a reduced matrix (one size per plan).

mod common;

use braid_cuda::{driver_present, CudaError, Gpus};
use braid_ir::{Collective, Mode, Protocol};
use braid_plan::{Execution, Plan};
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::reference::{first_mismatch, inputs, reference};
use braid_runtime::selfcheck::{buffer_elems, run_checked};
use common::{modes, plans, roots, Tally};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a test kernel waits for a peer before failing.
const KERNEL_TIMEOUT: Duration = Duration::from_secs(5);

/// GPU tests share the GPUs: one at a time.
static GPU: Mutex<()> = Mutex::new(());

/// Opens two GPUs, or says why the test skips.
fn gpus(test: &str) -> Option<Gpus> {
    gpus_with(test, false)
}

/// Opens two GPUs, connections host-staged when `staged`, or says why the test skips.
fn gpus_with(test: &str, staged: bool) -> Option<Gpus> {
    // Checked before any other cudarc call: without a driver those panic.
    if !driver_present() {
        eprintln!("skipping {test}: no CUDA driver on this machine");
        return None;
    }
    match Gpus::open_with(2, staged) {
        Ok(mut g) => {
            // Plans that deadlock (and the lonely-rank test) fail fast, not after
            // BRAID_TIMEOUT's default.
            g.set_timeout(KERNEL_TIMEOUT);
            Some(g)
        }
        Err(CudaError::Invalid(why)) => {
            eprintln!("skipping {test}: {why}");
            None
        }
        Err(e) => panic!("{test}: opening the GPUs failed: {e}"),
    }
}

/// Cases up to this many bytes also run on the host backend, which must match the same
/// reference: so both backends agree bit for bit.
const HOST_TOO: usize = 1 << 20;

/// Runs one call and compares it with the reference; `Err` describes a failure.
fn check(
    g: &Gpus,
    plan: &Plan,
    dtype: DType,
    op: RedOp,
    count: usize,
    mode: Mode,
) -> Result<f64, String> {
    let n = plan.n_ranks;
    if count == 0 {
        let out = g
            .run(plan, dtype, op, 0, mode, &vec![Vec::new(); n as usize])
            .map_err(|e| format!("error: {e}"))?;
        return match out.outputs.iter().flatten().find(|o| !o.is_empty()) {
            Some(o) => Err(format!("{} bytes for a zero count", o.len())),
            None => Ok(0.0),
        };
    }
    let inputs = inputs(plan.collective, dtype, op, n, count, 7);
    let expected = reference(plan.collective, dtype, op, plan.root, &inputs);
    let out = g
        .run(plan, dtype, op, count, mode, &inputs)
        .map_err(|e| format!("error: {e}"))?;
    for (r, (want, got)) in expected.iter().zip(&out.outputs).enumerate() {
        match (want, got) {
            (Some(w), Some(o)) => {
                if let Some((i, e, a)) = first_mismatch(dtype, w, o) {
                    return Err(format!("rank {r}: element {i}: expected {e}, got {a}"));
                }
            }
            (None, None) => {}
            _ => return Err(format!("rank {r}: output presence differs from reference")),
        }
    }
    let (i, o) = buffer_elems(plan.collective, n, count);
    if i.max(o) * dtype.size() <= HOST_TOO {
        let host = run_checked(plan, dtype, op, count, mode, 7, Duration::from_secs(60))
            .map_err(|e| format!("host backend: {e}"))?;
        if let Some((r, bad, i, want, got)) = host.wrong.first() {
            return Err(format!(
                "host backend: rank {r}: {bad} wrong, first element {i}: expected {want}, got {got}"
            ));
        }
    }
    Ok(out.kernel_time.as_secs_f64())
}

/// The plan as shipped (streaming) and, where it verifies so, replayed tiled (a plan safe
/// streaming is safe tiled): exercises the kernels' tile loop.
fn variants(plan: &Plan) -> Vec<Plan> {
    let mut v = vec![plan.clone()];
    if plan.execution == Execution::Streaming {
        let mut t = plan.clone();
        t.execution = Execution::Tiled;
        if braid_plan::verify(&t).is_ok() {
            v.push(t);
        }
    }
    v
}

/// Whether the host backend, given the same call, also fails to finish: then a GPU
/// timeout is the plan's (a deadlock the verifier's model misses), not this backend's.
fn host_deadlocks(plan: &Plan, d: DType, o: RedOp, count: usize, mode: Mode) -> bool {
    matches!(
        run_checked(plan, d, o, count, mode, 7, Duration::from_secs(10)),
        Err(braid_runtime::RuntimeError::Timeout { .. } | braid_runtime::RuntimeError::Aborted(_))
    )
}

/// The calls every streaming plan gets, each with a protocol (`None`: auto by size):
/// f32 sum at every size (auto, and Simple forced on the small ones, whose auto is LL;
/// LL forced on one that takes several LL slices), each other (dtype, op) at an odd size
/// of each protocol's range, 64 MiB in the larger buffer, and 1 GiB when `huge`.
fn matrix(
    counts: &[usize],
    others: &[(DType, RedOp)],
    quick: bool,
    huge: bool,
    c: Collective,
) -> Vec<(DType, RedOp, usize, Option<Protocol>)> {
    let f32sum = |k, p| (DType::F32, RedOp::Sum, k, p);
    let mut cases: Vec<_> = counts.iter().map(|&k| f32sum(k, None)).collect();
    if !quick {
        cases.push(f32sum(7, Some(Protocol::Simple)));
        cases.push(f32sum(1000, Some(Protocol::Simple)));
        cases.push(f32sum(65_537, Some(Protocol::Ll)));
    }
    for &(d, o) in others {
        cases.push((d, o, 999, None));
        if !quick {
            cases.push((d, o, 100_003, None));
        }
    }
    let (i, o) = buffer_elems(c, 2, 1);
    if !quick {
        cases.push(f32sum((16 << 20) / i.max(o), None));
    }
    if huge {
        cases.push(f32sum((256 << 20) / i.max(o), None));
    }
    cases
}

#[test]
fn every_algorithm_matches_the_reference_on_two_gpus() {
    let _l = GPU.lock().unwrap_or_else(|e| e.into_inner());
    let Some(g) = gpus("every_algorithm_matches_the_reference_on_two_gpus") else {
        return;
    };
    let quick = std::env::var("BRAID_CUDA_QUICK").is_ok();
    let counts: &[usize] = if quick {
        &[1001]
    } else {
        &[0, 1, 7, 1000, 65_537, 1 << 20]
    };
    let mut g = g;
    // (dtype, op) beyond f32 sum, on every plan at one odd and one even size.
    let others = [
        (DType::F16, RedOp::Sum),
        (DType::Bf16, RedOp::Max),
        (DType::F64, RedOp::Prod),
        (DType::I8, RedOp::Min),
        (DType::U8, RedOp::Sum),
        (DType::I32, RedOp::Avg),
        (DType::U32, RedOp::Max),
        (DType::I64, RedOp::Prod),
        (DType::U64, RedOp::Sum),
        (DType::F32, RedOp::Avg),
    ];
    let (mut pass, mut fail, mut host) = (0, Vec::new(), Vec::new());
    let start = Instant::now();
    for c in Collective::ALL {
        for root in roots(c) {
            let shipped = plans(c, root);
            for (p, plan) in shipped.iter().flat_map(|p| variants(p)).enumerate() {
                for mode in modes(&plan) {
                    let tiled = plan.execution == Execution::Tiled;
                    let cases = if tiled {
                        // The tiled replay of a streaming plan: a few cases suffice.
                        vec![
                            (DType::F32, RedOp::Sum, 65_537, None),
                            (DType::F32, RedOp::Sum, 65_537, Some(Protocol::Ll)),
                            (DType::F32, RedOp::Sum, 3 << 20, None),
                            (DType::Bf16, RedOp::Sum, 999, None),
                            (DType::I32, RedOp::Prod, 100_003, None),
                        ]
                    } else {
                        // 1 GiB once per collective and root: the first plan, out of place.
                        let huge = !quick && p == 0 && mode == Mode::OutOfPlace;
                        matrix(counts, &others, quick, huge, c)
                    };
                    for (d, o, k, proto) in cases {
                        let exec = if tiled { " (tiled)" } else { "" };
                        let forced = proto.map(|p| format!(" {}", p.name())).unwrap_or_default();
                        let what = format!(
                            "{}{exec} {c} root={root:?} {mode:?} {d} {o} count={k}{forced}",
                            plan.name
                        );
                        g.set_protocol(proto);
                        match check(&g, &plan, d, o, k, mode) {
                            Ok(t) => {
                                pass += 1;
                                if k >= 1 << 20 {
                                    println!("ok   {what}  kernel {:.3} ms", t * 1e3);
                                }
                            }
                            Err(e) if k <= 1 << 22 && host_deadlocks(&plan, d, o, k, mode) => {
                                println!("HOST {what}: the host backend times out too: {e}");
                                host.push(what);
                            }
                            Err(e) => {
                                println!("FAIL {what}: {e}");
                                fail.push(what);
                            }
                        }
                    }
                }
            }
        }
    }
    println!(
        "summary: {pass} passed, {} failed, {} time out on the host backend too, {:.1} s",
        fail.len(),
        host.len(),
        start.elapsed().as_secs_f64()
    );
    assert!(fail.is_empty(), "{} cases failed: {fail:#?}", fail.len());
}

#[test]
fn a_plan_pointing_outside_its_buffers_is_refused_before_launch() {
    let _l = GPU.lock().unwrap_or_else(|e| e.into_inner());
    let Some(g) = gpus("a_plan_pointing_outside_its_buffers_is_refused_before_launch") else {
        return;
    };
    let mut plan = (*plans(Collective::Allreduce, None)[0]).clone();
    let step = plan.ranks[0].blocks[0]
        .steps
        .iter_mut()
        .find(|s| s.src.is_some())
        .expect("a step with a source");
    step.src.as_mut().unwrap().offset += plan.chunks;
    let inputs = vec![vec![0u8; 4 * 1024]; 2];
    match g.run(
        &plan,
        DType::F32,
        RedOp::Sum,
        1024,
        Mode::OutOfPlace,
        &inputs,
    ) {
        Err(e @ (CudaError::Unverified { .. } | CudaError::Invalid(_))) => {
            println!(
                "refused as expected: {}",
                e.to_string().lines().next().unwrap_or("")
            );
        }
        other => panic!("expected a refusal before launch, got {other:?}"),
    }
}

/// Rank inputs for an f32 sum of `count` elements and what each rank must end with.
fn sum_case(plan: &Plan, count: usize) -> (Vec<Vec<u8>>, Vec<Option<Vec<u8>>>) {
    let inputs = inputs(
        plan.collective,
        DType::F32,
        RedOp::Sum,
        plan.n_ranks,
        count,
        11,
    );
    let expected = reference(plan.collective, DType::F32, RedOp::Sum, plan.root, &inputs);
    (inputs, expected)
}

fn compare(expected: &[Option<Vec<u8>>], got: &[Option<Vec<u8>>]) -> Result<(), String> {
    for (r, (want, got)) in expected.iter().zip(got).enumerate() {
        match (want, got) {
            (Some(w), Some(o)) => {
                if let Some((i, e, a)) = first_mismatch(DType::F32, w, o) {
                    return Err(format!("rank {r}: element {i}: expected {e}, got {a}"));
                }
            }
            (None, None) => {}
            _ => return Err(format!("rank {r}: output presence differs from reference")),
        }
    }
    Ok(())
}

/// Fresh caller-owned streams, one per GPU (forked from the `Gpus`' own).
fn caller_streams(g: &Gpus) -> Vec<Arc<cudarc::driver::CudaStream>> {
    g.streams().iter().map(|s| s.fork().unwrap()).collect()
}

#[test]
fn enqueue_returns_before_the_kernels_finish() {
    let _l = GPU.lock().unwrap_or_else(|e| e.into_inner());
    let Some(g) = gpus("enqueue_returns_before_the_kernels_finish") else {
        return;
    };
    let plan = plans(Collective::Allreduce, None)[0].clone();
    // 256 MiB of f32 per rank: each call takes on the order of a millisecond.
    let count = 64 << 20;
    let (inputs, expected) = sum_case(&plan, count);
    let call = g
        .prepare(
            &plan,
            DType::F32,
            RedOp::Sum,
            count,
            Mode::OutOfPlace,
            &inputs,
        )
        .unwrap();
    let one = call.launch().unwrap(); // warm-up (module load), synchronous
    let streams = caller_streams(&g);
    let mut best = None::<(Duration, Duration, bool)>;
    for _ in 0..3 {
        let t0 = Instant::now();
        for _ in 0..3 {
            call.enqueue(&streams).unwrap();
        }
        let enqueue = t0.elapsed();
        // Still running when enqueue returned: the host did not wait for the GPUs.
        let pending = streams.iter().any(|s| {
            // SAFETY: queries a live stream.
            let r = unsafe { cudarc::driver::sys::cuStreamQuery(s.cu_stream()) };
            r == cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_READY
        });
        for s in &streams {
            s.synchronize().unwrap();
        }
        let total = t0.elapsed();
        call.status().unwrap();
        compare(&expected, &call.outputs().unwrap()).unwrap();
        println!(
            "3 enqueued allreduce calls of {} MiB: enqueue {:?}, enqueue+sync {:?} \
             (one synchronous launch {:?}), work pending after enqueue: {pending}",
            call.bytes() >> 20,
            enqueue,
            total,
            one
        );
        let ratio = |e: Duration, t: Duration| e.as_secs_f64() / t.as_secs_f64();
        if best.is_none_or(|(e, t, _)| ratio(enqueue, total) < ratio(e, t)) {
            best = Some((enqueue, total, pending));
        }
    }
    let (enqueue, total, pending) = best.unwrap();
    assert!(pending, "the streams were idle when enqueue returned");
    assert!(
        enqueue * 5 < total,
        "enqueue {enqueue:?} is not far below enqueue+sync {total:?}"
    );
}

#[test]
fn an_enqueued_allreduce_replays_from_a_cuda_graph() {
    use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let _l = GPU.lock().unwrap_or_else(|e| e.into_inner());
    let Some(g) = gpus("an_enqueued_allreduce_replays_from_a_cuda_graph") else {
        return;
    };
    for plan in plans(Collective::Allreduce, None) {
        for count in [1000, 1 << 20, 3 << 20] {
            let (inputs, expected) = sum_case(&plan, count);
            let call = g
                .prepare(
                    &plan,
                    DType::F32,
                    RedOp::Sum,
                    count,
                    Mode::OutOfPlace,
                    &inputs,
                )
                .unwrap();
            let streams = caller_streams(&g);
            // Each GPU's stream is captured on its own: one graph per GPU.
            for s in &streams {
                s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
                    .unwrap();
            }
            call.enqueue(&streams).unwrap();
            let graphs: Vec<_> = streams
                .iter()
                .map(|s| {
                    s.end_capture(CUgraphInstantiate_flags(0))
                        .unwrap()
                        .expect("a captured graph")
                })
                .collect();
            for round in 0..3 {
                // Ten replays back to back, every GPU's graph before any synchronisation
                // (the kernels wait for each other), nothing reset in between.
                for _ in 0..10 {
                    for gr in &graphs {
                        gr.launch().unwrap();
                    }
                }
                for s in &streams {
                    s.synchronize().unwrap();
                }
                call.status().unwrap();
                if let Err(e) = compare(&expected, &call.outputs().unwrap()) {
                    panic!("{} count {count} graph round {round}: {e}", plan.name);
                }
            }
            println!(
                "{}: count {count} ({:?}): 30 graph replays match the reference",
                plan.name,
                call.wire()
            );
        }
    }
}

#[test]
fn host_staged_connections_match_the_reference() {
    let _l = GPU.lock().unwrap_or_else(|e| e.into_inner());
    let test = "host_staged_connections_match_the_reference";
    let Some(mut g) = gpus_with(test, true) else {
        return;
    };
    assert!(!g.p2p());
    let mut t = Tally::default();
    for c in Collective::ALL {
        for root in roots(c) {
            for plan in plans(c, root) {
                for mode in modes(&plan) {
                    for (k, proto) in [(999, None), (999, Some(Protocol::Simple)), (1 << 20, None)]
                    {
                        g.set_protocol(proto);
                        let what = format!(
                            "host-staged {} {c} root={root:?} {mode:?} count={k} {proto:?}",
                            plan.name
                        );
                        t.record(
                            what,
                            check(&g, &plan, DType::F32, RedOp::Sum, k, mode),
                            false,
                        );
                    }
                }
            }
        }
    }
    t.assert_all_passed("host-staged");
}

#[test]
fn a_plan_that_deadlocks_becomes_an_error_and_the_next_call_works() {
    let _l = GPU.lock().unwrap_or_else(|e| e.into_inner());
    let test = "a_plan_that_deadlocks_becomes_an_error_and_the_next_call_works";
    let Some(g) = gpus(test) else {
        return;
    };
    // A peer that never runs its part: rank 0 waits for data that never comes.
    let plan = plans(Collective::Allreduce, None)[0].clone();
    let (inputs, expected) = sum_case(&plan, 4096);
    let call = g
        .prepare(
            &plan,
            DType::F32,
            RedOp::Sum,
            4096,
            Mode::OutOfPlace,
            &inputs,
        )
        .unwrap();
    // Only rank 0 launches: it must time out, not hang.
    let streams = caller_streams(&g);
    let t0 = Instant::now();
    call.enqueue_rank(0, &streams[0]).unwrap();
    streams[0].synchronize().unwrap();
    let err = call
        .status()
        .expect_err("a rank without its peer must fail");
    println!(
        "lonely rank: {err} after {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    assert!(matches!(err, CudaError::Kernel { rank: 0, .. }), "{err}");
    // After the reset, a normal call is right again.
    call.reset().unwrap();
    call.launch().unwrap();
    compare(&expected, &call.outputs().unwrap()).unwrap();
}

/// Every dtype with every op (all 50 pairs; the big matrix pairs them 10 times), on the
/// first plan of each collective, out of place, at an LL size and a Simple size.
#[test]
fn every_dtype_with_every_op_on_each_collective() {
    let _l = GPU.lock().unwrap_or_else(|e| e.into_inner());
    let Some(g) = gpus("every_dtype_with_every_op_on_each_collective") else {
        return;
    };
    let mut t = Tally::default();
    for c in Collective::ALL {
        let root = c.is_rooted().then_some(1);
        let plan = plans(c, root)[0].clone();
        let ops: &[RedOp] = if c.reduces() {
            &RedOp::ALL
        } else {
            &[RedOp::Sum]
        };
        for d in DType::ALL {
            for &o in ops {
                for k in [999, 100_003] {
                    let what = format!("{} {c} {d} {o} count={k}", plan.name);
                    t.record(what, check(&g, &plan, d, o, k, Mode::OutOfPlace), false);
                }
            }
        }
    }
    t.assert_all_passed("dtype x op");
}
