//! A plan as the kernel reads it: one rank's step programs laid out in device memory
//! (`kernels_templates/braid_kernel.cuh` declares the same structures), and the
//! connections a plan uses. Pure data: built and tested without a GPU.
//!
//! Before anything is encoded, [`check`] proves on its own (whatever the verifier said)
//! that every step of the rank stays inside the buffers the rank has, uses the
//! connections its block has, and depends only on steps that exist: the kernel trusts
//! the program completely, so a plan file can never make it touch memory outside the
//! call's buffers, its scratch and its FIFOs.
//!
//! Layout of one rank's table (one allocation, sections 16-byte aligned):
//! `Table` (128 bytes) | `BlockDesc` x grid (224 bytes each, from [`BLOCKS_AT`]) |
//! `StepDesc` x steps (32) | `StepDeps` x steps (8) | `DepDesc` x deps (12) |
//! `ChainOp` x chain operands (16) | step times. Grid block `g = replica * nblocks + block`.

use crate::error::{CudaError, Result};
use crate::kernel::LANES;
use braid_ir::{Buf, Collective};
use braid_plan::{Execution, Plan, StepKind};

/// Where every field the kernel reads lies, as `encode` writes it and the launch builds
/// it: (structure of `braid_kernel.cuh`, field, byte offset); a field named `sizeof` is
/// the structure's size. `tests/layout.rs` compiles these as static assertions against
/// the structures of the kernel template, so the two sides cannot drift apart unnoticed.
pub const LAYOUT: &[(&str, &str, usize)] = &[
    ("Table", "progress", 0),
    ("Table", "counters", 8),
    ("Table", "fail", 16),
    ("Table", "report", 24),
    ("Table", "abort", 32),
    ("Table", "scratch", 40),
    ("Table", "timeout_ns", 48),
    ("Table", "blocks", 56),
    ("Table", "steps", 64),
    ("Table", "step_deps", 72),
    ("Table", "deps", 80),
    ("Table", "nblocks", 88),
    ("Table", "grid", 92),
    ("Table", "replicas", 96),
    ("Table", "tiled", 100),
    ("Table", "out_chunks", 104),
    ("Table", "sync", 108),
    ("Table", "trace", 112),
    ("Table", "chains", 120),
    ("Table", "sizeof", TABLE_BYTES),
    ("ChainOp", "rank", 0),
    ("ChainOp", "buf", 4),
    ("ChainOp", "off", 8),
    ("ChainOp", "sizeof", CHAIN_OP_BYTES),
    ("BlockDesc", "block", 0),
    ("BlockDesc", "replica", 4),
    ("BlockDesc", "first_step", 8),
    ("BlockDesc", "nsteps", 12),
    ("BlockDesc", "send", 16),
    ("BlockDesc", "recv", 16 + LANES * END_BYTES),
    ("BlockDesc", "first_dep", 16 + 2 * LANES * END_BYTES),
    ("BlockDesc", "ndeps", 20 + 2 * LANES * END_BYTES),
    ("BlockDesc", "send_rank", 24 + 2 * LANES * END_BYTES),
    ("BlockDesc", "recv_rank", 28 + 2 * LANES * END_BYTES),
    ("BlockDesc", "sizeof", BLOCK_BYTES),
    ("End", "slots", 0),
    ("End", "head", 8),
    ("End", "tail", 16),
    ("End", "counter", 24),
    ("End", "nslots", 28),
    ("End", "sizeof", END_BYTES),
    ("StepDesc", "kind", 0),
    ("StepDesc", "sbuf", 4),
    ("StepDesc", "dbuf", 8),
    ("StepDesc", "soff", 12),
    ("StepDesc", "doff", 16),
    ("StepDesc", "count", 20),
    ("StepDesc", "poff", 24),
    ("StepDesc", "chain", 28),
    ("StepDesc", "sizeof", STEP_BYTES),
    ("StepDeps", "first", 0),
    ("StepDeps", "n", 4),
    ("StepDeps", "sizeof", STEP_DEPS_BYTES),
    ("DepDesc", "block", 0),
    ("DepDesc", "step", 4),
    ("DepDesc", "nsteps", 8),
    ("DepDesc", "sizeof", DEP_BYTES),
];

/// Bytes of one lane of one connection end (`End`).
pub const END_BYTES: usize = 32;
pub const TABLE_BYTES: usize = 128;
pub const BLOCK_BYTES: usize = 32 + 2 * LANES * END_BYTES;
/// Where the block descriptors start in a table: the kernel finds its block's
/// descriptor from the table's address alone (`BRAID_BLOCKS_AT`).
pub const BLOCKS_AT: usize = TABLE_BYTES.div_ceil(16) * 16;
/// `StepDesc.kind`'s flag for a step whose end the block publishes in its progress
/// counter: a dependency of another step of the rank, or the block's last step.
pub const PUBLISH: u32 = 1 << 8;
/// `StepDesc.kind`'s flag: a send the receiver may read from this rank's `in` itself, or
/// the receive that may read it (`StepDesc.poff`: the sender's first chunk), when both
/// ranks' calls are in one launch ([`braid_plan::direct`]).
pub const DIRECT: u32 = 1 << 9;
/// `BlockDesc.send_rank` / `recv_rank` of a block without that peer.
pub const NO_RANK: u32 = u32::MAX;
/// `End.nslots`'s flag: both ends of the connection run on this GPU in one process and
/// the FIFO is in its memory, so GPU-scope fences order the protocol.
pub const GPU_SCOPE: u32 = 1 << 31;
/// `End.nslots`'s flag: a proxy thread carries the lane (the network transport): the
/// sender also writes each slice's byte count after `head` and publishes `head` on the
/// LL lane too.
pub const NET: u32 = 1 << 30;
/// `End.nslots`'s flag: every step of the block that uses this end is `DIRECT`, so a call
/// whose peer reads (or is read) directly never touches the end: the kernel reads
/// neither its counters nor the peer's.
pub const DIRECT_ONLY: u32 = 1 << 29;
/// The most slots a proxied lane has: its slice sizes share the head's 128-byte line.
pub const NET_MAX_SLOTS: u32 = 15;
pub const STEP_BYTES: usize = 32;
pub const STEP_DEPS_BYTES: usize = 8;
pub const DEP_BYTES: usize = 12;
pub const CHAIN_OP_BYTES: usize = 16;
/// `StepDesc.kind`'s flags: the first step of a chain of reductions into one destination
/// ([`braid_plan::direct::chains`]), and each later one. When every peer operand of the
/// chain reads directly in this launch, the chain runs as one pass that waits for nothing
/// but the head's dependencies: done by the head alone, or, where the chain may split
/// ([`braid_plan::direct::Chain::splits`]) and its range is large enough, shared among
/// the blocks of its steps (step k does part k of `steps`); else each step runs as it
/// stands. `StepDesc.chain` is then [`chain_word`]: the chain's operands are `ChainOp`s
/// `first .. first + n` of the table, in the order they are combined.
pub const CHAIN_HEAD: u32 = 1 << 10;
pub const CHAIN_LINK: u32 = 1 << 11;
/// The most operands a chain run as one pass has (the kernel's `FUSE_MAX`): all but the
/// rank's own come from ranks of one launch, which holds at most this many.
pub const CHAIN_MAX: usize = crate::kernel::MAX_LOCAL;

