//! Running calls: at once, or when the thread's outermost group ends (NCCL's
//! `ncclGroupStart` / `ncclGroupEnd`: calls of several communicators, and sends and
//! receives, all in flight together, so that exchanges inside a group never deadlock).

use crate::abi::{self, ncclRedOp_t};
use crate::comm::{Backend, Comm};
use crate::errors::{Failure, Res};
use crate::forward;
use braid_ir::{Collective, Mode};
use braid_runtime::bootstrap::UniqueId;
use braid_runtime::call::CallSpec;
use braid_runtime::comm::Buffers;
use braid_runtime::device_comm::{enqueue_group, GroupCall};
use braid_runtime::dtype::{DType, RedOp};
use std::cell::RefCell;
use std::sync::Arc;

/// One call, as the application made it.
pub enum Op {
    Coll {
        comm: Arc<Comm>,
        spec: CallSpec,
        /// `ncclRedOpCreatePreMulSum`'s scalar (host bytes of the dtype), if the op is one.
        premul: Option<Vec<u8>>,
        send: u64,
        recv: u64,
        stream: usize,
    },
    P2p {
        comm: Arc<Comm>,
        send: bool,
        buf: u64,
        count: usize,
        dtype: DType,
        peer: u32,
        stream: usize,
    },
    /// A call Braid does not serve, for the real NCCL (`forward`).
    Fwd {
        comm: Arc<Comm>,
        call: forward::Call,
        stream: usize,
        premul: Option<(Vec<u8>, std::ffi::c_int)>,
        why: &'static str,
    },
}

impl Op {
    fn comm(&self) -> &Arc<Comm> {
        match self {
            Op::Coll { comm, .. } | Op::P2p { comm, .. } | Op::Fwd { comm, .. } => comm,
        }
    }
}

struct Group {
    depth: u32,
    ops: Vec<Op>,
    /// Blocking inits made inside the group: they join at its end.
    inits: Vec<(Arc<Comm>, UniqueId)>,
    /// The first error of a call inside the group: the group's end reports it.
    error: Option<Failure>,
}

thread_local! {
    static GROUP: RefCell<Group> = const { RefCell::new(Group { depth: 0, ops: Vec::new(), inits: Vec::new(), error: None }) };
}

pub fn group_start() {
    GROUP.with(|g| g.borrow_mut().depth += 1);
}

/// Whether the calling thread is inside a group.
pub fn in_group() -> bool {
    GROUP.with(|g| g.borrow().depth > 0)
}

/// Makes `shell` at the end of the thread's group (several ranks of one thread join
/// together there).
pub fn defer_init(shell: Arc<Comm>, id: UniqueId) {
    GROUP.with(|g| g.borrow_mut().inits.push((shell, id)));
}

/// Makes the communicators of deferred inits, each on a thread of its own (they join
/// each other's groups); the first failure is returned, each failure left in its
/// communicator.
fn run_inits(inits: Vec<(Arc<Comm>, UniqueId)>) -> Res<()> {
    let results: Vec<Res<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = inits
            .iter()
            .map(|(shell, id)| {
                s.spawn(move || {
                    crate::comm::on_device(shell.device, || crate::comm::init_rank(shell, id))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(Failure::new(abi::INTERNAL_ERROR, "an init thread panicked"))
                })
            })
            .collect()
    });
    results.into_iter().collect()
}

/// Ends a group level; at the outermost, runs (or, `simulate`, drops) what it collected.
pub fn group_end(simulate: bool) -> Res<()> {
    let (ops, inits, error) = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Err(Failure::usage("ncclGroupEnd without ncclGroupStart"));
        }
        g.depth -= 1;
        if g.depth > 0 {
            return Ok((Vec::new(), Vec::new(), None));
        }
        Ok((
            std::mem::take(&mut g.ops),
            std::mem::take(&mut g.inits),
            g.error.take(),
        ))
    })?;
    // Inits join even in a failed or simulated group: other ranks wait for them.
    let inited = run_inits(inits);
    if let Some(e) = error {
        return Err(e);
    }
    inited?;
    if simulate {
        return Ok(());
    }
    run(ops)
}

