//! PreMulSum (NCCL's `ncclRedOpCreatePreMulSum`) on the GPU: each rank's input times the
//! rank's scalar, then summed. The scaled input is written by a small kernel
//! (`braid_scale`, in the product variant's module) into the communicator's own staging
//! memory, and the call runs as a sum from there into the caller's output, out of place;
//! the caller's input is never modified, in place or not.
//!
//! The staging memory grows to the largest group seen (allocated on the first call that
//! needs more, never on the usual path). Calls of one rank that use it run in issue order:
//! on the rank's stream they are ordered already; a call on another stream first waits
//! for an event recorded after the previous one.

use crate::device::DeviceAlloc;
use crate::engine::CudaEngine;
use crate::error::{CudaError, Result};
use crate::kernel::{self, THREADS};
use crate::modules;
use crate::stream::Stream;
use crate::CudaComm;
use braid_runtime::call::CallSpec;
use braid_runtime::device_comm::{enqueue_group, Engine, GroupCall};
use braid_runtime::dtype::RedOp;
use cudarc::driver::{result, sys};

/// One PreMulSum collective of a group.
pub struct PremulCall<'a> {
    pub comm: &'a CudaComm,
    /// The call, its op the sum.
    pub spec: CallSpec,
    pub send: u64,
    pub recv: u64,
    /// The scalar: one element of the call's dtype, its bytes.
    pub scalar: &'a [u8],
    pub stream: &'a Stream,
}

/// A rank's staging memory and what last used it.
#[derive(Default)]
pub struct Staging {
    mem: Option<DeviceAlloc>,
    /// The stream of the last call that read it, and an event recorded there after it.
    last: Option<(sys::CUstream, sys::CUevent)>,
}

// SAFETY: stream and event handles may be used from any thread.
unsafe impl Send for Staging {}

impl Staging {
    /// Destroys the event (the memory frees itself); the engine calls it when dropped.
    pub(crate) fn release(&mut self, ctx: &cudarc::driver::CudaContext) {
        if let Some((_, ev)) = self.last.take() {
            if ctx.bind_to_thread().is_ok() {
                // SAFETY: created here, destroyed once.
                let _ = unsafe { result::event::destroy(ev) };
            }
        }
    }
}

/// Bytes each call's slice of the staging memory starts on.
const ALIGN: usize = 256;

/// The scalar's bytes as the kernel's argument (low bytes, little-endian).
pub fn scalar_bits(scalar: &[u8]) -> Result<u64> {
    if scalar.is_empty() || scalar.len() > 8 {
        return Err(CudaError::Invalid(format!(
            "a PreMulSum scalar of {} bytes",
            scalar.len()
        )));
    }
    let mut b = [0u8; 8];
    b[..scalar.len()].copy_from_slice(scalar);
    Ok(u64::from_le_bytes(b))
}

/// Where each call's scaled input goes in its rank's staging memory, and the bytes each
/// rank needs: `sizes[i]` is call `i`'s input bytes, `owner[i]` its rank's index.
pub fn layout(sizes: &[usize], owner: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let ranks = owner.iter().max().map_or(0, |m| m + 1);
    let mut need = vec![0usize; ranks];
    let offsets = sizes
        .iter()
        .zip(owner)
        .map(|(&s, &o)| {
            let at = need[o];
            need[o] += s.div_ceil(ALIGN) * ALIGN;
            at
        })
        .collect();
    (offsets, need)
}

