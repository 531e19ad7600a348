//! What the GPU tests share: caller-side memory of every kind an application has (plain
//! `cuMemAlloc`, stream-ordered pools, virtual-memory mappings), a few kernels of "the
//! application" to put around the collectives, and timing with CUDA events.

// Each test binary compiles this module on its own and uses part of it.
#![allow(dead_code)]

use braid_cuda::{DeviceMemory, RawDeviceMemory, Stream};
use cudarc::driver::{sys, CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::Ptx;
use std::sync::Arc;

pub fn check(r: sys::CUresult, what: &str) -> Result<(), String> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what}: {r:?}"))
    }
}

/// How the application allocated a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `cuMemAlloc`.
    Plain,
    /// `cuMemAllocAsync` from the device's default pool (PyTorch's allocator can use it).
    Pool,
    /// `cuMemCreate` + `cuMemAddressReserve` + `cuMemMap` (PyTorch's expandable segments).
    Vmm,
}

pub const KINDS: [Kind; 3] = [Kind::Plain, Kind::Pool, Kind::Vmm];

/// Device memory the test (the application) owns.
pub struct Mem {
    kind: Kind,
    ptr: u64,
    len: usize,
    /// Reserved size (VMM) or stream (pool) for freeing.
    reserved: usize,
    handle: sys::CUmemGenericAllocationHandle,
    stream: sys::CUstream,
    ctx: Arc<CudaContext>,
}

impl Mem {
    pub fn new(
        ctx: &Arc<CudaContext>,
        kind: Kind,
        len: usize,
        stream: &Stream,
    ) -> Result<Mem, String> {
        ctx.bind_to_thread().map_err(|e| e.to_string())?;
        let len = len.max(1);
        let mut m = Mem {
            kind,
            ptr: 0,
            len,
            reserved: 0,
            handle: 0,
            stream: stream.raw(),
            ctx: ctx.clone(),
        };
        // SAFETY: out-parameters of the driver's allocation calls; freed in `drop`.
        unsafe {
            match kind {
                Kind::Plain => check(sys::cuMemAlloc_v2(&mut m.ptr, len), "cuMemAlloc")?,
                Kind::Pool => check(
                    sys::cuMemAllocAsync(&mut m.ptr, len, m.stream),
                    "cuMemAllocAsync",
                )?,
                Kind::Vmm => {
                    let mut prop: sys::CUmemAllocationProp = std::mem::zeroed();
                    prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
                    prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
                    prop.location.id = ctx.ordinal() as i32;
                    let mut gran = 0usize;
                    check(
                        sys::cuMemGetAllocationGranularity(
                            &mut gran,
                            &prop,
                            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
                        ),
                        "cuMemGetAllocationGranularity",
                    )?;
                    let size = len.div_ceil(gran) * gran;
                    check(
                        sys::cuMemCreate(&mut m.handle, size, &prop, 0),
                        "cuMemCreate",
                    )?;
                    check(
                        sys::cuMemAddressReserve(&mut m.ptr, size, 0, 0, 0),
                        "cuMemAddressReserve",
                    )?;
                    m.reserved = size;
                    check(sys::cuMemMap(m.ptr, size, 0, m.handle, 0), "cuMemMap")?;
                    let mut access: sys::CUmemAccessDesc = std::mem::zeroed();
                    access.location = prop.location;
                    access.flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
                    check(
                        sys::cuMemSetAccess(m.ptr, size, &access, 1),
                        "cuMemSetAccess",
                    )?;
                }
            }
        }
        Ok(m)
    }

    /// The memory as the communicator sees it.
    pub fn view(&self) -> RawDeviceMemory {
        // SAFETY: the allocation lives until `self` is dropped, which the tests do only
        // after synchronising the streams that use it.
        unsafe { RawDeviceMemory::new(self.ptr, self.len, self.ctx.ordinal()) }
    }

    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Enqueues filling every byte with `b`.
    pub fn fill_async(&self, b: u8, stream: &Stream) -> Result<(), String> {
        // SAFETY: inside the allocation.
        check(
            unsafe { sys::cuMemsetD8Async(self.ptr, b, self.len, stream.raw()) },
            "cuMemsetD8Async",
        )
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: frees what `new` allocated, once; users synchronised their streams.
        unsafe {
            match self.kind {
                Kind::Plain => {
                    sys::cuMemFree_v2(self.ptr);
                }
                Kind::Pool => {
                    sys::cuMemFreeAsync(self.ptr, self.stream);
                    sys::cuStreamSynchronize(self.stream);
                }
                Kind::Vmm => {
                    sys::cuMemUnmap(self.ptr, self.reserved);
                    sys::cuMemAddressFree(self.ptr, self.reserved);
                    sys::cuMemRelease(self.handle);
                }
            }
        }
    }
}

/// The application's own kernels: a copy, a spin that keeps the stream busy, and the
/// smallest possible 8-byte allreduce between ranks sharing a GPU (the roofline).
pub struct AppKernels {
    copy: CudaFunction,
    spin: CudaFunction,
    roof: CudaFunction,
    _module: Arc<CudaModule>,
}

