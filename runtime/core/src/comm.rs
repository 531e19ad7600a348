//! Communicators, shaped after NCCL's: one per rank, created for all ranks of a process
//! at once ([`Communicator::create_local`]) or one per process from a bootstrap, and the
//! collectives on them. Calls are blocking on the host backend.

use crate::dtype::{DType, RedOp};
use crate::error::{Result, RuntimeError};
use crate::exec::{run_rank, Job, Mem};
use crate::fabric::{Fabric, InProcGroup};
use crate::geometry::{buffer_elems, Geometry};
use crate::reduce::finish_avg;
use crate::registry::Registry;
use braid_ir::{Collective, Mode};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The buffers of one call. In place, the single buffer is laid out as NCCL lays it out:
/// allgather's input is this rank's block of the output, reduce-scatter's output is this
/// rank's block of the input.
pub enum Buffers<'a> {
    OutOfPlace { send: &'a [u8], recv: &'a mut [u8] },
    InPlace(&'a mut [u8]),
}

/// Default for BRAID_TIMEOUT, in seconds.
pub const DEFAULT_TIMEOUT_S: f64 = 300.0;

/// `BRAID_TIMEOUT` (seconds, fractions allowed) or the default.
pub fn timeout_from_env() -> Duration {
    let s = std::env::var("BRAID_TIMEOUT")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| *v > 0.0)
        .unwrap_or(DEFAULT_TIMEOUT_S);
    Duration::from_secs_f64(s)
}

pub struct Communicator {
    fabric: Box<dyn Fabric>,
    registry: Arc<Registry>,
    seq: AtomicU64,
    timeout: Duration,
    failed: Mutex<Option<String>>,
}

impl Communicator {
    pub fn new(
        fabric: Box<dyn Fabric>,
        registry: Arc<Registry>,
        timeout: Duration,
    ) -> Communicator {
        Communicator {
            fabric,
            registry,
            seq: AtomicU64::new(0),
            timeout,
            failed: Mutex::new(None),
        }
    }

    /// One communicator per rank for `n` ranks living in this process (like
    /// `ncclCommInitAll`); drive each from its own thread.
    pub fn create_local(n: u32, registry: Arc<Registry>, timeout: Duration) -> Vec<Communicator> {
        let group = InProcGroup::new(n);
        (0..n)
            .map(|r| Communicator::new(Box::new(group.member(r)), registry.clone(), timeout))
            .collect()
    }

    /// One rank of a group whose ranks live in different processes, from the unique id
    /// rank 0 created (like `ncclCommInitRank`).
    pub fn init_rank(
        id: &crate::bootstrap::UniqueId,
        rank: u32,
        n: u32,
        registry: Arc<Registry>,
        timeout: Duration,
    ) -> Result<Communicator> {
        let boot = crate::bootstrap::Bootstrap::init(id, rank, n, timeout)?;
        Ok(Communicator::new(
            Box::new(crate::net_fabric::NetFabric::new(boot)),
            registry,
            timeout,
        ))
    }

    /// One rank of a group started by a launcher (torchrun, Open MPI, Slurm), from the
    /// launcher's environment variables.
    pub fn from_launch_env(registry: Arc<Registry>, timeout: Duration) -> Result<Communicator> {
        let env = crate::launcher::LaunchEnv::from_env()?;
        let boot = crate::bootstrap::Bootstrap::from_launch_env(&env, timeout)?;
        Ok(Communicator::new(
            Box::new(crate::net_fabric::NetFabric::new(boot)),
            registry,
            timeout,
        ))
    }

    pub fn rank(&self) -> u32 {
        self.fabric.rank()
    }

