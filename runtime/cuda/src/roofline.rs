//! The roofline `braid perf --backend cuda` puts beside each row: how long this machine
//! takes to copy a number of bytes from one GPU to another (or within one GPU), the
//! faster of a copy-engine copy and an SM copy kernel, timed as the calls are (back to
//! back on a stream between two CUDA events, the median of several runs). Measured in
//! the same run as the calls it is compared with, so it holds on whatever machine it runs on.

use crate::compile;
use crate::device::{enable_peer, DeviceAlloc};
use crate::error::{CudaError, Result};
use crate::modules::arch;
use cudarc::driver::{sys, CudaContext, CudaFunction, CudaModule, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use std::sync::Arc;
use std::time::Duration;

/// The copy kernel's source (compiled with NVRTC like the collectives' kernels).
pub const COPY_SOURCE: &str = include_str!("../../../kernels_templates/roofline_copy.cu");
const COPY_ENTRY: &str = "braid_roofline_copy";
const THREADS: u32 = 512;

/// The largest copy timed as it is. A larger one is timed at this size and its time scaled
/// by the bytes: this far past every cache a copy runs at its full rate, so its time grows
/// with its bytes, and the roofline then never allocates a path's whole traffic twice (a
/// one-shot all-reduce of 1 GiB on 8 ranks of one GPU moves 56 GiB, more than the GPU
/// holds).
pub const TIMED_MAX: usize = 1 << 30;

/// The bytes to time for a copy of `bytes`, and the factor that scales that copy's time
/// to `bytes`'.
pub fn timed(bytes: usize) -> (usize, f64) {
    if bytes <= TIMED_MAX {
        (bytes, 1.0)
    } else {
        (TIMED_MAX, bytes as f64 / TIMED_MAX as f64)
    }
}

/// One copy's time both ways.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CopyTime {
    /// `cuMemcpyDtoDAsync` (the copy engine).
    pub engine: Duration,
    /// The SM copy kernel, run on the source GPU (pushing into a peer's memory).
    pub kernel: Duration,
}

impl CopyTime {
    /// The faster of the two: the roofline.
    pub fn best(&self) -> Duration {
        self.engine.min(self.kernel)
    }
}

/// Copies between GPUs of this process, ready to be timed: contexts, peer access, the
/// copy kernel loaded on each source GPU.
pub struct Copier {
    ctxs: Vec<Arc<CudaContext>>,
    kernels: Vec<Option<(CudaFunction, Arc<CudaModule>, u32)>>,
}

impl Copier {
    /// A copier for GPUs `0..gpus`.
    pub fn new(gpus: usize) -> Result<Copier> {
        let ctxs = (0..gpus)
            .map(|g| Ok(CudaContext::new(g)?))
            .collect::<Result<Vec<_>>>()?;
        Ok(Copier {
            kernels: vec![None; ctxs.len()],
            ctxs,
        })
    }

    fn kernel(&mut self, gpu: usize) -> Result<(CudaFunction, u32)> {
        if let Some((f, _, sms)) = &self.kernels[gpu] {
            return Ok((f.clone(), *sms));
        }
        let ctx = &self.ctxs[gpu];
        let cubin = compile::compile(COPY_SOURCE, &arch(ctx)?)?.cubin;
        let module = ctx.load_module(Ptx::from_binary(cubin))?;
        let f = module.load_function(COPY_ENTRY)?;
        let sms =
            ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        self.kernels[gpu] = Some((f.clone(), module, sms as u32));
        Ok((f, sms as u32))
    }

