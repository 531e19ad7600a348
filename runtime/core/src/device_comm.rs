//! The device communicator: NCCL's semantics on the caller's memory and streams, one
//! implementation for every backend. A backend is an [`Engine`] (the CUDA backend's,
//! or the host backend's, which runs the same calls on CPU threads so that everything here
//! is tested without a GPU); [`DeviceComm`] does the rest, identically for both:
//!
//! * checks a call (root, counts, null buffers) and works out its mode from the pointers
//!   as NCCL does ([`crate::call`]);
//! * asks the [`Policy`] for the plan, replicas and protocol, and prepares that choice
//!   once (verify the replicated plan, then the engine's compile and connect), caching it
//!   per exact call so that a repeated call is a hash lookup and one launch (a call
//!   that repeats the rank's last one on the same buffers not even that: its plan and
//!   arguments are remembered);
//! * computes the call's arguments (addresses, [`Geometry`]: uneven counts and rounds
//!   are handled where the data is, never staged);
//! * turns failures into errors that stick, as NCCL's asynchronous errors do.
//!
//! [`Stats`] counts everything that is set up (allocations, exchanges between ranks,
//! compilations, verifications), so tests can prove that the per-call path does none of
//! it after a call's first time.

use crate::call::CallSpec;
use crate::dtype::{DType, RedOp};
use crate::error::{Result, RuntimeError};
use crate::geometry::Geometry;
use crate::policy::{Policy, Request, Target};
use crate::registry::Registry;
use braid_ir::{Collective, Mode, Protocol};
use braid_plan::Verified;
use rustc_hash::FxHashMap;
use smallvec::SmallVec;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What a communicator has set up so far, counted as it happens.
#[derive(Debug, Default)]
pub struct Stats {
    allocations: AtomicU64,
    exchanges: AtomicU64,
    compiles: AtomicU64,
    kernel_loads: AtomicU64,
    verifications: AtomicU64,
    prepared: AtomicU64,
    launches: AtomicU64,
    flat_launches: AtomicU64,
}

/// A copy of [`Stats`] at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Memory allocated (device or host, buffers, FIFOs, tables, mappings opened).
    pub allocations: u64,
    /// Exchanges with other ranks (handles, digests, connections opened).
    pub exchanges: u64,
    /// Kernel compilations (NVRTC runs; disk-cache hits are not compilations).
    pub compiles: u64,
    /// Kernel modules loaded into a GPU context.
    pub kernel_loads: u64,
    /// Plans proved by the plan verifier.
    pub verifications: u64,
    /// (plan, replicas, dtype, op, protocol) choices prepared.
    pub prepared: u64,
    /// Calls launched.
    pub launches: u64,
    /// Of those, calls a backend ran without its plan interpreter, every step resolved
    /// to a pass over the launch's buffers (the CUDA backend's flat launches).
    pub flat_launches: u64,
}

impl StatsSnapshot {
    /// Everything but launches: what must not grow on a repeated call.
    pub fn setup(&self) -> StatsSnapshot {
        StatsSnapshot {
            launches: 0,
            flat_launches: 0,
            ..*self
        }
    }
}

impl Stats {
    pub fn allocated(&self, n: u64) {
        self.allocations.fetch_add(n, Ordering::Relaxed);
    }
    pub fn exchanged(&self) {
        self.exchanges.fetch_add(1, Ordering::Relaxed);
    }
    pub fn compiled(&self) {
        self.compiles.fetch_add(1, Ordering::Relaxed);
    }
    pub fn loaded(&self) {
        self.kernel_loads.fetch_add(1, Ordering::Relaxed);
    }
    pub fn verified(&self) {
        self.verifications.fetch_add(1, Ordering::Relaxed);
    }
    pub fn launched(&self, n: u64) {
        self.launches.fetch_add(n, Ordering::Relaxed);
    }
    pub fn launched_flat(&self, n: u64) {
        self.flat_launches.fetch_add(n, Ordering::Relaxed);
    }
    pub fn snapshot(&self) -> StatsSnapshot {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            allocations: l(&self.allocations),
            exchanges: l(&self.exchanges),
            compiles: l(&self.compiles),
            kernel_loads: l(&self.kernel_loads),
            verifications: l(&self.verifications),
            prepared: l(&self.prepared),
            launches: l(&self.launches),
            flat_launches: l(&self.flat_launches),
        }
    }
}