/// Runs `op` now, or keeps it for the end of the thread's group.
pub fn submit(op: Op) -> Res<()> {
    let in_group = GROUP.with(|g| g.borrow().depth > 0);
    if in_group {
        GROUP.with(|g| g.borrow_mut().ops.push(op));
        return Ok(());
    }
    // The usual call (a collective on the CUDA backend, outside a group): straight to the
    // communicator, nothing sorted or collected on the way.
    if let Op::Coll {
        comm,
        spec,
        premul: None,
        send,
        recv,
        stream,
    } = &op
    {
        if let Ok(Backend::Cuda(c)) = comm.ready() {
            return run_one_cuda(comm, c, spec, *send, *recv, *stream);
        }
    }
    run(vec![op])
}

/// One collective on the CUDA backend, as [`run`] would run it alone.
fn run_one_cuda(
    comm: &Arc<Comm>,
    c: &braid_cuda::CudaComm,
    spec: &CallSpec,
    send: u64,
    recv: u64,
    stream: usize,
) -> Res<()> {
    if let Some(f) = comm.async_error() {
        return Err(f);
    }
    // SAFETY: the application's stream of the communicator's device (NCCL's contract),
    // alive until the call completes.
    let stream = unsafe { caller_stream(comm, stream) };
    let call = [GroupCall {
        comm: c,
        spec: *spec,
        send,
        recv,
        stream: &stream,
    }];
    // SAFETY: NCCL's contract: the buffers are device memory of the communicator's GPU
    // holding the call's sizes, alive until the call completes on its stream.
    let r: Res<()> = unsafe { enqueue_group(&call) }.map_err(Failure::from);
    if let Err(e) = &r {
        fail_unless_refused(std::slice::from_ref(comm), e);
    }
    r
}

/// After a call failed with `e`: a peer's failure leaves every communicator of the call
/// unusable; a call refused for its arguments or as unsupported leaves them usable, as
/// NCCL's own refusals do.
fn fail_unless_refused(comms: &[Arc<Comm>], e: &Failure) {
    if e.code != abi::INVALID_ARGUMENT && e.code != abi::INVALID_USAGE {
        for c in comms {
            c.fail(e);
        }
    }
}

/// Records a failure of a call inside a group (the group's end returns it too).
pub fn note_group_error(f: &Failure) {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth > 0 && g.error.is_none() {
            g.error = Some(f.clone());
        }
    });
}

/// The op a collective runs and, for a PreMulSum op, its scalar.
pub fn resolve_op(comm: &Comm, op: ncclRedOp_t, reduces: bool) -> Res<(RedOp, Option<Vec<u8>>)> {
    if !reduces {
        return Ok((RedOp::Sum, None));
    }
    if let Some(o) = abi::red_op(op) {
        return Ok((o, None));
    }
    match comm.premul.lock().unwrap().get(&op) {
        Some((scalar, _)) => Ok((RedOp::Sum, Some(scalar.clone()))),
        None => Err(Failure::invalid(format!(
            "reduction op {op} is neither built in nor made by ncclRedOpCreatePreMulSum on this communicator"
        ))),
    }
}

fn run(ops: Vec<Op>) -> Res<()> {
    let (fwd, own): (Vec<Op>, Vec<Op>) = ops.into_iter().partition(|o| matches!(o, Op::Fwd { .. }));
    let comms: Vec<Arc<Comm>> = own.iter().map(|o| o.comm().clone()).collect();
    if let Err(e) = run_own(own) {
        // (A failed forwarded call leaves Braid's communicators as they were.)
        fail_unless_refused(&comms, &e);
        return Err(e);
    }
    if !fwd.is_empty() {
        run_forwarded(&fwd)?;
    }
    Ok(())
}

