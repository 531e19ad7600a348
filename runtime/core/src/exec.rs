//! The host backend's executor: runs one rank's part of a plan on CPU threads, one
//! thread per block and replica, exactly as the plan says: steps in block order,
//! cross-block dependencies, messages cut into slices through bounded links. Chunks are
//! found in the caller's buffers with [`Geometry`](crate::geometry::Geometry), the same way the GPU kernels find
//! them: a short chunk's padding travels as zeros and is never written back.

use crate::device_comm::CallArgs;
use crate::dtype::{DType, RedOp};
use crate::error::{Result, RuntimeError};
use crate::fabric::{Fabric, POLL, VERDICT_GRACE};
use crate::reduce::{finish_avg, reduce_into, reduce_pair};
use crate::step_clock::StepClock;
use crate::transport::Link;
use crate::workers::Workers;
use braid_ir::Buf;
use braid_plan::{Block, Execution, Slice, StepKind, Verified};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Bytes per slice on a link: the unit of flow control (a GPU's slot).
pub const SLICE_BYTES: usize = 256 * 1024;

/// The base addresses and lengths in bytes of one rank's three buffers: the caller's
/// `in` and `out` (aliased exactly as NCCL aliases them in place) and the scratch memory.
#[derive(Clone, Copy, Debug)]
pub struct Mem {
    pub base: [*mut u8; 3],
    /// Length in bytes of each buffer (0 where it does not exist).
    pub len: [usize; 3],
}

// SAFETY: the plan verifier proved that steps touching one location are ordered by
// happens-before, and every step is bounds-checked against `len` before it runs, so
// block threads never access the same bytes concurrently unless both only read. The
// executor follows one protocol for that memory: bytes a step only reads are borrowed
// shared (`shared`), bytes it writes exclusively (`exclusive`), and a step never holds
// both over the same bytes; the caller's input (read-only: the verifier rejects plans
// that write it) is only ever read.
unsafe impl Send for Mem {}
unsafe impl Sync for Mem {}

fn buf_index(b: Buf) -> usize {
    match b {
        Buf::In => 0,
        Buf::Out => 1,
        Buf::Scratch => 2,
    }
}

/// What one call asks of this rank. Only a [`Verified`] plan runs.
pub struct Job<'a> {
    pub plan: &'a Verified,
    pub args: CallArgs,
    pub dtype: DType,
    pub op: RedOp,
    pub mem: Mem,
    pub timeout: Duration,
    /// Where the first replica's steps record when they start and end (`BRAID_TRACE`).
    pub trace: Option<&'a StepClock>,
}

/// Progress of the blocks of one replica on this rank, for cross-block dependencies:
/// block `b`'s counter holds the steps it completed in this call, `tiles_done * steps(b)
/// + steps_done_in_tile`, as the GPU kernel counts.
struct Progress {
    done: Vec<AtomicU64>,
    lock: Mutex<()>,
    /// One per block: a block's progress wakes only the blocks waiting on it (on few cores
    /// waking every waiter of the replica for each step cost a trip through the scheduler
    /// per waiter that went back to sleep).
    changed: Vec<Condvar>,
    /// Blocks waiting on each block's `changed`: a block that completes a step wakes them
    /// only when there are any (most steps have no waiter, and a wake-up costs a system
    /// call).
    waiters: Vec<AtomicU64>,
}

