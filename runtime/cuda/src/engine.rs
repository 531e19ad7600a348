//! The CUDA backend as an [`Engine`]: preparing a plan is loading its kernel variant,
//! making its connections and writing each rank's table once; a call is one kernel launch
//! (one per GPU for a group of ranks sharing it) whose arguments say where the caller's
//! buffers are. Nothing on the launch path allocates, exchanges, compiles or verifies.

use crate::clique::{Clique, Launches, MAX_GRID};
use crate::device::DeviceAlloc;
use crate::error::{CudaError, Result};
use crate::kernel::{Lane, Variant, Wire, MAX_LOCAL, THREADS};
use crate::modules::{self, Loaded};
use crate::program::{self, RankRes};
use crate::stream::Stream;
use braid_ir::Protocol;
use braid_plan::Verified;
use braid_runtime::device_comm::{CallArgs, Engine, Launch, Stats};
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::policy::Target;
use braid_runtime::RuntimeError;
use cudarc::driver::{result, sys};
use std::sync::{Arc, Mutex};

/// One rank of a communicator on its GPU.
pub struct CudaEngine {
    clique: Arc<Clique>,
    /// This rank's position among the clique's local ranks.
    me: usize,
    stats: Stats,
    order: Mutex<Order>,
    /// PreMulSum's staging memory ([`crate::premul`]).
    staging: Mutex<crate::premul::Staging>,
}

/// What keeps one rank's calls in issue order across the streams they come on: the
/// stream its last call came on and that stream's launch count then, and an event for
/// the rare stream change.
struct Order {
    last: Option<(sys::CUstream, u64)>,
    event: Option<sys::CUevent>,
}

// SAFETY: stream and event handles may be used from any thread.
unsafe impl Send for Order {}

/// A plan ready on one rank: its table in device memory and its kernel.
pub struct CudaPrepared {
    table: DeviceAlloc,
    kernel: Loaded,
    grid: u32,
    /// Where the table's step times are and how many steps, when they are recorded.
    trace: Option<(usize, usize)>,
    /// The rank's plan as flat passes, where it qualifies ([`crate::flat`]).
    flat: Option<crate::flat::FlatProgram>,
}

/// The kernel's argument: the calls of the ranks of one launch. Layout of `Launch` in
/// `kernels_templates/braid_kernel.cuh`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct LaunchParams {
    n: u32,
    first: [u32; MAX_LOCAL + 1],
    table: [u64; MAX_LOCAL],
    call: [KernelCall; MAX_LOCAL],
}

/// The kernel's `CallArgs` and `Launch` layouts (the launch builds them as these structs):
/// checked against the CUDA structures like `program::LAYOUT`.
pub const LAUNCH_LAYOUT: &[(&str, &str, usize)] = &[
    ("CallArgs", "in", std::mem::offset_of!(KernelCall, input)),
    ("CallArgs", "out", std::mem::offset_of!(KernelCall, output)),
    ("CallArgs", "count", std::mem::offset_of!(KernelCall, count)),
    (
        "CallArgs",
        "chunk_elems",
        std::mem::offset_of!(KernelCall, chunk_elems),
    ),
    (
        "CallArgs",
        "round_elems",
        std::mem::offset_of!(KernelCall, round_elems),
    ),
    (
        "CallArgs",
        "per_segment",
        std::mem::offset_of!(KernelCall, per_segment),
    ),
    ("CallArgs", "plan", std::mem::offset_of!(KernelCall, plan)),
    ("CallArgs", "avg_n", std::mem::offset_of!(KernelCall, avg_n)),
    ("CallArgs", "rank", std::mem::offset_of!(KernelCall, rank)),
    ("CallArgs", "flags", std::mem::offset_of!(KernelCall, flags)),
    ("CallArgs", "sizeof", std::mem::size_of::<KernelCall>()),
    ("Launch", "n", std::mem::offset_of!(LaunchParams, n)),
    ("Launch", "first", std::mem::offset_of!(LaunchParams, first)),
    ("Launch", "table", std::mem::offset_of!(LaunchParams, table)),
    ("Launch", "call", std::mem::offset_of!(LaunchParams, call)),
    ("Launch", "sizeof", std::mem::size_of::<LaunchParams>()),
];

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct KernelCall {
    input: u64,
    output: u64,
    count: u64,
    chunk_elems: u64,
    round_elems: u64,
    plan: u64,
    per_segment: u32,
    avg_n: u32,
    rank: u32,
    flags: u32,
}