/// Everything one rank's kernel (or host executor) needs per call, computed by
/// [`DeviceComm`] the same way for every backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallArgs {
    /// Where the plan's `in` starts (0: the rank has none).
    pub input: u64,
    /// Where the plan's `out` starts (0: the rank has none).
    pub output: u64,
    pub geometry: Geometry,
    /// `avg`: the rank count the sum is divided by at the end; 0 otherwise.
    pub avg_ranks: u32,
    /// The call leaves `in` as it found it while it runs (out of place: `in` and `out`
    /// do not overlap), so other ranks' calls of the same launch may read it directly.
    pub in_untouched: bool,
}

/// What an engine prepared for one choice, with the plan it prepared.
pub struct Prepared<P> {
    /// The plan as it runs: replicated to the chosen count, proved again.
    pub plan: Arc<Verified>,
    pub protocol: Protocol,
    pub dtype: DType,
    /// The reduction the kernels perform (`Sum` for collectives that only move data).
    pub op: RedOp,
    /// This rank's steps change nothing in place ([`braid_plan::direct::identity_in_place`]:
    /// a broadcast root's): an in-place call still lends its `in`.
    pub in_place_identity: bool,
    pub inner: P,
}

/// When each step of a rank's plan (its first replica) started and ended, device clock,
/// ns: per block of the rank in the plan's order, each block's steps in order
/// ([`DeviceComm::step_times`]).
pub type StepTimes = Vec<Vec<(u64, u64)>>;

/// One rank's recorded call: the rank, the plan that served it and its [`StepTimes`].
pub type RankSteps = (u32, Arc<Verified>, StepTimes);

/// A call ready to launch: its prepared plan and its arguments.
type Planned<E> = (Arc<Prepared<<E as Engine>::Prepared>>, CallArgs);

/// One rank's call for [`Engine::launch`].
pub struct Launch<'a, E: Engine> {
    pub engine: &'a E,
    pub prepared: &'a Prepared<E::Prepared>,
    pub args: CallArgs,
    pub stream: &'a E::Stream,
}