impl Progress {
    fn new(blocks: usize) -> Progress {
        Progress {
            done: (0..blocks).map(|_| AtomicU64::new(0)).collect(),
            lock: Mutex::new(()),
            changed: (0..blocks).map(|_| Condvar::new()).collect(),
            waiters: (0..blocks).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Waits until `block` completed `target` steps.
    fn wait(&self, block: u32, target: u64, fabric: &dyn Fabric, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let b = block as usize;
        let done = &self.done[b];
        if done.load(Ordering::Acquire) >= target {
            return Ok(());
        }
        let mut guard = self.lock.lock().unwrap();
        // Counted before the condition is checked under the lock: a setter that stores
        // after our check sees the count (both SeqCst) and wakes us under the same lock.
        self.waiters[b].fetch_add(1, Ordering::SeqCst);
        let _counted = Uncount(&self.waiters[b]);
        while done.load(Ordering::SeqCst) < target {
            if let Some(r) = fabric.aborted() {
                return Err(RuntimeError::Aborted(r));
            }
            if Instant::now() >= deadline {
                return Err(RuntimeError::Timeout {
                    seconds: timeout.as_secs_f64(),
                    what: format!("block {block} to complete {target} steps"),
                });
            }
            guard = self.changed[b].wait_timeout(guard, POLL).unwrap().0;
        }
        Ok(())
    }

    fn set(&self, block: u32, steps: u64) {
        let b = block as usize;
        self.done[b].store(steps, Ordering::SeqCst);
        if self.waiters[b].load(Ordering::SeqCst) > 0 {
            let _g = self.lock.lock().unwrap();
            self.changed[b].notify_all();
        }
    }
}

/// Takes a waiter off the count when its wait ends, however it ends.
struct Uncount<'a>(&'a AtomicU64);

impl Drop for Uncount<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs this rank's blocks of `job.plan` to completion, then finishes `avg` on its
/// output. One thread per (replica, block) runs the block through every round and tile
/// of the call on its own, as a GPU thread block does: blocks meet only through their
/// dependencies, and, between rounds of a plan with scratch, a barrier of the replica's
/// blocks (the next round reuses the scratch window). On any error every other rank is
/// aborted through `fabric` and the first error is returned.
pub fn run_rank(job: &Job, fabric: &dyn Fabric) -> Result<()> {
    run_rank_on(job, fabric, &Workers::new())
}

/// [`run_rank`] on block threads kept in `workers` from call to call.
pub fn run_rank_on(job: &Job, fabric: &dyn Fabric, workers: &Workers) -> Result<()> {
    let rank = fabric.rank();
    let plan = job.plan;
    let blocks = &plan.ranks[rank as usize].blocks;
    let channels_per_replica = plan
        .ranks
        .iter()
        .flat_map(|r| r.blocks.iter().map(|b| b.channel + 1))
        .max()
        .unwrap_or(1);
    let first_error: Mutex<Option<RuntimeError>> = Mutex::new(None);
    let mut tasks: Vec<Box<dyn FnOnce() + Send + '_>> = Vec::new();
    {
        for k in 0..job.args.geometry.replicas {
            let progress = Arc::new(Progress::new(blocks.len()));
            for block in blocks {
                let progress = progress.clone();
                let first_error = &first_error;
                tasks.push(Box::new(move || {
                    let channel = k as u32 * channels_per_replica + block.channel;
                    let r = run_block(job, fabric, block, k, channel, &progress);
                    if let Err(mut e) = r {
                        if let RuntimeError::PeerFailed { .. } = e {
                            // The peer may only have given up on a third rank's death:
                            // name the rank the group says failed, when it says so soon.
                            if let Some(why) = fabric.verdict(VERDICT_GRACE) {
                                e = RuntimeError::Aborted(why);
                            }
                        }
                        fabric.abort(&format!("rank {rank} failed: {e}"));
                        let mut slot = first_error.lock().unwrap();
                        // Keep the root cause, not the aborts it caused.
                        let replace = match (&*slot, &e) {
                            (None, _) => true,
                            (Some(RuntimeError::Aborted(_)), RuntimeError::Aborted(_)) => false,
                            (Some(RuntimeError::Aborted(_)), _) => true,
                            _ => false,
                        };
                        if replace {
                            *slot = Some(e);
                        }
                    }
                }));
            }
        }
    }
    workers.run_all(tasks);
    if let Some(e) = first_error.into_inner().unwrap() {
        // An abort's own message says only where it was seen; the fabric knows why
        // (which rank failed).
        if let (RuntimeError::Aborted(_), Some(why)) = (&e, fabric.aborted()) {
            return Err(RuntimeError::Aborted(why));
        }
        return Err(e);
    }
    if job.args.avg_ranks > 0 && job.mem.len[1] > 0 {
        // SAFETY: the output region of this call, which no block touches any more.
        let out = unsafe { exclusive(job.mem.base[1], job.mem.len[1]) };
        finish_avg(job.dtype, out, job.args.avg_ranks);
    }
    Ok(())
}

/// Where a block runs its steps once: the element range of every chunk, and the round's
/// window `[w0, w1)` it lies in (scratch chunk `c` holds the window at `c * round_elems`).
#[derive(Clone, Copy, Debug)]
struct At {
    range: (usize, usize),
    window: (usize, usize),
}

/// Every `At` replica `k` runs its blocks over, in order: per round, its part of the
/// window once (streaming) or once per tile of it, each tile small enough to fill one
/// slice so that a message of `count` chunks is `count` slices (tiled: MSCCL's model).
/// The second value says whether the round ends there.
fn schedule(job: &Job, k: usize) -> Vec<(At, bool)> {
    let g = &job.args.geometry;
    let tile = (SLICE_BYTES / g.elem).max(1);
    let mut out = Vec::new();
    for r in 0..g.rounds() {
        let window = g.round_range(r);
        let (a, b) = g.replica_range(r, k);
        match job.plan.execution {
            Execution::Streaming => out.push((
                At {
                    range: (a, b),
                    window,
                },
                true,
            )),
            Execution::Tiled => {
                let mut lo = a;
                while lo < b {
                    let hi = (lo + tile).min(b);
                    out.push((
                        At {
                            range: (lo, hi),
                            window,
                        },
                        hi == b,
                    ));
                    lo = hi;
                }
            }
        }
    }
    out
}

/// A run of bytes of one chunk for one step: `len` bytes from `ptr`, of which the first
/// `valid` exist in the buffer (the rest is padding).
#[derive(Clone, Copy, Debug)]
struct Piece {
    ptr: *mut u8,
    len: usize,
    valid: usize,
}

/// The byte regions of a slice for the element range `at.range` of each of its chunks:
/// one region per chunk, all the same length.
fn regions(job: &Job, s: &Slice, at: At) -> Result<Vec<Piece>> {
    let g = &job.args.geometry;
    let e = g.elem;
    let b_idx = buf_index(s.buf);
    let (a, b) = at.range;
    let mut out = Vec::with_capacity(s.count as usize);
    for i in s.offset..s.offset + s.count {
        let (start, valid) = if s.buf == Buf::Scratch {
            (i as usize * g.round_elems + (a - at.window.0), b - a)
        } else {
            let span = g.span(i);
            (span.start + a, span.valid.saturating_sub(a).min(b - a))
        };
        let (start, len, valid) = (start * e, (b - a) * e, valid * e);
        // Checked here as well as by the verifier: an executor never trusts offsets.
        let end = if s.buf == Buf::Scratch {
            start + len
        } else {
            start + valid
        };
        if valid > 0 && end > job.mem.len[b_idx] {
            return Err(RuntimeError::Invalid(format!(
                "{} chunk {i} ends at byte {end} but the buffer has {} bytes",
                s.buf, job.mem.len[b_idx]
            )));
        }
        // In bounds where valid (checked just above); never dereferenced past that.
        let ptr = job.mem.base[b_idx].wrapping_add(start);
        out.push(Piece { ptr, len, valid });
    }
    Ok(out)
}

/// Pieces of at most SLICE_BYTES of every region, in order: how messages are sliced.
fn pieces(regions: &[Piece]) -> Vec<Piece> {
    let mut v = Vec::new();
    for r in regions {
        let mut off = 0;
        while off < r.len {
            let n = SLICE_BYTES.min(r.len - off);
            v.push(Piece {
                ptr: r.ptr.wrapping_add(off),
                len: n,
                valid: r.valid.saturating_sub(off).min(n),
            });
            off += n;
        }
    }
    v
}

/// Borrows bytes a step writes: the verifier proved that no other thread reads or writes
/// them meanwhile.
///
/// # Safety
/// `p..p+n` must lie in one of the call's writable buffers (checked by `regions`), and
/// nothing else may access it while the borrow lives.
unsafe fn exclusive<'a>(p: *mut u8, n: usize) -> &'a mut [u8] {
    std::slice::from_raw_parts_mut(p, n)
}

/// Borrows bytes a step only reads (other threads may read them too, none writes).
///
/// # Safety
/// `p..p+n` must lie in one of the call's buffers (checked by `regions`), and nothing
/// may write it while the borrow lives.
unsafe fn shared<'a>(p: *const u8, n: usize) -> &'a [u8] {
    std::slice::from_raw_parts(p, n)
}

/// Whether two steps' pieces are the very same bytes.
fn same_bytes(a: &Option<Vec<Piece>>, b: &Option<Vec<Piece>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|(x, y)| x.ptr == y.ptr && x.valid == y.valid)
        }
        _ => false,
    }
}

