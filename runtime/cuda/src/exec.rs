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
use cudarc::driver::{sys, CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Whether a CUDA driver library can be loaded here. Check this before calling anything
/// else of cudarc: without a driver its functions panic.
pub fn driver_present() -> bool {
    // SAFETY: only tries to load the library.
    unsafe { sys::is_culib_present() }
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
            return Ok(Outcome {
                outputs: (0..n).map(|r| shape.unstage_out(r, &[])).collect(),
                kernel_time: Duration::ZERO,
                cached: true,
            });
        }
        validate::check_bounds(&shape)?;
        validate::check_residency(plan, self.multiprocessors)?;
        let _lock = RUN_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let (funcs, cached) = self.kernels(plan, dtype, op)?;
        let run = self.launch(&shape, &funcs, inputs)?;
        let mut outputs = run.0;
        if op == RedOp::Avg && plan.collective.reduces() {
            for out in outputs.iter_mut().flatten() {
                finish_avg(dtype, out, n);
            }
        }
        Ok(Outcome {
            outputs,
            kernel_time: run.1,
            cached,
        })
    }

    /// Allocates, uploads, launches every rank, waits, checks and downloads.
    fn launch(
        &self,
        shape: &CallShape,
        funcs: &[CudaFunction],
        inputs: &[Vec<u8>],
    ) -> Result<(Vec<Option<Vec<u8>>>, Duration)> {
        let plan = shape.plan;
        let n = plan.n_ranks as usize;
        let geometry = shape.geometry();
        let conns = table::connections(plan);
        let fifo_len = table::FIFO_HEADER + plan.slots as usize * crate::SLICE_BYTES;
        let fifos = conns
            .iter()
            .map(|c| DeviceAlloc::new(&self.ctxs[c.receiver as usize], fifo_len, 0))
            .collect::<Result<Vec<_>>>()?;
        let fifo_ptrs: Vec<u64> = fifos.iter().map(|f| f.ptr()).collect();
        struct RankMem {
            data: DeviceAlloc,
            _scratch: DeviceAlloc,
            _progress: DeviceAlloc,
            status: DeviceAlloc,
            table: DeviceAlloc,
            grid: u32,
        }
        let mut mems = Vec::with_capacity(n);
        for (r, input) in inputs.iter().enumerate().take(n) {
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
                _progress: progress,
                status,
                table: tab,
                grid,
            });
        }
        let chunk_elems = geometry.chunk_elems as u64;
        let start = Instant::now();
        for (r, m) in mems.iter().enumerate() {
            let table_ptr = m.table.ptr();
            let cfg = LaunchConfig {
                grid_dim: (m.grid, 1, 1),
                block_dim: (crate::THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut b = self.streams[r].launch_builder(&funcs[r]);
            b.arg(&table_ptr).arg(&chunk_elems);
            // SAFETY: the kernel's arguments match its signature (table pointer, element
            // count); every address in the table is a live allocation sized by `layout`,
            // and `validate::check_bounds` proved every step stays inside them.
            unsafe { b.launch(cfg) }?;
        }
        let mut first_err = None;
        for s in &self.streams[..n] {
            if let Err(e) = s.synchronize() {
                first_err.get_or_insert(e);
            }
        }
        let elapsed = start.elapsed();
        if let Some(e) = first_err {
            return Err(e.into());
        }
        for (r, m) in mems.iter().enumerate() {
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
        let mut outputs = Vec::with_capacity(n);
        for (r, m) in mems.iter().enumerate() {
            let layout = shape.rank_layout(r as u32);
            let data = m.data.download(layout.data_len)?;
            outputs.push(shape.unstage_out(r as u32, &data));
        }
        drop(mems);
        drop(fifos);
        Ok((outputs, elapsed))
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
