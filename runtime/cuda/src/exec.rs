//! Running a plan on the local GPUs: one process, rank `r` on GPU `r`, every rank's
//! kernel on its own stream so that all ranks run at once. Connections use peer-to-peer
//! access where every pair has it, else (or with `BRAID_P2P_DISABLE=1`) FIFOs in pinned
//! host memory.
//!
//! Order of a call: validate (verifier, mode, bounds against this call's buffers, thread
//! blocks that fit at once) -> generate and compile (or take from the caches) -> allocate
//! and upload -> launch every rank -> synchronise -> read status words -> download. Nothing
//! is allocated or launched for a plan that fails validation.

use crate::codegen::Wire;
use crate::device::{disable_peer, enable_peer};
use crate::error::{CudaError, Result};
use crate::layout::CallShape;
use crate::rank_mem::{Fifo, RankMem};
use crate::settings::Settings;
use crate::table;
use crate::validate;
use braid_ir::Mode;
use braid_plan::Plan;
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::reduce::finish_avg;
use braid_runtime::selfcheck::buffer_elems;
use cudarc::driver::{sys, CudaContext, CudaFunction, CudaStream};
use cudarc::nvrtc::Ptx;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Whether a CUDA driver library can be loaded here. Check this before calling anything
/// else of cudarc: without a driver its functions panic.
pub fn driver_present() -> bool {
    // SAFETY: only tries to load the library.
    unsafe { sys::is_culib_present() }
}

/// How many GPUs this machine has (0 without a driver).
pub fn device_count() -> usize {
    if !driver_present() {
        return 0;
    }
    CudaContext::device_count().map_or(0, |n| n as usize)
}

/// Kernels spin while they wait for peers, so two calls sharing the GPUs could starve each
/// other of multiprocessors: calls run one at a time per process.
static RUN_LOCK: Mutex<()> = Mutex::new(());

/// Whether `BRAID_P2P_DISABLE` asks for host-staged connections (like `NCCL_P2P_DISABLE`).
pub fn p2p_disabled_by_env() -> bool {
    p2p_disabled(std::env::var("BRAID_P2P_DISABLE").ok().as_deref())
}

/// Whether a value of `BRAID_P2P_DISABLE` disables peer to peer: set, not empty, not `0`.
fn p2p_disabled(value: Option<&str>) -> bool {
    value.is_some_and(|v| !matches!(v.trim(), "" | "0"))
}

/// Whether GPU `a` can access GPU `b`'s memory directly.
fn can_access_peer(a: &CudaContext, b: &CudaContext) -> Result<bool> {
    let mut can = 0;
    // SAFETY: out-parameter; both devices exist.
    unsafe { sys::cuDeviceCanAccessPeer(&mut can, a.cu_device(), b.cu_device()) }.result()?;
    Ok(can != 0)
}

/// The local GPUs a process drives, peers enabled both ways between every pair (or
/// host-staged connections where that is impossible or disabled).
pub struct Gpus {
    ctxs: Vec<Arc<CudaContext>>,
    streams: Vec<Arc<CudaStream>>,
    settings: Settings,
}

/// What one call produced.
#[derive(Debug)]
pub struct Outcome {
    /// Each rank's result (NCCL's receive buffer); `None` where the rank has none.
    pub outputs: Vec<Option<Vec<u8>>>,
    /// From the launch of the first kernel to the end of the last one.
    pub kernel_time: Duration,
    /// Whether the kernels were already compiled (memory or disk cache).
    pub cached: bool,
}

impl Gpus {
    /// Opens the first `n` GPUs (all the same architecture) and enables peer access
    /// between every pair, unless `BRAID_P2P_DISABLE` is set or some pair cannot: then
    /// every connection is host-staged.
    pub fn open(n: u32) -> Result<Gpus> {
        Self::open_with(n, p2p_disabled_by_env())
    }