/// `CallArgs.flags`: the call leaves its `in` untouched (see the kernel's `direct_pair`).
const IN_UNTOUCHED: u32 = 1;

impl KernelCall {
    /// Rank `rank`'s call `a` of the prepared plan with digest `plan`; `direct`: other
    /// ranks of the launch may read its `in` (`BRAID_DIRECT` not off).
    fn of(a: &CallArgs, plan: u64, rank: u32, direct: bool) -> KernelCall {
        let g = &a.geometry;
        KernelCall {
            input: a.input,
            output: a.output,
            count: g.count as u64,
            chunk_elems: g.chunk_elems as u64,
            round_elems: g.round_elems as u64,
            plan,
            per_segment: g.per_segment as u32,
            avg_n: a.avg_ranks,
            rank,
            flags: if direct && a.in_untouched {
                IN_UNTOUCHED
            } else {
                0
            },
        }
    }
}

impl CudaEngine {
    pub(crate) fn new(clique: Arc<Clique>, me: usize, stats: Stats) -> CudaEngine {
        CudaEngine {
            clique,
            me,
            stats,
            order: Mutex::new(Order {
                last: None,
                event: None,
            }),
            staging: Mutex::new(crate::premul::Staging::default()),
        }
    }

    pub(crate) fn clique(&self) -> &Arc<Clique> {
        &self.clique
    }

    pub(crate) fn staging_state(&self) -> &Mutex<crate::premul::Staging> {
        &self.staging
    }

    /// This rank's position among the clique's local ranks.
    pub(crate) fn local_index(&self) -> usize {
        self.me
    }

    /// The GPU (ordinal) this rank runs on.
    pub fn device(&self) -> usize {
        self.clique.locals[self.me].ctx.ordinal()
    }

    pub fn context(&self) -> &Arc<cudarc::driver::CudaContext> {
        &self.clique.locals[self.me].ctx
    }

    /// Whether connections go peer to peer (`false`: host-staged).
    pub fn p2p(&self) -> bool {
        self.clique.p2p
    }

    fn multiprocessors(&self) -> u32 {
        self.context()
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_or(1, |v| v.max(1) as u32)
    }

    /// Before a launch on `lead` of a call that came on `own`: when the rank's previous
    /// call came on another stream `last`, `lead` must wait for that call's kernel. If
    /// no launch of this communicator reached `last` since, an event recorded on `last`
    /// now marks exactly that (the application's own work after it can only delay us);
    /// otherwise another rank's call followed it there, and waiting for that one could
    /// wait for this very call: refused. Nothing is recorded on the usual path, where a
    /// rank keeps its stream. The rank's order stays locked until the launch records
    /// where the call went ([`OrderGuard::after`]).
    fn order_before(
        &self,
        lead: sys::CUstream,
        own: sys::CUstream,
        seen: &Launches,
    ) -> Result<OrderGuard<'_>> {
        let mut o = self.order.lock().unwrap();
        let Some((last, seq)) = o.last else {
            return Ok(OrderGuard(o));
        };
        if last == own || last == lead {
            return Ok(OrderGuard(o));
        }
        if seen.per_stream.get(&(last as usize)).copied().unwrap_or(0) != seq {
            return Err(CudaError::Invalid(format!(
                "rank {}: this call came on another stream than the rank's previous one, and \
                 another rank's call was enqueued behind that one: the new call cannot be \
                 ordered after it without waiting for the other rank. Keep each rank on its \
                 stream, or synchronise the old stream first",
                self.rank()
            )));
        }
        if capturing(last)? || capturing(lead)? {
            return Ok(OrderGuard(o));
        }
        let ev = match o.event {
            Some(e) => e,
            None => {
                let e = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?;
                o.event = Some(e);
                e
            }
        };
        // SAFETY: a live event and streams of this rank's context.
        unsafe {
            result::event::record(ev, last)?;
            result::stream::wait_event(lead, ev, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)?;
        }
        o.last = None;
        Ok(OrderGuard(o))
    }
}

/// A rank's call order, locked from [`CudaEngine::order_before`] to the launch.
struct OrderGuard<'a>(std::sync::MutexGuard<'a, Order>);