/// A chain step's `StepDesc.chain` word: `first << 13 | splits << 12 | steps << 8 |
/// position << 4 | n` (n operands from `ChainOp` `first`; the step's position in a chain
/// of `steps` steps; whether it may split). `n` and `steps` are at most [`CHAIN_MAX`].
pub fn chain_word(first: u32, n: u32, position: u32, steps: u32, splits: bool) -> u32 {
    debug_assert!(n as usize <= CHAIN_MAX && steps as usize <= CHAIN_MAX && position < steps);
    first << 13 | u32::from(splits) << 12 | steps << 8 | position << 4 | n
}

/// A connection `(sender, receiver, channel)` with the channel across replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Conn {
    pub sender: u32,
    pub receiver: u32,
    pub channel: u32,
}

/// Channels one replica uses (the largest block channel + 1 over all ranks).
pub fn channels_per_replica(plan: &Plan) -> u32 {
    plan.ranks
        .iter()
        .flat_map(|r| r.blocks.iter().map(|b| b.channel + 1))
        .max()
        .unwrap_or(1)
}

/// Every connection the plan uses across its replicas, sorted.
pub fn connections(plan: &Plan) -> Vec<Conn> {
    let cpr = channels_per_replica(plan);
    let mut v = Vec::new();
    for k in 0..plan.channels {
        for r in &plan.ranks {
            for b in &r.blocks {
                if let Some(p) = b.send_peer {
                    v.push(Conn {
                        sender: r.rank,
                        receiver: p,
                        channel: k * cpr + b.channel,
                    });
                }
            }
        }
    }
    v.sort();
    v.dedup();
    v
}

/// The connections grid block `g` of `rank` sends and receives on.
pub fn block_conns(plan: &Plan, rank: u32, g: u32) -> (Option<Conn>, Option<Conn>) {
    let blocks = &plan.ranks[rank as usize].blocks;
    let nb = blocks.len() as u32;
    let (k, b) = (g / nb, &blocks[(g % nb) as usize]);
    let channel = k * channels_per_replica(plan) + b.channel;
    (
        b.send_peer.map(|p| Conn {
            sender: rank,
            receiver: p,
            channel,
        }),
        b.recv_peer.map(|p| Conn {
            sender: p,
            receiver: rank,
            channel,
        }),
    )
}

/// Grid blocks of `rank`: its plan blocks times the replicas.
pub fn grid(plan: &Plan, rank: u32) -> u32 {
    plan.ranks[rank as usize].blocks.len() as u32 * plan.channels.max(1)
}

/// Whether `rank` has `in` / `out` for the plan's collective.
pub fn has_buffers(plan: &Plan, rank: u32) -> (bool, bool) {
    let c = plan.collective;
    (
        !(c == Collective::Broadcast && plan.root != Some(rank)),
        !(c == Collective::Reduce && plan.root != Some(rank)),
    )
}

/// Proves what the kernel relies on for `rank` (see the module docs).
pub fn check(plan: &Plan, rank: u32) -> Result<()> {
    let bad = |m: String| Err(CudaError::Invalid(format!("plan `{}`: {m}", plan.name)));
    let n = plan.n_ranks;
    let Some(rp) = plan.ranks.get(rank as usize) else {
        return bad(format!("no program for rank {rank}"));
    };
    if rp.blocks.is_empty() {
        return bad(format!("rank {rank} has no blocks"));
    }
    let (has_in, has_out) = has_buffers(plan, rank);
    let chunks = |b: Buf| match b {
        Buf::In if has_in => plan.in_chunks,
        Buf::Out if has_out => plan.out_chunks,
        Buf::Scratch => plan.scratch_chunks,
        _ => 0,
    };
    for (bi, block) in rp.blocks.iter().enumerate() {
        if block.id as usize != bi {
            return bad(format!("rank {rank}: block {bi} has id {}", block.id));
        }
        for p in [block.send_peer, block.recv_peer].into_iter().flatten() {
            if p >= n || p == rank {
                return bad(format!(
                    "rank {rank} block {bi}: peer {p} is not another rank"
                ));
            }
        }
        for (si, s) in block.steps.iter().enumerate() {
            let at = format!("rank {rank}, block {bi}, step {si}");
            if s.kind.receives() && block.recv_peer.is_none() {
                return bad(format!("{at} receives in a block without a receive peer"));
            }
            if s.kind.sends() && block.send_peer.is_none() {
                return bad(format!("{at} sends in a block without a send peer"));
            }
            if s.src.is_some() != s.kind.has_src() || s.dst.is_some() != s.kind.has_dst() {
                return bad(format!(
                    "{at}: operands do not fit a {} step",
                    s.kind.short_name()
                ));
            }
            if let (Some(a), Some(b)) = (s.src, s.dst) {
                if a.count != b.count {
                    return bad(format!("{at}: source and destination differ in length"));
                }
            }
            for sl in [s.src, s.dst].into_iter().flatten() {
                let end = u64::from(sl.offset) + u64::from(sl.count);
                if end > u64::from(chunks(sl.buf)) {
                    return bad(format!(
                        "{at}: {}[{}..{end}] is outside the {} chunk(s) rank {rank} has",
                        sl.buf,
                        sl.offset,
                        chunks(sl.buf)
                    ));
                }
            }
            for d in &s.deps {
                let ok = rp
                    .blocks
                    .get(d.block as usize)
                    .is_some_and(|b| (d.step as usize) < b.steps.len());
                if !ok {
                    return bad(format!(
                        "{at} depends on block {} step {}, which does not exist",
                        d.block, d.step
                    ));
                }
            }
        }
    }
    if plan.collective.has_k() && plan.chunks % n != 0 {
        return bad(format!(
            "{} chunks do not split over {n} ranks",
            plan.chunks
        ));
    }
    Ok(())
}