const APP_SOURCE: &str = r#"
extern "C" __global__ void app_copy(char* d, const char* s, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) d[i] = s[i];
}
extern "C" __global__ void app_spin(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t0));
  do { asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
// Each block is a rank: publish 8 bytes, raise this call's flag, wait for every rank's,
// sum. Flags only grow (the call number is read from them), so launches and graph
// replays need no reset.
extern "C" __global__ void app_roof(volatile unsigned long long* flags, volatile double* vals,
                                    double* out, int ranks) {
  if (threadIdx.x != 0) return;
  const int b = blockIdx.x;
  const unsigned long long epoch = flags[b] + 1;
  vals[2 * b + (epoch & 1)] = 1.0 + b;
  __threadfence();
  flags[b] = epoch;
  double s = 0;
  for (int j = 0; j < ranks; j++) {
    while (flags[j] < epoch) {}
    s += vals[2 * j + (epoch & 1)];
  }
  out[b] = s;
}
"#;

impl AppKernels {
    pub fn load(ctx: &Arc<CudaContext>) -> Result<AppKernels, String> {
        let arch = braid_cuda::modules::arch(ctx).map_err(|e| e.to_string())?;
        let c = braid_cuda::compile::compile(APP_SOURCE, &arch).map_err(|e| e.to_string())?;
        let m = ctx
            .load_module(Ptx::from_binary(c.cubin))
            .map_err(|e| e.to_string())?;
        let f = |n: &str| m.load_function(n).map_err(|e| e.to_string());
        Ok(AppKernels {
            copy: f("app_copy")?,
            spin: f("app_spin")?,
            roof: f("app_roof")?,
            _module: m.clone(),
        })
    }

    fn launch(
        &self,
        f: &CudaFunction,
        grid: u32,
        threads: u32,
        stream: &Stream,
        args: &mut [*mut std::ffi::c_void],
    ) -> Result<(), String> {
        // SAFETY: the arguments match the kernels' signatures (callers below); addresses
        // are live device memory of the stream's GPU.
        unsafe {
            cudarc::driver::result::launch_kernel(
                f.cu_function(),
                (grid, 1, 1),
                (threads, 1, 1),
                0,
                stream.raw(),
                args,
            )
        }
        .map_err(|e| e.to_string())
    }

    /// Enqueues copying `n` bytes from `src` to `dst`.
    pub fn copy(&self, dst: u64, src: u64, n: usize, stream: &Stream) -> Result<(), String> {
        if n == 0 {
            return Ok(());
        }
        let (mut d, mut s, mut len) = (dst, src, n as u64);
        let mut args = [
            &mut d as *mut u64 as *mut _,
            &mut s as *mut u64 as *mut _,
            &mut len as *mut u64 as *mut _,
        ];
        self.launch(&self.copy, 132, 256, stream, &mut args)
    }

    /// Enqueues a kernel that keeps the stream busy for `ns` nanoseconds.
    pub fn spin(&self, ns: u64, stream: &Stream) -> Result<(), String> {
        let mut t = ns;
        let mut args = [&mut t as *mut u64 as *mut _];
        self.launch(&self.spin, 1, 32, stream, &mut args)
    }

    /// Enqueues one roofline allreduce of `ranks` ranks as blocks of one launch.
    pub fn roof(
        &self,
        flags: u64,
        vals: u64,
        out: u64,
        ranks: i32,
        stream: &Stream,
    ) -> Result<(), String> {
        let (mut f, mut v, mut o, mut r) = (flags, vals, out, ranks);
        let mut args = [
            &mut f as *mut u64 as *mut _,
            &mut v as *mut u64 as *mut _,
            &mut o as *mut u64 as *mut _,
            &mut r as *mut i32 as *mut _,
        ];
        self.launch(&self.roof, ranks as u32, 32, stream, &mut args)
    }
}

/// A pair of CUDA events around enqueued work.
pub struct Timer {
    start: sys::CUevent,
    end: sys::CUevent,
}

impl Timer {
    pub fn new(ctx: &Arc<CudaContext>) -> Result<Timer, String> {
        ctx.bind_to_thread().map_err(|e| e.to_string())?;
        let mk = || {
            cudarc::driver::result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
                .map_err(|e| e.to_string())
        };
        Ok(Timer {
            start: mk()?,
            end: mk()?,
        })
    }

    pub fn start(&self, s: &Stream) -> Result<(), String> {
        // SAFETY: live event and stream.
        unsafe { cudarc::driver::result::event::record(self.start, s.raw()) }
            .map_err(|e| e.to_string())
    }

    pub fn stop(&self, s: &Stream) -> Result<(), String> {
        // SAFETY: live event and stream.
        unsafe { cudarc::driver::result::event::record(self.end, s.raw()) }
            .map_err(|e| e.to_string())
    }

    /// Milliseconds between the two events (waits for the second).
    pub fn elapsed_ms(&self) -> Result<f64, String> {
        let mut ms = 0f32;
        // SAFETY: live events.
        unsafe {
            check(sys::cuEventSynchronize(self.end), "cuEventSynchronize")?;
            check(
                sys::cuEventElapsedTime_v2(&mut ms, self.start, self.end),
                "cuEventElapsedTime",
            )?;
        }
        Ok(f64::from(ms))
    }
}

/// A CUDA graph of what a test enqueued on one stream (braid-cuda's, with the tests'
/// string errors).
pub struct Graph(braid_cuda::graph::Graph);

impl Graph {
    pub fn capture(s: &Stream, f: impl FnOnce() -> Result<(), String>) -> Result<Graph, String> {
        braid_cuda::graph::Graph::capture(std::slice::from_ref(s), || {
            f().map_err(braid_cuda::CudaError::Invalid)
        })
        .map(Graph)
        .map_err(|e| e.to_string())
    }

    pub fn launch(&self, s: &Stream) -> Result<(), String> {
        // SAFETY: every test keeps what it captured alive until it has synchronised the
        // stream after its last replay.
        unsafe { self.0.launch(s) }.map_err(|e| e.to_string())
    }
}

/// Device memory as the communicator's safe API takes it.
pub fn dm(m: &RawDeviceMemory) -> &dyn DeviceMemory {
    m
}