    /// [`Gpus::open`] with host-staged connections forced (`p2p_disable`) or not.
    pub fn open_with(n: u32, p2p_disable: bool) -> Result<Gpus> {
        if !driver_present() {
            return Err(CudaError::NoDriver);
        }
        let have = CudaContext::device_count()?;
        if (have as u32) < n {
            return Err(CudaError::Invalid(format!(
                "{n} ranks need {n} GPUs, this machine has {have}"
            )));
        }
        let ctxs = (0..n as usize)
            .map(CudaContext::new)
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let mut p2p = !p2p_disable;
        for (i, a) in ctxs.iter().enumerate() {
            for (j, b) in ctxs.iter().enumerate() {
                if p2p && i != j && !can_access_peer(a, b)? {
                    tracing::warn!(
                        "GPU {i} cannot access GPU {j} peer to peer: connections are host-staged"
                    );
                    p2p = false;
                }
            }
        }
        if p2p {
            for (i, a) in ctxs.iter().enumerate() {
                for (j, b) in ctxs.iter().enumerate() {
                    if i != j {
                        enable_peer(a, b)?;
                    }
                }
            }
        } else {
            tracing::info!("{n} GPUs, connections staged through pinned host memory");
        }
        let streams = ctxs
            .iter()
            .map(|c| c.new_stream())
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(Gpus {
            settings: Settings::new(&ctxs, p2p)?,
            ctxs,
            streams,
        })
    }

    /// Whether connections go peer to peer (`false`: host-staged).
    pub fn p2p(&self) -> bool {
        self.settings.p2p
    }

    /// Forces a protocol for every later call (`None`: the plan's, `auto` by size),
    /// overriding `BRAID_PROTO`.
    pub fn set_protocol(&mut self, protocol: Option<braid_ir::Protocol>) {
        self.settings.protocol = protocol;
    }