/// A piece's existing bytes followed by zeros for its padding, in `tmp`.
///
/// # Safety
/// As [`shared`] for the piece's valid part.
unsafe fn padded<'t>(p: &Piece, tmp: &'t mut [u8]) -> &'t mut [u8] {
    let t = &mut tmp[..p.len];
    t[..p.valid].copy_from_slice(shared(p.ptr, p.valid));
    t[p.valid..].fill(0);
    t
}

/// Block `block` of replica `k` through the whole call (see [`run_rank`]).
fn run_block(
    job: &Job,
    fabric: &dyn Fabric,
    block: &Block,
    k: usize,
    channel: u32,
    progress: &Progress,
) -> Result<()> {
    let slots = job.plan.slots;
    let send: Option<Arc<dyn Link>> = match block.send_peer {
        Some(p) => Some(fabric.send_link(p, channel, slots)?),
        None => None,
    };
    let recv: Option<Arc<dyn Link>> = match block.recv_peer {
        Some(p) => Some(fabric.recv_link(p, channel, slots)?),
        None => None,
    };
    let (mut tmp, mut tmp2) = SliceBufs::take();
    let r = run_schedule(
        job,
        fabric,
        block,
        k,
        progress,
        (&send, &recv),
        (&mut tmp, &mut tmp2),
    );
    SliceBufs::give_back(tmp, tmp2);
    r
}