/// One lane of one connection end, as the kernel sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EndDesc {
    /// Address of slot 0 (0: no connection).
    pub slots: u64,
    pub head: u64,
    pub tail: u64,
    /// Index of this end's counter in the rank's counter array.
    pub counter: u32,
    pub nslots: u32,
    /// Both ends on this GPU in this process, the FIFO in its memory (see [`GPU_SCOPE`]).
    pub gpu_scope: bool,
    /// A proxy forwards what this end sends (see [`NET`]).
    pub net: bool,
}

impl EndDesc {
    /// `End.nslots` as the kernel reads it: the slot count and the flags.
    pub fn nslots_word(&self) -> u32 {
        debug_assert!(self.nslots < DIRECT_ONLY);
        debug_assert!(!self.net || self.nslots <= NET_MAX_SLOTS);
        self.nslots | if self.gpu_scope { GPU_SCOPE } else { 0 } | if self.net { NET } else { 0 }
    }
}

/// A grid block's connection ends, per lane ([`crate::kernel::Lane`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockEnds {
    pub send: [EndDesc; LANES],
    pub recv: [EndDesc; LANES],
}

/// The rank's resources every table points at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RankRes {
    pub progress: u64,
    pub counters: u64,
    pub fail: u64,
    pub report: u64,
    pub abort: u64,
    pub scratch: u64,
    pub timeout_ns: u64,
    /// Record replica 0's step times in the table's trace section (`BRAID_TRACE`).
    pub trace: bool,
}

fn align16(x: usize) -> usize {
    x.div_ceil(16) * 16
}

struct Sections {
    blocks: usize,
    steps: usize,
    step_deps: usize,
    deps: usize,
    chains: usize,
    trace: usize,
    total: usize,
}

fn sections(plan: &Plan, rank: u32, chain_ops: usize) -> Sections {
    let rp = &plan.ranks[rank as usize];
    let nsteps: usize = rp.blocks.iter().map(|b| b.steps.len()).sum();
    let ndeps: usize = rp
        .blocks
        .iter()
        .flat_map(|b| &b.steps)
        .map(|s| s.deps.len())
        .sum();
    let blocks = BLOCKS_AT;
    let steps = align16(blocks + grid(plan, rank) as usize * BLOCK_BYTES);
    let step_deps = align16(steps + nsteps * STEP_BYTES);
    let deps = align16(step_deps + nsteps * STEP_DEPS_BYTES);
    let chains = align16(deps + ndeps * DEP_BYTES);
    let trace = align16(chains + chain_ops * CHAIN_OP_BYTES);
    let total = align16(trace + nsteps * 16);
    Sections {
        blocks,
        steps,
        step_deps,
        deps,
        chains,
        trace,
        total,
    }
}

/// One operand of a chain run as one pass: a peer's `in` from chunk `off` on (`rank` a
/// plan rank), or (`rank` = [`NO_RANK`]) the rank's own buffer `buf` (0 in, 1 out, 2
/// scratch) from chunk `off` on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainOp {
    pub rank: u32,
    pub buf: i32,
    pub off: u32,
}

/// One chain of `rank` that can run as one pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    /// The (block, step) of each step, the head first.
    pub steps: Vec<(u32, u32)>,
    /// The operands in the order they are combined.
    pub ops: Vec<ChainOp>,
    /// Whether its blocks may share the pass ([`braid_plan::direct::Chain::splits`]).
    pub splits: bool,
}

/// `rank`'s chains that can run as one pass.
pub fn chains(plan: &Plan, rank: u32) -> Vec<Chain> {
    chains_with(plan, rank, &braid_plan::direct::direct(plan))
}

fn chains_with(plan: &Plan, rank: u32, direct: &braid_plan::direct::Direct) -> Vec<Chain> {
    use braid_plan::flat::Operand;
    braid_plan::flat::rank_chains(plan, rank, direct, CHAIN_MAX, false)
        .into_iter()
        .filter_map(|c| {
            Some(Chain {
                ops: c
                    .ops
                    .iter()
                    .map(|&o| match o {
                        Operand::Own { buf, chunk } => Some(ChainOp {
                            rank: NO_RANK,
                            buf: i32::from(buf),
                            off: chunk,
                        }),
                        Operand::Peer { rank, chunk } => Some(ChainOp {
                            rank,
                            buf: 0,
                            off: chunk,
                        }),
                        // (Chains read inputs only: a peer's `out` is no operand of one.)
                        Operand::PeerOut { .. } => None,
                    })
                    .collect::<Option<Vec<_>>>()?,
                steps: c.chain.steps,
                splits: c.chain.splits,
            })
        })
        .collect()
}

