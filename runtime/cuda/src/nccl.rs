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
use braid_ir::{Collective, Mode};
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

/// Bytes Braid's own `libnccl.so.2` carries (`runtime/nccl`), so that a comparison with
/// NCCL can tell that the library it loaded is Braid's, which has the same name.
pub const BRAID_MARK: &[u8; 40] = b"braid: this libnccl.so.2 is Braid's own.";

/// The file of the NCCL library loaded in this process, if one is (from the process's
/// memory map).
pub fn loaded_path() -> Option<std::path::PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| {
            std::path::Path::new(p)
                .file_name()
                .is_some_and(|f| f.to_string_lossy().starts_with("libnccl.so"))
        })
        .map(std::path::PathBuf::from)
}

/// Whether the library file at `path` is Braid's own `libnccl.so.2`.
pub fn is_braid(path: &std::path::Path) -> std::io::Result<bool> {
    let bytes = std::fs::read(path)?;
    Ok(bytes.windows(BRAID_MARK.len()).any(|w| w == BRAID_MARK))
}

/// Which NCCL was loaded, as `VERSION (PATH)`; an error if none can be, or if it is
/// Braid's own library (a comparison with itself would measure nothing).
pub fn describe() -> Result<String> {
    let v = version()?;
    let path = loaded_path();
    if let Some(p) = &path {
        if is_braid(p).unwrap_or(false) {
            return Err(CudaError::Nccl(format!(
                "the libnccl.so loaded ({}) is Braid's own library, not NVIDIA NCCL; put the real NCCL's directory first on LD_LIBRARY_PATH",
                p.display()
            )));
        }
    }
    Ok(match path {
        Some(p) => format!("{v} ({})", p.display()),
        None => v,
    })
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

    /// Times NCCL's `collective` on buffers sized for `count` (NCCL's count, as braid's
    /// calls use it) in `mode`, the way [`crate::check::Prepared::run_back_to_back`]
    /// times braid's: `warmup` untimed calls (at least one), then `runs` runs of `iters`
    /// calls issued as `how` says ([`crate::timing::time_calls`]: back to back, or from
    /// CUDA graphs); with `sync`, also the mean of `iters` calls each waited for on the
    /// host.
    #[allow(clippy::too_many_arguments)]
    pub fn time(
        &self,
        collective: Collective,
        root: Option<u32>,
        dtype: DType,
        op: RedOp,
        count: usize,
        mode: Mode,
        warmup: u32,
        iters: u32,
        runs: u32,
        sync: bool,
        how: crate::timing::Timing,
    ) -> Result<NcclTiming> {
        let n = self.comms.len();
        let e = dtype.size();
        let (in_elems, out_elems) = buffer_elems(collective, n as u32, count);
        let in_place = mode == Mode::InPlace;
        if in_place && collective == Collective::Alltoall {
            return Err(CudaError::Invalid("alltoall has no in-place mode".into()));
        }
        let ctxs = self
            .streams
            .iter()
            .map(|s| Ok(CudaContext::new(s.device())?))
            .collect::<Result<Vec<_>>>()?;
        // In place, one buffer of the larger size serves as both (NCCL's pointer rule).
        let send = ctxs
            .iter()
            .map(|c| DeviceAlloc::new(c, in_elems.max(if in_place { out_elems } else { 0 }) * e, 1))
            .collect::<Result<Vec<_>>>()?;
        let recv = if in_place {
            Vec::new()
        } else {
            ctxs.iter()
                .map(|c| DeviceAlloc::new(c, out_elems * e, 0))
                .collect::<Result<Vec<_>>>()?
        };
        let pointers = |r: usize| -> (u64, u64) {
            if !in_place {
                return (send[r].ptr(), recv[r].ptr());
            }
            let base = send[r].ptr();
            let block = (r * count * e) as u64;
            match collective {
                Collective::Allgather => (base + block, base),
                Collective::ReduceScatter => (base, base + block),
                _ => (base, base),
            }
        };
        let enqueue = || -> Result<()> {
            result::group_start().map_err(err)?;
            for r in 0..n {
                let (sp, dp) = pointers(r);
                let (s, d) = (sp as *const c_void, dp as *mut c_void);
                let comm = self.comms[r];
                let stream = self.streams[r].raw() as sys::cudaStream_t;
                let (t, o) = (nccl_dtype(dtype), nccl_op(op));
                let root = root.unwrap_or(0) as i32;
                // SAFETY: `s` and `d` point into live allocations of this rank's GPU sized
                // for `count` as NCCL defines it for this collective (in place: NCCL's
                // offsets into one buffer of the larger size); the communicator and the
                // stream belong to the same GPU.
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
                            let sp = (sp + off) as *const c_void;
                            let dp = (dp + off) as *mut c_void;
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
            Ok(())
        };
        let wait = || -> Result<()> {
            for s in self.streams {
                s.synchronize()?;
            }
            Ok(())
        };
        for _ in 0..warmup.max(1) {
            enqueue()?;
        }
        wait()?;
        let iters = iters.max(1);
        let mut timed = Vec::new();
        for _ in 0..runs.max(1) {
            timed.push(crate::timing::time_calls(
                self.streams,
                &enqueue,
                iters,
                how,
            )?);
        }
        let synced = if sync {
            let start = Instant::now();
            for _ in 0..iters {
                enqueue()?;
                wait()?;
            }
            Some(start.elapsed() / iters)
        } else {
            None
        };
        Ok(NcclTiming {
            runs: timed,
            sync: synced,
        })
    }
}

/// NCCL's times for one size: per call, every run back to back; and host-synchronised.
#[derive(Clone, Debug)]
pub struct NcclTiming {
    pub runs: Vec<Duration>,
    pub sync: Option<Duration>,
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
