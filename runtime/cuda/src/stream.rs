//! Streams calls are enqueued on: the caller's, however it made them.

use crate::error::Result;
use cudarc::driver::{sys, CudaContext, CudaStream};
use std::sync::Arc;

/// A CUDA stream of one GPU. Made from a cudarc stream (kept alive as long as this value)
/// or, unsafely, from a raw handle the caller keeps alive (what the C API receives).
#[derive(Clone, Debug)]
pub struct Stream {
    raw: sys::CUstream,
    device: usize,
    _owner: Option<Arc<CudaStream>>,
}

// SAFETY: a stream handle may be used from any thread.
unsafe impl Send for Stream {}
unsafe impl Sync for Stream {}

impl Stream {
    /// A new stream on `ctx`'s GPU.
    pub fn new(ctx: &Arc<CudaContext>) -> Result<Stream> {
        Ok(Self::from_cudarc(&ctx.new_stream()?))
    }

    /// The stream `s` (kept alive by the returned value).
    pub fn from_cudarc(s: &Arc<CudaStream>) -> Stream {
        Stream {
            raw: s.cu_stream(),
            device: s.context().ordinal(),
            _owner: Some(s.clone()),
        }
    }

    /// A stream from its raw handle.
    ///
    /// # Safety
    /// `raw` must be a stream of GPU `device` (or 0, the legacy default stream of that
    /// GPU's primary context) that outlives every use of the returned value.
    pub unsafe fn from_raw(raw: sys::CUstream, device: usize) -> Stream {
        Stream {
            raw,
            device,
            _owner: None,
        }
    }

    pub fn raw(&self) -> sys::CUstream {
        self.raw
    }

    /// The GPU (ordinal) the stream belongs to.
    pub fn device(&self) -> usize {
        self.device
    }

    /// Waits until everything enqueued on the stream has run.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: a live stream (the constructors' contracts).
        unsafe { sys::cuStreamSynchronize(self.raw) }.result()?;
        Ok(())
    }

    /// Records a timing event on the stream now (a CUDA event with timing, as nccl-tests
    /// records around its back-to-back calls). Only streams this crate made can make
    /// events (a raw stream comes without the context to make them in).
    pub fn record_timing(&self) -> Result<cudarc::driver::CudaEvent> {
        let owner = self._owner.as_ref().ok_or_else(|| {
            crate::error::CudaError::Invalid(
                "timing events need a stream made by braid-cuda".into(),
            )
        })?;
        Ok(owner.record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?)
    }

    /// Whether everything enqueued has run (does not wait).
    pub fn is_idle(&self) -> Result<bool> {
        // SAFETY: a live stream.
        let r = unsafe { sys::cuStreamQuery(self.raw) };
        match r {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            e => {
                e.result()?;
                Ok(true)
            }
        }
    }
}