    /// How long a kernel of a later call may wait for a peer before the call fails,
    /// overriding `BRAID_TIMEOUT` (part of the generated source: a new value compiles
    /// anew).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.settings.timeout = timeout;
    }

    pub fn len(&self) -> usize {
        self.ctxs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ctxs.is_empty()
    }

    /// The smallest multiprocessor count of the open GPUs.
    pub fn multiprocessors(&self) -> u32 {
        self.settings.multiprocessors
    }

    /// The target architecture, e.g. `sm_90`.
    pub fn arch(&self) -> &str {
        &self.settings.arch
    }

    /// The stream each rank's kernel runs on (rank `r` on GPU `r`); NCCL's comparison
    /// runs on the same streams.
    pub fn streams(&self) -> &[Arc<CudaStream>] {
        &self.streams
    }

    /// Runs one call of `plan`: `inputs[r]` is rank `r`'s send buffer (NCCL's layout and
    /// size for `count`). Refuses, before touching any GPU, a plan that does not verify,
    /// is not valid for `mode`, or has a step outside this call's buffers.
    pub fn run(
        &self,
        plan: &Plan,
        dtype: DType,
        op: RedOp,
        count: usize,
        mode: Mode,
        inputs: &[Vec<u8>],
    ) -> Result<Outcome> {
        if count == 0 {
            let shape = CallShape {
                plan,
                elem: dtype.size(),
                count,
                mode,
            };
            validate::check_plan(plan, mode)?;
            return Ok(Outcome {
                outputs: (0..plan.n_ranks)
                    .map(|r| shape.unstage_out(r, &[]))
                    .collect(),
                kernel_time: Duration::ZERO,
                cached: true,
            });
        }
        let resident = self.prepare(plan, dtype, op, count, mode, inputs)?;
        let kernel_time = resident.launch()?;
        Ok(Outcome {
            outputs: resident.outputs()?,
            kernel_time,
            cached: resident.cached,
        })
    }

    /// Validates `plan` for this call, compiles it (or takes it from the caches), and
    /// allocates and uploads every rank's buffers, FIFOs and launch table once, so that
    /// [`Resident::launch`] can run the call many times with no host copy: what `braid
    /// perf` times. Same refusals as [`Gpus::run`]; `count` must be positive. Calls are
    /// serialised per process while the returned value lives (kernels spin on peers).
    pub fn prepare<'a>(
        &'a self,
        plan: &'a Plan,
        dtype: DType,
        op: RedOp,
        count: usize,
        mode: Mode,
        inputs: &[Vec<u8>],
    ) -> Result<Resident<'a>> {
        let n = plan.n_ranks;
        let shape = CallShape {
            plan,
            elem: dtype.size(),
            count,
            mode,
        };
        if inputs.len() != n as usize || inputs.iter().any(|i| i.len() != shape.input_bytes()) {
            return Err(CudaError::Invalid(format!(
                "expected {n} inputs of {} bytes",
                shape.input_bytes()
            )));
        }
        if n as usize > self.len() {
            return Err(CudaError::Invalid(format!(
                "plan has {n} ranks, only {} GPUs are open",
                self.len()
            )));
        }
        let (wire, source) = self.settings.source(&shape, dtype, op)?;
        let lock = RUN_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let (funcs, cached) = self.settings.kernels(&source, |ptx| {
            let mut funcs = Vec::new();
            for (ctx, name) in self.ctxs.iter().zip(&source.kernels) {
                let module = ctx.load_module(Ptx::from_src(ptx))?;
                funcs.push(module.load_function(name)?);
            }
            Ok(funcs)
        })?;
        let conns = table::connections(plan);
        let fifos = conns
            .iter()
            .map(|c| {
                let ctx = &self.ctxs[c.receiver as usize];
                if self.settings.p2p {
                    Fifo::device(ctx, plan.slots)
                } else {
                    Fifo::host(ctx, plan.slots)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let fifo_ptrs: Vec<u64> = fifos.iter().map(|f| f.ptr()).collect();
        let mems = inputs
            .iter()
            .enumerate()
            .take(n as usize)
            .map(|(r, input)| {
                RankMem::new(
                    &self.ctxs[r],
                    &shape,
                    r as u32,
                    input,
                    &conns,
                    &fifo_ptrs,
                    self.settings.timeout,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Resident {
            gpus: self,
            shape,
            dtype,
            op,
            wire,
            funcs,
            cached,
            mems,
            fifos,
            _lock: lock,
        })
    }
}

/// A call whose buffers stay on the GPUs between launches (from [`Gpus::prepare`]).
/// Everything is freed when it is dropped.
pub struct Resident<'a> {
    gpus: &'a Gpus,
    shape: CallShape<'a>,
    dtype: DType,
    op: RedOp,
    wire: Wire,
    funcs: Vec<CudaFunction>,
    /// Whether the kernels were already compiled (memory or disk cache).
    pub cached: bool,
    mems: Vec<RankMem>,
    /// Declared after `mems`: FIFOs go last, as in a single call.
    fifos: Vec<Fifo>,
    _lock: MutexGuard<'static, ()>,
}

impl Resident<'_> {
    /// Bytes of the larger buffer of one rank (nccl-tests' "size").
    pub fn bytes(&self) -> usize {
        let p = self.shape.plan;
        let (i, o) = buffer_elems(p.collective, p.n_ranks, self.shape.count);
        i.max(o) * self.shape.elem
    }

    /// The wire protocol this call runs with.
    pub fn wire(&self) -> Wire {
        self.wire
    }

    /// Enqueues the call once more on `streams` (`streams[r]`: a stream of GPU `r`, one
    /// per rank) and returns at once: one kernel launch per rank, nothing else, so the
    /// call can be captured in a CUDA graph and nothing synchronises the host.
    ///
    /// Nothing is reset between calls: every connection's counters and each block's
    /// progress only grow, and each grid block carries what it needs into the next call
    /// in its state record (see `kernels_templates/braid_prims.cuh`). So a rank may start
    /// call `k + 1` while a peer still finishes call `k`; the FIFOs order them. The
    /// kernels of every rank spin on each other, so all ranks' streams must make progress
    /// concurrently (never enqueue two ranks on one stream, and launch every GPU's graph
    /// before synchronising any). Out of place, inputs are untouched, so every call
    /// computes the same result. Call [`Resident::status`] after synchronising the streams
    /// to learn whether a kernel timed out.
    pub fn enqueue(&self, streams: &[Arc<CudaStream>]) -> Result<()> {
        let n = self.mems.len();
        if streams.len() != n {
            return Err(CudaError::Invalid(format!(
                "{n} ranks need {n} streams, got {}",
                streams.len()
            )));
        }
        // Every stream is checked before any rank launches: a half-launched call would
        // leave the launched ranks waiting for their peers.
        for (r, s) in streams.iter().enumerate() {
            self.check_stream(r, s)?;
        }
        for (r, s) in streams.iter().enumerate() {
            self.launch_rank(r, s)?;
        }
        Ok(())
    }

    /// Enqueues only rank `rank`'s kernel on `stream` (a stream of GPU `rank`), for
    /// callers that drive each GPU from its own thread. Every rank must be enqueued once
    /// per call, or the enqueued ones wait for their peers until they time out.
    pub fn enqueue_rank(&self, rank: usize, stream: &CudaStream) -> Result<()> {
        if rank >= self.mems.len() {
            return Err(CudaError::Invalid(format!(
                "rank {rank} is not one of {} ranks",
                self.mems.len()
            )));
        }
        self.check_stream(rank, stream)?;
        self.launch_rank(rank, stream)
    }

    fn check_stream(&self, rank: usize, stream: &CudaStream) -> Result<()> {
        if stream.context().cu_device() != self.gpus.ctxs[rank].cu_device() {
            return Err(CudaError::Invalid(format!(
                "stream {rank} does not belong to GPU {rank}"
            )));
        }
        Ok(())
    }

    fn launch_rank(&self, rank: usize, stream: &CudaStream) -> Result<()> {
        let chunk_elems = self.shape.geometry().chunk_elems as u64;
        self.mems[rank].launch(&self.funcs[rank], chunk_elems, stream)
    }

    /// Whether the last calls' kernels finished normally: reads every rank's status word
    /// (sticky: once a kernel timed out, every later call reports it until
    /// [`Resident::reset`], which [`Resident::launch`] does itself). Call it after
    /// synchronising the streams.
    pub fn status(&self) -> Result<()> {
        self.mems.iter().try_for_each(RankMem::status)
    }

    /// Zeroes every counter, state record, status word and FIFO (blocking): after a
    /// failed call, so that the next one starts from nothing.
    pub fn reset(&self) -> Result<()> {
        for c in &self.gpus.ctxs[..self.mems.len()] {
            c.synchronize()?;
        }
        self.fifos.iter().try_for_each(Fifo::clear)?;
        self.mems.iter().try_for_each(RankMem::reset)
    }

    /// Runs the call once more on the resident buffers and returns the time from the
    /// first launch to the end of the last rank's kernel (host clock around
    /// [`Resident::enqueue`] on the `Gpus`' own streams and synchronise, as NCCL is
    /// timed). After a kernel timed out, everything is reset (blocking) so that the next
    /// call starts clean.
    pub fn launch(&self) -> Result<Duration> {
        let streams = &self.gpus.streams[..self.mems.len()];
        let start = Instant::now();
        let mut first_err = self.enqueue(streams).err();
        for s in streams {
            if let Err(e) = s.synchronize() {
                first_err.get_or_insert(e.into());
            }
        }
        let elapsed = start.elapsed();
        if let Some(e) = first_err {
            return Err(e);
        }
        if let Err(e) = self.status() {
            self.reset()?;
            return Err(e);
        }
        Ok(elapsed)
    }

    /// Reads every rank's result back (NCCL's receive buffer; `None` where the rank has
    /// none), with `avg` finished on the host as the host backend does.
    pub fn outputs(&self) -> Result<Vec<Option<Vec<u8>>>> {
        let plan = self.shape.plan;
        let mut outputs = Vec::with_capacity(self.mems.len());
        for m in &self.mems {
            outputs.push(m.output(&self.shape)?);
        }
        if self.op == RedOp::Avg && plan.collective.reduces() {
            for out in outputs.iter_mut().flatten() {
                finish_avg(self.dtype, out, plan.n_ranks);
            }
        }
        Ok(outputs)
    }
}

impl Drop for Resident<'_> {
    fn drop(&mut self) {
        // Work enqueued on callers' streams may still use the buffers.
        for c in &self.gpus.ctxs[..self.mems.len()] {
            let _ = c.synchronize();
        }
    }
}

impl Drop for Gpus {
    fn drop(&mut self) {
        for s in &self.streams {
            let _ = s.synchronize();
        }
        if self.settings.p2p {
            for (i, a) in self.ctxs.iter().enumerate() {
                for (j, b) in self.ctxs.iter().enumerate() {
                    if i != j {
                        disable_peer(a, b);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::p2p_disabled;

    #[test]
    fn p2p_disable_takes_any_value_but_empty_and_zero() {
        assert!(!p2p_disabled(None));
        assert!(!p2p_disabled(Some("")));
        assert!(!p2p_disabled(Some(" 0 ")));
        assert!(p2p_disabled(Some("1")));
        assert!(p2p_disabled(Some("yes")));
    }
}