    pub(crate) fn fabric(&self) -> &dyn Fabric {
        self.fabric.as_ref()
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    pub fn n_ranks(&self) -> u32 {
        self.fabric.n_ranks()
    }

    /// Aborts the communicator: every blocked call of every rank returns an error.
    pub fn abort(&self, reason: &str) {
        self.fabric.abort(reason);
        *self.failed.lock().unwrap() = Some(reason.to_string());
    }

    pub fn all_reduce(&self, bufs: Buffers, count: usize, dtype: DType, op: RedOp) -> Result<()> {
        self.call(Collective::Allreduce, bufs, count, dtype, op, None)
    }

    pub fn all_gather(&self, bufs: Buffers, sendcount: usize, dtype: DType) -> Result<()> {
        self.call(
            Collective::Allgather,
            bufs,
            sendcount,
            dtype,
            RedOp::Sum,
            None,
        )
    }

    pub fn reduce_scatter(
        &self,
        bufs: Buffers,
        recvcount: usize,
        dtype: DType,
        op: RedOp,
    ) -> Result<()> {
        self.call(Collective::ReduceScatter, bufs, recvcount, dtype, op, None)
    }

    pub fn broadcast(&self, bufs: Buffers, count: usize, dtype: DType, root: u32) -> Result<()> {
        self.call(
            Collective::Broadcast,
            bufs,
            count,
            dtype,
            RedOp::Sum,
            Some(root),
        )
    }

    pub fn reduce(
        &self,
        bufs: Buffers,
        count: usize,
        dtype: DType,
        op: RedOp,
        root: u32,
    ) -> Result<()> {
        self.call(Collective::Reduce, bufs, count, dtype, op, Some(root))
    }

    /// `count` is what one rank sends to one peer.
    pub fn all_to_all(
        &self,
        send: &[u8],
        recv: &mut [u8],
        count: usize,
        dtype: DType,
    ) -> Result<()> {
        self.call(
            Collective::Alltoall,
            Buffers::OutOfPlace { send, recv },
            count,
            dtype,
            RedOp::Sum,
            None,
        )
    }

    /// Runs one collective. `count` is NCCL's count argument for that collective.
    pub fn call(
        &self,
        collective: Collective,
        bufs: Buffers,
        count: usize,
        dtype: DType,
        op: RedOp,
        root: Option<u32>,
    ) -> Result<()> {
        if let Some(r) = self.failed.lock().unwrap().clone() {
            return Err(RuntimeError::Aborted(r));
        }
        let result = self.call_inner(collective, bufs, count, dtype, op, root);
        if let Err(e) = &result {
            // Like NCCL after an asynchronous error: the communicator is unusable now.
            *self.failed.lock().unwrap() = Some(e.to_string());
        }
        result
    }

    fn call_inner(
        &self,
        collective: Collective,
        bufs: Buffers,
        count: usize,
        dtype: DType,
        op: RedOp,
        root: Option<u32>,
    ) -> Result<()> {
        let n = self.n_ranks();
        let rank = self.rank();
        if let Some(r) = root {
            if r >= n {
                return Err(RuntimeError::Invalid(format!(
                    "root {r} is not a rank of {n}"
                )));
            }
        }
        let e = dtype.size();
        let mode = match bufs {
            Buffers::InPlace(_) => Mode::InPlace,
            Buffers::OutOfPlace { .. } => Mode::OutOfPlace,
        };
        let (in_elems, out_elems) = buffer_elems(collective, n, count);
        let has_in = !(collective == Collective::Broadcast && root != Some(rank));
        let has_out = !(collective == Collective::Reduce && root != Some(rank));
        check_lengths(
            &bufs,
            collective,
            rank,
            in_elems * e,
            out_elems * e,
            count * e,
            has_in,
            has_out,
        )?;
        let bytes = in_elems.max(out_elems) * e;
        let plan = if count == 0 {
            None
        } else {
            Some(self.registry.select(collective, n, root, mode, bytes)?)
        };
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        let desc = format!(
            "{collective}(count={count}, dtype={}, op={}, root={root:?}, plan={})",
            dtype.name(),
            op.name(),
            plan.as_ref().map_or("none", |p| p.name.as_str())
        );
        self.fabric
            .agree(seq, desc.as_bytes(), Instant::now() + self.timeout)?;
        let Some(plan) = plan else { return Ok(()) };
        let geometry = Geometry::new(collective, n, plan.chunks, count, e, plan.channels);
        let stride_bytes = geometry.stride() * e;
        let exec_len = |chunks: u32| chunks as usize * geometry.chunk_elems * e;
        let in_len = if has_in { exec_len(plan.in_chunks) } else { 0 };
        let out_len = if has_out {
            exec_len(plan.out_chunks)
        } else {
            0
        };
        let mut scratch = vec![0u8; exec_len(plan.scratch_chunks)];
        let segments_in = if collective.has_k() && collective != Collective::Allgather {
            n as usize
        } else {
            1
        };
        let segments_out = if collective.has_k() && collective != Collective::ReduceScatter {
            n as usize
        } else {
            1
        };
        let seg = count * e;
        let mut staging: Vec<u8>;
        let mut staging_out: Vec<u8>;
        let (in_ptr, out_ptr, user_out): (*mut u8, *mut u8, Option<(*mut u8, usize)>) = match bufs {
            Buffers::OutOfPlace { send, recv } => {
                if geometry.exact() {
                    (send.as_ptr() as *mut u8, recv.as_mut_ptr(), None)
                } else {
                    staging = vec![0u8; in_len];
                    if has_in {
                        scatter_segments(send, &mut staging, segments_in, seg, stride_bytes);
                    }
                    staging_out = vec![0u8; out_len];
                    let user = (recv.as_mut_ptr(), recv.len());
                    (
                        staging.as_mut_ptr(),
                        staging_out.as_mut_ptr(),
                        has_out.then_some(user),
                    )
                }
            }
            Buffers::InPlace(buf) => {
                // Where this rank's part sits inside the one buffer.
                let (big, small_at) = match collective {
                    Collective::Allgather => (Buf2::Out, rank as usize),
                    Collective::ReduceScatter => (Buf2::In, rank as usize),
                    _ => (Buf2::Both, 0),
                };
                let big_len = match big {
                    Buf2::Out => out_len,
                    _ => in_len.max(out_len),
                };
                let segments = match big {
                    Buf2::Out => segments_out,
                    Buf2::In => segments_in,
                    Buf2::Both => 1,
                };
                let (base, user) = if geometry.exact() {
                    (buf.as_mut_ptr(), None)
                } else {
                    staging = vec![0u8; big_len];
                    scatter_segments(buf, &mut staging, segments, seg, stride_bytes);
                    (staging.as_mut_ptr(), Some((buf.as_mut_ptr(), buf.len())))
                };
                // SAFETY: offsets are within `big_len` (rank < n segments).
                let part = unsafe { base.add(small_at * stride_bytes) };
                match big {
                    Buf2::Out => (part, base, user),
                    Buf2::In => (base, part, user),
                    Buf2::Both => (base, base, user),
                }
            }
        };
        let mem = Mem {
            base: [in_ptr, out_ptr, scratch.as_mut_ptr()],
            len: [in_len, out_len, scratch.len()],
        };
        let job = Job {
            plan: &plan,
            geometry,
            dtype,
            op,
            mem,
            timeout: self.timeout,
        };
        run_rank(&job, self.fabric.as_ref())?;
        // The result region of this rank, in executor space, for avg and unstaging.
        if has_out {
            let out_bytes = out_len;
            // SAFETY: out_ptr..out_ptr+out_len is this call's output region.
            let out = unsafe { std::slice::from_raw_parts_mut(out_ptr, out_bytes) };
            if op == RedOp::Avg && collective.reduces() {
                finish_avg(dtype, out, n);
            }
            if let Some((user_ptr, user_len)) = user_out {
                let segs = segments_out;
                let user_base = match mode {
                    // In place, the user's result sits at this rank's block of the buffer.
                    Mode::InPlace if collective == Collective::ReduceScatter => rank as usize * seg,
                    _ => 0,
                };
                // SAFETY: the user buffer is at least as long as checked above.
                let user = unsafe { std::slice::from_raw_parts_mut(user_ptr, user_len) };
                gather_segments(out, &mut user[user_base..], segs, seg, stride_bytes);
            }
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum Buf2 {
    In,
    Out,
    Both,
}

#[allow(clippy::too_many_arguments)]
fn check_lengths(
    bufs: &Buffers,
    c: Collective,
    rank: u32,
    in_b: usize,
    out_b: usize,
    seg_b: usize,
    has_in: bool,
    has_out: bool,
) -> Result<()> {
    let short = |what: &str, have: usize, need: usize| {
        RuntimeError::Invalid(format!(
            "{c} on rank {rank}: the {what} buffer has {have} bytes, the call needs {need}"
        ))
    };
    match bufs {
        Buffers::OutOfPlace { send, recv } => {
            if has_in && send.len() < in_b {
                return Err(short("send", send.len(), in_b));
            }
            if has_out && recv.len() < out_b {
                return Err(short("receive", recv.len(), out_b));
            }
        }
        Buffers::InPlace(buf) => {
            if c == Collective::Alltoall {
                return Err(RuntimeError::Invalid(
                    "alltoall has no in-place mode".into(),
                ));
            }
            let need = in_b.max(out_b).max(seg_b);
            if buf.len() < need {
                return Err(short("in-place", buf.len(), need));
            }
        }
    }
    Ok(())
}

/// Copies `segments` user segments of `seg` bytes into a staging buffer at `stride`.
fn scatter_segments(user: &[u8], staging: &mut [u8], segments: usize, seg: usize, stride: usize) {
    for j in 0..segments {
        staging[j * stride..j * stride + seg].copy_from_slice(&user[j * seg..(j + 1) * seg]);
    }
}

/// The inverse of [`scatter_segments`].
fn gather_segments(staging: &[u8], user: &mut [u8], segments: usize, seg: usize, stride: usize) {
    for j in 0..segments {
        user[j * seg..(j + 1) * seg].copy_from_slice(&staging[j * stride..j * stride + seg]);
    }
}