/// Two slice-sized buffers kept by each block thread from call to call. Allocated on every
/// call they cost two `mmap`s and two `munmap`s per block (they are above the allocator's
/// threshold for mapping), and a `munmap` in a process of many threads interrupts every
/// core that ran one of them: the largest part of a small call's time on few cores.
struct SliceBufs;

thread_local! {
    static SLICE_BUFS: std::cell::Cell<Option<(Vec<u8>, Vec<u8>)>> =
        const { std::cell::Cell::new(None) };
}

impl SliceBufs {
    fn take() -> (Vec<u8>, Vec<u8>) {
        SLICE_BUFS
            .with(|c| c.take())
            .unwrap_or_else(|| (vec![0u8; SLICE_BYTES], vec![0u8; SLICE_BYTES]))
    }

    fn give_back(a: Vec<u8>, b: Vec<u8>) {
        SLICE_BUFS.with(|c| c.set(Some((a, b))));
    }
}

/// [`run_block`]'s rounds and tiles, with its links and slice buffers.
fn run_schedule(
    job: &Job,
    fabric: &dyn Fabric,
    block: &Block,
    k: usize,
    progress: &Progress,
    (send, recv): Links,
    (tmp, tmp2): (&mut Vec<u8>, &mut Vec<u8>),
) -> Result<()> {
    let blocks = &job.plan.ranks[fabric.rank() as usize].blocks;
    let schedule = schedule(job, k);
    let last_round_end = schedule.iter().rposition(|(_, end)| *end);
    let mut tiles = 0u64;
    let clock = job.trace.filter(|_| k == 0);
    for (i, (at, round_end)) in schedule.into_iter().enumerate() {
        run_steps(
            job,
            fabric,
            block,
            at,
            (tiles, clock),
            progress,
            (send, recv),
            (&mut *tmp, &mut *tmp2),
        )?;
        tiles += 1;
        if round_end && job.plan.scratch_chunks > 0 && Some(i) != last_round_end {
            // The next round reuses this round's scratch window: every block of the
            // replica must be done with it first.
            for (b, other) in blocks.iter().enumerate() {
                let target = tiles * other.steps.len() as u64;
                progress.wait(b as u32, target, fabric, job.timeout)?;
            }
        }
    }
    Ok(())
}

type Links<'a> = (&'a Option<Arc<dyn Link>>, &'a Option<Arc<dyn Link>>);

