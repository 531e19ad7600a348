//! The device communicator's logic on the host backend, through the same interface the
//! CUDA backend implements (`DeviceComm` over an `Engine`): calls enqueued on streams with
//! raw buffer addresses, any count (odd, zero), in and out of place, several ranks per
//! process, groups, rounds through a small scratch memory, two communicators at once,
//! nothing set up per call after the first, abort, and a mismatched call.

use braid_ir::{Collective, Mode};
use braid_library::Library;
use braid_plan::Verified;
use braid_runtime::call::CallSpec;
use braid_runtime::device_comm::{enqueue_group, DeviceComm, GroupCall};
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::fabric::InProcGroup;
use braid_runtime::host_engine::{HostEngine, HostStream};
use braid_runtime::policy::Policy;
use braid_runtime::reference::{first_mismatch, inputs, reference};
use braid_runtime::registry::{PlanProvider, Registry};
use braid_runtime::RuntimeError;
use braid_topo::Topology;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Lib(Library);

impl PlanProvider for Lib {
    fn plans(&self, c: Collective, root: Option<u32>) -> Vec<Arc<Verified>> {
        self.0.plans(c, root)
    }
}

fn registry(n: u32) -> Arc<Registry> {
    let lib = Library::new(Topology::from_arg(&format!("nvswitch:{n}")).unwrap());
    Arc::new(Registry::new().with_provider(Box::new(Lib(lib))))
}

struct Ranks {
    comms: Vec<DeviceComm<HostEngine>>,
    streams: Vec<HostStream>,
}

fn open(n: u32, scratch: usize, timeout: Duration) -> Ranks {
    open_with(n, scratch, timeout, Policy::default())
}

fn open_with(n: u32, scratch: usize, timeout: Duration, policy: Policy) -> Ranks {
    let group = InProcGroup::new(n);
    let reg = registry(n);
    let comms = (0..n)
        .map(|r| {
            let e = HostEngine::with_scratch(Box::new(group.member(r)), timeout, scratch);
            DeviceComm::new(e, reg.clone(), policy.clone())
        })
        .collect();
    let streams = (0..n).map(|_| HostStream::new()).collect();
    Ranks { comms, streams }
}

/// One rank's buffers for a call, as an application holds them.
struct Bufs {
    send: Vec<u8>,
    recv: Vec<u8>,
    in_place: bool,
}

impl Bufs {
    fn new(spec: &CallSpec, rank: u32, n: u32, mode: Mode, input: &[u8]) -> Bufs {
        let s = spec.sizes(rank, n);
        match mode {
            Mode::OutOfPlace => {
                let mut send = vec![0u8; s.send.unwrap_or(0)];
                if s.send.is_some() {
                    send.copy_from_slice(input);
                }
                Bufs {
                    send,
                    recv: vec![0xAA; s.recv.unwrap_or(0)],
                    in_place: false,
                }
            }
            Mode::InPlace => {
                let mut one = vec![0xAA; s.larger];
                if s.send.is_some() {
                    let (i, _) = spec.in_place_buffers(rank, 0);
                    one[i as usize..i as usize + input.len()].copy_from_slice(input);
                }
                Bufs {
                    send: one,
                    recv: Vec::new(),
                    in_place: true,
                }
            }
        }
    }

    /// NCCL's `sendbuff` and `recvbuff`.
    fn addrs(&mut self, spec: &CallSpec, rank: u32) -> (u64, u64) {
        if self.in_place {
            spec.in_place_buffers(rank, self.send.as_mut_ptr() as u64)
        } else {
            let s = if self.send.is_empty() {
                8
            } else {
                self.send.as_ptr() as u64
            };
            let r = if self.recv.is_empty() {
                8
            } else {
                self.recv.as_mut_ptr() as u64
            };
            (s, r)
        }
    }

