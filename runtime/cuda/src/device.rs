//! Device memory that peers can touch, and peer access between contexts.
//!
//! Allocations use `cuMemAlloc` (`result::malloc_sync`), not cudarc's stream allocator:
//! pool memory is not mapped for peers by `cuCtxEnablePeerAccess`, and a peer kernel
//! touching it faults. Everything is freed explicitly on drop.

use crate::error::Result;
use cudarc::driver::{result, sys, CudaContext, CudaStream};
use std::sync::Arc;

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
        // SAFETY: within the allocation.
        unsafe { result::memset_d8_sync(ptr, fill, len)? };
        Ok(a)
    }

    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Sets the first `n` bytes to `byte` (resets counters between resident launches).
    pub fn fill(&self, byte: u8, n: usize) -> Result<()> {
        assert!(n <= self.len, "fill larger than the allocation");
        self.ctx.bind_to_thread()?;
        // SAFETY: `n` bytes lie in the allocation (asserted).
        unsafe { result::memset_d8_sync(self.ptr, byte, n)? };
        Ok(())
    }

    /// Enqueues setting the `n` bytes at `offset` to `byte` on `stream` (a stream of this
    /// allocation's GPU); returns at once.
    pub fn fill_async(&self, byte: u8, offset: usize, n: usize, stream: &CudaStream) -> Result<()> {
        assert!(offset + n <= self.len, "fill larger than the allocation");
        self.ctx.bind_to_thread()?;
        // SAFETY: `n` bytes from `offset` lie in the allocation (asserted); the allocation
        // lives until the `Resident` owning it is dropped, which synchronises first.
        unsafe { result::memset_d8_async(self.ptr + offset as u64, byte, n, stream.cu_stream())? };
        Ok(())
    }

    /// Copies `data` to the start of the allocation.
    pub fn upload(&self, data: &[u8]) -> Result<()> {
        assert!(data.len() <= self.len, "upload larger than the allocation");
        self.ctx.bind_to_thread()?;
        // SAFETY: `data` fits in the allocation (asserted).
        unsafe { result::memcpy_htod_sync(self.ptr, data)? };
        Ok(())
    }

    /// Copies the first `n` bytes back to the host.
    pub fn download(&self, n: usize) -> Result<Vec<u8>> {
        assert!(n <= self.len, "download larger than the allocation");
        self.ctx.bind_to_thread()?;
        let mut v = vec![0u8; n];
        // SAFETY: `n` bytes lie in the allocation (asserted).
        unsafe { result::memcpy_dtoh_sync(&mut v, self.ptr)? };
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
