//! The host backend's executor: runs one rank's part of a plan on CPU threads, one
//! thread per block and replica, exactly as the plan says: steps in block order,
//! cross-block dependencies, messages cut into slices through bounded links.

use crate::dtype::{DType, RedOp};
use crate::error::{Result, RuntimeError};
use crate::fabric::{Fabric, POLL};
use crate::geometry::Geometry;
use crate::reduce::{reduce_into, reduce_pair};
use crate::transport::Link;
use braid_ir::Buf;
use braid_plan::{Block, Execution, Plan, Slice, StepKind};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Bytes per slice on a link: the unit of flow control (a GPU's slot).
pub const SLICE_BYTES: usize = 256 * 1024;

/// The base addresses of one rank's three buffers, as the executor sees them (staging
/// buffers when the call needs padding). Aliasing of in-place calls is real aliasing.
#[derive(Clone, Copy, Debug)]
pub struct Mem {
    pub base: [*mut u8; 3],
    /// Length in bytes of each buffer (0 where it does not exist).
    pub len: [usize; 3],
}

// SAFETY: the plan verifier proved that steps touching one location are ordered by
// happens-before, and every step is bounds-checked against `len` before it runs, so
// block threads never access the same bytes concurrently unless both only read.
unsafe impl Send for Mem {}
unsafe impl Sync for Mem {}

fn buf_index(b: Buf) -> usize {
    match b {
        Buf::In => 0,
        Buf::Out => 1,
        Buf::Scratch => 2,
    }
}

/// What one call asks of this rank.
pub struct Job<'a> {
    pub plan: &'a Plan,
    pub geometry: Geometry,
    pub dtype: DType,
    pub op: RedOp,
    pub mem: Mem,
    pub timeout: Duration,
}

/// Progress of the blocks of one replica on this rank, for cross-block dependencies.
struct Progress {
    done: Vec<AtomicU32>,
    lock: Mutex<()>,
    changed: Condvar,
}

impl Progress {
    fn wait(&self, block: u32, step: u32, fabric: &dyn Fabric, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let target = &self.done[block as usize];
        let mut guard = self.lock.lock().unwrap();
        while target.load(Ordering::Acquire) <= step {
            if let Some(r) = fabric.aborted() {
                return Err(RuntimeError::Aborted(r));
            }
            if Instant::now() >= deadline {
                return Err(RuntimeError::Timeout {
                    seconds: timeout.as_secs_f64(),
                    what: format!("block {block} to finish step {step}"),
                });
            }
            guard = self.changed.wait_timeout(guard, POLL).unwrap().0;
        }
        Ok(())
    }

    fn advance(&self, block: u32) {
        self.done[block as usize].fetch_add(1, Ordering::Release);
        let _g = self.lock.lock().unwrap();
        self.changed.notify_all();
    }
}