/// The block's steps once over `at`, as tile number `tiles` of the call.
#[allow(clippy::too_many_arguments)]
fn run_steps(
    job: &Job,
    fabric: &dyn Fabric,
    block: &Block,
    at: At,
    (tiles, clock): (u64, Option<&StepClock>),
    progress: &Progress,
    (send, recv): Links,
    (tmp, tmp2): (&mut Vec<u8>, &mut Vec<u8>),
) -> Result<()> {
    let blocks = &job.plan.ranks[fabric.rank() as usize].blocks;
    let n = block.steps.len() as u64;
    // A step is done: other blocks may go on, and the trace has its end.
    let done = |i: usize| {
        progress.set(block.id, tiles * n + i as u64 + 1);
        if let Some(c) = clock {
            c.end(block.id, i);
        }
    };
    for (i, step) in block.steps.iter().enumerate() {
        if let (Some(c), 0) = (clock, tiles) {
            c.start(block.id, i);
        }
        for d in &step.deps {
            let their = blocks[d.block as usize].steps.len() as u64;
            progress.wait(
                d.block,
                tiles * their + u64::from(d.step) + 1,
                fabric,
                job.timeout,
            )?;
        }
        if let Some(r) = fabric.aborted() {
            return Err(RuntimeError::Aborted(r));
        }
        let deadline = || Instant::now() + job.timeout;
        let src = step
            .src
            .map(|s| regions(job, &s, at))
            .transpose()?
            .map(|r| pieces(&r));
        let dst = step
            .dst
            .map(|s| regions(job, &s, at))
            .transpose()?
            .map(|r| pieces(&r));
        if step.kind == StepKind::Copy && same_bytes(&src, &dst) {
            // A copy of bytes onto themselves (an in-place call aliasing `in` and `out`)
            // touches nothing, as the plan verifier reads it: other blocks may read these
            // bytes meanwhile, so it must not write them.
            done(i);
            continue;
        }
        let (dt, op) = (job.dtype, job.op);
        let link_s = || {
            send.as_ref().ok_or_else(|| {
                RuntimeError::Invalid("step sends in a block without a send peer".into())
            })
        };
        let link_r = || {
            recv.as_ref().ok_or_else(|| {
                RuntimeError::Invalid("step receives in a block without a receive peer".into())
            })
        };
        let whole = |p: &Option<Vec<Piece>>| {
            p.as_ref()
                .is_none_or(|v| v.iter().all(|x| x.valid == x.len))
        };
        if !(whole(&src) && whole(&dst)) {
            // Some chunk is short: go through temporaries, padding read as zeros and
            // never written back.
            // SAFETY: as below.
            unsafe {
                padded_step(
                    step.kind,
                    &src,
                    &dst,
                    &link_s,
                    &link_r,
                    deadline,
                    (dt, op),
                    tmp,
                    tmp2,
                )?
            };
            done(i);
            continue;
        }
        // SAFETY (all borrows below): regions are bounds-checked and the plan is
        // race-free: bytes this step writes are touched by no other thread during it,
        // bytes it reads are written by none; each borrow ends before the next one of
        // the same bytes begins.
        unsafe {
            match step.kind {
                StepKind::Send => {
                    for p in src.as_ref().unwrap() {
                        link_s()?.send(shared(p.ptr, p.len), deadline())?;
                    }
                }
                StepKind::Recv => {
                    for p in dst.as_ref().unwrap() {
                        link_r()?.recv(exclusive(p.ptr, p.len), deadline())?;
                    }
                }
                StepKind::RecvCopySend => {
                    for p in dst.as_ref().unwrap() {
                        link_r()?.recv(exclusive(p.ptr, p.len), deadline())?;
                        link_s()?.send(shared(p.ptr, p.len), deadline())?;
                    }
                }
                StepKind::RecvReduceSend => {
                    for p in src.as_ref().unwrap() {
                        let t = &mut tmp[..p.len];
                        link_r()?.recv(t, deadline())?;
                        reduce_into(dt, op, t, shared(p.ptr, p.len));
                        link_s()?.send(t, deadline())?;
                    }
                }
                StepKind::RecvReduceCopy | StepKind::RecvReduceCopySend => {
                    let forward = step.kind == StepKind::RecvReduceCopySend;
                    for (s, d) in src.as_ref().unwrap().iter().zip(dst.as_ref().unwrap()) {
                        let n = s.len;
                        let t = &mut tmp[..n];
                        link_r()?.recv(t, deadline())?;
                        if s.ptr == d.ptr {
                            reduce_into(dt, op, exclusive(d.ptr, n), t);
                        } else {
                            // Distinct chunks are disjoint (the verifier's rule).
                            reduce_pair(dt, op, exclusive(d.ptr, n), shared(s.ptr, n), t);
                        }
                        if forward {
                            link_s()?.send(shared(d.ptr, n), deadline())?;
                        }
                    }
                }
                StepKind::Copy => {
                    for (s, d) in src.as_ref().unwrap().iter().zip(dst.as_ref().unwrap()) {
                        if s.ptr != d.ptr {
                            std::ptr::copy(s.ptr, d.ptr, s.len);
                        }
                    }
                }
                StepKind::Reduce => {
                    for (s, d) in src.as_ref().unwrap().iter().zip(dst.as_ref().unwrap()) {
                        if s.ptr == d.ptr {
                            // x (+) x: the operand through a temporary, never aliased.
                            let t = &mut tmp[..s.len];
                            t.copy_from_slice(shared(s.ptr, s.len));
                            reduce_into(dt, op, exclusive(d.ptr, d.len), t);
                        } else {
                            reduce_into(dt, op, exclusive(d.ptr, d.len), shared(s.ptr, s.len));
                        }
                    }
                }
                StepKind::Nop => {}
            }
        }
        done(i);
    }
    Ok(())
}

