//! NCCL as the yardstick: the same collective, on device buffers of the same sizes, on
//! the same GPUs and streams as braid's kernels, in the same process (`braid perf
//! --vs-nccl`). cudarc loads `libnccl.so` at run time, so builds need no NCCL; check
//! [`present`] before anything else here (without the library cudarc's calls panic).
//!
//! One communicator per GPU from `ncclCommInitAll`; every call is issued for all ranks
//! inside one `ncclGroupStart`/`ncclGroupEnd`, as nccl-tests does with `-g`. Buffers are
//! `cuMemAlloc` allocations, like braid's, so neither side gets a different allocator.

use crate::device::DeviceAlloc;
use crate::error::{CudaError, Result};
use crate::stream::Stream;
use braid_ir::Collective;
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::selfcheck::buffer_elems;
use cudarc::driver::CudaContext;
use cudarc::nccl::result::NcclStatus;
use cudarc::nccl::{result, sys};
use std::ffi::c_void;
use std::time::{Duration, Instant};

/// Whether `libnccl.so` can be loaded here.
pub fn present() -> bool {
    // SAFETY: only tries to load the library.
    unsafe { sys::is_culib_present() }
}

fn err(e: result::NcclError) -> CudaError {
    CudaError::Nccl(format!("{e:?}"))
}

/// NCCL's version as `major.minor.patch`.
pub fn version() -> Result<String> {
    if !present() {
        return Err(CudaError::Nccl("libnccl.so cannot be loaded".into()));
    }
    let v = result::get_nccl_version().map_err(err)?;
    Ok(format!("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100))
}

/// One NCCL communicator per GPU, destroyed on drop.
pub struct Nccl<'a> {
    streams: &'a [Stream],
    comms: Vec<sys::ncclComm_t>,
}

fn nccl_dtype(d: DType) -> sys::ncclDataType_t {
    use sys::ncclDataType_t as T;
    match d {
        DType::F16 => T::ncclFloat16,
        DType::Bf16 => T::ncclBfloat16,
        DType::F32 => T::ncclFloat32,
        DType::F64 => T::ncclFloat64,
        DType::I8 => T::ncclInt8,
        DType::U8 => T::ncclUint8,
        DType::I32 => T::ncclInt32,
        DType::U32 => T::ncclUint32,
        DType::I64 => T::ncclInt64,
        DType::U64 => T::ncclUint64,
    }
}

fn nccl_op(o: RedOp) -> sys::ncclRedOp_t {
    use sys::ncclRedOp_t as O;
    match o {
        RedOp::Sum => O::ncclSum,
        RedOp::Prod => O::ncclProd,
        RedOp::Min => O::ncclMin,
        RedOp::Max => O::ncclMax,
        RedOp::Avg => O::ncclAvg,
    }
}

impl<'a> Nccl<'a> {
    /// Creates one communicator per stream, rank `r` on the GPU of `streams[r]` (distinct
    /// GPUs: NCCL refuses two ranks on one).
    pub fn new(streams: &'a [Stream]) -> Result<Nccl<'a>> {
        if !present() {
            return Err(CudaError::Nccl(
                "libnccl.so cannot be loaded (put NCCL's library directory on LD_LIBRARY_PATH)"
                    .into(),
            ));
        }
        let n = streams.len();
        let mut comms = vec![std::ptr::null_mut(); n];
        let ordinals: Vec<i32> = streams.iter().map(|s| s.device() as i32).collect();
        // SAFETY: `comms` has room for `n` communicators; the ordinals exist (open GPUs).
        unsafe { result::comm_init_all(comms.as_mut_ptr(), n as i32, ordinals.as_ptr()) }
            .map_err(err)?;
        Ok(Nccl { streams, comms })
    }

    /// Runs NCCL's `collective` once per iteration on buffers sized for `count` (NCCL's
    /// count, as braid's calls use it), out of place, after `warmup` untimed calls (at
    /// least one), and
    /// returns the mean time of one call: host clock around issuing every rank's call
    /// and synchronising every stream, as `braid perf` times braid's calls.
    #[allow(clippy::too_many_arguments)]
    pub fn time(
        &self,
        collective: Collective,
        root: Option<u32>,
        dtype: DType,
        op: RedOp,
        count: usize,
        warmup: u32,
        iters: u32,
    ) -> Result<Duration> {
        let n = self.comms.len();
        let e = dtype.size();
        let (in_elems, out_elems) = buffer_elems(collective, n as u32, count);
        let ctxs = self
            .streams
            .iter()
            .map(|s| Ok(CudaContext::new(s.device())?))
            .collect::<Result<Vec<_>>>()?;
        let send = ctxs
            .iter()
            .map(|c| DeviceAlloc::new(c, in_elems * e, 1))
            .collect::<Result<Vec<_>>>()?;
        let recv = ctxs
            .iter()
            .map(|c| DeviceAlloc::new(c, out_elems * e, 0))
            .collect::<Result<Vec<_>>>()?;
        let once = || -> Result<Duration> {
            let start = Instant::now();
            result::group_start().map_err(err)?;
            for r in 0..n {
                let (s, d) = (send[r].ptr() as *const c_void, recv[r].ptr() as *mut c_void);
                let comm = self.comms[r];
                let stream = self.streams[r].raw() as sys::cudaStream_t;
                let (t, o) = (nccl_dtype(dtype), nccl_op(op));
                let root = root.unwrap_or(0) as i32;
                // SAFETY: `s` and `d` are live allocations of this rank's GPU sized for
                // `count` as NCCL defines it for this collective; the communicator and
                // the stream belong to the same GPU.
                let res = unsafe {
                    match collective {
                        Collective::Allreduce => {
                            result::all_reduce(s, d, count, t, o, comm, stream)
                        }
                        Collective::Allgather => result::all_gather(s, d, count, t, comm, stream),
                        Collective::ReduceScatter => {
                            result::reduce_scatter(s, d, count, t, o, comm, stream)
                        }
                        Collective::Broadcast => {
                            result::broadcast(s, d, count, t, root, comm, stream)
                        }
                        Collective::Reduce => result::reduce(s, d, count, t, o, root, comm, stream),
                        Collective::Alltoall => (0..n).try_fold(NcclStatus::Success, |_, p| {
                            let off = (p * count * e) as u64;
                            let sp = (send[r].ptr() + off) as *const c_void;
                            let dp = (recv[r].ptr() + off) as *mut c_void;
                            result::send(sp, count, t, p as i32, comm, stream)?;
                            result::recv(dp, count, t, p as i32, comm, stream)
                        }),
                    }
                };
                if let Err(e) = res {
                    let _ = result::group_end();
                    return Err(err(e));
                }
            }
            result::group_end().map_err(err)?;
            for s in self.streams {
                s.synchronize()?;
            }
            Ok(start.elapsed())
        };
        for _ in 0..warmup.max(1) {
            once()?;
        }
        let mut total = Duration::ZERO;
        for _ in 0..iters.max(1) {
            total += once()?;
        }
        Ok(total / iters.max(1))
    }
}

impl Drop for Nccl<'_> {
    fn drop(&mut self) {
        for s in self.streams {
            let _ = s.synchronize();
        }
        for c in &self.comms {
            // SAFETY: created by `comm_init_all`, destroyed once, no call in flight.
            let _ = unsafe { result::comm_destroy(*c) };
        }
    }
}