/// Runs this rank's blocks of `job.plan` to completion. On any error every other
/// rank is aborted through `fabric` and the first error is returned.
pub fn run_rank(job: &Job, fabric: &dyn Fabric) -> Result<()> {
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
    for pass in passes(job) {
        std::thread::scope(|scope| {
            for &(k, range) in &pass {
                let progress = Arc::new(Progress {
                    done: blocks.iter().map(|_| AtomicU32::new(0)).collect(),
                    lock: Mutex::new(()),
                    changed: Condvar::new(),
                });
                for block in blocks {
                    let progress = progress.clone();
                    let first_error = &first_error;
                    scope.spawn(move || {
                        let channel = k as u32 * channels_per_replica + block.channel;
                        let r = run_block(job, fabric, block, range, channel, &progress);
                        if let Err(e) = r {
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
                    });
                }
            }
        });
        if first_error.lock().unwrap().is_some() {
            break;
        }
    }
    match first_error.into_inner().unwrap() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The passes over the data: each pass runs every block once per (replica, element range
/// of every chunk) it lists, concurrently. A streaming plan is one pass with every replica;
/// a tiled plan (MSCCL's model) replays the plan once per tile, each chunk's tile small
/// enough to fill one slice, so that a message of `count` chunks is `count` slices.
fn passes(job: &Job) -> Vec<Vec<(usize, (usize, usize))>> {
    let g = &job.geometry;
    let replicas: Vec<(usize, (usize, usize))> =
        (0..g.replicas).map(|k| (k, g.replica_range(k))).collect();
    match job.plan.execution {
        Execution::Streaming => vec![replicas],
        Execution::Tiled => {
            let tile = (SLICE_BYTES / g.elem).max(1);
            let longest = replicas.iter().map(|(_, (a, b))| b - a).max().unwrap_or(0);
            (0..longest.div_ceil(tile))
                .map(|t| {
                    replicas
                        .iter()
                        .filter_map(|&(k, (a, b))| {
                            let lo = a + t * tile;
                            (lo < b).then_some((k, (lo, (lo + tile).min(b))))
                        })
                        .collect()
                })
                .collect()
        }
    }
}

/// The byte regions of a slice for the element range `[a, b)` of each of its chunks: one
/// region per chunk, all the same length.
fn regions(job: &Job, s: &Slice, (a, b): (usize, usize)) -> Result<Vec<(*mut u8, usize)>> {
    let g = &job.geometry;
    let b_idx = buf_index(s.buf);
    let mut out = Vec::with_capacity(s.count as usize);
    for i in s.offset..s.offset + s.count {
        let start = (g.chunk_offset(i) + a) * g.elem;
        let len = (b - a) * g.elem;
        // Checked here as well as by the verifier: an executor never trusts offsets.
        if start + len > job.mem.len[b_idx] {
            return Err(RuntimeError::Invalid(format!(
                "{} chunk {i} ends at byte {} but the buffer has {} bytes",
                s.buf,
                start + len,
                job.mem.len[b_idx]
            )));
        }
        // SAFETY: in bounds, checked just above.
        out.push((unsafe { job.mem.base[b_idx].add(start) }, len));
    }
    Ok(out)
}

/// Pieces of at most SLICE_BYTES of every region, in order: how messages are sliced.
fn pieces(regions: &[(*mut u8, usize)]) -> Vec<(*mut u8, usize)> {
    let mut v = Vec::new();
    for &(p, len) in regions {
        let mut off = 0;
        while off < len {
            let n = SLICE_BYTES.min(len - off);
            // SAFETY: within the region.
            v.push((unsafe { p.add(off) }, n));
            off += n;
        }
    }
    v
}

/// Borrows raw memory the verifier proved no other thread touches meanwhile.
///
/// # Safety
/// `p..p+n` must lie in one of the call's buffers (checked by `regions`).
unsafe fn bytes<'a>(p: *mut u8, n: usize) -> &'a mut [u8] {
    std::slice::from_raw_parts_mut(p, n)
}

fn run_block(
    job: &Job,
    fabric: &dyn Fabric,
    block: &Block,
    range: (usize, usize),
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
    let mut tmp = vec![0u8; SLICE_BYTES];
    for step in &block.steps {
        for d in &step.deps {
            progress.wait(d.block, d.step, fabric, job.timeout)?;
        }
        if let Some(r) = fabric.aborted() {
            return Err(RuntimeError::Aborted(r));
        }
        let deadline = || Instant::now() + job.timeout;
        let src = step
            .src
            .map(|s| regions(job, &s, range))
            .transpose()?
            .map(|r| pieces(&r));
        let dst = step
            .dst
            .map(|s| regions(job, &s, range))
            .transpose()?
            .map(|r| pieces(&r));
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
        // SAFETY (all `bytes` calls below): regions are bounds-checked and the plan is
        // race-free, so no other thread accesses these bytes during this step.
        unsafe {
            match step.kind {
                StepKind::Send => {
                    for &(p, n) in src.as_ref().unwrap() {
                        link_s()?.send(bytes(p, n), deadline())?;
                    }
                }
                StepKind::Recv => {
                    for &(p, n) in dst.as_ref().unwrap() {
                        link_r()?.recv(bytes(p, n), deadline())?;
                    }
                }
                StepKind::RecvCopySend => {
                    for &(p, n) in dst.as_ref().unwrap() {
                        link_r()?.recv(bytes(p, n), deadline())?;
                        link_s()?.send(bytes(p, n), deadline())?;
                    }
                }
                StepKind::RecvReduceSend => {
                    for &(p, n) in src.as_ref().unwrap() {
                        let t = &mut tmp[..n];
                        link_r()?.recv(t, deadline())?;
                        reduce_into(dt, op, t, bytes(p, n));
                        link_s()?.send(t, deadline())?;
                    }
                }
                StepKind::RecvReduceCopy | StepKind::RecvReduceCopySend => {
                    let forward = step.kind == StepKind::RecvReduceCopySend;
                    for (&(s, n), &(d, _)) in
                        src.as_ref().unwrap().iter().zip(dst.as_ref().unwrap())
                    {
                        let t = &mut tmp[..n];
                        link_r()?.recv(t, deadline())?;
                        if s == d {
                            reduce_into(dt, op, bytes(d, n), t);
                        } else {
                            reduce_pair(dt, op, bytes(d, n), bytes(s, n), t);
                        }
                        if forward {
                            link_s()?.send(bytes(d, n), deadline())?;
                        }
                    }
                }
                StepKind::Copy => {
                    for (&(s, n), &(d, _)) in
                        src.as_ref().unwrap().iter().zip(dst.as_ref().unwrap())
                    {
                        if s != d {
                            std::ptr::copy(s, d, n);
                        }
                    }
                }
                StepKind::Reduce => {
                    for (&(s, n), &(d, _)) in
                        src.as_ref().unwrap().iter().zip(dst.as_ref().unwrap())
                    {
                        reduce_into(dt, op, bytes(d, n), bytes(s, n));
                    }
                }
                StepKind::Nop => {}
            }
        }
        progress.advance(block.id);
    }
    Ok(())
}