/// What `rank`'s table is made of, analysed once: where its sections lie, which steps
/// read or write a peer's buffer directly, and which chains run as one pass.
pub struct Layout {
    sec: Sections,
    direct: braid_plan::direct::Direct,
    chains: Vec<Chain>,
    nsteps: usize,
}

impl Layout {
    pub fn new(plan: &Plan, rank: u32) -> Layout {
        let direct = braid_plan::direct::direct(plan);
        let chains = chains_with(plan, rank, &direct);
        let ops = chains.iter().map(|c| c.ops.len()).sum();
        Layout {
            sec: sections(plan, rank, ops),
            direct,
            chains,
            nsteps: plan.ranks[rank as usize]
                .blocks
                .iter()
                .map(|b| b.steps.len())
                .sum(),
        }
    }

    /// The plan's direct pairs.
    pub fn direct(&self) -> &braid_plan::direct::Direct {
        &self.direct
    }

    /// The rank's chains that run as one pass.
    pub fn chains(&self) -> &[Chain] {
        &self.chains
    }

    /// Bytes of the table.
    pub fn bytes(&self) -> usize {
        self.sec.total
    }

    /// Where the step times are in the table (bytes from its start) and how many steps
    /// there are: a (start, end) pair of u64 nanoseconds per step, in the plan's order
    /// (its blocks in order, each block's steps in order).
    pub fn trace(&self) -> (usize, usize) {
        (self.sec.trace, self.nsteps)
    }
}

fn kind_code(k: StepKind) -> u32 {
    match k {
        StepKind::Nop => 0,
        StepKind::Send => 1,
        StepKind::Recv => 2,
        StepKind::RecvCopySend => 3,
        StepKind::RecvReduceSend => 4,
        StepKind::RecvReduceCopy => 5,
        StepKind::RecvReduceCopySend => 6,
        StepKind::Copy => 7,
        StepKind::Reduce => 8,
    }
}

fn buf_code(s: Option<braid_plan::Slice>) -> (i32, u32) {
    match s {
        None => (-1, 0),
        Some(s) => (
            match s.buf {
                Buf::In => 0,
                Buf::Out => 1,
                Buf::Scratch => 2,
            },
            s.offset,
        ),
    }
}

/// The steps of `rank` whose end its blocks publish (`(block, step)`): every step another
/// step depends on. (A block's last step is published too when the call ends with a
/// barrier over the replica, which waits for it: the kernel decides that per call.)
pub fn published(plan: &Plan, rank: u32) -> std::collections::BTreeSet<(u32, u32)> {
    let rp = &plan.ranks[rank as usize];
    rp.blocks
        .iter()
        .flat_map(|b| b.steps.iter().flat_map(|s| &s.deps))
        .map(|d| (d.block, d.step))
        .collect()
}

/// Whether every step of `rank`'s plan block `bi` that sends (`send`) or receives is a
/// `DIRECT` one, and there is one: the block's end on that side carries [`DIRECT_ONLY`].
fn direct_only(
    plan: &Plan,
    rank: u32,
    bi: u32,
    direct: &braid_plan::direct::Direct,
    send: bool,
) -> bool {
    let steps = &plan.ranks[rank as usize].blocks[bi as usize].steps;
    let mut uses = steps
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            if send {
                s.kind.sends()
            } else {
                s.kind.receives()
            }
        })
        .peekable();
    uses.peek().is_some()
        && uses.all(|(si, _)| {
            let at = (rank, bi, si as u32);
            if send {
                direct.sends.contains(&at)
            } else {
                direct.recvs.contains_key(&at)
            }
        })
}