fn run_own(ops: Vec<Op>) -> Res<()> {
    if ops.is_empty() {
        return Ok(());
    }
    for op in &ops {
        if let Some(f) = op.comm().async_error() {
            return Err(f);
        }
        op.comm().ready()?;
    }
    let (to_self, ops): (Vec<Op>, Vec<Op>) = ops
        .into_iter()
        .partition(|o| matches!(o, Op::P2p { comm, peer, .. } if *peer == comm.rank));
    run_self(&to_self)?;
    let (cuda, host): (Vec<Op>, Vec<Op>) = ops
        .into_iter()
        .partition(|o| matches!(o.comm().ready(), Ok(Backend::Cuda(_))));
    if !cuda.is_empty() {
        run_cuda(&cuda)?;
    }
    if !host.is_empty() {
        run_host(host)?;
    }
    Ok(())
}

/// Sends to the rank itself, each matched with the same rank's receive from itself in
/// order (NCCL's rule): a copy, on the stream of the receive.
fn run_self(ops: &[Op]) -> Res<()> {
    let mut done = vec![false; ops.len()];
    for (i, recv) in ops.iter().enumerate() {
        let Op::P2p {
            comm,
            send: false,
            buf: dst,
            count,
            dtype,
            stream,
            ..
        } = recv
        else {
            continue;
        };
        let matched = ops.iter().enumerate().find(|(j, o)| {
            !done[*j] && matches!(o, Op::P2p { comm: c, send: true, .. } if Arc::ptr_eq(c, comm))
        });
        let Some((
            j,
            Op::P2p {
                buf: src,
                count: sent,
                dtype: sent_type,
                ..
            },
        )) = matched
        else {
            return Err(Failure::usage(format!(
                "rank {}: a receive from itself without a send to itself",
                comm.rank
            )));
        };
        let bytes = count * dtype.size();
        if sent * sent_type.size() != bytes {
            return Err(Failure::invalid(format!(
                "rank {}: a send to itself of {} bytes meets a receive of {bytes}",
                comm.rank,
                sent * sent_type.size()
            )));
        }
        done[j] = true;
        done[i] = true;
        if bytes == 0 || src == dst {
            continue;
        }
        match comm.ready()? {
            Backend::Host(_) => {
                // SAFETY: NCCL's contract: both buffers hold `bytes`, nothing else uses them.
                unsafe { std::ptr::copy(*src as *const u8, *dst as *mut u8, bytes) }
            }
            Backend::Cuda(_) => {
                use cudarc::driver::sys;
                // SAFETY: device buffers of `bytes` under NCCL's contract, on the caller's
                // stream of the communicator's device (made current for the call).
                let rc = crate::comm::on_device(comm.device, || unsafe {
                    sys::cuMemcpyAsync(*dst, *src, bytes, *stream as sys::CUstream)
                });
                if rc != sys::CUresult::CUDA_SUCCESS {
                    return Err(Failure::new(
                        abi::UNHANDLED_CUDA_ERROR,
                        format!("a copy to itself: {rc:?}"),
                    ));
                }
            }
        }
    }
    if let Some((o, _)) = ops.iter().zip(&done).find(|(_, d)| !**d) {
        return Err(Failure::usage(format!(
            "rank {}: a send to itself without a receive from itself",
            o.comm().rank
        )));
    }
    Ok(())
}

fn run_forwarded(ops: &[Op]) -> Res<()> {
    let mut calls = Vec::with_capacity(ops.len());
    for op in ops {
        if let Op::Fwd {
            comm,
            call,
            stream,
            premul,
            why,
        } = op
        {
            calls.push(forward::Forwarded {
                slot: comm.forward()?,
                call: call.clone(),
                stream: *stream,
                premul: premul.clone(),
                why,
            });
        }
    }
    forward::run(calls, crate::comm::timeout())
}

