//! Point to point on the GPU: the sends and receives of one group (NCCL's `ncclSend` /
//! `ncclRecv` between `ncclGroupStart` and `ncclGroupEnd`), on the caller's buffers and
//! streams, as one kernel launch per GPU.
//!
//! Every ordered pair of ranks has `BRAID_P2P_CHANNELS` connections of its own, made when
//! the communicator is created ([`crate::clique::Clique::connect_p2p`]), apart from every
//! plan's. A message is cut into parts, one per channel, and goes over the LL lane when
//! small, the Simple lane otherwise: both decided from its byte count alone
//! ([`route`]), so the sender and the receiver cut it alike without talking. Each lane
//! of each connection end is one thread block, which moves the lane's messages in the
//! group's order: the i-th send to a peer meets the peer's i-th receive from this rank,
//! NCCL's matching rule. All sends and receives of a group run at once, so exchanges
//! (everyone sends, then everyone receives) never deadlock on the bounded FIFOs.
//!
//! As with NCCL, a send and its receive must have the same size; a receive never writes
//! past its own buffer whatever the sender does.

use crate::clique::Clique;
use crate::engine::{check_device, check_streams, launch_joined, Member};
use crate::error::{CudaError, Result};
use crate::kernel::{self, MAX_LOCAL, P2P_LANES, P2P_TASKS};
use crate::modules;
use crate::stream::Stream;
use crate::CudaComm;
use braid_runtime::device_comm::Engine;
use braid_runtime::RuntimeError;
use std::sync::Arc;

/// Messages up to this many bytes go over the LL lane (lower latency, half the bytes).
pub const LL_MAX_BYTES: u64 = 64 << 10;
/// A message takes one more channel for each this many bytes (up to the channels made).
pub const PART_BYTES: u64 = 512 << 10;
/// Point-to-point channels per ordered pair of ranks without `BRAID_P2P_CHANNELS`.
pub const DEFAULT_CHANNELS: u32 = 2;
/// The most `BRAID_P2P_CHANNELS` may ask for.
pub const MAX_CHANNELS: u32 = 16;

/// `BRAID_P2P_CHANNELS`: point-to-point channels per ordered pair of ranks (0 turns
/// point to point on the GPU off).
pub fn channels_from(value: Option<&str>) -> std::result::Result<u32, String> {
    match value.map(str::trim) {
        None | Some("") => Ok(DEFAULT_CHANNELS),
        Some(v) => v
            .parse::<u32>()
            .ok()
            .filter(|&c| c <= MAX_CHANNELS)
            .ok_or_else(|| {
                format!("BRAID_P2P_CHANNELS={v}: expected a number of channels from 0 to {MAX_CHANNELS}")
            }),
    }
}

/// How a message of `bytes` travels when `channels` channels exist: its parts (one per
/// channel from 0) and whether it takes the LL lane. Both ends compute it alike.
pub fn route(bytes: u64, channels: u32) -> (u32, bool) {
    let parts = bytes
        .div_ceil(PART_BYTES)
        .clamp(1, u64::from(channels.max(1)));
    (parts as u32, bytes <= LL_MAX_BYTES)
}

/// Bytes `[a, b)` of part `k` of `parts` of a message of `bytes`: cut at 16-byte
/// boundaries, so every part but the last starts and ends aligned.
pub fn part(bytes: u64, k: u32, parts: u32) -> (u64, u64) {
    let units = bytes.div_ceil(16);
    let at = |i: u64| (i * units / u64::from(parts) * 16).min(bytes);
    (at(u64::from(k)), at(u64::from(k) + 1))
}

/// One send or receive of a group.
pub struct P2pOp<'a> {
    pub comm: &'a CudaComm,
    /// Send (`true`) or receive.
    pub send: bool,
    pub peer: u32,
    /// Device address of the message on the rank's GPU.
    pub addr: u64,
    pub bytes: usize,
    pub stream: &'a Stream,
}

