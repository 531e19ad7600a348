//! Memory that peers can touch: device memory (`cuMemAlloc`), pinned host memory for
//! host-staged connections, and device memory of another process opened through a CUDA
//! IPC handle; peer access between contexts.
//!
//! Device allocations use `cuMemAlloc` (`result::malloc_sync`), not cudarc's stream
//! allocator: pool memory is not mapped for peers by `cuCtxEnablePeerAccess` (a peer
//! kernel touching it faults), and IPC handles need it too. Everything is freed (or
//! closed) explicitly on drop.
//!
//! Initialising and uploading go through a stream of Braid's own per GPU and wait for it:
//! the driver's "synchronous" memset returns before the device memory is set, and its
//! synchronous copy from pageable memory before the data has landed; both are ordered
//! only on the legacy default stream, which the streams kernels run on do not wait for.
//! A kernel launched right after could read what was there before.

use crate::error::Result;
use cudarc::driver::{result, sys, CudaContext};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Braid's own stream of each GPU (by ordinal) for setting memory up, made on first use
/// and kept for the process's life, with the context it belongs to: the GPU's primary
/// context, which is destroyed when its last user lets go (every communicator of the GPU
/// dropped, say), and the stream with it, unless this keeps it.
static SETUP: Mutex<Option<HashMap<usize, SetupStream>>> = Mutex::new(None);

/// A setup stream's handle (as an integer: raw handles are not `Send`) and its context.
type SetupStream = (Arc<CudaContext>, usize);

/// Runs `f` with the setup stream of `ctx`'s GPU (the context bound), then waits for
/// everything `f` enqueued on it.
fn with_setup_stream(
    ctx: &Arc<CudaContext>,
    f: impl FnOnce(sys::CUstream) -> Result<()>,
) -> Result<()> {
    ctx.bind_to_thread()?;
    let stream = {
        let mut m = SETUP.lock().unwrap_or_else(|e| e.into_inner());
        let m = m.get_or_insert_with(HashMap::new);
        match m.get(&ctx.ordinal()) {
            Some((_, s)) => *s as sys::CUstream,
            None => {
                let s = result::stream::create(result::stream::StreamKind::NonBlocking)?;
                m.insert(ctx.ordinal(), (ctx.clone(), s as usize));
                s
            }
        }
    };
    let r = f(stream);
    // SAFETY: a live stream of this GPU's primary context.
    let synced = unsafe { result::stream::synchronize(stream) };
    r?;
    synced?;
    Ok(())
}

/// One `cuMemAlloc` allocation of one context, freed on drop.
pub struct DeviceAlloc {
    ctx: Arc<CudaContext>,
    ptr: sys::CUdeviceptr,
    len: usize,
}

impl DeviceAlloc {
    /// `len` bytes (at least 1) on `ctx`, every byte set to `fill`.
    pub fn new(ctx: &Arc<CudaContext>, len: usize, fill: u8) -> Result<DeviceAlloc> {
        ctx.bind_to_thread()?;
        let len = len.max(1);
        // SAFETY: a fresh allocation of `len` bytes, owned by the returned value.
        let ptr = unsafe { result::malloc_sync(len)? };
        let a = DeviceAlloc {
            ctx: ctx.clone(),
            ptr,
            len,
        };
        a.fill(fill, len)?;
        Ok(a)
    }

    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Sets the first `n` bytes to `byte`, and waits until they are set.
    pub fn fill(&self, byte: u8, n: usize) -> Result<()> {
        assert!(n <= self.len, "fill larger than the allocation");
        let ptr = self.ptr;
        // SAFETY: `n` bytes lie in the allocation (asserted).
        with_setup_stream(&self.ctx, |s| {
            unsafe { result::memset_d8_async(ptr, byte, n, s)? };
            Ok(())
        })
    }

    /// The allocation's size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A handle another process can open with [`IpcImport::open`] (`cuIpcGetMemHandle`).
    pub fn ipc_handle(&self) -> Result<[u8; IPC_HANDLE_LEN]> {
        self.ctx.bind_to_thread()?;
        let mut h = sys::CUipcMemHandle_st { reserved: [0; 64] };
        // SAFETY: out-parameter; `ptr` is the base of a `cuMemAlloc` allocation.
        unsafe { sys::cuIpcGetMemHandle(&mut h, self.ptr) }.result()?;
        Ok(h.reserved.map(|b| b as u8))
    }

    /// Copies `data` to the start of the allocation, and waits until it has landed.
    pub fn upload(&self, data: &[u8]) -> Result<()> {
        assert!(data.len() <= self.len, "upload larger than the allocation");
        let ptr = self.ptr;
        // SAFETY: `data` fits in the allocation (asserted) and outlives the wait that
        // `with_setup_stream` ends with.
        with_setup_stream(&self.ctx, |s| {
            unsafe { result::memcpy_htod_async(ptr, data, s)? };
            Ok(())
        })
    }

    /// Copies the first `n` bytes back to the host.
    pub fn download(&self, n: usize) -> Result<Vec<u8>> {
        self.download_at(0, n)
    }