fn run_cuda(ops: &[Op]) -> Res<()> {
    fn cuda(comm: &Comm) -> &braid_cuda::CudaComm {
        match comm.ready() {
            Ok(Backend::Cuda(c)) => c,
            _ => unreachable!("partitioned by backend"),
        }
    }
    let streams: Vec<braid_cuda::Stream> = ops
        .iter()
        .map(|op| {
            let (Op::Coll { comm, stream, .. }
            | Op::P2p { comm, stream, .. }
            | Op::Fwd { comm, stream, .. }) = op;
            // SAFETY: the application's stream of the communicator's device (NCCL's
            // contract), alive until the call completes.
            unsafe { caller_stream(comm, *stream) }
        })
        .collect();
    let mut calls: Vec<GroupCall<braid_cuda::CudaEngine>> = Vec::new();
    let mut scaled: Vec<braid_cuda::PremulCall> = Vec::new();
    let mut sends: Vec<braid_cuda::P2pOp> = Vec::new();
    for (op, stream) in ops.iter().zip(&streams) {
        match op {
            Op::Fwd { .. } => unreachable!("partitioned in run"),
            Op::Coll {
                comm,
                spec,
                send,
                recv,
                premul: None,
                ..
            } => calls.push(GroupCall {
                comm: cuda(comm),
                spec: *spec,
                send: *send,
                recv: *recv,
                stream,
            }),
            Op::Coll {
                comm,
                spec,
                send,
                recv,
                premul: Some(scalar),
                ..
            } => scaled.push(braid_cuda::PremulCall {
                comm: cuda(comm),
                spec: *spec,
                send: *send,
                recv: *recv,
                scalar,
                stream,
            }),
            Op::P2p {
                comm,
                send,
                buf,
                count,
                dtype,
                peer,
                ..
            } => sends.push(braid_cuda::P2pOp {
                comm: cuda(comm),
                send: *send,
                peer: *peer,
                addr: *buf,
                bytes: count * dtype.size(),
                stream,
            }),
        }
    }
    // SAFETY: NCCL's contract: the buffers are device memory of the communicator's GPU
    // holding the call's sizes, alive until the call completes on its stream.
    unsafe { enqueue_group(&calls) }?;
    if !scaled.is_empty() {
        // SAFETY: as above.
        unsafe { braid_cuda::premul::enqueue(&scaled) }?;
    }
    if !sends.is_empty() {
        // SAFETY: as above.
        unsafe { braid_cuda::p2p::enqueue(&sends) }?;
    }
    Ok(())
}

/// The application's stream `stream` of `comm`'s device (0: the legacy stream).
///
/// # Safety
/// `stream` must be a stream of that device, alive while the returned value is used.
unsafe fn caller_stream(comm: &Comm, stream: usize) -> braid_cuda::Stream {
    // SAFETY: the caller's contract.
    unsafe {
        braid_cuda::Stream::from_raw(
            stream as cudarc::driver::sys::CUstream,
            comm.device.max(0) as usize,
        )
    }
}

/// The host backend: each communicator's calls in its own thread (they wait for each
/// other's ranks), in order, its sends and receives together; all complete before this
/// returns.
fn run_host(ops: Vec<Op>) -> Res<()> {
    let mut per_comm: Vec<(Arc<Comm>, Vec<Op>)> = Vec::new();
    for op in ops {
        let c = op.comm().clone();
        match per_comm.iter_mut().find(|(k, _)| Arc::ptr_eq(k, &c)) {
            Some((_, v)) => v.push(op),
            None => per_comm.push((c, vec![op])),
        }
    }
    let results: Vec<Res<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = per_comm
            .iter()
            .map(|(comm, ops)| s.spawn(move || run_host_comm(comm, ops)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(Failure::new(
                        abi::INTERNAL_ERROR,
                        "a rank's thread panicked",
                    ))
                })
            })
            .collect()
    });
    results.into_iter().collect()
}