/// The kernel's argument: `P2pLaunch` of `kernels_templates/braid_kernel.cuh`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct LaunchParams {
    nlanes: u32,
    ntasks: u32,
    rank: [RankArgs; MAX_LOCAL],
    lane: [LaneArgs; P2P_LANES],
    task: [TaskArgs; P2P_TASKS],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct RankArgs {
    fail: u64,
    report: u64,
    abort: u64,
    timeout_ns: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct LaneArgs {
    slots: u64,
    head: u64,
    tail: u64,
    counter: u64,
    nslots: u32,
    ll: u32,
    rank: u32,
    send: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct TaskArgs {
    buf: u64,
    bytes: u64,
    lane: u32,
    pad: u32,
}

macro_rules! at {
    ($s:literal, $t:ty, $f:ident) => {
        ($s, stringify!($f), std::mem::offset_of!($t, $f))
    };
}

/// The layouts the launch builds, checked against the kernel's structures like
/// `program::LAYOUT` (`tests/layout.rs`).
pub const P2P_LAYOUT: &[(&str, &str, usize)] = &[
    at!("P2pRank", RankArgs, fail),
    at!("P2pRank", RankArgs, report),
    at!("P2pRank", RankArgs, abort),
    at!("P2pRank", RankArgs, timeout_ns),
    ("P2pRank", "sizeof", std::mem::size_of::<RankArgs>()),
    at!("P2pLane", LaneArgs, slots),
    at!("P2pLane", LaneArgs, head),
    at!("P2pLane", LaneArgs, tail),
    at!("P2pLane", LaneArgs, counter),
    at!("P2pLane", LaneArgs, nslots),
    at!("P2pLane", LaneArgs, ll),
    at!("P2pLane", LaneArgs, rank),
    at!("P2pLane", LaneArgs, send),
    ("P2pLane", "sizeof", std::mem::size_of::<LaneArgs>()),
    at!("P2pTask", TaskArgs, buf),
    at!("P2pTask", TaskArgs, bytes),
    at!("P2pTask", TaskArgs, lane),
    ("P2pTask", "sizeof", std::mem::size_of::<TaskArgs>()),
    at!("P2pLaunch", LaunchParams, nlanes),
    at!("P2pLaunch", LaunchParams, ntasks),
    at!("P2pLaunch", LaunchParams, rank),
    at!("P2pLaunch", LaunchParams, lane),
    at!("P2pLaunch", LaunchParams, task),
    ("P2pLaunch", "sizeof", std::mem::size_of::<LaunchParams>()),
];

/// A lane of a connection end: (local rank slot in the launch, send?, peer, channel, LL?).
type LaneKey = (usize, bool, u32, u32, bool);
/// A message's part on a lane: (lane index, device address, bytes).
type Task = (usize, u64, u64);

/// The lanes and tasks of one launch's messages, given as (local rank slot in the launch,
/// send?, peer, address, bytes), in the group's order. `channels` channels exist per
/// pair. Empty messages take no lane.
fn assign(
    msgs: &[(usize, bool, u32, u64, u64)],
    channels: u32,
) -> Result<(Vec<LaneKey>, Vec<Task>)> {
    let mut lanes: Vec<LaneKey> = Vec::new();
    let mut tasks = Vec::new();
    for &(slot, send, peer, addr, bytes) in msgs {
        if bytes == 0 {
            continue;
        }
        let (parts, ll) = route(bytes, channels);
        for k in 0..parts {
            let (a, b) = part(bytes, k, parts);
            let key = (slot, send, peer, k, ll);
            let lane = match lanes.iter().position(|l| *l == key) {
                Some(i) => i,
                None => {
                    lanes.push(key);
                    lanes.len() - 1
                }
            };
            tasks.push((lane, addr + a, b - a));
        }
    }
    if lanes.len() > P2P_LANES || tasks.len() > P2P_TASKS {
        return Err(CudaError::Invalid(format!(
            "a group of sends and receives needs {} lanes and {} message parts on one GPU; \
             one launch takes at most {P2P_LANES} and {P2P_TASKS}: split the group, or \
             lower BRAID_P2P_CHANNELS",
            lanes.len(),
            tasks.len()
        )));
    }
    Ok((lanes, tasks))
}

/// Enqueues the sends and receives of one group and returns at once: per GPU and
/// communicator, one launch on the first message's stream (the other streams joined to
/// it).
///
/// # Safety
/// Every `addr` must be device memory of its rank's GPU holding `bytes`, allocated and
/// otherwise unused until the group completes on its stream.
pub unsafe fn enqueue(ops: &[P2pOp<'_>]) -> Result<()> {
    for op in ops {
        let e = op.comm.engine();
        check_device(Member {
            engine: e,
            stream: op.stream,
        })?;
        if op.peer >= e.n_ranks() || op.peer == e.rank() {
            return Err(CudaError::Invalid(format!(
                "rank {} cannot {} rank {} of a communicator of {}",
                e.rank(),
                if op.send { "send to" } else { "receive from" },
                op.peer,
                e.n_ranks()
            )));
        }
        if let Some(f) = op.comm.async_error() {
            return Err(CudaError::Runtime(RuntimeError::Aborted(f)));
        }
        if e.clique().p2p_channels() == 0 {
            return Err(CudaError::Invalid(
                "point to point on the GPU is off (BRAID_P2P_CHANNELS=0)".into(),
            ));
        }
    }
    // One launch per (communicator, GPU).
    let mut groups: Vec<Vec<&P2pOp<'_>>> = Vec::new();
    for op in ops.iter().filter(|o| o.bytes > 0) {
        let e = op.comm.engine();
        match groups.iter_mut().find(|g| {
            let f = g[0].comm.engine();
            Arc::ptr_eq(f.clique(), e.clique()) && f.device() == e.device()
        }) {
            Some(g) => g.push(op),
            None => groups.push(vec![op]),
        }
    }
    let mut launches = Vec::with_capacity(groups.len());
    for g in &groups {
        launches.push(build(g)?);
    }
    for (members, func, mut params) in launches {
        check_streams(&members)?;
        // SAFETY: `func` takes a `P2pLaunch` by value, which `LaunchParams` lays out; every
        // lane is a connection end the clique made for its rank; the tasks are the
        // caller's buffers (the function's contract).
        unsafe { launch_joined(&members, func, params.nlanes, &mut *params) }?;
    }
    Ok(())
}

type Built<'a> = (
    Vec<Member<'a>>,
    cudarc::driver::sys::CUfunction,
    Box<LaunchParams>,
);

/// The launch of one (communicator, GPU)'s messages.
fn build<'a>(g: &[&'a P2pOp<'a>]) -> Result<Built<'a>> {
    let first = g[0].comm.engine();
    let clique: &Arc<Clique> = first.clique();
    // The ranks of the launch, each with the first stream it came on.
    let mut members: Vec<Member<'a>> = Vec::new();
    let mut msgs = Vec::with_capacity(g.len());
    for op in g {
        let e = op.comm.engine();
        let slot = match members.iter().position(|m| std::ptr::eq(m.engine, e)) {
            Some(i) => i,
            None => {
                members.push(Member {
                    engine: e,
                    stream: op.stream,
                });
                members.len() - 1
            }
        };
        msgs.push((slot, op.send, op.peer, op.addr, op.bytes as u64));
    }
    if members.len() > MAX_LOCAL {
        return Err(CudaError::Invalid(format!(
            "{} ranks of one communicator on GPU {} in one group of sends and receives; one \
             launch takes at most {MAX_LOCAL}",
            members.len(),
            first.device()
        )));
    }
    // Streams other than a rank's first: joined to the launch too.
    for op in g {
        if !members
            .iter()
            .any(|m| std::ptr::eq(m.engine, op.comm.engine()) && m.stream.raw() == op.stream.raw())
        {
            members.push(Member {
                engine: op.comm.engine(),
                stream: op.stream,
            });
        }
    }
    let (lanes, tasks) = assign(&msgs, clique.p2p_channels())?;
    let ctx = first.context().clone();
    let loaded = modules::get(&ctx, kernel::p2p_variant(clique.host_fifo()), first.stats())?;
    let (func, per_sm) = loaded.p2p.clone().ok_or_else(|| {
        CudaError::Invalid("the byte kernel's module has no point-to-point entry".into())
    })?;
    let resident = per_sm * loaded.multiprocessors;
    if lanes.len() as u32 > resident {
        return Err(CudaError::Invalid(format!(
            "a group of sends and receives needs {} thread blocks at once on GPU {}; it \
             holds {resident}",
            lanes.len(),
            ctx.ordinal()
        )));
    }
    let mut p = Box::new(LaunchParams {
        nlanes: lanes.len() as u32,
        ntasks: tasks.len() as u32,
        rank: [RankArgs::default(); MAX_LOCAL],
        lane: [LaneArgs::default(); P2P_LANES],
        task: [TaskArgs::default(); P2P_TASKS],
    });
    let timeout_ns = u64::try_from(clique.timeout.as_nanos()).unwrap_or(u64::MAX);
    for (slot, m) in members.iter().enumerate().take(MAX_LOCAL) {
        let me = m.engine.local_index();
        p.rank[slot] = RankArgs {
            fail: clique.locals[me].fail_addr(),
            report: clique.report_addr(me),
            abort: clique.abort_addr(),
            timeout_ns,
        };
    }
    for (i, &(slot, send, peer, k, ll)) in lanes.iter().enumerate() {
        let e = members[slot].engine;
        let ends: crate::clique::Ends =
            clique.p2p_end(e.rank(), peer, send, k).ok_or_else(|| {
                CudaError::Invalid(format!(
                    "rank {}: no point-to-point connection {} rank {peer} on channel {k}",
                    e.rank(),
                    if send { "to" } else { "from" }
                ))
            })?;
        let end = ends[usize::from(ll)];
        p.lane[i] = LaneArgs {
            slots: end.slots,
            head: end.head,
            tail: end.tail,
            counter: clique.locals[e.local_index()].counters.ptr() + 8 * u64::from(end.counter),
            nslots: end.nslots_word(),
            ll: u32::from(ll),
            rank: slot as u32,
            send: u32::from(send),
        };
    }
    for (i, &(lane, buf, bytes)) in tasks.iter().enumerate() {
        p.task[i] = TaskArgs {
            buf,
            bytes,
            lane: lane as u32,
            pad: 0,
        };
    }
    Ok((members, func.cu_function(), p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_messages_take_ll_and_one_channel_large_ones_several() {
        assert_eq!(route(8, 2), (1, true));
        assert_eq!(route(LL_MAX_BYTES, 4), (1, true));
        assert_eq!(route(LL_MAX_BYTES + 1, 4), (1, false));
        assert_eq!(route(PART_BYTES + 1, 4), (2, false));
        assert_eq!(route(100 * PART_BYTES, 4), (4, false));
        assert_eq!(route(100 * PART_BYTES, 0), (1, false));
    }

    #[test]
    fn parts_cover_the_message_at_aligned_cuts() {
        for bytes in [1u64, 15, 16, 17, 1000, 1 << 20, (3 << 20) + 7] {
            for parts in 1..=5 {
                let mut at = 0;
                for k in 0..parts {
                    let (a, b) = part(bytes, k, parts);
                    assert_eq!(a, at, "{bytes} bytes, part {k} of {parts}");
                    assert!(b >= a);
                    if b < bytes {
                        assert_eq!(b % 16, 0);
                    }
                    at = b;
                }
                assert_eq!(at, bytes);
            }
        }
    }

    #[test]
    fn lanes_follow_rank_direction_peer_channel_and_protocol() {
        let big = 2 * PART_BYTES;
        let msgs = [
            (0, true, 1, 0x1000, 8),       // LL lane to 1
            (0, true, 1, 0x2000, 16),      // the same lane, after it
            (0, false, 1, 0x3000, big),    // two Simple lanes from 1
            (1, true, 0, 0x4000, 0),       // empty: no lane
            (1, true, 0, 0x5000, 4 << 10), // another rank's lane
        ];
        let (lanes, tasks) = assign(&msgs, 2).unwrap();
        assert_eq!(
            lanes,
            vec![
                (0, true, 1, 0, true),
                (0, false, 1, 0, false),
                (0, false, 1, 1, false),
                (1, true, 0, 0, true)
            ]
        );
        assert_eq!(
            tasks,
            vec![
                (0, 0x1000, 8),
                (0, 0x2000, 16),
                (1, 0x3000, PART_BYTES),
                (2, 0x3000 + PART_BYTES, PART_BYTES),
                (3, 0x5000, 4 << 10)
            ]
        );
    }

    #[test]
    fn a_group_too_large_for_one_launch_is_refused() {
        let msgs: Vec<_> = (0..P2P_TASKS as u64 + 1)
            .map(|i| (0, true, 1, 0x1000 + i, 8))
            .collect();
        let e = assign(&msgs, 1).unwrap_err().to_string();
        assert!(
            e.contains("message parts") && e.contains("split the group"),
            "{e}"
        );
        let many: Vec<_> = (0..P2P_LANES as u32 + 1)
            .map(|p| (0, true, p + 1, 0x1000, 8))
            .collect();
        assert!(assign(&many, 1).is_err());
    }

    #[test]
    fn channels_come_from_the_variable() {
        assert_eq!(channels_from(None), Ok(DEFAULT_CHANNELS));
        assert_eq!(channels_from(Some(" 4 ")), Ok(4));
        assert_eq!(channels_from(Some("0")), Ok(0));
        assert!(channels_from(Some("17")).is_err());
        assert!(channels_from(Some("two")).is_err());
    }
}