    fn output(&self, spec: &CallSpec, rank: u32, n: u32) -> Option<Vec<u8>> {
        let len = spec.sizes(rank, n).recv?;
        Some(if self.in_place {
            let (_, o) = spec.in_place_buffers(rank, 0);
            self.send[o as usize..o as usize + len].to_vec()
        } else {
            self.recv[..len].to_vec()
        })
    }
}

/// Every rank's call as one group, waited for, checked against the reference.
fn run(r: &Ranks, spec: &CallSpec, mode: Mode, seed: u64) -> Result<(), String> {
    let n = r.comms.len() as u32;
    let ins = inputs(spec.collective, spec.dtype, spec.op, n, spec.count, seed);
    let mut bufs: Vec<Bufs> = (0..n)
        .map(|k| Bufs::new(spec, k, n, mode, &ins[k as usize]))
        .collect();
    let addrs: Vec<(u64, u64)> = bufs
        .iter_mut()
        .enumerate()
        .map(|(k, b)| b.addrs(spec, k as u32))
        .collect();
    let calls: Vec<GroupCall<HostEngine>> = r
        .comms
        .iter()
        .zip(&r.streams)
        .zip(&addrs)
        .map(|((comm, stream), &(send, recv))| GroupCall {
            comm,
            spec: *spec,
            send,
            recv,
            stream,
        })
        .collect();
    // SAFETY: the buffers hold the call's sizes and live until the streams are synchronised
    // below.
    unsafe { enqueue_group(&calls) }.map_err(|e| e.to_string())?;
    for s in &r.streams {
        s.synchronize().map_err(|e| e.to_string())?;
    }
    if spec.count == 0 {
        return Ok(());
    }
    let expected = reference(spec.collective, spec.dtype, spec.op, spec.root, &ins);
    for (k, (b, want)) in bufs.iter().zip(&expected).enumerate() {
        let got = b.output(spec, k as u32, n);
        match (want, got) {
            (None, None) => {}
            (Some(w), Some(g)) => {
                if let Some((i, x, y)) = first_mismatch(spec.dtype, w, &g) {
                    return Err(format!("rank {k}: element {i}: expected {x}, got {y}"));
                }
            }
            (w, g) => {
                return Err(format!(
                    "rank {k}: output presence {} vs {}",
                    w.is_some(),
                    g.is_some()
                ))
            }
        }
    }
    Ok(())
}

fn modes(c: Collective) -> Vec<Mode> {
    if c == Collective::Alltoall {
        vec![Mode::OutOfPlace]
    } else {
        vec![Mode::OutOfPlace, Mode::InPlace]
    }
}