/// # Safety (of the slices made here)
/// NCCL's contract: the addresses hold the call's sizes and nothing else uses them
/// during the call.
fn run_host_comm(comm: &Comm, ops: &[Op]) -> Res<()> {
    let Ok(Backend::Host(c)) = comm.ready() else {
        unreachable!("partitioned by backend")
    };
    for op in ops {
        if let Op::Coll {
            spec,
            premul,
            send,
            recv,
            ..
        } = op
        {
            host_collective(c, comm, spec, premul.as_deref(), *send, *recv)?;
        }
    }
    let p2p: Vec<&Op> = ops.iter().filter(|o| matches!(o, Op::P2p { .. })).collect();
    if p2p.is_empty() {
        return Ok(());
    }
    // SAFETY: see the function's contract.
    let slices: Vec<(bool, &mut [u8], usize, DType, u32)> = p2p
        .iter()
        .map(|o| match o {
            Op::P2p {
                send,
                buf,
                count,
                dtype,
                peer,
                ..
            } => (
                *send,
                unsafe { bytes_mut(*buf, count * dtype.size()) },
                *count,
                *dtype,
                *peer,
            ),
            Op::Coll { .. } | Op::Fwd { .. } => unreachable!("filtered"),
        })
        .collect();
    let mut error = None;
    c.group(|g| {
        for (send, buf, count, dtype, peer) in slices {
            if send {
                g.send(buf, count, dtype, peer);
            } else {
                g.recv(buf, count, dtype, peer);
            }
        }
    })
    .unwrap_or_else(|e| error = Some(e));
    match error {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// `n` bytes at `p` (an empty slice for none).
///
/// # Safety
/// `p` must point at `n` bytes nothing else uses meanwhile.
unsafe fn bytes_mut<'a>(p: u64, n: usize) -> &'a mut [u8] {
    if p == 0 || n == 0 {
        &mut []
    } else {
        std::slice::from_raw_parts_mut(p as *mut u8, n)
    }
}

fn host_collective(
    c: &braid_runtime::Communicator,
    comm: &Comm,
    spec: &CallSpec,
    premul: Option<&[u8]>,
    send: u64,
    recv: u64,
) -> Res<()> {
    let (rank, n) = (comm.rank, comm.n);
    let sizes = spec.sizes(rank, n);
    // PreMulSum: each rank's input times the scalar, then a sum (NCCL's definition).
    let mut scaled = None;
    let mode = spec.mode_of(rank, n, send, recv);
    if let (Some(scalar), Some(len)) = (premul, sizes.send) {
        // SAFETY: NCCL's contract for the send buffer.
        let input = unsafe { bytes_mut(send, len) }.to_vec();
        scaled = Some(braid_runtime::reduce::scale(spec.dtype, &input, scalar));
    }
    let result = match mode {
        Mode::InPlace => {
            let (big, _) = match spec.collective {
                Collective::ReduceScatter => (send, recv),
                Collective::Allgather => (recv, send),
                _ => (send, recv),
            };
            // SAFETY: the one buffer of an in-place call holds the larger size.
            let buf = unsafe { bytes_mut(big, sizes.larger) };
            if let Some(s) = &scaled {
                let (at, _) = spec.in_place_buffers(rank, 0);
                buf[at as usize..at as usize + s.len()].copy_from_slice(s);
            }
            c.call(
                spec.collective,
                Buffers::InPlace(buf),
                spec.count,
                spec.dtype,
                spec.op,
                spec.root,
            )
        }
        Mode::OutOfPlace => {
            // SAFETY: NCCL's contract; distinct buffers out of place.
            let s_buf: &[u8] = match &scaled {
                Some(s) => s,
                None => unsafe { bytes_mut(send, sizes.send.unwrap_or(0)) },
            };
            let r_buf = unsafe { bytes_mut(recv, sizes.recv.unwrap_or(0)) };
            c.call(
                spec.collective,
                Buffers::OutOfPlace {
                    send: s_buf,
                    recv: r_buf,
                },
                spec.count,
                spec.dtype,
                spec.op,
                spec.root,
            )
        }
    };
    result.map_err(Failure::from)
}