impl OrderGuard<'_> {
    /// After a launch: the rank's call is complete, in stream order, on `own` (the
    /// launch stream, or a stream joined to it after the launch) at launch `seq` there.
    fn after(mut self, own: sys::CUstream, seq: u64) {
        self.0.last = Some((own, seq));
    }
}

fn capturing(s: sys::CUstream) -> Result<bool> {
    let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: out-parameter of a live stream.
    unsafe { sys::cuStreamIsCapturing(s, &mut st) }.result()?;
    Ok(st != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

impl Drop for CudaEngine {
    fn drop(&mut self) {
        let o = self.order.get_mut().unwrap();
        if let Some(e) = o.event.take() {
            let _ = self.context().bind_to_thread();
            // SAFETY: created by this engine, destroyed once.
            let _ = unsafe { result::event::destroy(e) };
        }
        let ctx = self.context().clone();
        self.staging.get_mut().unwrap().release(&ctx);
    }
}

fn rt(e: CudaError) -> RuntimeError {
    match e {
        CudaError::Runtime(r) => r,
        CudaError::Invalid(m) => RuntimeError::Invalid(m),
        other => RuntimeError::Invalid(other.to_string()),
    }
}

impl Engine for CudaEngine {
    type Stream = Stream;
    type Prepared = CudaPrepared;

    fn rank(&self) -> u32 {
        self.clique.locals[self.me].rank
    }

    fn n_ranks(&self) -> u32 {
        self.clique.n
    }

    fn target(&self) -> Target {
        // Each communicator takes at most half the GPU at one block per multiprocessor,
        // shared by the ranks on it: all of a launch's blocks fit at once, with room for
        // a second communicator and the application's kernels.
        let share = self.clique.sharing_gpu(self.me) as u32;
        Target {
            block_budget: (self.multiprocessors() / 2 / share).max(1),
            size_replicas: true,
            ll: true,
            ll128: self.clique.ll128,
            direct: self.clique.launches_together(),
            flat: self.clique.launches_together() && self.clique.flat,
        }
    }

    fn scratch_bytes(&self) -> usize {
        self.clique.scratch_bytes
    }

    fn stats(&self) -> &Stats {
        &self.stats
    }

    fn prepare(
        &self,
        plan: &Arc<Verified>,
        dtype: DType,
        op: RedOp,
        protocol: Protocol,
    ) -> braid_runtime::Result<CudaPrepared> {
        self.prepare_inner(plan, dtype, op, protocol).map_err(rt)
    }

    fn copies(&self) -> bool {
        true
    }

    fn step_times(
        &self,
        prepared: &CudaPrepared,
    ) -> braid_runtime::Result<Option<Vec<(u64, u64)>>> {
        let Some((at, n)) = prepared.trace else {
            return Ok(None);
        };
        let bytes = prepared.table.download_at(at, 16 * n).map_err(rt)?;
        Ok(Some(
            bytes
                .chunks_exact(16)
                .map(|c| {
                    let w = |i: usize| u64::from_le_bytes(c[i..i + 8].try_into().unwrap());
                    (w(0), w(8))
                })
                .collect(),
        ))
    }

    fn prepare_is_collective(&self) -> bool {
        // Ranks of other processes compare choices and exchange FIFOs while preparing.
        self.clique.oob.is_some()
    }

    unsafe fn copy(
        &self,
        src: u64,
        dst: u64,
        bytes: usize,
        stream: &Stream,
    ) -> braid_runtime::Result<()> {
        if stream.device() != self.device() {
            return Err(rt(CudaError::Invalid(format!(
                "rank {}: the stream belongs to GPU {}, the rank to GPU {}",
                self.rank(),
                stream.device(),
                self.device()
            ))));
        }
        self.context().bind_to_thread().map_err(|e| rt(e.into()))?;
        // SAFETY: the caller's contract: device memory of this GPU, `bytes` long each,
        // not overlapping; a live stream of this GPU.
        unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, stream.raw()) }
            .result()
            .map_err(|e| rt(e.into()))
    }

    unsafe fn launch(calls: &[Launch<'_, Self>]) -> braid_runtime::Result<()> {
        // SAFETY: the caller's contract.
        unsafe { launch_all(calls) }.map_err(rt)
    }

    fn abort(&self, reason: &str) {
        self.clique.abort_because(reason);
    }

    fn failure(&self) -> Option<String> {
        let code = self.clique.report(self.me);
        if code != 0 {
            let what = describe_failure(self.rank(), code, self.clique.timeout);
            // A kernel stopped by an abort says so; the abort's reason names the cause
            // (a peer whose process is gone, for one).
            return Some(match self.clique.abort_reason() {
                Some(why) if self.clique.aborted() => format!("{what}: {why}"),
                _ => what,
            });
        }
        if self.clique.aborted() {
            return Some(match self.clique.abort_reason() {
                Some(why) => format!("rank {}: aborted: {why}", self.rank()),
                None => format!("rank {}: the communicator was aborted", self.rank()),
            });
        }
        None
    }
}

/// What a kernel's failure word says.
pub fn describe_failure(rank: u32, code: u32, timeout: std::time::Duration) -> String {
    let block = code & 0xff_ffff;
    let what = match code >> 24 {
        1 => format!("timed out after {timeout:?} waiting for data from its receive peer"),
        2 => format!("timed out after {timeout:?} waiting for FIFO space at its send peer"),
        3 => format!("timed out after {timeout:?} waiting for another block's step"),
        4 => "stopped: the communicator was aborted".to_string(),
        _ => format!("failed (code {code:#x})"),
    };
    format!("rank {rank} failed on the GPU: block {block} {what} (BRAID_TIMEOUT)")
}

impl CudaEngine {
    fn prepare_inner(
        &self,
        plan: &Arc<Verified>,
        dtype: DType,
        op: RedOp,
        protocol: Protocol,
    ) -> Result<CudaPrepared> {
        let rank = self.rank();
        program::check(plan, rank)?;
        let grid = program::grid(plan, rank);
        if grid as usize > MAX_GRID {
            return Err(CudaError::Invalid(format!(
                "plan `{}` on {} replicas needs {grid} thread blocks on rank {rank}; at most \
                 {MAX_GRID}",
                plan.name, plan.channels
            )));
        }
        let wire = Wire {
            lane: Lane::of(protocol),
            host_fifo: self.clique.host_fifo(),
        };
        if wire.lane == Lane::Ll128 && !self.clique.ll128 {
            // The policy never asks for it here; a plan prepared by hand must not either.
            return Err(CudaError::Invalid(format!(
                "plan `{}`: LL128 runs only where every link of the communicator passed the \
                 LL128 stress test (docs/cuda.md, Protocols)",
                plan.name
            )));
        }
        let ctx = self.context().clone();
        let kernel = modules::get(&ctx, Variant { dtype, op, wire }, &self.stats)?;
        // Every block of every rank sharing this GPU in this process must be resident at
        // once (they wait on each other): never a deadlock because the GPU is full.
        let together: u32 = self
            .clique
            .locals
            .iter()
            .filter(|l| l.ctx.ordinal() == ctx.ordinal())
            .map(|l| program::grid(plan, l.rank))
            .sum();
        if together > kernel.resident() {
            return Err(CudaError::Invalid(format!(
                "plan `{}` on {} replicas needs {together} thread blocks resident at once on \
                 GPU {} ({} rank(s) share it); it holds {} of this kernel",
                plan.name,
                plan.channels,
                ctx.ordinal(),
                self.clique.sharing_gpu(self.me),
                kernel.resident()
            )));
        }
        // Every rank runs the same choice: ranks of other processes compare digests
        // before anything is connected.
        if let Some(oob) = &self.clique.oob {
            let mine = format!(
                "{:016x} x{} {} {} {}",
                plan.digest(),
                plan.channels,
                dtype.name(),
                op.name(),
                protocol.name()
            );
            let all = oob.allgather(mine.as_bytes())?;
            self.stats.exchanged();
            if let Some(r) = all.iter().position(|d| d != mine.as_bytes()) {
                return Err(CudaError::Runtime(RuntimeError::Mismatch(format!(
                    "rank {r} prepares `{}` as {}, rank {rank} as {mine} (plan digest, \
                     replicas, dtype, op, protocol): the ranks make different calls",
                    plan.name,
                    String::from_utf8_lossy(&all[r]),
                ))));
            }
        }
        self.clique.connect(plan, &self.stats)?;
        let ends = self.clique.block_ends(plan, rank)?;
        let local = &self.clique.locals[self.me];
        let scratch = if plan.scratch_chunks > 0 {
            self.clique.scratch(self.me, &self.stats)?
        } else {
            0
        };
        let res = RankRes {
            progress: local.state.ptr(),
            counters: local.counters.ptr(),
            fail: local.fail_addr(),
            report: self.clique.report_addr(self.me),
            abort: self.clique.abort_addr(),
            scratch,
            timeout_ns: u64::try_from(self.clique.timeout.as_nanos()).unwrap_or(u64::MAX),
            trace: self.clique.trace,
        };
        let layout = program::Layout::new(plan, rank);
        let table = DeviceAlloc::new(&ctx, layout.bytes(), 0)?;
        self.stats.allocated(1);
        table.upload(&program::encode(
            plan,
            rank,
            &layout,
            &res,
            &ends,
            table.ptr(),
        ))?;
        let flat = if self.clique.flat && !res.trace {
            crate::flat::program(plan, rank, layout.direct())
        } else {
            None
        };
        Ok(CudaPrepared {
            table,
            kernel,
            grid,
            trace: res.trace.then(|| layout.trace()),
            flat,
        })
    }
}

/// Launches `calls`: the ranks sharing a GPU and a kernel go in one launch (up to
/// [`MAX_LOCAL`]), on the first one's stream, with the others' streams joined to it.
///
/// # Safety
/// As [`Engine::launch`].
unsafe fn launch_all(calls: &[Launch<'_, CudaEngine>]) -> Result<()> {
    for c in calls {
        check_device(Member {
            engine: c.engine,
            stream: c.stream,
        })?;
    }
    // The usual case, one call per rank, the ranks of one GPU together: one launch, no
    // sorting.
    let distinct = calls
        .iter()
        .enumerate()
        .all(|(i, c)| calls[..i].iter().all(|d| !std::ptr::eq(d.engine, c.engine)));
    let one_launch =
        distinct && calls.len() <= MAX_LOCAL && calls.iter().all(|c| same_launch(&calls[0], c));
    if one_launch {
        let g: Group<&Launch<'_, CudaEngine>> = calls.iter().collect();
        let members = members_of(&g);
        check_streams(&members)?;
        // SAFETY: passed on.
        return unsafe { launch_group(&g, &members) };
    }
    // Identities of each call's rank and of the launch it could share.
    let rank: Vec<usize> = calls
        .iter()
        .map(|c| c.engine as *const CudaEngine as usize)
        .collect();
    let kernel: Vec<usize> = calls
        .iter()
        .map(|c| {
            calls
                .iter()
                .position(|d| same_launch(d, c))
                .expect("a call can share its own launch")
        })
        .collect();
    let groups: Vec<Vec<&Launch<'_, CudaEngine>>> = launch_groups(&rank, &kernel, MAX_LOCAL)
        .into_iter()
        .map(|g| g.into_iter().map(|i| &calls[i]).collect())
        .collect();
    let members: Vec<Group<Member<'_>>> = groups.iter().map(|g| members_of(g)).collect();
    for m in &members {
        check_streams(m)?;
    }
    for (g, m) in groups.iter().zip(&members) {
        // SAFETY: passed on.
        unsafe { launch_group(g, m)? };
    }
    Ok(())
}

/// Which calls go in each launch, in launch order: a rank's calls keep their issue order
/// and never share a launch (two calls of one rank in one kernel would use its
/// connections at once, and a peer could not tell them apart), the k-th call of every
/// rank goes with the other ranks' k-th (the calls that meet it), and a launch holds
/// calls of one kernel, at most `max`. `rank[i]` and `kernel[i]` identify call i's rank
/// and the launch it can share (equal values: the same).
fn launch_groups(rank: &[usize], kernel: &[usize], max: usize) -> Vec<Vec<usize>> {
    let round: Vec<usize> = (0..rank.len())
        .map(|i| rank[..i].iter().filter(|&&r| r == rank[i]).count())
        .collect();
    let mut out: Vec<Vec<usize>> = Vec::new();
    for k in 0..=round.iter().copied().max().unwrap_or(0) {
        let first = out.len();
        for i in (0..rank.len()).filter(|&i| round[i] == k) {
            match out[first..]
                .iter_mut()
                .find(|g| g.len() < max && kernel[g[0]] == kernel[i])
            {
                Some(g) => g.push(i),
                None => out.push(vec![i]),
            }
        }
    }
    out
}

/// The calls of one group or launch, held without allocating up to [`MAX_LOCAL`] (the
/// ranks one process launches together).
pub(crate) type Group<T> = smallvec::SmallVec<[T; MAX_LOCAL]>;

/// Streams one launch may join besides its own (every rank of a launch on its own
/// stream, and a point-to-point group's ranks on a few each).
const MAX_LAUNCH_STREAMS: usize = 4 * MAX_LOCAL;

/// One rank's part of a launch: its engine and the stream its call came on.
#[derive(Clone, Copy)]
pub(crate) struct Member<'a> {
    pub engine: &'a CudaEngine,
    pub stream: &'a Stream,
}

/// Refuses a call on a stream of another GPU than its rank's.
pub(crate) fn check_device(m: Member<'_>) -> Result<()> {
    if m.stream.device() != m.engine.device() {
        return Err(CudaError::Invalid(format!(
            "rank {}: the stream belongs to GPU {}, the rank to GPU {}",
            m.engine.rank(),
            m.stream.device(),
            m.engine.device()
        )));
    }
    Ok(())
}

/// Whether two calls can run in one launch: ranks of one clique on one GPU, one kernel.
fn same_launch(a: &Launch<'_, CudaEngine>, b: &Launch<'_, CudaEngine>) -> bool {
    Arc::ptr_eq(a.engine.clique(), b.engine.clique())
        && a.engine.device() == b.engine.device()
        && a.prepared.inner.kernel.func.cu_function() == b.prepared.inner.kernel.func.cu_function()
}

/// The members of a launch of calls.
fn members_of<'a>(g: &[&'a Launch<'a, CudaEngine>]) -> Group<Member<'a>> {
    g.iter()
        .map(|c| Member {
            engine: c.engine,
            stream: c.stream,
        })
        .collect()
}

/// Refuses what would deadlock: two ranks sharing a GPU and a stream in separate
/// launches (the second waits behind the first, which waits for the second).
pub(crate) fn check_streams(g: &[Member<'_>]) -> Result<()> {
    let clique = g[0].engine.clique();
    let device = g[0].engine.device();
    let sharing = clique.sharing_gpu(g[0].engine.me);
    if sharing < 2 {
        return Ok(());
    }
    let s = g[0].stream.raw();
    let first = g[0].engine.rank();
    let has = |r: u32| g.iter().any(|c| c.engine.rank() == r);
    // Ranks of this launch (a rank may appear with several streams).
    let ranks = clique.locals.iter().filter(|l| has(l.rank)).count();
    let mut l = clique.launches.lock().unwrap();
    let entry = l.last_solo.entry(device).or_insert(None);
    if let Some((stream, other)) = *entry {
        if stream == s as usize && !has(other) && ranks < sharing {
            return Err(CudaError::Invalid(format!(
                "ranks {other} and {first} share GPU {device} and one stream in separate calls: \
                 the second would wait behind the first forever. Call them in one group \
                 (one launch), or give each rank its own stream"
            )));
        }
    }
    *entry = (ranks < sharing).then_some((s as usize, first));
    Ok(())
}

/// Launches the calls `g` (one kernel, ranks sharing a GPU); `members` are their ranks
/// and streams, as [`members_of`] makes them.
///
/// # Safety
/// As [`Engine::launch`].
unsafe fn launch_group(g: &[&Launch<'_, CudaEngine>], members: &[Member<'_>]) -> Result<()> {
    if let Some(f) = flat_launch(g) {
        let flat = &g[0].prepared.inner.kernel.flat;
        let grid = f.grid();
        // SAFETY: each of `braid_flat_s`, `braid_flat_m` and `braid_flat` takes a
        // `FlatArgs` of its size by value, which `flat::FlatArgs` lays out, packed by
        // `FlatLaunch::pack` as the kernel reads it; every address in it is inside a
        // buffer of a call of this launch (the plan's steps, proved inside those buffers
        // by `program::check` when prepared, resolved with the calls' geometry), and the
        // caller guarantees the buffers.
        unsafe {
            match f.pack(g[0].engine.clique().flat_full_args) {
                crate::flat::Packed::S(mut a) => {
                    launch_joined(members, flat[0].cu_function(), grid, &mut a)?
                }
                crate::flat::Packed::M(mut a) => {
                    launch_joined(members, flat[1].cu_function(), grid, &mut a)?
                }
                crate::flat::Packed::L(mut a) => {
                    launch_joined(members, flat[2].cu_function(), grid, &mut a)?
                }
            }
        };
        for c in g {
            c.engine.stats.launched_flat(1);
        }
        return Ok(());
    }
    let mut p = LaunchParams {
        n: g.len() as u32,
        ..LaunchParams::default()
    };
    let mut total = 0u32;
    for (i, c) in g.iter().enumerate() {
        p.first[i] = total;
        p.table[i] = c.prepared.inner.table.ptr();
        p.call[i] = KernelCall::of(
            &c.args,
            c.prepared.plan.digest(),
            c.engine.rank(),
            c.engine.clique().direct,
        );
        total += c.prepared.inner.grid;
    }
    p.first[g.len()] = total;
    let func = g[0].prepared.inner.kernel.func.cu_function();
    // SAFETY: the kernel's one parameter is a `Launch` by value, which `LaunchParams`
    // lays out; every table was written by `program::encode` after `program::check`
    // proved its steps inside the call's buffers, scratch and FIFOs; the caller
    // guarantees the buffers.
    unsafe { launch_joined(members, func, total, &mut p) }
}

/// The flat launch of `g`, where every rank of it has a flat program and the launch
/// resolves ([`crate::flat::resolve`]).
fn flat_launch(g: &[&Launch<'_, CudaEngine>]) -> Option<crate::flat::FlatLaunch> {
    let calls = g
        .iter()
        .map(|c| {
            Some(crate::flat::RankCall {
                rank: c.engine.rank(),
                program: c.prepared.inner.flat.as_ref()?,
                input: c.args.input,
                output: c.args.output,
                geometry: &c.args.geometry,
                plan: c.prepared.plan.digest(),
                in_untouched: c.args.in_untouched,
                avg: c.args.avg_ranks > 1,
            })
        })
        .collect::<Option<Group<_>>>()?;
    let prog = g[0]
        .engine
        .clique()
        .flat_program(&g[0].prepared.plan, calls[0].plan, &calls)?;
    // Blocks of a flat launch never wait for one another: they need not be resident at
    // once, and a large call may take a block per multiprocessor.
    let max_grid = g[0]
        .engine
        .clique()
        .flat_blocks
        .unwrap_or(g[0].prepared.inner.kernel.multiprocessors);
    prog.resolve_cached(&calls, max_grid)
}

/// Launches `func` with `grid` blocks and the one parameter `param` on the first
/// member's stream: the launch waits for what came before it on the other members'
/// streams, and they wait for the launch; each member's rank keeps its calls in issue
/// order ([`CudaEngine::order_before`]).
///
/// # Safety
/// `param` must be what `func` takes, by value, and everything it points at must be
/// valid for the kernel until it completes.
pub(crate) unsafe fn launch_joined<P>(
    g: &[Member<'_>],
    func: sys::CUfunction,
    grid: u32,
    param: &mut P,
) -> Result<()> {
    let lead = g[0];
    let ctx = lead.engine.context();
    ctx.bind_to_thread()?;
    let stream = lead.stream.raw();
    // Other ranks' streams: the launch waits for what came before on them, and they wait
    // for the launch. Distinct, in order of first appearance (no allocation: a launch has
    // at most one stream per member).
    let mut other_buf = [std::ptr::null_mut(); MAX_LAUNCH_STREAMS];
    let mut n_others = 0;
    for c in g {
        let s = c.stream.raw();
        if s != stream && !other_buf[..n_others].contains(&s) {
            if n_others == MAX_LAUNCH_STREAMS {
                return Err(CudaError::Invalid(format!(
                    "one launch joins at most {MAX_LAUNCH_STREAMS} streams"
                )));
            }
            other_buf[n_others] = s;
            n_others += 1;
        }
    }
    let others = &other_buf[..n_others];
    let clique = lead.engine.clique().clone();
    let mut seen = clique.launches.lock().unwrap();
    // Every member's order is held (in the members' order, under the clique's lock, so
    // no two launches take them in another) until the launch has recorded it.
    let mut orders: Group<OrderGuard<'_>> = Group::new();
    for c in g {
        orders.push(c.engine.order_before(stream, c.stream.raw(), &seen)?);
    }
    let join = if others.is_empty() {
        None
    } else {
        Some(lead.engine.clique().join_event(ctx)?)
    };
    if let Some(ev) = join {
        for &s in others {
            // SAFETY: live event and streams.
            unsafe {
                result::event::record(ev, s)?;
                result::stream::wait_event(
                    stream,
                    ev,
                    sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                )?;
            }
        }
    }
    let mut arg = param as *mut P as *mut std::ffi::c_void;
    // SAFETY: the caller's contract.
    unsafe {
        result::launch_kernel(
            func,
            (grid, 1, 1),
            (THREADS, 1, 1),
            0,
            stream,
            std::slice::from_mut(&mut arg),
        )?;
    }
    if let Some(ev) = join {
        // One record after the launch serves every other stream's wait (a wait takes the
        // event's latest record at the time it is issued).
        // SAFETY: live event and streams.
        unsafe { result::event::record(ev, stream)? };
        for &s in others {
            // SAFETY: live event and streams.
            unsafe {
                result::stream::wait_event(s, ev, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)?
            };
        }
    }
    let mut bumped = [(std::ptr::null_mut(), 0u64); MAX_LAUNCH_STREAMS + 1];
    for (i, s) in std::iter::once(stream)
        .chain(others.iter().copied())
        .enumerate()
    {
        let n = seen.per_stream.entry(s as usize).or_insert(0);
        *n += 1;
        bumped[i] = (s, *n);
    }
    let bumped = &bumped[..1 + others.len()];
    drop(seen);
    for (c, order) in g.iter().zip(orders) {
        let own = c.stream.raw();
        let seq = bumped.iter().find(|(s, _)| *s == own).map_or(0, |b| b.1);
        order.after(own, seq);
        c.engine.stats.launched(1);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two collectives of two ranks in one group, in either order of issue: each rank's
    /// calls in order, never two of one rank together, the k-th calls of the ranks
    /// together; different kernels apart; at most `max` a launch.
    #[test]
    fn a_ranks_calls_keep_their_order_and_meet_their_peers() {
        // Collective by collective: (r0, r1), then (r0, r1).
        assert_eq!(
            launch_groups(&[0, 1, 0, 1], &[0, 0, 0, 0], 8),
            vec![vec![0, 1], vec![2, 3]]
        );
        // Rank by rank: r0's two calls, then r1's: r0's first with r1's first.
        assert_eq!(
            launch_groups(&[0, 0, 1, 1], &[0, 0, 0, 0], 8),
            vec![vec![0, 2], vec![1, 3]]
        );
        // The second collective on another kernel: apart from the first round.
        assert_eq!(
            launch_groups(&[0, 1, 0, 1], &[0, 0, 2, 2], 8),
            vec![vec![0, 1], vec![2, 3]]
        );
        // Mixed kernels in one round, and a launch limit of 2.
        assert_eq!(
            launch_groups(&[0, 1, 2, 3], &[0, 1, 0, 0], 2),
            vec![vec![0, 2], vec![1], vec![3]]
        );
        // One call per rank, one kernel: one launch.
        assert_eq!(
            launch_groups(&[5, 6, 7], &[0, 0, 0], 8),
            vec![vec![0, 1, 2]]
        );
    }

    #[test]
    fn launch_params_have_the_kernels_layout() {
        assert_eq!(std::mem::size_of::<KernelCall>(), 64);
        assert_eq!(std::mem::offset_of!(LaunchParams, first), 4);
        assert_eq!(std::mem::offset_of!(LaunchParams, table), 40);
        assert_eq!(std::mem::offset_of!(LaunchParams, call), 104);
        assert_eq!(std::mem::size_of::<LaunchParams>(), 104 + 64 * MAX_LOCAL);
    }

    #[test]
    fn failures_name_the_rank_block_and_wait() {
        let t = std::time::Duration::from_secs(5);
        let m = describe_failure(3, (1 << 24) | 7, t);
        assert!(
            m.contains("rank 3") && m.contains("block 7") && m.contains("receive peer"),
            "{m}"
        );
        assert!(describe_failure(0, 4 << 24, t).contains("aborted"));
    }
}