/// One step where some chunk is short. Per piece: the value `x` is what arrives (for
/// receiving kinds), combined with the local operand padded with zeros; the existing
/// part of `x` is written to the destination, and all of `x` is sent.
///
/// # Safety
/// The pieces' valid parts lie in the call's buffers (bounds-checked) and the plan is
/// race-free.
#[allow(clippy::too_many_arguments)]
unsafe fn padded_step<'l>(
    kind: StepKind,
    src: &Option<Vec<Piece>>,
    dst: &Option<Vec<Piece>>,
    link_s: &dyn Fn() -> Result<&'l Arc<dyn Link>>,
    link_r: &dyn Fn() -> Result<&'l Arc<dyn Link>>,
    deadline: impl Fn() -> Instant,
    (dt, op): (DType, RedOp),
    tmp: &mut [u8],
    tmp2: &mut [u8],
) -> Result<()> {
    let receives = matches!(
        kind,
        StepKind::Recv
            | StepKind::RecvCopySend
            | StepKind::RecvReduceSend
            | StepKind::RecvReduceCopy
            | StepKind::RecvReduceCopySend
    );
    let sends = matches!(
        kind,
        StepKind::Send
            | StepKind::RecvCopySend
            | StepKind::RecvReduceSend
            | StepKind::RecvReduceCopySend
    );
    if kind == StepKind::Nop {
        return Ok(());
    }
    let count = src.as_ref().or(dst.as_ref()).map_or(0, |v| v.len());
    for i in 0..count {
        let s = src.as_ref().map(|v| v[i]);
        let d = dst.as_ref().map(|v| v[i]);
        let n = s.or(d).map_or(0, |p| p.len);
        let x = &mut tmp[..n];
        if receives {
            link_r()?.recv(x, deadline())?;
        }
        match kind {
            StepKind::Send | StepKind::Copy => {
                x.copy_from_slice(padded(&s.unwrap(), tmp2));
            }
            StepKind::RecvReduceSend | StepKind::RecvReduceCopy | StepKind::RecvReduceCopySend => {
                reduce_into(dt, op, x, padded(&s.unwrap(), tmp2));
            }
            StepKind::Reduce => {
                let d0 = d.unwrap();
                x.copy_from_slice(padded(&d0, tmp2));
                reduce_into(dt, op, x, padded(&s.unwrap(), tmp2));
            }
            _ => {}
        }
        if let Some(d) = d {
            if kind != StepKind::Send && kind != StepKind::RecvReduceSend {
                exclusive(d.ptr, d.valid).copy_from_slice(&x[..d.valid]);
            }
        }
        if sends {
            link_s()?.send(x, deadline())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_thread_keeps_its_slice_buffers_from_call_to_call() {
        let (a, b) = SliceBufs::take();
        assert_eq!((a.len(), b.len()), (SLICE_BYTES, SLICE_BYTES));
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        SliceBufs::give_back(a, b);
        let (a, b) = SliceBufs::take();
        assert_eq!((a.as_ptr(), b.as_ptr()), (pa, pb));
        // Taken, they are no longer there: a second taker on the thread gets its own.
        let (c, _d) = SliceBufs::take();
        assert_ne!(c.as_ptr(), pa);
        SliceBufs::give_back(a, b);
    }

    #[test]
    fn a_blocks_progress_wakes_the_blocks_that_wait_on_it() {
        let progress = Arc::new(Progress::new(3));
        let group = crate::fabric::InProcGroup::new(1);
        let fabric = group.member(0);
        let p = progress.clone();
        let waiter = std::thread::spawn(move || {
            let f = crate::fabric::InProcGroup::new(1).member(0);
            p.wait(2, 1, &f, Duration::from_secs(10))
        });
        // Another block's progress does not satisfy the wait; block 2's does.
        progress.set(1, 5);
        progress.set(2, 1);
        waiter.join().unwrap().unwrap();
        let short = progress.wait(0, 1, &fabric, Duration::from_millis(50));
        assert!(
            matches!(short, Err(RuntimeError::Timeout { .. })),
            "{short:?}"
        );
    }
}