/// `rank`'s table for a copy at device address `base`, laid out as `layout` (made for
/// this plan and rank); `ends[g]` are grid block `g`'s connection ends. Call [`check`]
/// first.
pub fn encode(
    plan: &Plan,
    rank: u32,
    layout: &Layout,
    res: &RankRes,
    ends: &[BlockEnds],
    base: u64,
) -> Vec<u8> {
    let rp = &plan.ranks[rank as usize];
    let sec = &layout.sec;
    let nb = rp.blocks.len() as u32;
    let g_total = grid(plan, rank);
    assert_eq!(ends.len(), g_total as usize, "one BlockEnds per grid block");
    let mut t = vec![0u8; sec.total];
    let mut w = Writer { buf: &mut t, at: 0 };
    let (_, has_out) = has_buffers(plan, rank);
    for v in [
        res.progress,
        res.counters,
        res.fail,
        res.report,
        res.abort,
        res.scratch,
        res.timeout_ns,
        base + sec.blocks as u64,
        base + sec.steps as u64,
        base + sec.step_deps as u64,
        base + sec.deps as u64,
    ] {
        w.u64(v);
    }
    w.u32(nb);
    w.u32(g_total);
    w.u32(plan.channels.max(1));
    w.u32(u32::from(plan.execution == Execution::Tiled));
    w.u32(if has_out { plan.out_chunks } else { 0 });
    // Whether a step of the rank waits for another block's: then blocks publish their
    // progress and the call ends by resetting it.
    w.u32(u32::from(
        rp.blocks
            .iter()
            .flat_map(|b| &b.steps)
            .any(|s| !s.deps.is_empty()),
    ));
    w.u64(if res.trace {
        base + sec.trace as u64
    } else {
        0
    });
    w.u64(base + sec.chains as u64);
    debug_assert_eq!(w.at, TABLE_BYTES);
    // Each plan block's first step and its dependencies' (first, count).
    let mut first = Vec::with_capacity(rp.blocks.len());
    let mut deps_of = Vec::with_capacity(rp.blocks.len());
    let (mut acc, mut dacc) = (0u32, 0u32);
    for b in &rp.blocks {
        let nd: u32 = b.steps.iter().map(|s| s.deps.len() as u32).sum();
        first.push(acc);
        deps_of.push((dacc, nd));
        acc += b.steps.len() as u32;
        dacc += nd;
    }
    let direct = &layout.direct;
    let only: Vec<[bool; 2]> = (0..nb)
        .map(|b| [true, false].map(|send| direct_only(plan, rank, b, direct, send)))
        .collect();
    w.at = sec.blocks;
    for (g, e) in ends.iter().enumerate() {
        let (k, b) = (g as u32 / nb, g as u32 % nb);
        w.u32(b);
        w.u32(k);
        w.u32(first[b as usize]);
        w.u32(rp.blocks[b as usize].steps.len() as u32);
        // Every lane of the send side, then of the receive side, each flagged by its side.
        for (side, lanes) in [&e.send, &e.recv].into_iter().enumerate() {
            for end in lanes {
                let only = end.slots != 0 && only[b as usize][side];
                w.u64(end.slots);
                w.u64(end.head);
                w.u64(end.tail);
                w.u32(end.counter);
                w.u32(end.nslots_word() | if only { DIRECT_ONLY } else { 0 });
            }
        }
        w.u32(deps_of[b as usize].0);
        w.u32(deps_of[b as usize].1);
        let blk = &rp.blocks[b as usize];
        w.u32(blk.send_peer.unwrap_or(NO_RANK));
        w.u32(blk.recv_peer.unwrap_or(NO_RANK));
    }
    // Each chain step's flag and operand range.
    let chains = &layout.chains;
    let mut chain_of = std::collections::BTreeMap::new();
    let mut first_op = 0u32;
    for c in chains {
        for (k, &at) in c.steps.iter().enumerate() {
            let flag = if k == 0 { CHAIN_HEAD } else { CHAIN_LINK };
            let word = chain_word(
                first_op,
                c.ops.len() as u32,
                k as u32,
                c.steps.len() as u32,
                c.splits,
            );
            chain_of.insert(at, (flag, word));
        }
        first_op += c.ops.len() as u32;
    }
    w.at = sec.steps;
    let published = published(plan, rank);
    for (bi, b) in rp.blocks.iter().enumerate() {
        for (si, s) in b.steps.iter().enumerate() {
            let at = (rank, bi as u32, si as u32);
            let (sb, so) = buf_code(s.src);
            let (db, doff) = buf_code(s.dst);
            let mut flag = if published.contains(&(bi as u32, si as u32)) {
                PUBLISH
            } else {
                0
            };
            let poff = direct.recvs.get(&at).copied();
            if poff.is_some() || direct.sends.contains(&at) {
                flag |= DIRECT;
            }
            let (chain_flag, chain) = chain_of
                .get(&(bi as u32, si as u32))
                .copied()
                .unwrap_or((0, 0));
            w.u32(kind_code(s.kind) | flag | chain_flag);
            w.u32(sb as u32);
            w.u32(db as u32);
            w.u32(so);
            w.u32(doff);
            w.u32(s.count());
            w.u32(poff.unwrap_or(0));
            w.u32(chain);
        }
    }
    w.at = sec.step_deps;
    let mut dep_at = 0u32;
    for s in rp.blocks.iter().flat_map(|b| &b.steps) {
        w.u32(dep_at);
        w.u32(s.deps.len() as u32);
        dep_at += s.deps.len() as u32;
    }
    w.at = sec.deps;
    for s in rp.blocks.iter().flat_map(|b| &b.steps) {
        for d in &s.deps {
            w.u32(d.block);
            w.u32(d.step + 1);
            w.u32(rp.blocks[d.block as usize].steps.len() as u32);
        }
    }
    w.at = sec.chains;
    for op in chains.iter().flat_map(|c| &c.ops) {
        w.u32(op.rank);
        w.u32(op.buf as u32);
        w.u32(op.off);
        w.u32(0);
    }
    t
}

