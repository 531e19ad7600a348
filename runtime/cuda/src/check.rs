//! Running calls on device buffers with generated inputs and checking every result
//! against the reference: what `braid run`, `braid rank` and `braid perf` do with the
//! CUDA backend, through the communicator like any application.

use crate::comm::{group, Bufs, CudaComm, DeviceBuffer, DeviceMemory, GroupItem};
use crate::error::{CudaError, Result};
use crate::stream::Stream;
use braid_ir::{Collective, Mode};
use braid_runtime::call::CallSpec;
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::reference::{first_mismatch, inputs, reference};
use std::time::{Duration, Instant};

/// One call to check.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub collective: Collective,
    pub dtype: DType,
    pub op: RedOp,
    pub count: usize,
    pub mode: Mode,
    pub root: Option<u32>,
    pub seed: u64,
}

impl Case {
    /// The call in NCCL's terms.
    pub fn spec(&self) -> CallSpec {
        CallSpec {
            collective: self.collective,
            count: self.count,
            dtype: self.dtype,
            op: self.op,
            root: self.root,
        }
    }
}

/// A wrong rank: `(rank, wrong elements, first wrong element, expected, got)`.
pub type Wrong = (u32, usize, usize, String, String);

/// One rank's buffers for a case, with its input uploaded.
pub struct RankBuffers {
    rank: u32,
    n: u32,
    case: Case,
    send: DeviceBuffer,
    /// Absent in place (the call uses `send` for both).
    recv: Option<DeviceBuffer>,
}

impl RankBuffers {
    /// Allocates rank `comm.rank()`'s buffers for `case` and uploads its input
    /// (`input`: its send buffer). Receive buffers start as 0xAA bytes.
    pub fn new(comm: &CudaComm, case: &Case, input: &[u8]) -> Result<RankBuffers> {
        let (rank, n) = (comm.rank(), comm.n_ranks());
        let spec = case.spec();
        let sizes = spec.sizes(rank, n);
        let ctx = comm.context();
        let fill = |b: &DeviceBuffer, len: usize| b.upload(&vec![0xAAu8; len]);
        let (send, recv) = match case.mode {
            Mode::OutOfPlace => {
                let send = DeviceBuffer::new(ctx, sizes.send.unwrap_or(0).max(1))?;
                let rl = sizes.recv.unwrap_or(0).max(1);
                let recv = DeviceBuffer::new(ctx, rl)?;
                fill(&recv, rl)?;
                if sizes.send.is_some() {
                    send.upload(input)?;
                }
                (send, Some(recv))
            }
            Mode::InPlace => {
                let len = sizes.larger.max(1);
                let buf = DeviceBuffer::new(ctx, len)?;
                let mut init = vec![0xAAu8; len];
                if sizes.send.is_some() {
                    let (input_at, _) = spec.in_place_buffers(rank, 0);
                    let at = input_at as usize;
                    init[at..at + input.len()].copy_from_slice(input);
                }
                buf.upload(&init)?;
                (buf, None)
            }
        };
        Ok(RankBuffers {
            rank,
            n,
            case: *case,
            send,
            recv,
        })
    }

    pub fn bufs(&self) -> Bufs<'_> {
        match &self.recv {
            Some(r) => Bufs::OutOfPlace {
                send: &self.send,
                recv: r,
            },
            None => Bufs::InPlace(&self.send),
        }
    }

    /// The rank's result (NCCL's receive buffer); `None` where it has none. Synchronise
    /// the rank's stream first.
    pub fn output(&self) -> Result<Option<Vec<u8>>> {
        let spec = self.case.spec();
        let Some(len) = spec.sizes(self.rank, self.n).recv else {
            return Ok(None);
        };
        Ok(Some(match &self.recv {
            Some(r) => r.download(len)?,
            None => {
                let (_, out_at) = spec.in_place_buffers(self.rank, 0);
                let all = self.send.download(self.send.len())?;
                all[out_at as usize..out_at as usize + len].to_vec()
            }
        }))
    }
}

/// Every rank's buffers of an in-process communicator for one case.
pub struct Prepared<'a> {
    comms: &'a [CudaComm],
    streams: &'a [Stream],
    pub buffers: Vec<RankBuffers>,
    expected: Vec<Option<Vec<u8>>>,
    case: Case,
}