    /// Copies the `n` bytes from byte `at` back to the host.
    pub fn download_at(&self, at: usize, n: usize) -> Result<Vec<u8>> {
        assert!(
            at.checked_add(n).is_some_and(|end| end <= self.len),
            "download outside the allocation"
        );
        self.ctx.bind_to_thread()?;
        let mut v = vec![0u8; n];
        // SAFETY: bytes [at, at + n) lie in the allocation (asserted).
        unsafe { result::memcpy_dtoh_sync(&mut v, self.ptr + at as u64)? };
        Ok(v)
    }
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: allocated by `new`, freed once; kernels using it have finished
            // (the executor synchronises every stream before dropping allocations).
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

/// Bytes of a CUDA IPC memory handle.
pub const IPC_HANDLE_LEN: usize = 64;

/// Device memory of another process, opened from its IPC handle into `ctx`
/// (`cuIpcOpenMemHandle_v2`, peer access enabled lazily by the driver); closed on drop.
pub struct IpcImport {
    ctx: Arc<CudaContext>,
    ptr: sys::CUdeviceptr,
}

impl IpcImport {
    pub fn open(ctx: &Arc<CudaContext>, handle: &[u8; IPC_HANDLE_LEN]) -> Result<IpcImport> {
        ctx.bind_to_thread()?;
        let h = sys::CUipcMemHandle_st {
            reserved: handle.map(|b| b as std::ffi::c_char),
        };
        let mut ptr = 0;
        // SAFETY: out-parameter; the handle came from the exporting process, which keeps
        // the allocation alive until every importer closed it (the callers' teardown
        // barrier).
        unsafe {
            sys::cuIpcOpenMemHandle_v2(
                &mut ptr,
                h,
                sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32,
            )
        }
        .result()?;
        Ok(IpcImport {
            ctx: ctx.clone(),
            ptr,
        })
    }

    pub fn ptr(&self) -> u64 {
        self.ptr
    }
}

impl Drop for IpcImport {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: opened by `open`, closed once, after the kernels using it finished.
            let _ = unsafe { sys::cuIpcCloseMemHandle(self.ptr) };
        }
    }
}

/// Pinned host memory every context of this process can address (`cuMemHostAlloc` with
/// `PORTABLE | DEVICEMAP`): the FIFOs of host-staged connections. Zeroed; freed on drop.
pub struct HostAlloc {
    ctx: Arc<CudaContext>,
    host: *mut std::ffi::c_void,
    dev: sys::CUdeviceptr,
    len: usize,
}

// SAFETY: the pointer is owned by this value and only handed to the driver and kernels.
unsafe impl Send for HostAlloc {}
unsafe impl Sync for HostAlloc {}

impl HostAlloc {
    pub fn new(ctx: &Arc<CudaContext>, len: usize) -> Result<HostAlloc> {
        ctx.bind_to_thread()?;
        let len = len.max(1);
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        // SAFETY: a fresh pinned allocation of `len` bytes, owned by the returned value.
        let host = unsafe { result::malloc_host(len, flags)? };
        let mut a = HostAlloc {
            ctx: ctx.clone(),
            host,
            dev: 0,
            len,
        };
        // SAFETY: `len` bytes at `host` belong to this allocation.
        unsafe { std::ptr::write_bytes(host as *mut u8, 0, len) };
        // SAFETY: out-parameter; `host` is mapped (DEVICEMAP).
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut a.dev, host, 0) }.result()?;
        Ok(a)
    }

    /// The address kernels use (the same on every GPU: PORTABLE, unified addressing).
    pub fn ptr(&self) -> u64 {
        self.dev
    }

    pub fn len_bytes(&self) -> usize {
        self.len
    }

    /// The host address of the first byte (for the network proxy's raw accesses).
    pub fn host_ptr(&self) -> *mut u8 {
        self.host as *mut u8
    }

    /// Reads the `u32` word `i` (the GPU may write it at any time: a volatile read).
    pub fn read_u32(&self, i: usize) -> u32 {
        assert!(4 * (i + 1) <= self.len, "word outside the allocation");
        // SAFETY: inside the allocation (asserted) and 4-byte aligned (page-aligned base).
        unsafe { std::ptr::read_volatile((self.host as *const u32).add(i)) }
    }

    /// Writes the `u32` word `i` (kernels poll it: a volatile write).
    pub fn write_u32(&self, i: usize, v: u32) {
        assert!(4 * (i + 1) <= self.len, "word outside the allocation");
        // SAFETY: inside the allocation (asserted) and 4-byte aligned (page-aligned base).
        unsafe { std::ptr::write_volatile((self.host as *mut u32).add(i), v) };
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for HostAlloc {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: allocated by `new`, freed once, after the kernels using it finished.
            let _ = unsafe { result::free_host(self.host) };
        }
    }
}

/// Lets `ctx` access memory of `peer` (an already enabled pair counts as success).
pub fn enable_peer(ctx: &Arc<CudaContext>, peer: &Arc<CudaContext>) -> Result<()> {
    ctx.bind_to_thread()?;
    // SAFETY: both contexts are alive; the accessing one is current.
    let r = unsafe { sys::cuCtxEnablePeerAccess(peer.cu_ctx(), 0) };
    if r == sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
        return Ok(());
    }
    r.result()?;
    Ok(())
}

/// Undoes [`enable_peer`]; errors are ignored (used on teardown).
pub fn disable_peer(ctx: &Arc<CudaContext>, peer: &Arc<CudaContext>) {
    if ctx.bind_to_thread().is_ok() {
        // SAFETY: both contexts are alive; the accessing one is current.
        let _ = unsafe { sys::cuCtxDisablePeerAccess(peer.cu_ctx()) };
    }
}