    /// The time to copy `bytes` from GPU `src` to GPU `dst` (the same GPU: device to
    /// device), each way: `iters` copies back to back between two events, the median of
    /// `runs` such runs. Zero bytes take no time; more than [`TIMED_MAX`] are timed at
    /// that size and scaled ([`timed`]).
    pub fn time(
        &mut self,
        src: usize,
        dst: usize,
        bytes: usize,
        iters: u32,
        runs: u32,
    ) -> Result<CopyTime> {
        if src >= self.ctxs.len() || dst >= self.ctxs.len() {
            return Err(CudaError::Invalid(format!(
                "no GPU {} on this machine ({} GPU(s))",
                src.max(dst),
                self.ctxs.len()
            )));
        }
        if bytes == 0 {
            return Ok(CopyTime {
                engine: Duration::ZERO,
                kernel: Duration::ZERO,
            });
        }
        let (bytes, scale) = timed(bytes);
        let (func, sms) = self.kernel(src)?;
        let (cs, cd) = (&self.ctxs[src], &self.ctxs[dst]);
        if src != dst {
            enable_peer(cs, cd)?;
        }
        // Whole 16-byte words: the kernel copies words.
        let words = bytes.div_ceil(16);
        let from = DeviceAlloc::new(cs, words * 16, 1)?;
        let to = DeviceAlloc::new(cd, words * 16, 0)?;
        cs.bind_to_thread()?;
        let stream = cs.new_stream()?;
        let engine = |_: u32| -> Result<()> {
            // SAFETY: both allocations are live and hold `words * 16` bytes; the stream is
            // the source GPU's; peer access is enabled when the GPUs differ.
            unsafe {
                sys::cuMemcpyDtoDAsync_v2(to.ptr(), from.ptr(), words * 16, stream.cu_stream())
            }
            .result()?;
            Ok(())
        };
        let blocks = (words.div_ceil(THREADS as usize) as u32).clamp(1, sms * 4);
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let (src_ptr, dst_ptr, n16) = (from.ptr(), to.ptr(), words as u64);
        let kernel = |_: u32| -> Result<()> {
            let mut launch = stream.launch_builder(&func);
            launch.arg(&src_ptr).arg(&dst_ptr).arg(&n16);
            // SAFETY: the kernel copies `n16` 16-byte words, inside both allocations; the
            // destination is this GPU's or a peer's with access enabled.
            unsafe { launch.launch(cfg) }?;
            Ok(())
        };
        let t = CopyTime {
            engine: time_on(&stream, &engine, iters, runs)?.mul_f64(scale),
            kernel: time_on(&stream, &kernel, iters, runs)?.mul_f64(scale),
        };
        stream.synchronize()?;
        Ok(t)
    }

    /// The time to copy `bytes` from pinned host memory to GPU `gpu` with the copy engine
    /// (the GPU's PCIe link), timed as [`Copier::time`] times.
    pub fn time_from_host(
        &mut self,
        gpu: usize,
        bytes: usize,
        iters: u32,
        runs: u32,
    ) -> Result<Duration> {
        let ctx = self.ctxs.get(gpu).ok_or_else(|| {
            CudaError::Invalid(format!(
                "no GPU {gpu} on this machine ({} GPU(s))",
                self.ctxs.len()
            ))
        })?;
        let bytes = bytes.max(1);
        let from = crate::device::HostAlloc::new(ctx, bytes)?;
        let to = DeviceAlloc::new(ctx, bytes, 0)?;
        ctx.bind_to_thread()?;
        let stream = ctx.new_stream()?;
        let copy = |_: u32| -> Result<()> {
            // SAFETY: both allocations are live and hold `bytes` bytes; the host one is
            // pinned and mapped, and unified addressing tells the driver which is which.
            unsafe { sys::cuMemcpyAsync(to.ptr(), from.ptr(), bytes, stream.cu_stream()) }
                .result()?;
            Ok(())
        };
        let t = time_on(&stream, &copy, iters, runs)?;
        stream.synchronize()?;
        Ok(t)
    }
}

/// `op` issued `iters` times back to back between two events on `stream`, after two
/// warm-up calls: the median of `runs` such runs, per call.
fn time_on(
    stream: &cudarc::driver::CudaStream,
    op: &dyn Fn(u32) -> Result<()>,
    iters: u32,
    runs: u32,
) -> Result<Duration> {
    let iters = iters.max(1);
    for i in 0..2 {
        op(i)?;
    }
    let mut per = Vec::new();
    for _ in 0..runs.max(1) {
        let a = stream.record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?;
        for i in 0..iters {
            op(i)?;
        }
        let b = stream.record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?;
        stream.synchronize()?;
        let ms = f64::from(a.elapsed_ms(&b)?);
        per.push(Duration::from_secs_f64(ms / 1e3 / f64::from(iters)));
    }
    per.sort();
    Ok(per[per.len() / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_past_the_largest_timed_are_scaled_from_it() {
        assert_eq!(timed(0), (0, 1.0));
        assert_eq!(timed(TIMED_MAX), (TIMED_MAX, 1.0));
        // A one-shot all-reduce of 1 GiB on 8 ranks of one GPU: every rank's input to
        // each of the 7 others.
        let (b, scale) = timed(56 << 30);
        assert_eq!(b, TIMED_MAX);
        assert_eq!(scale, 56.0);
        let (b, scale) = timed(TIMED_MAX + TIMED_MAX / 2);
        assert_eq!(b, TIMED_MAX);
        assert_eq!(scale, 1.5);
    }
}