impl<'a> Prepared<'a> {
    /// Uploads every rank's input for `case` (`streams[r]`: rank `r`'s stream).
    pub fn new(comms: &'a [CudaComm], streams: &'a [Stream], case: &Case) -> Result<Prepared<'a>> {
        if comms.len() != streams.len() || comms.is_empty() {
            return Err(CudaError::Invalid(
                "one stream per rank of the communicator".into(),
            ));
        }
        let n = comms.len() as u32;
        let ins = inputs(
            case.collective,
            case.dtype,
            case.op,
            n,
            case.count,
            case.seed,
        );
        let expected = if case.count == 0 {
            vec![None; n as usize]
        } else {
            reference(case.collective, case.dtype, case.op, case.root, &ins)
        };
        let buffers = comms
            .iter()
            .zip(&ins)
            .map(|(c, i)| RankBuffers::new(c, case, i))
            .collect::<Result<Vec<_>>>()?;
        Ok(Prepared {
            comms,
            streams,
            buffers,
            expected,
            case: *case,
        })
    }

    /// Enqueues the call on every rank (one group) and returns at once.
    pub fn enqueue(&self) -> Result<()> {
        let c = &self.case;
        let items: crate::engine::Group<GroupItem> = self
            .comms
            .iter()
            .zip(self.streams)
            .zip(&self.buffers)
            .map(|((comm, stream), b)| GroupItem {
                comm,
                collective: c.collective,
                bufs: b.bufs(),
                count: c.count,
                dtype: c.dtype,
                op: c.op,
                root: c.root,
                stream,
            })
            .collect();
        group(&items)
    }

    /// Waits for every rank's stream; the first communicator error if a call failed.
    pub fn synchronize(&self) -> Result<()> {
        for s in self.streams {
            s.synchronize()?;
        }
        for comm in self.comms {
            if let Some(e) = comm.async_error() {
                return Err(CudaError::Runtime(braid_runtime::RuntimeError::Aborted(e)));
            }
        }
        Ok(())
    }

    /// Runs the call once and waits: the time from enqueueing to the end of every
    /// rank's stream.
    pub fn run(&self) -> Result<Duration> {
        let start = Instant::now();
        self.enqueue()?;
        self.synchronize()?;
        Ok(start.elapsed())
    }

    /// `iters` calls issued back to back on every rank's stream (no waiting between
    /// them) between two timing events per stream, as nccl-tests times: the slowest
    /// stream's time from its first event to its last, divided by `iters`.
    pub fn run_back_to_back(&self, iters: u32) -> Result<Duration> {
        crate::timing::time_calls(
            self.streams,
            &|| self.enqueue(),
            iters,
            crate::timing::Timing::BackToBack,
        )
    }

    /// `iters` calls captured in CUDA graphs (one per GPU), replayed between two timing
    /// events per GPU ([`crate::timing::Timing::Graph`]). Call [`Prepared::run`] once
    /// first: a capture must find the call prepared.
    pub fn run_graph(&self, iters: u32) -> Result<Duration> {
        crate::timing::time_calls(
            self.streams,
            &|| self.enqueue(),
            iters,
            crate::timing::Timing::Graph,
        )
    }

    /// `warmup` calls, then `runs` timed runs of `iters` calls each, back to back or
    /// replayed from CUDA graphs (`graph`): each run's time per call. Call
    /// [`Prepared::run`] once first.
    pub fn time_runs(
        &self,
        warmup: u32,
        iters: u32,
        runs: u32,
        graph: bool,
    ) -> Result<Vec<Duration>> {
        for _ in 0..warmup {
            self.enqueue()?;
        }
        self.synchronize()?;
        (0..runs)
            .map(|_| {
                if graph {
                    self.run_graph(iters)
                } else {
                    self.run_back_to_back(iters)
                }
            })
            .collect()
    }

    /// Every wrong rank after a run (a zero count has nothing to compare).
    pub fn wrong(&self) -> Result<Vec<Wrong>> {
        let mut wrong = Vec::new();
        if self.case.count == 0 {
            return Ok(wrong);
        }
        for (b, want) in self.buffers.iter().zip(&self.expected) {
            let got = b.output()?;
            if let Some(w) = compare(self.case.dtype, b.rank, want.as_deref(), got.as_deref()) {
                wrong.push(w);
            }
        }
        Ok(wrong)
    }

    /// Bytes of the larger buffer of one rank (nccl-tests' "size").
    pub fn bytes(&self) -> usize {
        self.case.spec().sizes(0, self.comms.len() as u32).larger
    }
}

/// The plan (replicated) and protocol the communicator runs `case` with; `None` for a
/// zero count.
pub fn selection(
    comm: &CudaComm,
    case: &Case,
) -> Result<Option<(std::sync::Arc<braid_plan::Verified>, braid_ir::Protocol)>> {
    Ok(comm.selection(&case.spec(), case.mode)?)
}

/// How `got` differs from `want`, if it does.
pub fn compare(dtype: DType, rank: u32, want: Option<&[u8]>, got: Option<&[u8]>) -> Option<Wrong> {
    let e = dtype.size();
    let (want, got) = match (want, got) {
        (None, None) => return None,
        (Some(w), Some(g)) => (w, g),
        (Some(w), None) => (w, &[][..]),
        (None, Some(g)) => (&[][..], g),
    };
    let (i, x, y) = first_mismatch(dtype, want, got)?;
    let len = want.len().max(got.len()) / e;
    let bad = (0..len)
        .filter(|k| want.get(k * e..(k + 1) * e) != got.get(k * e..(k + 1) * e))
        .count();
    Some((rank, bad, i, x, y))
}

/// Runs `case` once on every rank of an in-process communicator and checks it.
pub fn run_checked(
    comms: &[CudaComm],
    streams: &[Stream],
    case: &Case,
) -> Result<(Duration, Vec<Wrong>)> {
    let p = Prepared::new(comms, streams, case)?;
    let t = p.run()?;
    Ok((t, p.wrong()?))
}

/// Runs `case` once on this process's rank (one rank per process) and checks its
/// result: every process computes every rank's input to know its own expected output.
pub fn run_checked_rank(
    comm: &CudaComm,
    stream: &Stream,
    case: &Case,
) -> Result<(Duration, Option<Wrong>)> {
    let (rank, n) = (comm.rank(), comm.n_ranks());
    let ins = inputs(
        case.collective,
        case.dtype,
        case.op,
        n,
        case.count,
        case.seed,
    );
    let b = RankBuffers::new(comm, case, &ins[rank as usize])?;
    let start = Instant::now();
    comm.call(
        case.collective,
        b.bufs(),
        case.count,
        case.dtype,
        case.op,
        case.root,
        stream,
    )?;
    stream.synchronize()?;
    let t = start.elapsed();
    if let Some(e) = comm.async_error() {
        return Err(CudaError::Runtime(braid_runtime::RuntimeError::Aborted(e)));
    }
    if case.count == 0 {
        return Ok((t, None));
    }
    let want =
        reference(case.collective, case.dtype, case.op, case.root, &ins).swap_remove(rank as usize);
    let got = b.output()?;
    Ok((
        t,
        compare(case.dtype, rank, want.as_deref(), got.as_deref()),
    ))
}