struct Writer<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn u64(&mut self, v: u64) {
        self.buf[self.at..self.at + 8].copy_from_slice(&v.to_le_bytes());
        self.at += 8;
    }
    fn u32(&mut self, v: u32) {
        self.buf[self.at..self.at + 4].copy_from_slice(&v.to_le_bytes());
        self.at += 4;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> Plan {
        Plan::from_json(include_str!(
            "../../../tests/plans/good/exchange_allgather_2.json"
        ))
        .unwrap()
    }

    /// `rank`'s table at address 0 with default resources.
    fn table(p: &Plan, rank: u32, ends: &[BlockEnds]) -> Vec<u8> {
        encode(p, rank, &Layout::new(p, rank), &RankRes::default(), ends, 0)
    }

    fn u32_at(t: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(t[at..at + 4].try_into().unwrap())
    }

    fn u64_at(t: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(t[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn replicas_get_their_own_connections() {
        let mut p = fixture();
        p.channels = 2;
        let c = connections(&p);
        assert_eq!(c.len(), 4);
        let nb = p.ranks[0].blocks.len() as u32;
        let (s0, _) = block_conns(&p, 0, 0);
        let (s1, _) = block_conns(&p, 0, nb);
        assert_eq!(s0.unwrap().channel + 1, s1.unwrap().channel);
        assert_eq!(grid(&p, 0), 2 * nb);
    }

    #[test]
    fn the_table_header_and_sections_are_where_the_kernel_reads_them() {
        let p = fixture();
        let res = RankRes {
            progress: 1,
            counters: 2,
            fail: 3,
            report: 4,
            abort: 5,
            scratch: 6,
            timeout_ns: 7,
            trace: false,
        };
        let g = grid(&p, 1) as usize;
        let ends = vec![BlockEnds::default(); g];
        let t = encode(&p, 1, &Layout::new(&p, 1), &res, &ends, 0x1000);
        assert_eq!(t.len(), Layout::new(&p, 1).bytes());
        let at = |field: &str| {
            LAYOUT
                .iter()
                .find(|(s, f, _)| *s == "Table" && *f == field)
                .map(|x| x.2)
                .unwrap()
        };
        for (field, v) in [
            ("progress", 1u64),
            ("counters", 2),
            ("fail", 3),
            ("report", 4),
            ("abort", 5),
            ("scratch", 6),
            ("timeout_ns", 7),
        ] {
            assert_eq!(u64_at(&t, at(field)), v, "{field}");
        }
        // Sections start 16-byte aligned.
        assert_eq!(
            u64_at(&t, at("blocks")),
            0x1000 + align16(TABLE_BYTES) as u64
        );
        assert_eq!(u32_at(&t, at("replicas")), p.channels.max(1));
        // No step waits for another block's: nothing to publish, nothing to reset.
        assert_eq!(u32_at(&t, at("sync")), 0);
        assert_eq!(
            u32_at(&t, at("tiled")),
            u32::from(p.execution == Execution::Tiled)
        );
        let blocks = u64_at(&t, 56) - 0x1000;
        assert_eq!(blocks as usize, 128);
        // No trace unless asked; asked, a (start, end) pair per step at the table's end.
        assert_eq!(u64_at(&t, at("trace")), 0);
        let traced = encode(
            &p,
            1,
            &Layout::new(&p, 1),
            &RankRes { trace: true, ..res },
            &ends,
            0x1000,
        );
        let (off, n) = Layout::new(&p, 1).trace();
        assert_eq!(u64_at(&traced, at("trace")), 0x1000 + off as u64);
        let steps_of_rank: usize = p.ranks[1].blocks.iter().map(|b| b.steps.len()).sum();
        assert_eq!(n, steps_of_rank);
        assert!(off >= u64_at(&t, 80) as usize - 0x1000 && off + 16 * n <= traced.len());
        assert_eq!(u32_at(&t, 88), p.ranks[1].blocks.len() as u32);
        assert_eq!(u32_at(&t, 92), g as u32);
        // The first step of block 1 of rank 1 is its step count's successor in order.
        let steps = (u64_at(&t, 64) - 0x1000) as usize;
        let s = &p.ranks[1].blocks[0].steps[0];
        assert_eq!(u32_at(&t, steps) & 0xff, kind_code(s.kind));
        assert_eq!(u32_at(&t, steps + 20), s.count());
    }

    /// The exchange allgather sends its `in` and receives into `out`: both steps are
    /// marked DIRECT, the receive with the sender's chunk; the blocks name their peers.
    #[test]
    fn direct_pairs_are_marked_with_the_senders_chunk_and_blocks_name_their_peers() {
        let p = fixture();
        let field = |s: &str, f: &str| LAYOUT.iter().find(|x| x.0 == s && x.1 == f).unwrap().2;
        let d = braid_plan::direct::direct(&p);
        assert_eq!((d.sends.len(), d.recvs.len()), (2, 2), "{d:?}");
        for rank in 0..2u32 {
            let ends = vec![BlockEnds::default(); grid(&p, rank) as usize];
            let t = table(&p, rank, &ends);
            let steps = u64_at(&t, field("Table", "steps")) as usize;
            let mut i = 0;
            for (bi, b) in p.ranks[rank as usize].blocks.iter().enumerate() {
                let bd = BLOCKS_AT + bi * BLOCK_BYTES;
                let peer = |x: Option<u32>| x.unwrap_or(NO_RANK);
                assert_eq!(
                    u32_at(&t, bd + field("BlockDesc", "send_rank")),
                    peer(b.send_peer)
                );
                assert_eq!(
                    u32_at(&t, bd + field("BlockDesc", "recv_rank")),
                    peer(b.recv_peer)
                );
                for si in 0..b.steps.len() {
                    let at = (rank, bi as u32, si as u32);
                    let sd = steps + i * STEP_BYTES;
                    let kind = u32_at(&t, sd);
                    assert_eq!(kind & DIRECT != 0, d.contains(at), "{at:?}");
                    let poff = u32_at(&t, sd + field("StepDesc", "poff"));
                    assert_eq!(poff, d.recvs.get(&at).copied().unwrap_or(0), "{at:?}");
                    i += 1;
                }
            }
        }
        // Rank 0's receive takes the chunk rank 1 sends: its `in`, chunk 0.
        assert_eq!(d.recvs.get(&(0, 0, 1)), Some(&0));
        assert!(d.sends.contains(&(1, 0, 1)));
    }

    /// An end is DIRECT_ONLY exactly when every step of its block on that side is a direct
    /// one: all of the exchange allgather's ends, none of a ring all-reduce's (whose
    /// sends and receives go through FIFOs), and never an end without a connection.
    #[test]
    fn ends_used_only_by_direct_steps_say_so() {
        let field = |s: &str, f: &str| LAYOUT.iter().find(|x| x.0 == s && x.1 == f).unwrap().2;
        let ring = Plan::from_json(include_str!(
            "../../../tests/plans/good/ring_allreduce_4.json"
        ))
        .unwrap();
        for (p, want_any) in [(fixture(), true), (ring, false)] {
            let mut flagged = 0;
            for rank in 0..p.ranks.len() as u32 {
                let rp = &p.ranks[rank as usize];
                let nb = rp.blocks.len();
                let end = EndDesc {
                    slots: 64,
                    nslots: 4,
                    ..EndDesc::default()
                };
                let mut ends = vec![
                    BlockEnds {
                        send: [end; LANES],
                        recv: [end; LANES],
                    };
                    grid(&p, rank) as usize
                ];
                // The last grid block has no connection at all.
                *ends.last_mut().unwrap() = BlockEnds::default();
                let g_total = ends.len();
                let t = table(&p, rank, &ends);
                for g in 0..g_total {
                    let b = &rp.blocks[g % nb];
                    for (i, side) in [(0usize, "send"), (2, "recv")] {
                        let at = BLOCKS_AT
                            + g * BLOCK_BYTES
                            + field("BlockDesc", side)
                            + field("End", "nslots");
                        let uses: Vec<_> = b
                            .steps
                            .iter()
                            .filter(|s| {
                                if i == 0 {
                                    s.kind.sends()
                                } else {
                                    s.kind.receives()
                                }
                            })
                            .collect();
                        let want = g + 1 < g_total && want_any && !uses.is_empty();
                        for lane in 0..LANES {
                            let w = u32_at(&t, at + lane * END_BYTES);
                            assert_eq!(
                                w & DIRECT_ONLY != 0,
                                want,
                                "rank {rank} grid block {g} {side}"
                            );
                            assert_eq!(w & !DIRECT_ONLY, if g + 1 < g_total { 4 } else { 0 });
                            flagged += usize::from(want);
                        }
                    }
                }
            }
            assert_eq!(flagged > 0, want_any);
        }
    }

    /// Each side's lanes carry that side's flag: in a chain broadcast a middle rank reads
    /// the root's input directly but sends from its own output through a FIFO, so its
    /// receive lanes (all of them, LL128's too) are DIRECT_ONLY and its send lanes not.
    #[test]
    fn every_lane_of_a_side_carries_that_sides_flag() {
        let field = |s: &str, f: &str| LAYOUT.iter().find(|x| x.0 == s && x.1 == f).unwrap().2;
        let topo = braid_topo::Topology::from_arg("nvswitch:4").unwrap();
        let mut mixed = 0;
        for v in braid_library::Library::new(topo).plans(Collective::Broadcast, Some(0)) {
            let p = v.plan();
            for rank in 0..p.ranks.len() as u32 {
                let layout = Layout::new(p, rank);
                let nb = p.ranks[rank as usize].blocks.len() as u32;
                let end = EndDesc {
                    slots: 64,
                    nslots: 4,
                    ..EndDesc::default()
                };
                let ends = vec![
                    BlockEnds {
                        send: [end; LANES],
                        recv: [end; LANES],
                    };
                    grid(p, rank) as usize
                ];
                let t = table(p, rank, &ends);
                for g in 0..ends.len() {
                    let b = g as u32 % nb;
                    let want =
                        [true, false].map(|send| direct_only(p, rank, b, &layout.direct, send));
                    mixed += usize::from(want[0] != want[1]);
                    for (side, name) in ["send", "recv"].into_iter().enumerate() {
                        for lane in 0..LANES {
                            let at = BLOCKS_AT
                                + g * BLOCK_BYTES
                                + field("BlockDesc", name)
                                + lane * END_BYTES
                                + field("End", "nslots");
                            assert_eq!(
                                u32_at(&t, at) & DIRECT_ONLY != 0,
                                want[side],
                                "{} rank {rank} grid block {g} {name} lane {lane}",
                                p.name
                            );
                        }
                    }
                }
            }
        }
        assert!(
            mixed > 0,
            "no block whose sides differ: the test shows nothing"
        );
    }

    /// The one-shot all-reduce on 4 ranks: each rank's reductions into `out` form one
    /// chain; its head and links are flagged, each names the chain's operands, and the
    /// operands are in the order the chain combines them (rank 0: its own input, then
    /// ranks 1, 2, 3; rank 2: ranks 0, 1, its own input, rank 3).
    #[test]
    fn chains_name_their_operands_in_order() {
        let topo = braid_topo::Topology::from_arg("nvswitch:4").unwrap();
        let p = braid_library::Library::new(topo)
            .plans(Collective::Allreduce, None)
            .into_iter()
            .find(|p| p.name == "one_shot_oop_allreduce")
            .unwrap()
            .plan()
            .clone();
        let field = |s: &str, f: &str| LAYOUT.iter().find(|x| x.0 == s && x.1 == f).unwrap().2;
        let peer = |rank| ChainOp {
            rank,
            buf: 0,
            off: 0,
        };
        let own = ChainOp {
            rank: NO_RANK,
            buf: 0,
            off: 0,
        };
        for (rank, want) in [
            (0u32, vec![own, peer(1), peer(2), peer(3)]),
            (2, vec![peer(0), peer(1), own, peer(3)]),
        ] {
            check(&p, rank).unwrap();
            let ch = chains(&p, rank);
            assert_eq!(ch.len(), 1);
            assert_eq!(ch[0].ops, want, "rank {rank}");
            assert!(ch[0].splits);
            let ends = vec![BlockEnds::default(); grid(&p, rank) as usize];
            let t = table(&p, rank, &ends);
            let steps_at = u64_at(&t, field("Table", "steps")) as usize;
            let ops_at = u64_at(&t, field("Table", "chains")) as usize;
            for (k, op) in want.iter().enumerate() {
                let at = ops_at + k * CHAIN_OP_BYTES;
                assert_eq!(u32_at(&t, at + field("ChainOp", "rank")), op.rank);
                assert_eq!(u32_at(&t, at + field("ChainOp", "buf")), op.buf as u32);
                assert_eq!(u32_at(&t, at + field("ChainOp", "off")), op.off);
            }
            let mut flat = 0;
            let rp = &p.ranks[rank as usize];
            for (bi, b) in rp.blocks.iter().enumerate() {
                for si in 0..b.steps.len() {
                    let sd = steps_at + flat * STEP_BYTES;
                    let kind = u32_at(&t, sd);
                    let pos = ch[0]
                        .steps
                        .iter()
                        .position(|&x| x == (bi as u32, si as u32));
                    let want_flag = match pos {
                        Some(0) => CHAIN_HEAD,
                        Some(_) => CHAIN_LINK,
                        None => 0,
                    };
                    assert_eq!(kind & (CHAIN_HEAD | CHAIN_LINK), want_flag, "{bi}.{si}");
                    let word = u32_at(&t, sd + field("StepDesc", "chain"));
                    // Operands from the first; the step's place in the chain, which
                    // may split.
                    let len = ch[0].steps.len() as u32;
                    let want_word = pos.map_or(0, |k| 1 << 12 | len << 8 | (k as u32) << 4 | 4);
                    assert_eq!(word, want_word, "{bi}.{si}");
                    flat += 1;
                }
            }
        }
    }

    /// The kernel trusts a chain's operands as it trusts the steps: on every shipped plan
    /// with chains (8 ranks), each operand lies inside its buffer for as many chunks as
    /// the chain's steps move, and every chain step moves that many.
    #[test]
    fn chain_operands_stay_inside_their_buffers() {
        let topo = braid_topo::Topology::from_arg("nvswitch:8").unwrap();
        let lib = braid_library::Library::new(topo);
        let mut seen = 0;
        for c in [
            Collective::Allreduce,
            Collective::ReduceScatter,
            Collective::Reduce,
        ] {
            for v in lib.plans(c, (c == Collective::Reduce).then_some(3)) {
                let p = v.plan();
                for rank in 0..p.n_ranks {
                    check(p, rank).unwrap();
                    for Chain { steps, ops, .. } in chains(p, rank) {
                        let rp = &p.ranks[rank as usize];
                        let (hb, hs) = steps[0];
                        let count = rp.blocks[hb as usize].steps[hs as usize].count();
                        for &(b, s) in &steps {
                            assert_eq!(rp.blocks[b as usize].steps[s as usize].count(), count);
                        }
                        assert!(ops.len() <= CHAIN_MAX && ops.len() >= 2);
                        for op in ops {
                            let chunks = match (op.rank, op.buf) {
                                (_, 0) => p.in_chunks,
                                (NO_RANK, 1) => p.out_chunks,
                                (NO_RANK, 2) => p.scratch_chunks,
                                other => panic!("{other:?}"),
                            };
                            assert!(op.off + count <= chunks, "{} rank {rank}: {op:?}", p.name);
                            assert!(op.rank == NO_RANK || op.rank < p.n_ranks);
                        }
                        seen += 1;
                    }
                }
            }
        }
        assert!(seen >= 17, "{seen} chains");
    }

    #[test]
    fn blocks_publish_the_steps_others_wait_for_and_know_their_deps() {
        let mut p = fixture();
        p.channels = 2;
        // Block 1's first step waits for block 0's first step.
        p.ranks[1].blocks[1].steps[0]
            .deps
            .push(braid_plan::Dep { block: 0, step: 0 });
        check(&p, 1).unwrap();
        let rank = 1u32;
        let rp = &p.ranks[rank as usize];
        let mut ends = vec![BlockEnds::default(); grid(&p, rank) as usize];
        ends[0].send[1] = EndDesc {
            slots: 64,
            head: 8,
            tail: 16,
            counter: 3,
            nslots: 5,
            gpu_scope: true,
            net: false,
        };
        ends[0].recv[0] = EndDesc {
            nslots: 7,
            ..ends[0].send[1]
        };
        let t = table(&p, rank, &ends);
        let published = published(&p, rank);
        let field = |s: &str, f: &str| {
            LAYOUT
                .iter()
                .find(|(a, b, _)| *a == s && *b == f)
                .unwrap()
                .2
        };
        let steps_at = u64_at(&t, field("Table", "steps")) as usize;
        let sdeps_at = u64_at(&t, field("Table", "step_deps")) as usize;
        assert_eq!(u32_at(&t, field("Table", "sync")), 1);
        let mut flat = 0;
        for (bi, b) in rp.blocks.iter().enumerate() {
            for si in 0..b.steps.len() {
                let kind = u32_at(&t, steps_at + STEP_BYTES * flat);
                let want = (bi, si) == (0, 0);
                assert_eq!(kind & PUBLISH != 0, want, "block {bi} step {si}");
                assert_eq!(published.contains(&(bi as u32, si as u32)), want);
                flat += 1;
            }
        }
        // Every grid block (both replicas) knows where its plan block's deps lie.
        let nb = rp.blocks.len();
        for g in 0..grid(&p, rank) as usize {
            let bd = BLOCKS_AT + g * BLOCK_BYTES;
            assert_eq!(u64_at(&t, field("Table", "blocks")) as usize, BLOCKS_AT);
            let b = g % nb;
            let first_step: usize = rp.blocks[..b].iter().map(|x| x.steps.len()).sum();
            let first = u32_at(&t, bd + field("BlockDesc", "first_dep"));
            let n = u32_at(&t, bd + field("BlockDesc", "ndeps"));
            assert_eq!(first, u32_at(&t, sdeps_at + STEP_DEPS_BYTES * first_step));
            let want: usize = rp.blocks[b].steps.iter().map(|s| s.deps.len()).sum();
            assert_eq!(n as usize, want);
        }
        // (Block 0's send and receive are direct ones: its ends say so.)
        let lane = |at: usize| u32_at(&t, BLOCKS_AT + at + field("End", "nslots"));
        let send1 = field("BlockDesc", "send") + END_BYTES;
        assert_eq!(lane(send1), 5 | GPU_SCOPE | DIRECT_ONLY);
        assert_eq!(
            lane(field("BlockDesc", "recv")),
            7 | GPU_SCOPE | DIRECT_ONLY
        );
        ends[0].send[1].gpu_scope = false;
        let t = table(&p, rank, &ends);
        assert_eq!(
            u32_at(&t, BLOCKS_AT + send1 + field("End", "nslots")),
            5 | DIRECT_ONLY
        );
        ends[0].send[1].net = true;
        let t = table(&p, rank, &ends);
        assert_eq!(
            u32_at(&t, BLOCKS_AT + send1 + field("End", "nslots")),
            5 | NET | DIRECT_ONLY
        );
    }

    #[test]
    fn a_step_outside_its_buffers_is_refused_before_encoding() {
        let mut p = fixture();
        check(&p, 1).unwrap();
        p.ranks[1].blocks[1].steps[0].dst.as_mut().unwrap().offset = 2;
        let e = check(&p, 1).unwrap_err().to_string();
        assert!(e.contains("rank 1, block 1, step 0"), "{e}");
        assert!(e.contains("outside"), "{e}");
        let mut q = fixture();
        q.ranks[0].blocks[0].send_peer = Some(0);
        assert!(check(&q, 0).is_err());
        let mut r = fixture();
        r.ranks[0].blocks[0].steps[0]
            .deps
            .push(braid_plan::Dep { block: 9, step: 0 });
        assert!(check(&r, 0)
            .unwrap_err()
            .to_string()
            .contains("does not exist"));
    }
}