/// Enqueues the calls: each input scaled into staging memory, then all of them as one
/// group of sums.
///
/// # Safety
/// As [`braid_runtime::device_comm::enqueue_group`] for every call's buffers.
pub unsafe fn enqueue(calls: &[PremulCall<'_>]) -> Result<()> {
    let mut engines: Vec<&CudaEngine> = Vec::new();
    let mut owner = Vec::with_capacity(calls.len());
    let mut sizes = Vec::with_capacity(calls.len());
    for c in calls {
        if c.spec.op != RedOp::Sum || !c.spec.collective.reduces() {
            return Err(CudaError::Invalid(format!(
                "PreMulSum runs a reducing collective as a sum, not {} {}",
                c.spec.collective,
                c.spec.op.name()
            )));
        }
        if c.scalar.len() != c.spec.dtype.size() {
            return Err(CudaError::Invalid(format!(
                "a PreMulSum scalar of {} bytes for {} elements",
                c.scalar.len(),
                c.spec.dtype.name()
            )));
        }
        let e = c.comm.engine();
        let i = match engines.iter().position(|x| std::ptr::eq(*x, e)) {
            Some(i) => i,
            None => {
                engines.push(e);
                engines.len() - 1
            }
        };
        owner.push(i);
        c.spec.check(e.n_ranks())?;
        let sizes_of = c.spec.sizes(e.rank(), e.n_ranks());
        sizes.push(sizes_of.send.unwrap_or(0));
    }
    let (offsets, need) = layout(&sizes, &owner);
    // Staging memory of every rank, and the wait for its last user where the stream
    // changed.
    let mut bases = Vec::with_capacity(engines.len());
    for (i, e) in engines.iter().enumerate() {
        let stream = calls[owner.iter().position(|&o| o == i).unwrap()].stream;
        bases.push(e.staging(need[i], stream)?);
    }
    let mut scaled = Vec::with_capacity(calls.len());
    for (k, c) in calls.iter().enumerate() {
        let e = engines[owner[k]];
        let dst = bases[owner[k]] + offsets[k] as u64;
        let n = sizes[k] / c.spec.dtype.size();
        if n > 0 {
            if c.send == 0 {
                return Err(CudaError::Invalid(format!(
                    "{} on rank {}: the send buffer is null",
                    c.spec.collective,
                    e.rank()
                )));
            }
            // SAFETY: the caller's contract for `send`; `dst` holds `sizes[k]` bytes of the
            // rank's staging memory, which nothing else uses until the group completes.
            unsafe { scale(e, dst, c.send, n, scalar_bits(c.scalar)?, c) }?;
        }
        scaled.push(dst);
    }
    let group: Vec<GroupCall<'_, CudaEngine>> = calls
        .iter()
        .zip(&scaled)
        .map(|(c, &dst)| GroupCall {
            comm: c.comm,
            spec: c.spec,
            send: dst,
            recv: c.recv,
            stream: c.stream,
        })
        .collect();
    // SAFETY: the scaled inputs are staging memory of each rank's GPU holding the call's
    // send size; the outputs are the caller's (its contract).
    unsafe { enqueue_group(&group) }?;
    for (i, e) in engines.iter().enumerate() {
        let k = owner.iter().rposition(|&o| o == i).unwrap();
        e.staging_used(calls[k].stream)?;
    }
    Ok(())
}

/// Enqueues `dst[i] = src[i] * scalar` for `n` elements on the call's stream.
///
/// # Safety
/// `src` and `dst` hold `n` elements of the call's dtype on the rank's GPU.
unsafe fn scale(
    e: &CudaEngine,
    dst: u64,
    src: u64,
    n: usize,
    bits: u64,
    c: &PremulCall<'_>,
) -> Result<()> {
    let ctx = e.context().clone();
    let loaded = modules::get(
        &ctx,
        kernel::scale_variant(c.spec.dtype, e.clique().host_fifo()),
        e.stats(),
    )?;
    let func = loaded.scale.ok_or_else(|| {
        CudaError::Invalid("the product kernel's module has no scaling entry".into())
    })?;
    let blocks = n
        .div_ceil(THREADS as usize)
        .clamp(1, 4 * loaded.multiprocessors as usize) as u32;
    let (mut d, mut s, mut nn, mut b) = (dst, src, n as u64, bits);
    let mut args = [
        &mut d as *mut u64 as *mut std::ffi::c_void,
        &mut s as *mut u64 as *mut std::ffi::c_void,
        &mut nn as *mut u64 as *mut std::ffi::c_void,
        &mut b as *mut u64 as *mut std::ffi::c_void,
    ];
    ctx.bind_to_thread()?;
    // SAFETY: `braid_scale(T*, const T*, u64, u64)` takes these four 64-bit values; the
    // memory is the caller's contract.
    unsafe {
        result::launch_kernel(
            func.cu_function(),
            (blocks, 1, 1),
            (THREADS, 1, 1),
            0,
            c.stream.raw(),
            &mut args,
        )
    }?;
    Ok(())
}

impl CudaEngine {
    /// The base of this rank's staging memory, at least `bytes` long, ready for a call
    /// on `stream`: a call on another stream than the last user's waits for it first.
    fn staging(&self, bytes: usize, stream: &Stream) -> Result<u64> {
        let mut st = self.staging_state().lock().unwrap();
        self.context().bind_to_thread()?;
        if let Some((last, ev)) = st.last {
            if last != stream.raw() {
                // SAFETY: a live event and stream of this rank's GPU.
                unsafe {
                    result::stream::wait_event(
                        stream.raw(),
                        ev,
                        sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                    )
                }?;
            }
        }
        let big_enough = st.mem.as_ref().is_some_and(|m| m.len() >= bytes);
        if !big_enough {
            if let Some((_, ev)) = st.last {
                // The old memory is freed: its last user must be done.
                // SAFETY: a live event.
                unsafe { result::event::synchronize(ev) }?;
            }
            st.mem = Some(DeviceAlloc::new(self.context(), bytes.max(ALIGN), 0)?);
            self.stats().allocated(1);
        }
        Ok(st.mem.as_ref().map_or(0, DeviceAlloc::ptr))
    }

    /// After the calls that read the staging memory were enqueued on `stream`.
    fn staging_used(&self, stream: &Stream) -> Result<()> {
        let mut st = self.staging_state().lock().unwrap();
        let ev = match st.last {
            Some((_, ev)) => ev,
            None => result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?,
        };
        // SAFETY: a live event and stream.
        unsafe { result::event::record(ev, stream.raw()) }?;
        st.last = Some((stream.raw(), ev));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rank_stages_its_calls_one_after_the_other_aligned() {
        let (off, need) = layout(&[10, 300, 0, 7], &[0, 0, 1, 1]);
        assert_eq!(off, vec![0, 256, 0, 0]);
        assert_eq!(need, vec![256 + 512, 256]);
    }

    #[test]
    fn the_scalar_goes_in_the_low_bytes() {
        assert_eq!(scalar_bits(&2.0f32.to_le_bytes()).unwrap(), 0x4000_0000);
        assert_eq!(scalar_bits(&[1, 2]).unwrap(), 0x0201);
        assert!(scalar_bits(&[]).is_err());
        assert!(scalar_bits(&[0; 9]).is_err());
    }
}
