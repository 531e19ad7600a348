//! Running a plan on the local GPUs: one process, rank `r` on GPU `r`, every rank's
//! kernel on its own stream so that all ranks run at once.
//!
//! Order of a call: validate (verifier, mode, bounds against this call's buffers, thread
//! blocks that fit at once) -> generate and compile (or take from the caches) -> allocate
//! and upload -> launch every rank -> synchronise -> read status words -> download. Nothing
//! is allocated or launched for a plan that fails validation.

use crate::codegen;
use crate::compile;
use crate::device::{disable_peer, enable_peer, DeviceAlloc};
use crate::error::{CudaError, Result};
use crate::layout::CallShape;
use crate::table;
use crate::validate;
use braid_ir::Mode;
use braid_plan::Plan;
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::reduce::finish_avg;
use braid_runtime::selfcheck::buffer_elems;
use cudarc::driver::{
    sys, CudaContext, CudaEvent, CudaFunction, CudaStream, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;
use std::collections::HashMap;
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

/// The local GPUs a process drives, peers enabled both ways between every pair.
pub struct Gpus {
    ctxs: Vec<Arc<CudaContext>>,
    streams: Vec<Arc<CudaStream>>,
    multiprocessors: u32,
    arch: String,
    driver_version: i32,
    /// Loaded kernels per source hash: one function per GPU (rank).
    modules: Mutex<HashMap<String, Vec<CudaFunction>>>,
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
    /// between every pair.
    pub fn open(n: u32) -> Result<Gpus> {
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
        let (major, minor) = ctxs[0].compute_capability()?;
        let mut multiprocessors = u32::MAX;
        for c in &ctxs {
            if c.compute_capability()? != (major, minor) {
                return Err(CudaError::Invalid(
                    "GPUs of different architectures are not supported yet".into(),
                ));
            }
            let sms =
                c.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
            multiprocessors = multiprocessors.min(sms as u32);
        }
        for (i, a) in ctxs.iter().enumerate() {
            for (j, b) in ctxs.iter().enumerate() {
                if i != j {
                    let mut can = 0;
                    // SAFETY: out-parameter; both devices exist.
                    unsafe { sys::cuDeviceCanAccessPeer(&mut can, a.cu_device(), b.cu_device()) }
                        .result()?;
                    if can == 0 {
                        return Err(CudaError::Invalid(format!(
                            "GPU {i} cannot access GPU {j} peer-to-peer (host-staged \
                             connections are not implemented yet)"
                        )));
                    }
                    enable_peer(a, b)?;
                }
            }
        }
        let streams = ctxs
            .iter()
            .map(|c| c.new_stream())
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let mut driver_version = 0;
        // SAFETY: out-parameter.
        unsafe { sys::cuDriverGetVersion(&mut driver_version) }.result()?;
        Ok(Gpus {
            ctxs,
            streams,
            multiprocessors,
            arch: format!("sm_{major}{minor}"),
            driver_version,
            modules: Mutex::new(HashMap::new()),
        })
    }

    pub fn len(&self) -> usize {
        self.ctxs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ctxs.is_empty()
    }

    /// The target architecture, e.g. `sm_90`.
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// The kernels of `plan` for `dtype`/`op`, one per rank, compiling if needed.
    fn kernels(&self, plan: &Plan, dtype: DType, op: RedOp) -> Result<(Vec<CudaFunction>, bool)> {
        let source = codegen::generate(plan, dtype, op);
        let key = crate::cache::key(&source.text, &self.arch, self.driver_version, (0, 0));
        if let Some(f) = self.modules.lock().unwrap().get(&key) {
            return Ok((f.clone(), true));
        }
        let (ptx, from_disk) = compile::compile(&source.text, &self.arch, self.driver_version)?;
        let mut funcs = Vec::new();
        for (r, name) in source.kernels.iter().enumerate() {
            let module = self.ctxs[r].load_module(Ptx::from_src(ptx.clone()))?;
            funcs.push(module.load_function(name)?);
        }
        self.modules.lock().unwrap().insert(key, funcs.clone());
        Ok((funcs, from_disk))
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
        validate::check_plan(plan, mode)?;
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
        if count == 0 {
            return Err(CudaError::Invalid("a resident call needs count > 0".into()));
        }
        validate::check_bounds(&shape)?;
        validate::check_residency(plan, self.multiprocessors)?;
        let lock = RUN_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let (funcs, cached) = self.kernels(plan, dtype, op)?;
        let conns = table::connections(plan);
        let fifo_len = table::FIFO_HEADER + plan.slots as usize * crate::SLICE_BYTES;
        let fifos = conns
            .iter()
            .map(|c| DeviceAlloc::new(&self.ctxs[c.receiver as usize], fifo_len, 0))
            .collect::<Result<Vec<_>>>()?;
        let fifo_ptrs: Vec<u64> = fifos.iter().map(|f| f.ptr()).collect();
        let mut mems = Vec::with_capacity(n as usize);
        for (r, input) in inputs.iter().enumerate().take(n as usize) {
            let ctx = &self.ctxs[r];
            let layout = shape.rank_layout(r as u32);
            let data = DeviceAlloc::new(ctx, layout.data_len, 0xAA)?;
            data.upload(&shape.stage_in(r as u32, input))?;
            let scratch = DeviceAlloc::new(ctx, layout.len[2], 0)?;
            let ends = table::ends(plan, &conns, r as u32);
            let grid = ends.len() as u32;
            let progress = DeviceAlloc::new(ctx, 4 * ends.len(), 0)?;
            let status = DeviceAlloc::new(ctx, 4, 0)?;
            let at = |present: bool, off: usize| if present { data.ptr() + off as u64 } else { 0 };
            let bufs = [
                at(layout.len[0] > 0, layout.in_at),
                at(layout.len[1] > 0, layout.out_at),
                if layout.len[2] > 0 { scratch.ptr() } else { 0 },
            ];
            let t = table::build(bufs, progress.ptr(), status.ptr(), &ends, &fifo_ptrs);
            let bytes: Vec<u8> = t.iter().flat_map(|v| v.to_ne_bytes()).collect();
            let tab = DeviceAlloc::new(ctx, bytes.len(), 0)?;
            tab.upload(&bytes)?;
            mems.push(RankMem {
                data,
                _scratch: scratch,
                progress,
                progress_len: 4 * ends.len(),
                status,
                table: tab,
                grid,
            });
        }
        let done = (0..n as usize)
            .map(|r| self.ctxs[r].new_event(None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(Resident {
            gpus: self,
            done,
            shape,
            dtype,
            op,
            funcs,
            cached,
            mems,
            fifos,
            _lock: lock,
        })
    }
}

/// One rank's device memory for a resident call.
struct RankMem {
    data: DeviceAlloc,
    _scratch: DeviceAlloc,
    progress: DeviceAlloc,
    progress_len: usize,
    status: DeviceAlloc,
    table: DeviceAlloc,
    grid: u32,
}

/// A call whose buffers stay on the GPUs between launches (from [`Gpus::prepare`]).
/// Everything is freed when it is dropped.
pub struct Resident<'a> {
    gpus: &'a Gpus,
    /// Per rank: recorded on its stream at the end of the last enqueued call (after the
    /// counter reset); the next call's streams wait for every peer's.
    done: Vec<CudaEvent>,
    shape: CallShape<'a>,
    dtype: DType,
    op: RedOp,
    funcs: Vec<CudaFunction>,
    /// Whether the kernels were already compiled (memory or disk cache).
    pub cached: bool,
    mems: Vec<RankMem>,
    /// Declared after `mems`: FIFOs go last, as in a single call.
    fifos: Vec<DeviceAlloc>,
    _lock: MutexGuard<'static, ()>,
}

impl Resident<'_> {
    /// Bytes of the larger buffer of one rank (nccl-tests' "size").
    pub fn bytes(&self) -> usize {
        let p = self.shape.plan;
        let (i, o) = buffer_elems(p.collective, p.n_ranks, self.shape.count);
        i.max(o) * self.shape.elem
    }

    /// Enqueues the call once more on `streams` (`streams[r]`: a stream of GPU `r`, one
    /// per rank) and returns at once: nothing here synchronises the host, so the call can
    /// be captured in a CUDA graph. Per rank, in stream order:
    ///
    /// 1. wait (`cuStreamWaitEvent`) until every peer finished the previous enqueued call
    ///    of this `Resident` (skipped while any stream is capturing: graph launches of
    ///    the same call must then be ordered by the caller, e.g. synchronise between them);
    /// 2. zero the status word (`cuMemsetD8Async`);
    /// 3. the rank's kernel;
    /// 4. zero what only grows within a call (`cuMemsetD8Async`): the progress counters and
    ///    the `head` then `tail` words of every FIFO in this rank's memory; then record
    ///    the rank's done event (not while capturing).
    ///
    /// Counters are zeroed *after* the kernel, not before: a peer may start its next call
    /// before this rank starts its own, and must find the FIFOs it sends into already
    /// reset. Buffers start zeroed. The kernels of every rank spin on each other, so all
    /// ranks' streams must make progress concurrently (never enqueue ranks on one stream).
    /// Out of place, inputs are untouched, so every call computes the same result. Call
    /// [`Resident::status`] after synchronising the streams to learn whether a kernel
    /// timed out.
    pub fn enqueue(&self, streams: &[Arc<CudaStream>]) -> Result<()> {
        let n = self.mems.len();
        if streams.len() != n {
            return Err(CudaError::Invalid(format!(
                "{n} ranks need {n} streams, got {}",
                streams.len()
            )));
        }
        let mut capturing = false;
        for (r, s) in streams.iter().enumerate() {
            if s.context().cu_device() != self.gpus.ctxs[r].cu_device() {
                return Err(CudaError::Invalid(format!(
                    "stream {r} does not belong to GPU {r}"
                )));
            }
            capturing |=
                s.capture_status()? != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        }
        let chunk_elems = self.shape.geometry().chunk_elems as u64;
        let conns = table::connections(self.shape.plan);
        for (r, m) in self.mems.iter().enumerate() {
            let s = &streams[r];
            if !capturing {
                for (p, ev) in self.done.iter().enumerate() {
                    if p != r {
                        s.wait(ev)?;
                    }
                }
            }
            m.status.fill_async(0, 0, 4, s)?;
            let table_ptr = m.table.ptr();
            let cfg = LaunchConfig {
                grid_dim: (m.grid, 1, 1),
                block_dim: (crate::THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut b = s.launch_builder(&self.funcs[r]);
            b.arg(&table_ptr).arg(&chunk_elems);
            // SAFETY: the kernel's arguments match its signature (table pointer, element
            // count); every address in the table is a live allocation sized by `layout`,
            // and `validate::check_bounds` proved every step stays inside them.
            unsafe { b.launch(cfg) }?;
        }
        // After every rank's kernel is enqueued (and its waits issued), so that no wait
        // above sees this call's record.
        for (r, m) in self.mems.iter().enumerate() {
            let s = &streams[r];
            m.progress.fill_async(0, 0, m.progress_len, s)?;
            for (c, f) in conns.iter().zip(&self.fifos) {
                if c.receiver as usize == r {
                    f.fill_async(0, 0, 8, s)?; // head
                    f.fill_async(0, table::TAIL_AT, 8, s)?; // tail
                }
            }
            if !capturing {
                self.done[r].record(s)?;
            }
        }
        Ok(())
    }

    /// Whether the last call's kernels finished normally: reads every rank's status word.
    /// Call it after synchronising the streams the call was enqueued on.
    pub fn status(&self) -> Result<()> {
        for (r, m) in self.mems.iter().enumerate() {
            let s = m.status.download(4)?;
            let code = u32::from_ne_bytes(s[..4].try_into().unwrap());
            if code != 0 {
                let what = match code >> 24 {
                    1 => "waiting for data from its receive peer",
                    2 => "waiting for FIFO space at its send peer",
                    _ => "waiting for another block's step",
                };
                return Err(CudaError::Kernel {
                    rank: r as u32,
                    what: format!(
                        "block {} timed out {what} ({} s)",
                        code & 0xff_ffff,
                        codegen::TIMEOUT_NS / 1_000_000_000
                    ),
                });
            }
        }
        Ok(())
    }

    /// Runs the call once more on the resident buffers and returns the time from the
    /// first launch to the end of the last rank's kernel (host clock around
    /// [`Resident::enqueue`] on the `Gpus`' own streams and synchronise, as NCCL is timed;
    /// the span includes the few-byte async counter resets after each kernel). After a
    /// kernel timed out, every counter is zeroed again (blocking) so that the next call
    /// starts clean.
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
            for f in &self.fifos {
                f.fill(0, table::FIFO_HEADER)?;
            }
            for m in &self.mems {
                m.progress.fill(0, m.progress_len)?;
            }
            return Err(e);
        }
        Ok(elapsed)
    }

    /// Reads every rank's result back (NCCL's receive buffer; `None` where the rank has
    /// none), with `avg` finished on the host as the host backend does.
    pub fn outputs(&self) -> Result<Vec<Option<Vec<u8>>>> {
        let plan = self.shape.plan;
        let mut outputs = Vec::with_capacity(self.mems.len());
        for (r, m) in self.mems.iter().enumerate() {
            let layout = self.shape.rank_layout(r as u32);
            let data = m.data.download(layout.data_len)?;
            outputs.push(self.shape.unstage_out(r as u32, &data));
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
        for (i, a) in self.ctxs.iter().enumerate() {
            for (j, b) in self.ctxs.iter().enumerate() {
                if i != j {
                    disable_peer(a, b);
                }
            }
        }
    }
}