#[test]
fn every_collective_on_raw_buffers_any_count_and_mode_on_one_to_eight_ranks() {
    let mut failures = Vec::new();
    let mut runs = 0;
    for n in [1u32, 2, 3, 8] {
        let r = open(n, 32 << 20, Duration::from_secs(30));
        for c in Collective::ALL {
            let roots = if c.is_rooted() {
                vec![Some(0), Some(n - 1)]
            } else {
                vec![None]
            };
            for root in roots {
                for (i, count) in [0usize, 1, 7, 1003].into_iter().enumerate() {
                    let (d, o) = [
                        (DType::F32, RedOp::Sum),
                        (DType::Bf16, RedOp::Avg),
                        (DType::I8, RedOp::Min),
                        (DType::U64, RedOp::Prod),
                    ][i];
                    let spec = CallSpec {
                        collective: c,
                        count,
                        dtype: d,
                        op: o,
                        root,
                    };
                    for mode in modes(c) {
                        runs += 1;
                        if let Err(e) = run(&r, &spec, mode, runs) {
                            failures.push(format!("n={n} {c} {root:?} {count} {mode}: {e}"));
                        }
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {runs} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn calls_chosen_by_the_cost_model_are_right_and_are_what_the_model_chose() {
    // The policy as libnccl and `braid perf --backend cuda` attach it; the host engine
    // offers a GPU-like target only through the policy's own checks, so the choice is
    // compared with a direct `choose` on the same registry and target.
    let n = 4;
    let topo = Topology::from_arg("nvswitch:4").unwrap();
    let policy = Policy::default().with_model(topo, braid_cost::Profile::default());
    let r = open_with(n, 32 << 20, Duration::from_secs(30), policy.clone());
    let mut runs = 0;
    for c in Collective::ALL {
        for count in [1usize, 1003, 300_001] {
            let spec = CallSpec {
                collective: c,
                count,
                dtype: DType::F32,
                op: RedOp::Sum,
                root: c.is_rooted().then_some(1),
            };
            for mode in modes(c) {
                runs += 1;
                run(&r, &spec, mode, runs).unwrap_or_else(|e| panic!("{c} {count} {mode}: {e}"));
                let (plan, proto) = r.comms[0].selection(&spec, mode).unwrap().unwrap();
                let req = braid_runtime::policy::Request {
                    collective: c,
                    n_ranks: n,
                    root: spec.root,
                    mode,
                    bytes: spec.sizes(0, n).larger,
                    elem: 4,
                };
                let want = policy
                    .choose(
                        r.comms[0].registry(),
                        &req,
                        &braid_runtime::policy::Target::HOST,
                    )
                    .unwrap();
                assert_eq!(
                    (plan.name.as_str(), proto),
                    (want.plan.name.as_str(), want.protocol),
                    "{c} {count} {mode}"
                );
            }
        }
    }
}

#[test]
fn a_small_scratch_runs_large_calls_in_rounds() {
    // ring_reduce_scatter keeps partial sums in scratch (C chunks): with 4 KiB of scratch,
    // 100,003 f32 per rank take many rounds.
    let r = open(3, 4096, Duration::from_secs(30));
    for (count, mode) in [(100_003usize, Mode::OutOfPlace), (33_331, Mode::InPlace)] {
        let spec = CallSpec {
            collective: Collective::ReduceScatter,
            count,
            dtype: DType::F32,
            op: RedOp::Sum,
            root: None,
        };
        run(&r, &spec, mode, 4).unwrap();
    }
    // A scratch memory too small for even one vector per chunk is refused, not overrun.
    let tiny = open(2, 8, Duration::from_secs(30));
    let spec = CallSpec {
        collective: Collective::ReduceScatter,
        count: 64,
        dtype: DType::F32,
        op: RedOp::Sum,
        root: None,
    };
    let e = run(&tiny, &spec, Mode::OutOfPlace, 1).unwrap_err();
    assert!(e.contains("bytes of scratch"), "{e}");
}

#[test]
fn replicas_run_ahead_through_rounds_without_touching_each_others_scratch() {
    // Every block runs through the rounds on its own, as on a GPU; with several replicas
    // and a scratch memory of a few rounds, a replica that runs ahead into a short last
    // round must not reuse scratch another replica still reads (found on a GPU with
    // tree_reduce on 8 ranks).
    for replicas in [3u32, 4] {
        let policy = Policy {
            replicas: Some(replicas),
            ..Policy::default()
        };
        let r = open_with(8, 4096, Duration::from_secs(60), policy);
        for (c, root, count) in [
            (Collective::Reduce, Some(0), 40_003usize),
            (Collective::Reduce, Some(7), 40_003),
            (Collective::ReduceScatter, None, 9_001),
        ] {
            for (d, o) in [(DType::F32, RedOp::Sum), (DType::Bf16, RedOp::Max)] {
                let spec = CallSpec {
                    collective: c,
                    count,
                    dtype: d,
                    op: o,
                    root,
                };
                for seed in 0..3 {
                    run(&r, &spec, Mode::OutOfPlace, seed).unwrap_or_else(|e| {
                        panic!("{replicas} replicas, {c} {root:?} {}: {e}", d.name())
                    });
                }
            }
        }
    }
}

#[test]
fn nothing_is_set_up_per_call_after_the_first() {
    let r = open(4, 32 << 20, Duration::from_secs(30));
    for (c, count) in [
        (Collective::Allreduce, 1usize << 16),
        (Collective::ReduceScatter, 999),
        (Collective::Allgather, 5),
    ] {
        let spec = CallSpec {
            collective: c,
            count,
            dtype: DType::F32,
            op: RedOp::Sum,
            root: None,
        };
        run(&r, &spec, Mode::OutOfPlace, 1).unwrap();
        let before: Vec<_> = r.comms.iter().map(|c| c.stats()).collect();
        assert!(before
            .iter()
            .all(|s| s.prepared > 0 && s.verifications + s.prepared > 0));
        for i in 0..20 {
            run(&r, &spec, Mode::OutOfPlace, i).unwrap();
        }
        for (k, (c, b)) in r.comms.iter().zip(&before).enumerate() {
            let now = c.stats();
            assert_eq!(now.setup(), b.setup(), "rank {k} set something up per call");
            assert_eq!(now.launches, b.launches + 20, "rank {k}");
        }
    }
    // A new size of the same kind selects the same plan: no new preparation either.
    let spec = CallSpec {
        collective: Collective::Allgather,
        count: 6,
        dtype: DType::F32,
        op: RedOp::Sum,
        root: None,
    };
    let before = r.comms[0].stats();
    run(&r, &spec, Mode::OutOfPlace, 3).unwrap();
    assert_eq!(r.comms[0].stats().prepared, before.prepared);
}

/// One rank: every collective is its input; out of place a copy, in place nothing. No
/// plan is prepared or launched (what NCCL does too), and the results are right.
#[test]
fn one_rank_copies_or_does_nothing_and_runs_no_plan() {
    let r = open(1, 1 << 20, Duration::from_secs(30));
    for c in [
        Collective::Allreduce,
        Collective::Allgather,
        Collective::ReduceScatter,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::Alltoall,
    ] {
        for mode in modes(c) {
            for (dtype, op) in [(DType::F32, RedOp::Sum), (DType::I32, RedOp::Avg)] {
                let spec = CallSpec {
                    collective: c,
                    count: 1001,
                    dtype,
                    op,
                    root: c.is_rooted().then_some(0),
                };
                run(&r, &spec, mode, 7).unwrap_or_else(|e| panic!("{c} {mode:?}: {e}"));
            }
        }
    }
    let s = r.comms[0].stats();
    assert_eq!((s.launches, s.prepared), (0, 0), "{s:?}");
}

#[test]
fn two_communicators_with_many_calls_in_flight() {
    let a = open(2, 32 << 20, Duration::from_secs(30));
    let b = open(2, 32 << 20, Duration::from_secs(30));
    std::thread::scope(|s| {
        let ta = s.spawn(|| {
            for i in 0..10 {
                let spec = CallSpec {
                    collective: Collective::Allreduce,
                    count: 1001 + i,
                    dtype: DType::I32,
                    op: RedOp::Max,
                    root: None,
                };
                run(&a, &spec, Mode::InPlace, i as u64).unwrap();
            }
        });
        let tb = s.spawn(|| {
            for i in 0..10 {
                let spec = CallSpec {
                    collective: Collective::Allgather,
                    count: 77 + i,
                    dtype: DType::F16,
                    op: RedOp::Sum,
                    root: None,
                };
                run(&b, &spec, Mode::OutOfPlace, i as u64).unwrap();
            }
        });
        ta.join().unwrap();
        tb.join().unwrap();
    });
}

#[test]
fn abort_ends_a_waiting_call_and_the_next_call_reports_it() {
    let r = open(2, 32 << 20, Duration::from_secs(300));
    let spec = CallSpec {
        collective: Collective::Allreduce,
        count: 4096,
        dtype: DType::F32,
        op: RedOp::Sum,
        root: None,
    };
    let send = vec![1u8; 4096 * 4];
    let mut recv = vec![0u8; 4096 * 4];
    // Rank 0 calls; rank 1 never does.
    // SAFETY: the buffers live until the stream is synchronised below.
    unsafe {
        r.comms[0]
            .enqueue(
                &spec,
                send.as_ptr() as u64,
                recv.as_mut_ptr() as u64,
                &r.streams[0],
            )
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    assert!(!r.streams[0].is_idle(), "the lonely call must be waiting");
    let t = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| r.comms[0].abort("aborted by the test"));
    });
    let done = r.streams[0].synchronize();
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "the stream took {:?} to drain",
        t.elapsed()
    );
    assert!(matches!(done, Err(RuntimeError::Aborted(_))), "{done:?}");
    // SAFETY: as above.
    let next = unsafe {
        r.comms[0].enqueue(
            &spec,
            send.as_ptr() as u64,
            recv.as_mut_ptr() as u64,
            &r.streams[0],
        )
    };
    match next {
        Err(RuntimeError::Aborted(m)) => assert!(m.contains("aborted by the test"), "{m}"),
        other => panic!("expected the abort to be reported, got {other:?}"),
    }
    assert_eq!(
        r.comms[0].async_error().as_deref(),
        Some("aborted by the test")
    );
}

#[test]
fn invalid_calls_are_refused_and_leave_the_communicator_usable() {
    let r = open(2, 32 << 20, Duration::from_secs(30));
    let bad_root = CallSpec {
        collective: Collective::Broadcast,
        count: 4,
        dtype: DType::F32,
        op: RedOp::Sum,
        root: Some(2),
    };
    // SAFETY: refused before anything runs.
    let e = unsafe { r.comms[0].enqueue(&bad_root, 8, 8, &r.streams[0]) }.unwrap_err();
    assert!(e.to_string().contains("root 2"), "{e}");
    let null = CallSpec {
        collective: Collective::Allreduce,
        count: 4,
        dtype: DType::F32,
        op: RedOp::Sum,
        root: None,
    };
    // SAFETY: refused before anything runs.
    let e = unsafe { r.comms[0].enqueue(&null, 0, 8, &r.streams[0]) }.unwrap_err();
    assert!(e.to_string().contains("send buffer is null"), "{e}");
    assert!(r.comms[0].async_error().is_none());
    run(&r, &null, Mode::OutOfPlace, 1).unwrap();
}

#[test]
fn a_mismatched_call_fails_on_every_rank() {
    let r = open(2, 32 << 20, Duration::from_secs(10));
    let ins = [vec![0u8; 400], vec![0u8; 404]];
    let mut outs = [vec![0u8; 400], vec![0u8; 404]];
    for k in 0..2 {
        let spec = CallSpec {
            collective: Collective::Allreduce,
            count: 100 + k,
            dtype: DType::F32,
            op: RedOp::Sum,
            root: None,
        };
        // SAFETY: the buffers live until the streams are synchronised.
        unsafe {
            r.comms[k]
                .enqueue(
                    &spec,
                    ins[k].as_ptr() as u64,
                    outs[k].as_mut_ptr() as u64,
                    &r.streams[k],
                )
                .unwrap();
        }
    }
    for s in &r.streams {
        match s.synchronize() {
            Err(RuntimeError::Mismatch(m)) => {
                assert!(m.contains("count=100") && m.contains("count=101"), "{m}")
            }
            other => panic!("expected a mismatch, got {other:?}"),
        }
    }
}

/// An engine whose preparation waits for every rank of the communicator (as the CUDA
/// backend's does across processes): the host engine with a barrier in `prepare` that
/// gives up after 10 s.
struct Rendezvous {
    inner: HostEngine,
    gate: Arc<Gate>,
}

struct Gate {
    n: usize,
    state: std::sync::Mutex<(usize, u64)>,
    cv: std::sync::Condvar,
}

impl Gate {
    fn wait(&self) -> braid_runtime::Result<()> {
        let mut s = self.state.lock().unwrap();
        let generation = s.1;
        s.0 += 1;
        if s.0 == self.n {
            *s = (0, generation + 1);
            self.cv.notify_all();
            return Ok(());
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while s.1 == generation {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(RuntimeError::Invalid(
                    "prepare waited 10 s for the other ranks".into(),
                ));
            }
            s = self.cv.wait_timeout(s, left).unwrap().0;
        }
        Ok(())
    }
}

impl braid_runtime::device_comm::Engine for Rendezvous {
    type Stream = HostStream;
    type Prepared = braid_runtime::host_engine::HostPrepared;

    fn rank(&self) -> u32 {
        self.inner.rank()
    }
    fn n_ranks(&self) -> u32 {
        self.inner.n_ranks()
    }
    fn target(&self) -> braid_runtime::policy::Target {
        self.inner.target()
    }
    fn scratch_bytes(&self) -> usize {
        self.inner.scratch_bytes()
    }
    fn stats(&self) -> &braid_runtime::device_comm::Stats {
        self.inner.stats()
    }
    fn prepare(
        &self,
        plan: &Arc<Verified>,
        dtype: DType,
        op: RedOp,
        protocol: braid_ir::Protocol,
    ) -> braid_runtime::Result<Self::Prepared> {
        self.gate.wait()?;
        self.inner.prepare(plan, dtype, op, protocol)
    }
    fn prepare_is_collective(&self) -> bool {
        true
    }
    unsafe fn launch(
        calls: &[braid_runtime::device_comm::Launch<'_, Self>],
    ) -> braid_runtime::Result<()> {
        let inner: Vec<braid_runtime::device_comm::Launch<'_, HostEngine>> = calls
            .iter()
            .map(|c| braid_runtime::device_comm::Launch {
                engine: &c.engine.inner,
                prepared: c.prepared,
                args: c.args,
                stream: c.stream,
            })
            .collect();
        // SAFETY: the caller's contract, passed on.
        unsafe { HostEngine::launch(&inner) }
    }
    fn abort(&self, reason: &str) {
        self.inner.abort(reason)
    }
    fn failure(&self) -> Option<String> {
        self.inner.failure()
    }
}

/// Ranks whose preparation is collective, all called from one thread in one group (as
/// ncclGroupStart/End over ranks made one by one): they prepare side by side instead of
/// the first waiting for the others forever. Twice: the second call finds everything
/// prepared and stays on the calling thread.
#[test]
fn one_thread_grouping_ranks_whose_preparation_is_collective_does_not_deadlock() {
    let n = 3u32;
    let group = InProcGroup::new(n);
    let reg = registry(n);
    let gate = Arc::new(Gate {
        n: n as usize,
        state: std::sync::Mutex::new((0, 0)),
        cv: std::sync::Condvar::new(),
    });
    let comms: Vec<DeviceComm<Rendezvous>> = (0..n)
        .map(|r| {
            let inner = HostEngine::with_scratch(
                Box::new(group.member(r)),
                Duration::from_secs(30),
                1 << 20,
            );
            DeviceComm::new(
                Rendezvous {
                    inner,
                    gate: gate.clone(),
                },
                reg.clone(),
                Policy::default(),
            )
        })
        .collect();
    let streams: Vec<HostStream> = (0..n).map(|_| HostStream::new()).collect();
    let spec = CallSpec {
        collective: Collective::Allreduce,
        count: 1000,
        dtype: DType::F32,
        op: RedOp::Sum,
        root: None,
    };
    for seed in 0..2 {
        let ins = inputs(spec.collective, spec.dtype, spec.op, n, spec.count, seed);
        let mut outs: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; spec.count * 4]).collect();
        let calls: Vec<GroupCall<Rendezvous>> = comms
            .iter()
            .zip(&streams)
            .zip(ins.iter().zip(outs.iter_mut()))
            .map(|((comm, stream), (i, o))| GroupCall {
                comm,
                spec,
                send: i.as_ptr() as u64,
                recv: o.as_mut_ptr() as u64,
                stream,
            })
            .collect();
        // SAFETY: every buffer holds the call's 4000 bytes and outlives the streams'
        // synchronisation below.
        unsafe { enqueue_group(&calls) }.unwrap();
        for s in &streams {
            s.synchronize().unwrap();
        }
        let want = reference(spec.collective, spec.dtype, spec.op, None, &ins);
        for (r, (o, w)) in outs.iter().zip(&want).enumerate() {
            let w = w.as_ref().unwrap();
            assert!(first_mismatch(spec.dtype, w, o).is_none(), "rank {r}");
        }
    }
    assert!(comms.iter().all(|c| c.stats().prepared == 1));
}

/// An engine that records step times: the host engine, with `recorded` steps timed
/// (step i from 10 i to 10 i + 5 ns) after each call.
struct Timed {
    inner: HostEngine,
    recorded: std::sync::atomic::AtomicUsize,
}

impl braid_runtime::device_comm::Engine for Timed {
    type Stream = HostStream;
    type Prepared = braid_runtime::host_engine::HostPrepared;

    fn rank(&self) -> u32 {
        self.inner.rank()
    }
    fn n_ranks(&self) -> u32 {
        self.inner.n_ranks()
    }
    fn target(&self) -> braid_runtime::policy::Target {
        self.inner.target()
    }
    fn scratch_bytes(&self) -> usize {
        self.inner.scratch_bytes()
    }
    fn stats(&self) -> &braid_runtime::device_comm::Stats {
        self.inner.stats()
    }
    fn prepare(
        &self,
        plan: &Arc<Verified>,
        dtype: DType,
        op: RedOp,
        protocol: braid_ir::Protocol,
    ) -> braid_runtime::Result<Self::Prepared> {
        self.inner.prepare(plan, dtype, op, protocol)
    }
    unsafe fn launch(
        calls: &[braid_runtime::device_comm::Launch<'_, Self>],
    ) -> braid_runtime::Result<()> {
        let inner: Vec<braid_runtime::device_comm::Launch<'_, HostEngine>> = calls
            .iter()
            .map(|c| braid_runtime::device_comm::Launch {
                engine: &c.engine.inner,
                prepared: c.prepared,
                args: c.args,
                stream: c.stream,
            })
            .collect();
        // SAFETY: the caller's contract, passed on.
        unsafe { HostEngine::launch(&inner) }
    }
    fn abort(&self, reason: &str) {
        self.inner.abort(reason)
    }
    fn failure(&self) -> Option<String> {
        self.inner.failure()
    }
    fn step_times(&self, _: &Self::Prepared) -> braid_runtime::Result<Option<Vec<(u64, u64)>>> {
        let n = self.recorded.load(std::sync::atomic::Ordering::Relaxed) as u64;
        Ok(Some((0..n).map(|i| (10 * i, 10 * i + 5)).collect()))
    }
}

/// Step times come back per block of the rank's plan, in its order; a record that does
/// not match the plan's steps is an error, not a timeline of the wrong steps.
#[test]
fn step_times_come_per_block_of_the_plan_and_a_mismatch_is_an_error() {
    let group = InProcGroup::new(2);
    let comm = DeviceComm::new(
        Timed {
            inner: HostEngine::with_scratch(
                Box::new(group.member(0)),
                Duration::from_secs(30),
                1 << 20,
            ),
            recorded: std::sync::atomic::AtomicUsize::new(0),
        },
        registry(2),
        Policy::default(),
    );
    let spec = CallSpec {
        collective: Collective::Allreduce,
        count: 1000,
        dtype: DType::F32,
        op: RedOp::Sum,
        root: None,
    };
    let (plan, _) = comm.selection(&spec, Mode::OutOfPlace).unwrap().unwrap();
    let blocks = &plan.ranks[0].blocks;
    let steps: usize = blocks.iter().map(|b| b.steps.len()).sum();
    comm.engine()
        .recorded
        .store(steps, std::sync::atomic::Ordering::Relaxed);
    let (timed, per_block) = comm.step_times(&spec, Mode::OutOfPlace).unwrap().unwrap();
    assert_eq!(timed.name, plan.name);
    let lens: Vec<usize> = per_block.iter().map(Vec::len).collect();
    assert_eq!(
        lens,
        blocks.iter().map(|b| b.steps.len()).collect::<Vec<_>>()
    );
    let flat: Vec<(u64, u64)> = per_block.into_iter().flatten().collect();
    assert_eq!(flat[1], (10, 15), "the plan's order");
    comm.engine()
        .recorded
        .store(steps + 1, std::sync::atomic::Ordering::Relaxed);
    let err = comm
        .step_times(&spec, Mode::OutOfPlace)
        .unwrap_err()
        .to_string();
    assert!(err.contains(&format!("for the {steps} steps")), "{err}");
}

/// A communicator remembers its last call's plan and arguments: calls that repeat it on
/// the same buffers, and calls that change only the count, the operation or one buffer,
/// each get their own right result, and nothing past the call's bytes is written.
#[test]
fn repeated_calls_on_the_same_buffers_follow_every_change_of_count_op_and_buffer() {
    let n = 4u32;
    let r = open(n, 32 << 20, Duration::from_secs(30));
    let max = 4096usize;
    let mut sends: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; 4 * max]).collect();
    let mut recvs: [Vec<Vec<u8>>; 2] = [
        (0..n).map(|_| vec![0u8; 4 * max]).collect(),
        (0..n).map(|_| vec![0u8; 4 * max]).collect(),
    ];
    let steps = [
        (max, RedOp::Sum, 0usize),
        (max, RedOp::Sum, 0),
        (1000, RedOp::Sum, 0),
        (1000, RedOp::Max, 0),
        (1000, RedOp::Max, 1),
        (1000, RedOp::Max, 1),
        (max, RedOp::Sum, 0),
    ];
    for (i, &(count, op, which)) in steps.iter().enumerate() {
        let spec = CallSpec {
            collective: Collective::Allreduce,
            count,
            dtype: DType::F32,
            op,
            root: None,
        };
        let ins = inputs(spec.collective, spec.dtype, op, n, count, i as u64 + 1);
        for k in 0..n as usize {
            sends[k][..ins[k].len()].copy_from_slice(&ins[k]);
            recvs[which][k].fill(0xAA);
        }
        let calls: Vec<GroupCall<HostEngine>> = (0..n as usize)
            .map(|k| GroupCall {
                comm: &r.comms[k],
                spec,
                send: sends[k].as_ptr() as u64,
                recv: recvs[which][k].as_mut_ptr() as u64,
                stream: &r.streams[k],
            })
            .collect();
        // SAFETY: every buffer holds `max` elements, more than any call's, and lives
        // until the streams are synchronised below.
        unsafe { enqueue_group(&calls) }.unwrap();
        for s in &r.streams {
            s.synchronize().unwrap();
        }
        let expected = reference(spec.collective, spec.dtype, op, None, &ins);
        for k in 0..n as usize {
            let want = expected[k].as_ref().unwrap();
            let got = &recvs[which][k];
            let mismatch = first_mismatch(spec.dtype, want, &got[..want.len()]);
            assert!(mismatch.is_none(), "call {i}, rank {k}: {mismatch:?}");
            assert!(
                got[want.len()..].iter().all(|&b| b == 0xAA),
                "call {i}, rank {k}: written past the call's bytes"
            );
        }
    }
}
