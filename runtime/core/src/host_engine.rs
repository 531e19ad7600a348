//! The host backend as an [`Engine`]: the device communicator's calls run on CPU threads,
//! asynchronously on [`HostStream`]s (a worker thread executing what is enqueued in
//! order, as a CUDA stream does). "Device memory" is host memory. This is how CI, which
//! has no GPU, runs the very code path the GPU backend uses (selection, preparation once,
//! call arguments, uneven counts, rounds, errors, abort), and what the blocking
//! [`crate::Communicator`] is built on.

use crate::device_comm::{Engine, Launch, Stats};
use crate::dtype::{DType, RedOp};
use crate::error::{Result, RuntimeError};
use crate::exec::{run_rank_on, Job, Mem};
use crate::fabric::Fabric;
use crate::policy::Target;
use crate::step_clock::StepClock;
use crate::workers::Workers;
use braid_ir::Protocol;
use braid_plan::Verified;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Default bytes of scratch per rank: plans with scratch run larger calls in rounds.
pub const DEFAULT_SCRATCH_BYTES: usize = 32 << 20;

type Work = Box<dyn FnOnce() -> Result<()> + Send>;

struct StreamState {
    /// Items enqueued and not finished.
    pending: u64,
    /// The first error since the last synchronize.
    error: Option<RuntimeError>,
}

struct StreamShared {
    state: Mutex<StreamState>,
    idle: Condvar,
}

/// An in-order queue of work run by one thread: the host backend's CUDA stream.
pub struct HostStream {
    tx: Option<mpsc::Sender<Work>>,
    shared: Arc<StreamShared>,
    worker: Option<JoinHandle<()>>,
}

impl Default for HostStream {
    fn default() -> Self {
        Self::new()
    }
}

impl HostStream {
    pub fn new() -> HostStream {
        Self::on_cpus(None)
    }

    /// A stream whose thread is kept on `cpus` where given (its rank's:
    /// [`HostEngine::cpus`]).
    pub fn on_cpus(cpus: Option<Arc<[usize]>>) -> HostStream {
        let (tx, rx) = mpsc::channel::<Work>();
        let shared = Arc::new(StreamShared {
            state: Mutex::new(StreamState {
                pending: 0,
                error: None,
            }),
            idle: Condvar::new(),
        });
        let s = shared.clone();
        let worker = std::thread::Builder::new()
            .name("braid-host-stream".into())
            .spawn(move || {
                if let Some(c) = cpus {
                    crate::cpus::bind_current(&c);
                }
                for work in rx {
                    let r = work();
                    let mut st = s.state.lock().unwrap();
                    if let Err(e) = r {
                        st.error.get_or_insert(e);
                    }
                    st.pending -= 1;
                    s.idle.notify_all();
                }
            })
            .expect("spawn a host stream thread");
        HostStream {
            tx: Some(tx),
            shared,
            worker: Some(worker),
        }
    }

    /// Runs `work` after everything enqueued before it; returns at once.
    pub fn enqueue(&self, work: impl FnOnce() -> Result<()> + Send + 'static) {
        self.shared.state.lock().unwrap().pending += 1;
        let tx = self.tx.as_ref().expect("open until drop");
        if tx.send(Box::new(work)).is_err() {
            let mut st = self.shared.state.lock().unwrap();
            st.pending -= 1;
            st.error.get_or_insert(RuntimeError::Invalid(
                "the host stream's thread is gone".into(),
            ));
        }
    }

    /// Waits until everything enqueued has run; the first error any of it returned since
    /// the last call.
    pub fn synchronize(&self) -> Result<()> {
        let mut st = self.shared.state.lock().unwrap();
        while st.pending > 0 {
            st = self.shared.idle.wait(st).unwrap();
        }
        match st.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Whether nothing is enqueued or running.
    pub fn is_idle(&self) -> bool {
        self.shared.state.lock().unwrap().pending == 0
    }
}

impl Drop for HostStream {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

struct Rank {
    fabric: Box<dyn Fabric>,
    timeout: Duration,
    stats: Stats,
    scratch_bytes: usize,
    /// Allocated with the first plan that has scratch; the lock also runs one rank's
    /// calls one at a time when they come on several streams, as a GPU communicator
    /// orders them.
    scratch: Mutex<Vec<u8>>,
    /// Calls launched, for the per-call agreement.
    seq: AtomicU64,
    failure: Mutex<Option<String>>,
    /// The block threads, kept between calls.
    workers: Workers,
    /// `BRAID_TRACE` set: prepared plans record their steps' times.
    trace: bool,
}

/// One rank of the host backend. Cheap to clone (shared).
#[derive(Clone)]
pub struct HostEngine(Arc<Rank>);

/// What the host backend prepares for a plan: the plan (links are opened by the fabric
/// on first use and kept), and where its calls record their steps' times when traced.
pub struct HostPrepared {
    trace: Option<Arc<StepClock>>,
}

impl HostEngine {
    /// The rank `fabric` connects, blocking waits bounded by `timeout`.
    pub fn new(fabric: Box<dyn Fabric>, timeout: Duration) -> HostEngine {
        Self::with_scratch(fabric, timeout, DEFAULT_SCRATCH_BYTES)
    }

