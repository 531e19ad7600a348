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
//! `Table` (120 bytes) | `BlockDesc` x grid (160 bytes each, from [`BLOCKS_AT`]) |
//! `StepDesc` x steps (32) | `StepDeps` x steps (8) | `DepDesc` x deps (12). Grid block
//! `g = replica * nblocks + block`.

use crate::error::{CudaError, Result};
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
    ("Table", "trace", 112),
    ("Table", "sizeof", TABLE_BYTES),
    ("BlockDesc", "block", 0),
    ("BlockDesc", "replica", 4),
    ("BlockDesc", "first_step", 8),
    ("BlockDesc", "nsteps", 12),
    ("BlockDesc", "send", 16),
    ("BlockDesc", "recv", 16 + 2 * END_BYTES),
    ("BlockDesc", "first_dep", 16 + 4 * END_BYTES),
    ("BlockDesc", "ndeps", 20 + 4 * END_BYTES),
    ("BlockDesc", "send_rank", 24 + 4 * END_BYTES),
    ("BlockDesc", "recv_rank", 28 + 4 * END_BYTES),
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
pub const TABLE_BYTES: usize = 120;
pub const BLOCK_BYTES: usize = 160;
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
/// The most slots a proxied lane has: its slice sizes share the head's 128-byte line.
pub const NET_MAX_SLOTS: u32 = 15;
pub const STEP_BYTES: usize = 32;
pub const STEP_DEPS_BYTES: usize = 8;
pub const DEP_BYTES: usize = 12;

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
        debug_assert!(self.nslots < NET);
        debug_assert!(!self.net || self.nslots <= NET_MAX_SLOTS);
        self.nslots | if self.gpu_scope { GPU_SCOPE } else { 0 } | if self.net { NET } else { 0 }
    }
}

/// A grid block's connection ends, per lane (0 Simple, 1 LL).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockEnds {
    pub send: [EndDesc; 2],
    pub recv: [EndDesc; 2],
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
    trace: usize,
    total: usize,
}

fn sections(plan: &Plan, rank: u32) -> Sections {
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
    let trace = align16(deps + ndeps * DEP_BYTES);
    let total = align16(trace + nsteps * 16);
    Sections {
        blocks,
        steps,
        step_deps,
        deps,
        trace,
        total,
    }
}

/// Where `rank`'s step times are in its table (bytes from its start) and how many steps
/// there are: a (start, end) pair of u64 nanoseconds per step, in the plan's order (its
/// blocks in order, each block's steps in order).
pub fn trace_section(plan: &Plan, rank: u32) -> (usize, usize) {
    let n = plan.ranks[rank as usize]
        .blocks
        .iter()
        .map(|b| b.steps.len())
        .sum();
    (sections(plan, rank).trace, n)
}

/// Bytes of `rank`'s table.
pub fn table_len(plan: &Plan, rank: u32) -> usize {
    sections(plan, rank).total
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
/// step depends on, and each block's last (what a barrier over the replica waits for).
pub fn published(plan: &Plan, rank: u32) -> std::collections::BTreeSet<(u32, u32)> {
    let rp = &plan.ranks[rank as usize];
    let mut set = std::collections::BTreeSet::new();
    for (bi, b) in rp.blocks.iter().enumerate() {
        if let Some(last) = b.steps.len().checked_sub(1) {
            set.insert((bi as u32, last as u32));
        }
        for d in b.steps.iter().flat_map(|s| &s.deps) {
            set.insert((d.block, d.step));
        }
    }
    set
}

/// `rank`'s table for a copy at device address `base`; `ends[g]` are grid block `g`'s
/// connection ends. Call [`check`] first.
pub fn encode(plan: &Plan, rank: u32, res: &RankRes, ends: &[BlockEnds], base: u64) -> Vec<u8> {
    let rp = &plan.ranks[rank as usize];
    let sec = sections(plan, rank);
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
    w.u32(0);
    w.u64(if res.trace {
        base + sec.trace as u64
    } else {
        0
    });
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
    w.at = sec.blocks;
    for (g, e) in ends.iter().enumerate() {
        let (k, b) = (g as u32 / nb, g as u32 % nb);
        w.u32(b);
        w.u32(k);
        w.u32(first[b as usize]);
        w.u32(rp.blocks[b as usize].steps.len() as u32);
        for end in e.send.iter().chain(e.recv.iter()) {
            w.u64(end.slots);
            w.u64(end.head);
            w.u64(end.tail);
            w.u32(end.counter);
            w.u32(end.nslots_word());
        }
        w.u32(deps_of[b as usize].0);
        w.u32(deps_of[b as usize].1);
        let blk = &rp.blocks[b as usize];
        w.u32(blk.send_peer.unwrap_or(NO_RANK));
        w.u32(blk.recv_peer.unwrap_or(NO_RANK));
    }
    w.at = sec.steps;
    let published = published(plan, rank);
    let direct = braid_plan::direct::direct(plan);
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
            w.u32(kind_code(s.kind) | flag);
            w.u32(sb as u32);
            w.u32(db as u32);
            w.u32(so);
            w.u32(doff);
            w.u32(s.count());
            w.u32(poff.unwrap_or(0));
            w.u32(0);
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
        let t = encode(&p, 1, &res, &ends, 0x1000);
        assert_eq!(t.len(), table_len(&p, 1));
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
        assert_eq!(
            u32_at(&t, at("tiled")),
            u32::from(p.execution == Execution::Tiled)
        );
        let blocks = u64_at(&t, 56) - 0x1000;
        assert_eq!(blocks as usize, 128);
        // No trace unless asked; asked, a (start, end) pair per step at the table's end.
        assert_eq!(u64_at(&t, at("trace")), 0);
        let traced = encode(&p, 1, &RankRes { trace: true, ..res }, &ends, 0x1000);
        let (off, n) = trace_section(&p, 1);
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
            let t = encode(&p, rank, &RankRes::default(), &ends, 0);
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

    #[test]
    fn blocks_publish_their_dependencies_and_last_steps_and_know_their_deps() {
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
        let t = encode(&p, rank, &RankRes::default(), &ends, 0);
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
        let mut flat = 0;
        for (bi, b) in rp.blocks.iter().enumerate() {
            for si in 0..b.steps.len() {
                let kind = u32_at(&t, steps_at + STEP_BYTES * flat);
                let want = si + 1 == b.steps.len() || (bi, si) == (0, 0);
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
        let lane = |at: usize| u32_at(&t, BLOCKS_AT + at + field("End", "nslots"));
        let send1 = field("BlockDesc", "send") + END_BYTES;
        assert_eq!(lane(send1), 5 | GPU_SCOPE);
        assert_eq!(lane(field("BlockDesc", "recv")), 7 | GPU_SCOPE);
        ends[0].send[1].gpu_scope = false;
        let t = encode(&p, rank, &RankRes::default(), &ends, 0);
        assert_eq!(u32_at(&t, BLOCKS_AT + send1 + field("End", "nslots")), 5);
        ends[0].send[1].net = true;
        let t = encode(&p, rank, &RankRes::default(), &ends, 0);
        assert_eq!(
            u32_at(&t, BLOCKS_AT + send1 + field("End", "nslots")),
            5 | NET
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