/// A backend: how one rank prepares and launches plans. Implementations: the CUDA
/// backend's (`braid-cuda`) and [`crate::host_engine::HostEngine`].
pub trait Engine: Send + Sync + Sized + 'static {
    /// Where calls are enqueued (a CUDA stream; a host stream of the host backend).
    type Stream: ?Sized + Sync;
    /// A plan ready to launch on this rank (kernels, connection tables).
    type Prepared: Send + Sync + 'static;

    fn rank(&self) -> u32;
    fn n_ranks(&self) -> u32;
    /// What the backend offers the policy.
    fn target(&self) -> Target;
    /// Bytes of this rank's scratch memory (bounds the rounds of plans with scratch).
    fn scratch_bytes(&self) -> usize;
    fn stats(&self) -> &Stats;
    /// Readies `plan` (proved, replicated) for this rank. Collective over the ranks of
    /// other processes: every rank prepares the same choices in the same order, because
    /// every rank makes the same calls and the policy is deterministic.
    fn prepare(
        &self,
        plan: &Arc<Verified>,
        dtype: DType,
        op: RedOp,
        protocol: Protocol,
    ) -> Result<Self::Prepared>;
    /// Whether [`Engine::prepare`] waits for the communicator's ranks in other processes
    /// (it exchanges with them): several such ranks of one thread must then prepare side
    /// by side.
    fn prepare_is_collective(&self) -> bool {
        false
    }
    /// Whether [`Engine::copy`] is offered: a one-rank communicator's out-of-place call
    /// is then a copy, as NCCL makes it, instead of the plan's run.
    fn copies(&self) -> bool {
        false
    }
    /// Enqueues a copy of `bytes` from `src` to `dst` (this rank's memory) on `stream`.
    ///
    /// # Safety
    /// `src` and `dst` must be memory the engine may access, `bytes` long, not
    /// overlapping, untouched by anything else until the copy completes on `stream`.
    unsafe fn copy(&self, src: u64, dst: u64, bytes: usize, stream: &Self::Stream) -> Result<()> {
        let _ = (src, dst, bytes, stream);
        Err(RuntimeError::Invalid("this backend does not copy".into()))
    }
    /// Enqueues the calls (of one or several local ranks) and returns at once.
    ///
    /// # Safety
    /// Every address in `calls[i].args` must be memory the engine's kernels may access,
    /// of at least the sizes the call needs ([`CallSpec::sizes`]), and stay allocated and
    /// untouched by anything else until the call completes on its stream.
    unsafe fn launch(calls: &[Launch<'_, Self>]) -> Result<()>;
    /// Stops every call in flight on this rank (and on its process's ranks of the same
    /// communicator): waits end with an error within milliseconds.
    fn abort(&self, reason: &str);
    /// The first asynchronous failure: a call that gave up waiting, an abort.
    fn failure(&self) -> Option<String>;
    /// The step times the last call run with `prepared` recorded on the device: per step
    /// of the plan's first replica, in the plan's order (its blocks in order, each
    /// block's steps in order), when it started and ended, in nanoseconds of the device's
    /// clock. `None` where the backend records none (or was not asked to). The call must
    /// have completed.
    fn step_times(&self, prepared: &Self::Prepared) -> Result<Option<Vec<(u64, u64)>>> {
        let _ = prepared;
        Ok(None)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct CallKey {
    collective: Collective,
    root: Option<u32>,
    mode: Mode,
    bytes: usize,
    dtype: DType,
    op: RedOp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct PrepKey {
    digest: u64,
    replicas: u32,
    dtype: DType,
    op: RedOp,
    protocol: Protocol,
}

/// Distinct exact calls remembered; beyond this, calls still find their prepared plan,
/// only through the policy again.
const CALL_CACHE: usize = 4096;

/// One rank of a communicator over an [`Engine`].
pub struct DeviceComm<E: Engine> {
    engine: E,
    registry: Arc<Registry>,
    policy: Policy,
    by_call: Mutex<FxHashMap<CallKey, Arc<Prepared<E::Prepared>>>>,
    by_choice: Mutex<HashMap<PrepKey, Arc<Prepared<E::Prepared>>>>,
    /// The last call planned and what it got: an application repeating its call (a
    /// training loop, a benchmark) skips the lookup and the arguments' arithmetic.
    last: Mutex<Option<LastCall<E>>>,
    failed: Mutex<Option<String>>,
    /// Whether `failed` holds an error (read on every call without taking its lock).
    has_failed: AtomicBool,
}

/// A call as [`DeviceComm::plan_checked`] saw it, and what it planned for it.
struct LastCall<E: Engine> {
    spec: CallSpec,
    send: u64,
    recv: u64,
    mode: Mode,
    planned: Planned<E>,
}

/// A group's calls, held without allocating up to 8 (the usual group: one process's ranks
/// on one machine); larger groups spill to the heap.
type Group<T> = SmallVec<[T; 8]>;

impl<E: Engine> DeviceComm<E> {
    pub fn new(engine: E, registry: Arc<Registry>, policy: Policy) -> DeviceComm<E> {
        DeviceComm {
            engine,
            registry,
            policy,
            by_call: Mutex::new(FxHashMap::default()),
            by_choice: Mutex::new(HashMap::new()),
            last: Mutex::new(None),
            failed: Mutex::new(None),
            has_failed: AtomicBool::new(false),
        }
    }

    pub fn rank(&self) -> u32 {
        self.engine.rank()
    }

    pub fn n_ranks(&self) -> u32 {
        self.engine.n_ranks()
    }

    pub fn engine(&self) -> &E {
        &self.engine
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// This rank choosing by `policy` from now on (every rank of a group must hold the
    /// same one: they choose alike without talking); choices made so far are forgotten.
    pub fn set_policy(&mut self, policy: Policy) {
        self.policy = policy;
        self.by_call
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.by_choice
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        *self.last.get_mut().unwrap_or_else(|p| p.into_inner()) = None;
    }

    pub fn stats(&self) -> StatsSnapshot {
        self.engine.stats().snapshot()
    }

    /// Aborts the communicator: calls in flight end with an error soon, and every later
    /// call is refused with `reason` (NCCL's `ncclCommAbort`).
    pub fn abort(&self, reason: &str) {
        self.fail(reason.to_string());
        self.engine.abort(reason);
    }

    /// The error that made the communicator unusable, if any (NCCL's
    /// `ncclCommGetAsyncError`): a failed or aborted call, or a kernel that gave up.
    pub fn async_error(&self) -> Option<String> {
        if self.has_failed.load(Ordering::Acquire) {
            if let Some(e) = self.failed.lock().unwrap().clone() {
                return Some(e);
            }
        }
        let f = self.engine.failure()?;
        self.fail(f.clone());
        Some(f)
    }

    /// The plan, replica count and protocol that serve `spec` in `mode` (preparing them
    /// if no call has yet), as a call would get them.
    pub fn selection(
        &self,
        spec: &CallSpec,
        mode: Mode,
    ) -> Result<Option<(Arc<Verified>, Protocol)>> {
        Ok(self
            .prepared_for(spec, mode)?
            .map(|p| (p.plan.clone(), p.protocol)))
    }

    /// The plan that serves `spec` in `mode` and the step times its last call recorded
    /// on this rank ([`Engine::step_times`]), per block; `None` for a zero count or where
    /// none are recorded.
    pub fn step_times(
        &self,
        spec: &CallSpec,
        mode: Mode,
    ) -> Result<Option<(Arc<Verified>, StepTimes)>> {
        let Some(p) = self.prepared_for(spec, mode)? else {
            return Ok(None);
        };
        let Some(flat) = self.engine.step_times(&p.inner)? else {
            return Ok(None);
        };
        let blocks = &p.plan.ranks[self.rank() as usize].blocks;
        let steps: usize = blocks.iter().map(|b| b.steps.len()).sum();
        if flat.len() != steps {
            return Err(RuntimeError::Invalid(format!(
                "{} step times recorded for the {steps} steps of `{}`",
                flat.len(),
                p.plan.name
            )));
        }
        let mut it = flat.into_iter();
        let per_block = blocks
            .iter()
            .map(|b| it.by_ref().take(b.steps.len()).collect())
            .collect();
        Ok(Some((p.plan.clone(), per_block)))
    }

    /// The prepared plan of `spec` in `mode` (preparing it if no call has yet).
    fn prepared_for(
        &self,
        spec: &CallSpec,
        mode: Mode,
    ) -> Result<Option<Arc<Prepared<E::Prepared>>>> {
        spec.check(self.n_ranks())?;
        if spec.count == 0 {
            return Ok(None);
        }
        let key = CallKey {
            collective: spec.collective,
            root: spec.root,
            mode,
            bytes: spec.sizes(self.rank(), self.n_ranks()).larger,
            dtype: spec.dtype,
            op: spec.effective_op(),
        };
        let found = self.by_call.lock().unwrap().get(&key).cloned();
        let p = match found {
            Some(p) => p,
            None => self.prepare(&key)?,
        };
        Ok(Some(p))
    }

    fn fail(&self, reason: String) {
        self.failed.lock().unwrap().get_or_insert(reason);
        self.has_failed.store(true, Ordering::Release);
    }

    /// Enqueues one collective with NCCL's arguments on `stream` and returns at once.
    /// `send` and `recv` are addresses in the backend's memory (NCCL's `sendbuff` and
    /// `recvbuff`; in place exactly when NCCL says so). A zero count does nothing.
    ///
    /// # Safety
    /// `send` must hold [`CallSpec::sizes`]`.send` bytes and `recv` `.recv` bytes where
    /// the rank has them, accessible to the backend, allocated and not otherwise used
    /// until the call completes on `stream`.
    pub unsafe fn enqueue(
        &self,
        spec: &CallSpec,
        send: u64,
        recv: u64,
        stream: &E::Stream,
    ) -> Result<()> {
        enqueue_group(&[GroupCall {
            comm: self,
            spec: *spec,
            send,
            recv,
            stream,
        }])
    }

    /// A call's checks: the communicator not failed, the arguments valid, no null buffer
    /// where the rank has one. The call's mode, or `None` for a zero count.
    fn check_call(&self, spec: &CallSpec, send: u64, recv: u64) -> Result<Option<Mode>> {
        if let Some(e) = self.async_error() {
            return Err(RuntimeError::Aborted(e));
        }
        let (rank, n) = (self.rank(), self.n_ranks());
        spec.check(n)?;
        if spec.count == 0 {
            return Ok(None);
        }
        let sizes = spec.sizes(rank, n);
        let null = |what: &str| {
            RuntimeError::Invalid(format!(
                "{} on rank {rank}: the {what} buffer is null",
                spec.collective
            ))
        };
        if sizes.send.is_some() && send == 0 {
            return Err(null("send"));
        }
        if sizes.recv.is_some() && recv == 0 {
            return Err(null("receive"));
        }
        Ok(Some(spec.mode_of(rank, n, send, recv)))
    }

    /// The prepared plan and the arguments of a checked call of mode `mode`.
    fn call_key(&self, spec: &CallSpec, mode: Mode) -> CallKey {
        CallKey {
            collective: spec.collective,
            root: spec.root,
            mode,
            bytes: spec.sizes(self.rank(), self.n_ranks()).larger,
            dtype: spec.dtype,
            op: spec.effective_op(),
        }
    }

    /// Whether a call of `spec` in `mode` finds its prepared plan without preparing.
    fn remembers(&self, spec: &CallSpec, mode: Mode) -> bool {
        let key = self.call_key(spec, mode);
        self.by_call.lock().unwrap().contains_key(&key)
    }

    fn plan_checked(
        &self,
        spec: &CallSpec,
        send: u64,
        recv: u64,
        mode: Mode,
    ) -> Result<Planned<E>> {
        let again = {
            let last = self.last.lock().unwrap();
            last.as_ref()
                .filter(|l| l.spec == *spec && l.send == send && l.recv == recv && l.mode == mode)
                .map(|l| l.planned.clone())
        };
        let planned = match again {
            Some(p) => p,
            None => {
                let p = self.plan_afresh(spec, send, recv, mode)?;
                *self.last.lock().unwrap() = Some(LastCall {
                    spec: *spec,
                    send,
                    recv,
                    mode,
                    planned: p.clone(),
                });
                p
            }
        };
        let plan = &planned.0.plan;
        tracing::info!(
            rank = self.rank(),
            plan = %plan.name,
            replicas = plan.channels,
            protocol = planned.0.protocol.name(),
            "{} of {} bytes ({mode}, {} {})",
            spec.collective,
            spec.sizes(self.rank(), self.n_ranks()).larger,
            spec.dtype.name(),
            spec.op.name()
        );
        Ok(planned)
    }

    /// [`Self::plan_checked`] without the last call's memory.
    fn plan_afresh(&self, spec: &CallSpec, send: u64, recv: u64, mode: Mode) -> Result<Planned<E>> {
        let (rank, n) = (self.rank(), self.n_ranks());
        let sizes = spec.sizes(rank, n);
        let key = self.call_key(spec, mode);
        let found = self.by_call.lock().unwrap().get(&key).cloned();
        let prepared = match found {
            Some(p) => p,
            None => {
                let p = self.prepare(&key)?;
                let mut calls = self.by_call.lock().unwrap();
                if calls.len() < CALL_CACHE {
                    calls.insert(key, p.clone());
                }
                p
            }
        };
        let plan = &prepared.plan;
        let geometry = Geometry::new(
            plan.collective,
            plan.n_ranks,
            plan.chunks,
            plan.scratch_chunks,
            spec.count,
            spec.dtype.size(),
            plan.channels,
            self.engine.scratch_bytes(),
        );
        if geometry.scratch_bytes(plan.scratch_chunks) > self.engine.scratch_bytes() {
            return Err(RuntimeError::Invalid(format!(
                "plan `{}` needs {} bytes of scratch per round, the communicator has {}",
                plan.name,
                geometry.scratch_bytes(plan.scratch_chunks),
                self.engine.scratch_bytes()
            )));
        }
        let args = CallArgs {
            input: if sizes.send.is_some() { send } else { 0 },
            output: if sizes.recv.is_some() { recv } else { 0 },
            geometry,
            avg_ranks: if spec.op == RedOp::Avg && spec.collective.reduces() {
                n
            } else {
                0
            },
            // In place, a rank whose steps only copy chunks onto themselves (a broadcast
            // root's) changes nothing either: the copies are skipped.
            in_untouched: mode == Mode::OutOfPlace
                || (prepared.in_place_identity && send == recv && sizes.send.is_some()),
        };
        Ok((prepared, args))
    }

    /// Chooses and prepares the plan for a call not seen before (or not remembered).
    fn prepare(&self, key: &CallKey) -> Result<Arc<Prepared<E::Prepared>>> {
        let req = Request {
            collective: key.collective,
            n_ranks: self.n_ranks(),
            root: key.root,
            mode: key.mode,
            bytes: key.bytes,
            elem: key.dtype.size(),
        };
        let target = self.policy.target(self.engine.target());
        let choice = self.policy.choose(&self.registry, &req, &target)?;
        let pkey = PrepKey {
            digest: choice.plan.digest(),
            replicas: choice.replicas,
            dtype: kernel_dtype(key.collective, key.dtype),
            op: key.op,
            protocol: choice.protocol,
        };
        if let Some(p) = self.by_choice.lock().unwrap().get(&pkey) {
            return Ok(p.clone());
        }
        let stats = self.engine.stats();
        let plan = if choice.replicas == choice.plan.channels {
            choice.plan.clone()
        } else {
            stats.verified();
            Arc::new(choice.plan.with_channels(choice.replicas).map_err(|d| {
                RuntimeError::Invalid(format!(
                    "plan `{}` on {} replicas does not verify:\n{}",
                    choice.plan.name,
                    choice.replicas,
                    braid_plan::render_diagnostics(&d)
                ))
            })?)
        };
        let inner = self
            .engine
            .prepare(&plan, pkey.dtype, pkey.op, pkey.protocol)?;
        stats.prepared.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            rank = self.rank(),
            plan = %plan.name,
            replicas = plan.channels,
            protocol = pkey.protocol.name(),
            "prepared for {} {}",
            key.dtype.name(),
            key.op.name()
        );
        let in_place_identity = braid_plan::direct::identity_in_place(&plan, self.rank() as usize);
        let p = Arc::new(Prepared {
            in_place_identity,
            plan,
            protocol: pkey.protocol,
            dtype: pkey.dtype,
            op: pkey.op,
            inner,
        });
        self.by_choice.lock().unwrap().insert(pkey, p.clone());
        Ok(p)
    }
}

/// The element type kernels are built for: the call's own for reductions; for
/// collectives that only move data, the unsigned integer of the same size (they copy
/// bytes, so one kernel serves every type of a size; `f16` is the 2-byte one).
pub fn kernel_dtype(c: Collective, d: DType) -> DType {
    if c.reduces() {
        return d;
    }
    match d.size() {
        1 => DType::U8,
        2 => DType::F16,
        4 => DType::U32,
        _ => DType::U64,
    }
}

/// One rank's call in a group.
pub struct GroupCall<'a, E: Engine> {
    pub comm: &'a DeviceComm<E>,
    pub spec: CallSpec,
    pub send: u64,
    pub recv: u64,
    pub stream: &'a E::Stream,
}

/// Enqueues the calls of several local ranks together (NCCL's `ncclGroupStart` /
/// `ncclGroupEnd` over communicators of one process): the engine may launch the ranks
/// that share a GPU as one kernel. Nothing is launched unless every call is valid.
///
/// The prepared plan and arguments of every call, in order. Preparing a plan is
/// collective over the communicator's ranks in other processes; when one thread's group
/// holds calls of several such communicators that are not prepared yet (ranks made one
/// by one with ncclCommInitRank, called together in ncclGroupStart/End), each waits for
/// the others, so they prepare side by side, each on a thread of its own.
#[allow(clippy::type_complexity)]
fn plan_all<'c, 'g, E: Engine>(
    calls: &[(&'c GroupCall<'g, E>, Mode)],
) -> Result<Group<(&'c GroupCall<'g, E>, Planned<E>)>> {
    let plan =
        |c: &GroupCall<'g, E>, mode: Mode| c.comm.plan_checked(&c.spec, c.send, c.recv, mode);
    // A single call (the usual path) never waits for itself: no lookup.
    let cold = || {
        calls
            .iter()
            .filter(|(c, mode)| {
                c.comm.engine.prepare_is_collective() && !c.comm.remembers(&c.spec, *mode)
            })
            .count()
    };
    if calls.len() < 2 || cold() < 2 {
        return calls
            .iter()
            .map(|&(c, mode)| Ok((c, plan(c, mode)?)))
            .collect();
    }
    let results: Vec<Result<Planned<E>>> = std::thread::scope(|s| {
        let handles: Vec<_> = calls
            .iter()
            .map(|&(c, mode)| s.spawn(move || plan(c, mode)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(RuntimeError::Invalid("preparing a call panicked".into()))
                })
            })
            .collect()
    });
    calls
        .iter()
        .zip(results)
        .map(|(&(c, _), r)| Ok((c, r?)))
        .collect()
}

/// # Safety
/// As [`DeviceComm::enqueue`], for every call.
pub unsafe fn enqueue_group<E: Engine>(calls: &[GroupCall<'_, E>]) -> Result<()> {
    // Every call checked first: a call refused before launch leaves the communicator
    // usable, as NCCL's invalid-argument errors do, and nothing is enqueued.
    let mut to_plan: Group<_> = SmallVec::new();
    let mut copies: Group<_> = SmallVec::new();
    for c in calls {
        let Some(mode) = c.comm.check_call(&c.spec, c.send, c.recv)? else {
            continue;
        };
        // One rank: every collective is the identity on its data (a sum, minimum,
        // average... of one value is that value). In place there is nothing to do; out
        // of place a copy, which the backend may offer instead of running the plan.
        if c.comm.n_ranks() == 1 && mode == Mode::InPlace {
            continue;
        }
        if c.comm.n_ranks() == 1 && c.comm.engine.copies() {
            copies.push((c, c.spec.sizes(0, 1).larger));
            continue;
        }
        to_plan.push((c, mode));
    }
    let planned = plan_all(&to_plan)?;
    for (c, bytes) in copies {
        // SAFETY: the caller's contract: both buffers hold the call's bytes, and out of
        // place they do not overlap.
        if let Err(e) = unsafe { c.comm.engine.copy(c.send, c.recv, bytes, c.stream) } {
            c.comm.fail(e.to_string());
            return Err(e);
        }
    }
    if planned.is_empty() {
        return Ok(());
    }
    let launches: Group<Launch<'_, E>> = planned
        .iter()
        .map(|(c, (p, args))| Launch {
            engine: &c.comm.engine,
            prepared: p,
            args: *args,
            stream: c.stream,
        })
        .collect();
    // SAFETY: the caller's contract, passed on.
    let r = unsafe { E::launch(&launches) };
    if let Err(e) = &r {
        for (c, _) in &planned {
            c.comm.fail(e.to_string());
        }
    }
    r
}