    /// [`HostEngine::new`] with `scratch_bytes` of scratch memory.
    pub fn with_scratch(
        fabric: Box<dyn Fabric>,
        timeout: Duration,
        scratch_bytes: usize,
    ) -> HostEngine {
        // The rank's block threads on its share of the host's CPUs, where asked
        // (`cpus.rs`: `BRAID_CPU_AFFINITY`).
        let workers = match fabric
            .local_place()
            .and_then(|(i, n)| crate::cpus::for_rank(i, n))
        {
            Some(cpus) => Workers::on_cpus(cpus),
            None => Workers::new(),
        };
        HostEngine(Arc::new(Rank {
            fabric,
            timeout,
            stats: Stats::default(),
            scratch_bytes,
            scratch: Mutex::new(Vec::new()),
            seq: AtomicU64::new(0),
            failure: Mutex::new(None),
            workers,
            trace: std::env::var_os("BRAID_TRACE").is_some_and(|v| !v.is_empty()),
        }))
    }

    pub fn fabric(&self) -> &dyn Fabric {
        self.0.fabric.as_ref()
    }

    pub fn timeout(&self) -> Duration {
        self.0.timeout
    }

    /// The CPUs this rank's threads are kept on, if any (`cpus.rs`: `BRAID_CPU_AFFINITY`).
    pub fn cpus(&self) -> Option<Arc<[usize]>> {
        self.0.workers.cpus()
    }
}

impl Engine for HostEngine {
    type Stream = HostStream;
    type Prepared = HostPrepared;

    fn rank(&self) -> u32 {
        self.0.fabric.rank()
    }

    fn n_ranks(&self) -> u32 {
        self.0.fabric.n_ranks()
    }

    fn target(&self) -> Target {
        Target::HOST
    }

    fn scratch_bytes(&self) -> usize {
        self.0.scratch_bytes
    }

    fn stats(&self) -> &Stats {
        &self.0.stats
    }

    fn prepare(
        &self,
        plan: &Arc<Verified>,
        _dtype: DType,
        _op: RedOp,
        _protocol: Protocol,
    ) -> Result<HostPrepared> {
        let trace = self
            .0
            .trace
            .then(|| Arc::new(StepClock::new(plan, self.rank())));
        if plan.scratch_chunks > 0 {
            let mut s = self.0.scratch.lock().unwrap();
            if s.is_empty() {
                *s = vec![0u8; self.0.scratch_bytes];
                self.0.stats.allocated(1);
            }
        }
        Ok(HostPrepared { trace })
    }

    fn step_times(&self, prepared: &HostPrepared) -> Result<Option<Vec<(u64, u64)>>> {
        Ok(prepared.trace.as_ref().map(|c| c.read()))
    }

    fn copies(&self) -> bool {
        true
    }

    unsafe fn copy(&self, src: u64, dst: u64, bytes: usize, stream: &HostStream) -> Result<()> {
        stream.enqueue(move || {
            // SAFETY: the caller's contract: both ranges are `bytes` long, do not overlap
            // and are not touched by anything else until this copy has run on the stream.
            unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, bytes) };
            Ok(())
        });
        Ok(())
    }

    unsafe fn launch(calls: &[Launch<'_, Self>]) -> Result<()> {
        for c in calls {
            let rank = c.engine.0.clone();
            let plan = c.prepared.plan.clone();
            let (dtype, op, args) = (c.prepared.dtype, c.prepared.op, c.args);
            let spec_dtype = dtype;
            let clock = c.prepared.inner.trace.clone();
            c.engine.0.stats.launched(1);
            c.stream.enqueue(move || {
                let r = run_call(&rank, &plan, spec_dtype, op, args, clock.as_deref());
                if let Err(e) = &r {
                    rank.failure.lock().unwrap().get_or_insert(e.to_string());
                }
                r
            });
        }
        Ok(())
    }

    fn abort(&self, reason: &str) {
        self.0
            .failure
            .lock()
            .unwrap()
            .get_or_insert(reason.to_string());
        self.0.fabric.abort(reason);
    }

    fn failure(&self) -> Option<String> {
        self.0.failure.lock().unwrap().clone()
    }
}

/// One call on the host stream's thread: agree with the other ranks on what is called
/// (a mismatched call fails on every rank instead of corrupting data or hanging), then
/// run this rank's blocks.
fn run_call(
    rank: &Rank,
    plan: &Verified,
    dtype: DType,
    op: RedOp,
    args: crate::device_comm::CallArgs,
    trace: Option<&StepClock>,
) -> Result<()> {
    let seq = rank.seq.fetch_add(1, Ordering::SeqCst) + 1;
    let g = &args.geometry;
    let desc = format!(
        "{}(count={}, dtype={}, op={}, root={:?}, plan={})",
        plan.collective,
        g.count,
        dtype.name(),
        op.name(),
        plan.root,
        plan.name
    );
    rank.fabric
        .agree(seq, desc.as_bytes(), Instant::now() + rank.timeout)?;
    let mut scratch = rank.scratch.lock().unwrap();
    let n = plan.n_ranks;
    let (i, o) = crate::geometry::buffer_elems(plan.collective, n, g.count);
    let e = g.elem;
    let scratch_len = if plan.scratch_chunks > 0 {
        scratch.len()
    } else {
        0
    };
    let mem = Mem {
        base: [
            args.input as *mut u8,
            args.output as *mut u8,
            scratch.as_mut_ptr(),
        ],
        len: [
            if args.input != 0 { i * e } else { 0 },
            if args.output != 0 { o * e } else { 0 },
            scratch_len,
        ],
    };
    let job = Job {
        plan,
        args,
        dtype,
        op,
        mem,
        timeout: rank.timeout,
        trace,
    };
    run_rank_on(&job, rank.fabric.as_ref(), &rank.workers)
}
