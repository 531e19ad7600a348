//! Flat programs: a rank's plan as passes over its buffers and its peers' inputs, where
//! every step of it can be done by reading inputs of ranks that run in one launch (the
//! CUDA backend's flat launches, and the cost model's price for them). Pure data.
//!
//! A rank's plan qualifies ([`program`]) when each of its steps is one of: a send the
//! receiver reads itself (a direct pair's send, [`crate::direct`]: nothing to do), a
//! direct receive (`dst = peer's in`, or `dst = own (+) peer's in`), a chain that runs as
//! one pass (its head holds the whole chain, its links nothing), a local copy or reduce,
//! or nothing; no step touches scratch; and every step waits only for earlier steps of its
//! own block (or for sends that do nothing). The passes keep the operand order of the
//! steps they replace, so a backend that runs them gets the bits of the steps.

use crate::direct::{Chain, Direct};
use crate::plan::{Plan, Slice, StepKind};
use braid_ir::Buf;

/// Bytes one block of a flat launch reads and writes per part, at least: a backend cuts
/// each chunk of a launch's passes into parts, each run by a block of its own (the CUDA
/// backend's flat launches, and the cost model's price for them), so that the block of
/// the busiest sequence moves about this much. A copy's part is half of it (64 KiB read,
/// 64 KiB written).
pub const PART_ACCESS_BYTES: u64 = 128 << 10;

/// How many parts each chunk of a launch's passes is cut into, each run by a block of
/// its own, for `seqs` sequences, `accesses` bytes the busiest sequence reads and writes
/// per byte of a chunk ([`LaunchProgram::accesses`]) and `max_blocks` blocks for the
/// launch: a part per [`PART_ACCESS_BYTES`] the busiest sequence moves, at most
/// `max_blocks / seqs` (at least one). Parts are then made whole MiB where they are a MiB
/// or more, else a power of two bytes, at least 128 (fewer parts), so that in chunks
/// that are multiples of them each starts where the memory's pages and lines do:
/// a 256 MiB broadcast on 8 ranks cut into 132 parts of 1.94 MiB ran its memory at
/// 2.4 TB/s, in 128 parts of 2 MiB at 3.5 (docs/perf.md); an 8 MiB one on 8 ranks in 132
/// parts of 63,552 bytes took 35 µs, in 128 of 64 KiB 29.
pub fn parts(chunk_bytes: u64, accesses: u64, seqs: u64, max_blocks: u64) -> u64 {
    const MIB: u64 = 1 << 20;
    let room = (max_blocks / seqs.max(1)).max(1);
    let parts = chunk_bytes
        .saturating_mul(accesses.max(2))
        .div_ceil(PART_ACCESS_BYTES)
        .clamp(1, room);
    // Parts of whole MiB, or of a power of two bytes (at least a 128-byte line): the
    // kernel cuts a chunk into `parts` equal shares, which start where pages and lines
    // do when the chunk is a multiple of them.
    let per = chunk_bytes.div_ceil(parts).max(1);
    let per = if per >= MIB {
        per.div_ceil(MIB) * MIB
    } else {
        per.next_power_of_two().max(128)
    };
    chunk_bytes.div_ceil(per).max(1)
}

/// Destinations one pass of a launch program writes at most ([`launch`]): a backend's
/// and the cost model's.
pub const MAX_DSTS: usize = 8;

/// Sequences (grid blocks before parts) one flat launch holds: the limits of the CUDA
/// backend's kernel argument, which the cost model prices too.
pub const MAX_SEQS: usize = 64;
/// Passes over one chunk one flat launch holds.
pub const MAX_TASKS: usize = 96;
/// Operands of all those passes (a pass's operands and its destinations beyond the first).
pub const MAX_OPS: usize = 128;
/// Bytes of the kernel argument's head (`FlatHead`).
pub const ARG_HEAD_BYTES: usize = 24;
/// 8-byte words after the head in the kernel's three arguments (`FLAT_WORDS_S`, `_M`,
/// `_L`): a launch takes the smallest that holds it. The middle one holds an 8-rank
/// two-shot all-reduce (8 sequences, 8 tasks, 120 operands); the largest holds the
/// largest launch and stays within the 4 KiB a kernel's parameters may take on every GPU.
pub const ARG_WORDS: [usize; 3] = [64, 272, 465];

/// Where a launch's parts lie in the kernel argument's words: the sequences' first tasks
/// (16 bits each) from byte 0, the tasks (16 bytes each) from `task_at`, the operands (16
/// bytes each) from `op_at`, `words` in all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArgLayout {
    pub task_at: usize,
    pub op_at: usize,
    pub words: usize,
}

/// The layout of a launch of `seqs` sequences, `tasks` tasks and `ops` operands.
pub fn arg_layout(seqs: usize, tasks: usize, ops: usize) -> ArgLayout {
    let task_at = (2 * (seqs + 1)).div_ceil(8) * 8;
    let op_at = task_at + 16 * tasks;
    ArgLayout {
        task_at,
        op_at,
        words: (op_at + 16 * ops).div_ceil(8),
    }
}

/// Bytes of the smallest kernel argument that holds `words` words, head included
/// (`None`: none does).
pub fn arg_bytes(words: usize) -> Option<usize> {
    ARG_WORDS
        .iter()
        .find(|&&w| w >= words)
        .map(|w| ARG_HEAD_BYTES + 8 * w)
}

const _: () = assert!(
    (2 * (MAX_SEQS + 1)).div_ceil(8) * 8 + 16 * (MAX_TASKS + MAX_OPS) <= 8 * ARG_WORDS[2]
        && ARG_HEAD_BYTES + 8 * ARG_WORDS[2] <= 4096
);

/// One operand of a pass: the rank's own `in`, `out` or scratch (0, 1, 2) from chunk `chunk` on,
/// a peer's `in` from chunk `chunk` on (a direct receive), or a peer's `out` (a receive of
/// what the peer wrote there: [`crate::direct::Direct::forwards`], done by the pass that
/// writes it, [`launch`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operand {
    Own { buf: u8, chunk: u32 },
    Peer { rank: u32, chunk: u32 },
    PeerOut { rank: u32, chunk: u32 },
}

/// `count` chunks of the rank's buffer `dst_buf` (0 in, 1 out) from `dst_chunk` on, each
/// `ops[0] (+) ops[1] (+) ...` of the operands' same chunk (each operand advancing with
/// it). One operand: a copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pass {
    pub dst_buf: u8,
    pub dst_chunk: u32,
    pub count: u32,
    pub ops: Vec<Operand>,
}

/// A rank's plan as flat passes: one sequence per plan block that does anything, each
/// run in order by its grid block(s).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlatProgram {
    pub seqs: Vec<Vec<Pass>>,
    /// Ranks that must be in the launch, lending their `in`, because this rank reads it.
    pub reads: Vec<u32>,
    /// Ranks that must be in the launch with an `out`, because this rank receives what
    /// they write there.
    pub reads_out: Vec<u32>,
    /// Ranks that must be in the launch because they read this rank's `in` (its sends do
    /// nothing).
    pub read_by: Vec<u32>,
}

/// The rank's own slice `s` as an operand (buffer 0 in, 1 out, 2 scratch).
fn local(s: Slice) -> Operand {
    Operand::Own {
        buf: match s.buf {
            Buf::In => 0,
            Buf::Out => 1,
            Buf::Scratch => 2,
        },
        chunk: s.offset,
    }
}

/// [`local`], except scratch, which no flat pass touches.
fn own(s: Slice) -> Option<Operand> {
    (s.buf != Buf::Scratch).then(|| local(s))
}

/// A chain of `rank` that runs as one pass, with its operands in the order they combine
/// (`Own` buffer 2 is scratch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankChain {
    pub chain: Chain,
    pub ops: Vec<Operand>,
}

/// `rank`'s chains ([`crate::direct::chains`], or [`crate::direct::flat_chains`] where
/// `flat`) with their operands, those of at most `max` operands and steps (what one pass
/// of a backend takes).
pub fn rank_chains(
    plan: &Plan,
    rank: u32,
    direct: &Direct,
    max: usize,
    flat: bool,
) -> Vec<RankChain> {
    let Some(rp) = plan.ranks.get(rank as usize) else {
        return Vec::new();
    };
    let chains = if flat {
        crate::direct::flat_chains(plan, direct)
    } else {
        crate::direct::chains(plan, direct)
    };
    chains
        .into_iter()
        .filter(|c| c.rank == rank)
        .map(|c| {
            let mut ops = Vec::new();
            for (k, &(b, s)) in c.steps.iter().enumerate() {
                let blk = &rp.blocks[b as usize];
                let st = &blk.steps[s as usize];
                if k == 0 && st.kind == StepKind::RecvReduceCopy {
                    ops.extend(st.src.map(local));
                }
                match (direct.recvs.get(&(rank, b, s)), blk.recv_peer) {
                    (Some(&poff), Some(peer)) => ops.push(Operand::Peer {
                        rank: peer,
                        chunk: poff,
                    }),
                    _ => ops.extend(st.src.map(local)),
                }
            }
            RankChain { chain: c, ops }
        })
        .filter(|c| c.ops.len() <= max && c.chain.steps.len() <= max)
        .collect()
}

/// `rank`'s plan as a flat program, or `None` where it does not qualify (module docs).
/// `direct`: the plan's direct pairs; `max_ops`: the most operands one pass may have
/// (longer chains run step by step, and then do not qualify).
pub fn program(plan: &Plan, rank: u32, direct: &Direct, max_ops: usize) -> Option<FlatProgram> {
    if plan.scratch_chunks > 0 {
        return None;
    }
    let rp = plan.ranks.get(rank as usize)?;
    let chains = rank_chains(plan, rank, direct, max_ops, true);
    // Which sequence and pass realizes each step (None: the step does nothing).
    let mut realized: std::collections::BTreeMap<(u32, u32), Option<(usize, usize)>> =
        Default::default();
    let head_of: std::collections::BTreeMap<(u32, u32), usize> = chains
        .iter()
        .enumerate()
        .flat_map(|(k, c)| c.chain.steps.iter().map(move |&at| (at, k)))
        .collect();
    let mut out = FlatProgram::default();
    let mut seq_of_block: Vec<Option<usize>> = vec![None; rp.blocks.len()];
    for (bi, b) in rp.blocks.iter().enumerate() {
        for (si, s) in b.steps.iter().enumerate() {
            let at = (bi as u32, si as u32);
            let dat = (rank, bi as u32, si as u32);
            let chain = head_of.get(&at).copied();
            if let Some(k) = chain {
                if chains[k].chain.steps[0] != at {
                    // A link: its head's pass does its work.
                    continue;
                }
            }
            let pass = if let Some(k) = chain {
                let ops = chains[k].ops.clone();
                if ops
                    .iter()
                    .any(|o| matches!(o, Operand::Own { buf, .. } if *buf > 1))
                {
                    return None;
                }
                Some((s.dst?, ops))
            } else {
                match s.kind {
                    StepKind::Nop => None,
                    StepKind::Send
                        if direct.sends.contains(&dat) || direct.forward_sends.contains(&dat) =>
                    {
                        out.read_by.push(b.send_peer?);
                        None
                    }
                    StepKind::Recv if direct.forwards.contains_key(&dat) => {
                        let (peer, chunk) = direct.forwards[&dat];
                        out.reads_out.push(peer);
                        Some((s.dst?, vec![Operand::PeerOut { rank: peer, chunk }]))
                    }
                    StepKind::Recv | StepKind::RecvReduceCopy => {
                        let poff = *direct.recvs.get(&dat)?;
                        let peer = Operand::Peer {
                            rank: b.recv_peer?,
                            chunk: poff,
                        };
                        let ops = if s.kind == StepKind::Recv {
                            vec![peer]
                        } else {
                            vec![own(s.src?)?, peer]
                        };
                        Some((s.dst?, ops))
                    }
                    StepKind::Copy => {
                        // A copy onto itself (in place) is nothing.
                        if s.src == s.dst {
                            None
                        } else {
                            Some((s.dst?, vec![own(s.src?)?]))
                        }
                    }
                    StepKind::Reduce => Some((s.dst?, vec![own(s.dst?)?, own(s.src?)?])),
                    _ => return None,
                }
            };
            let Some((dst, ops)) = pass else {
                realized.insert(at, None);
                continue;
            };
            if ops.len() > max_ops {
                return None;
            }
            let Some(Operand::Own { buf: dst_buf, .. }) = own(dst) else {
                return None;
            };
            for op in &ops {
                if let Operand::Peer { rank: r, .. } = *op {
                    out.reads.push(r);
                }
            }
            let seq = *seq_of_block[bi].get_or_insert_with(|| {
                out.seqs.push(Vec::new());
                out.seqs.len() - 1
            });
            out.seqs[seq].push(Pass {
                dst_buf,
                dst_chunk: dst.offset,
                count: s.count(),
                ops,
            });
            realized.insert(at, Some((seq, out.seqs[seq].len() - 1)));
        }
    }
    // Chain links are realized by their head's pass.
    for c in &chains {
        let head = realized.get(&c.chain.steps[0]).copied().flatten();
        for &at in &c.chain.steps[1..] {
            realized.insert(at, head);
        }
    }
    // Every step that does something waits only for what its own sequence did before
    // it (or for steps that do nothing: sends the receiver reads itself).
    for (bi, b) in rp.blocks.iter().enumerate() {
        for (si, s) in b.steps.iter().enumerate() {
            let at = (bi as u32, si as u32);
            if head_of
                .get(&at)
                .is_some_and(|&k| chains[k].chain.steps[0] != at)
            {
                continue; // a link: its deps are its chain's own order
            }
            let Some(&Some((seq, idx))) = realized.get(&at) else {
                continue;
            };
            for d in &s.deps {
                match realized.get(&(d.block, d.step)) {
                    Some(None) => {}
                    Some(&Some((ds, di))) if ds == seq && di < idx => {}
                    _ => return None,
                }
            }
        }
    }
    out.reads.sort_unstable();
    out.reads.dedup();
    out.reads_out.sort_unstable();
    out.reads_out.dedup();
    out.read_by.sort_unstable();
    out.read_by.dedup();
    Some(out)
}

/// A run of chunks of a rank's buffer (0 in, 1 out) from `chunk` on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Loc {
    pub rank: u32,
    pub buf: u8,
    pub chunk: u32,
}

impl Loc {
    /// Where `op` of `rank`'s program reads (a peer's operand is its `in`).
    pub fn of(rank: u32, op: Operand) -> Loc {
        match op {
            Operand::Own { buf, chunk } => Loc { rank, buf, chunk },
            Operand::Peer { rank, chunk } => Loc {
                rank,
                buf: 0,
                chunk,
            },
            Operand::PeerOut { rank, chunk } => Loc {
                rank,
                buf: 1,
                chunk,
            },
        }
    }
}

/// A pass of a launch: `count` chunks of every destination in `dsts`, each
/// `ops[0] (+) ops[1] (+) ...` of the operands' same chunk (each advancing with it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchPass {
    pub dsts: Vec<Loc>,
    pub count: u32,
    pub ops: Vec<Loc>,
}

/// The flat programs of the ranks of one launch as one list of sequences, each run in
/// order by its grid block(s), the sequences concurrently.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LaunchProgram {
    pub seqs: Vec<Vec<LaunchPass>>,
}

impl LaunchProgram {
    /// Passes over one chunk (what a backend holds as tasks), destinations counted once
    /// per pass.
    pub fn tasks(&self) -> usize {
        self.seqs.iter().flatten().map(|p| p.count as usize).sum()
    }

    /// Operands of its tasks (each task's operands and its destinations beyond the first).
    pub fn operands(&self) -> usize {
        self.seqs
            .iter()
            .flatten()
            .map(|p| p.count as usize * (p.ops.len() + p.dsts.len().max(1) - 1))
            .sum()
    }

    /// Bytes its busiest sequence reads and writes per byte of a chunk: over its passes,
    /// each chunk's operands and destinations.
    pub fn accesses(&self) -> u64 {
        self.seqs
            .iter()
            .map(|s| {
                s.iter()
                    .map(|p| u64::from(p.count) * (p.ops.len() + p.dsts.len()) as u64)
                    .sum::<u64>()
            })
            .max()
            .unwrap_or(0)
    }

    /// Bytes of the kernel argument the launch takes where every chunk of it holds data
    /// (a backend drops a small call's empty chunks, so such a call may take less), or
    /// `None` where the launch holds more than a flat launch may ([`MAX_SEQS`],
    /// [`MAX_TASKS`], [`MAX_OPS`]).
    pub fn arg_bytes(&self) -> Option<usize> {
        let (seqs, tasks, ops) = (self.seqs.len(), self.tasks(), self.operands());
        if seqs > MAX_SEQS || tasks > MAX_TASKS || ops > MAX_OPS {
            return None;
        }
        arg_bytes(arg_layout(seqs, tasks, ops).words)
    }
}

/// The programs of the ranks of one launch (`(rank, program)`, in launch order) as one
/// launch program, or `None` where they cannot run as one (a receive of a peer's `out`
/// that no pass can do).
///
/// Two things make it more than the programs side by side:
///
/// - **Forwards.** A receive of chunks of a peer's `out` ([`Operand::PeerOut`]: a
///   two-shot all-reduce's second shot, a ring allgather's or a chain broadcast's
///   forwarding) waits for the pass that writes them, on another rank: a flat launch's
///   blocks never wait for each other, so it is done by that pass, as one more
///   destination of it. That needs one pass to write those chunks (the value sent is the
///   one it leaves), and the receive's destination to be its own (no other pass reads or
///   writes it, but further forwards of it, which go to the same pass). A receive that
///   cannot be done so makes the launch not flat.
/// - **Merges.** Passes that compute the same thing for several ranks are done once and
///   written to each of them: an all-reduce's ranks each summing the same inputs, a
///   broadcast's or an allgather's receivers each copying the same chunk. A pass is
///   merged only where it stands alone: it reads only inputs (which no pass writes) and
///   no other pass reads or writes any chunk it writes; so it may run in any sequence,
///   at any place, with the same result. Passes merge when their operands are the same
///   chunks in the same order (the first two may be swapped: every reduction is
///   commutative, `a (+) b` is `b (+) a` bit for bit), and take the first one's order
///   and place.
///
/// A pass writes at most `max_dsts` destinations (a forward that would need more makes
/// the launch not flat; merges stop there).
pub fn launch(programs: &[(u32, &FlatProgram)], max_dsts: usize) -> Option<LaunchProgram> {
    use std::collections::{HashMap, HashSet};
    let max_dsts = max_dsts.max(1);
    // Every pass, in launch order: (sequence, pass, a forward's source).
    let mut passes: Vec<(usize, LaunchPass, Option<Loc>)> = Vec::new();
    let mut nseq = 0;
    for &(rank, p) in programs {
        for seq in &p.seqs {
            for pass in seq {
                let ops: Vec<Loc> = pass.ops.iter().map(|op| Loc::of(rank, *op)).collect();
                let forward = match pass.ops[..] {
                    [Operand::PeerOut { .. }] => Some(ops[0]),
                    _ if pass
                        .ops
                        .iter()
                        .any(|o| matches!(o, Operand::PeerOut { .. })) =>
                    {
                        return None
                    }
                    _ => None,
                };
                let dst = Loc {
                    rank,
                    buf: pass.dst_buf,
                    chunk: pass.dst_chunk,
                };
                passes.push((
                    nseq,
                    LaunchPass {
                        dsts: vec![dst],
                        count: pass.count,
                        ops,
                    },
                    forward,
                ));
            }
            nseq += 1;
        }
    }
    // How many passes write each chunk, and read it other than as a forward.
    let chunk_of = |l: Loc, i: u32| (l.rank, l.buf, l.chunk + i);
    let mut writes: HashMap<(u32, u8, u32), u32> = HashMap::new();
    let mut reads: HashSet<(u32, u8, u32)> = HashSet::new();
    for (_, p, fwd) in &passes {
        for i in 0..p.count {
            for d in &p.dsts {
                *writes.entry(chunk_of(*d, i)).or_default() += 1;
            }
            if fwd.is_none() {
                reads.extend(p.ops.iter().map(|o| chunk_of(*o, i)));
            }
        }
    }
    // Chunks written by one pass and read by none (but forwards).
    let only = |l: Loc, count: u32| {
        (0..count)
            .all(|i| writes.get(&chunk_of(l, i)) == Some(&1) && !reads.contains(&chunk_of(l, i)))
    };
    // Forwards, until none is left (a forward of a forward goes to the pass its source
    // went to).
    let mut removed = vec![false; passes.len()];
    loop {
        let mut progress = false;
        let mut left = false;
        for k in 0..passes.len() {
            let Some(src) = passes[k].2.filter(|_| !removed[k]) else {
                continue;
            };
            let count = passes[k].1.count;
            // The one pass that writes the source chunks, whole.
            let writer = (0..passes.len()).find(|&w| {
                w != k
                    && !removed[w]
                    && passes[w].2.is_none()
                    && passes[w].1.count == count
                    && passes[w].1.dsts.contains(&src)
            });
            let sole = (0..count).all(|i| writes.get(&chunk_of(src, i)) == Some(&1));
            let dsts = passes[k].1.dsts.clone();
            let own = dsts.iter().all(|d| d.buf == 1 && only(*d, count));
            match writer {
                Some(w) if sole && own && passes[w].1.dsts.len() + dsts.len() <= max_dsts => {
                    passes[w].1.dsts.extend(dsts);
                    removed[k] = true;
                    progress = true;
                }
                _ => left = true,
            }
        }
        if !left {
            break;
        }
        if !progress {
            return None;
        }
    }
    // Merges.
    let inputs_only = |p: &LaunchPass| {
        p.ops
            .iter()
            .all(|o| o.buf == 0 && (0..p.count).all(|i| !writes.contains_key(&chunk_of(*o, i))))
    };
    let mut out = LaunchProgram::default();
    let mut seq_at: Vec<Option<usize>> = vec![None; nseq];
    let mut open: HashMap<(Vec<Loc>, u32), (usize, usize)> = HashMap::new();
    for (k, (seq, pass, _)) in passes.into_iter().enumerate() {
        if removed[k] {
            continue;
        }
        let alone =
            inputs_only(&pass) && pass.dsts.iter().all(|d| d.buf == 1 && only(*d, pass.count));
        let key = {
            let mut ops = pass.ops.clone();
            if ops.len() >= 2 && ops[1] < ops[0] {
                ops.swap(0, 1);
            }
            (ops, pass.count)
        };
        if alone {
            if let Some(&(s, i)) = open.get(&key) {
                let target: &mut LaunchPass = &mut out.seqs[s][i];
                if target.dsts.len() + pass.dsts.len() <= max_dsts {
                    target.dsts.extend(pass.dsts);
                    if target.dsts.len() == max_dsts {
                        open.remove(&key);
                    }
                    continue;
                }
            }
        }
        let s = *seq_at[seq].get_or_insert_with(|| {
            out.seqs.push(Vec::new());
            out.seqs.len() - 1
        });
        if alone && pass.dsts.len() < max_dsts {
            open.insert(key, (s, out.seqs[s].len()));
        }
        out.seqs[s].push(pass);
    }
    Some(out)
}

/// Where rank `rank`'s `in` and `out` are one place when a call of `collective` is in
/// place, as NCCL lays such calls out: `(a, b)`, `in`'s chunk `a` is `out`'s chunk `b`
/// (an allgather's `in` is its block of `out`, a reduce-scatter's `out` its block of
/// `in`, the others one buffer from the same element). Chunks follow from there alike.
pub fn in_place_anchor(
    collective: braid_ir::Collective,
    rank: u32,
    in_chunks: u32,
    out_chunks: u32,
) -> (u32, u32) {
    use braid_ir::Collective;
    match collective {
        Collective::Allgather => (0, rank * in_chunks),
        Collective::ReduceScatter => (rank * out_chunks, 0),
        _ => (0, 0),
    }
}

/// A range `[start, end)` a task of a launch reads or writes (bytes, or chunks of a
/// rank's buffers laid out one after another), with the task (in launch order) and the
/// sequence it runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    pub start: u64,
    pub end: u64,
    pub task: usize,
    pub seq: usize,
}

/// Whether every read of an input (`reads`) happens before any write to it (`writes`),
/// whatever order a launch's sequences run in: a place read and written is read and
/// written at the same place of a chunk (so by the same thread of the same block) by the
/// same task, or by a later task of the same sequence. Then every read sees the input,
/// as out of place, and the writes are those of the call out of place: the launch may
/// run in place. (Empty ranges touch nothing, wherever they start.)
pub fn reads_before_writes(reads: &[Access], writes: &[Access]) -> bool {
    reads.iter().all(|r| {
        writes.iter().all(|w| {
            r.end <= w.start
                || w.end <= r.start
                || r.start == r.end
                || w.start == w.end
                || (r.start == w.start && (w.task == r.task || (w.seq == r.seq && w.task > r.task)))
        })
    })
}

/// Whether `launch` (every rank of `plan`) may run in place, where a rank's `in` and
/// `out` are one buffer as NCCL lays them out (an allgather's `in` is its block of
/// `out`, a reduce-scatter's `out` its block of `in`, the others one buffer from the same
/// place): [`reads_before_writes`] over the launch's passes, chunk by chunk, the way a
/// backend runs them (each chunk of a pass a task, in order; a copy onto itself skipped).
/// What the cost model prices; a backend checks the addresses it launches with.
pub fn runs_in_place(plan: &Plan, launch: &LaunchProgram) -> bool {
    let (ic, oc) = (u64::from(plan.in_chunks), u64::from(plan.out_chunks));
    // Rank `r`'s buffer as the chunks of its larger buffer, from `r * span` on; its `in`
    // and `out` chunks where NCCL's in-place layout puts them.
    let span = ic.max(oc);
    let at = |l: Loc, i: u32| -> u64 {
        let (a, b) = in_place_anchor(plan.collective, l.rank, plan.in_chunks, plan.out_chunks);
        let c = u64::from(l.chunk + i);
        let within = if l.buf == 0 {
            u64::from(b.max(a)) - u64::from(a) + c
        } else {
            u64::from(a.max(b)) - u64::from(b) + c
        };
        u64::from(l.rank) * span + within
    };
    let (mut reads, mut writes) = (Vec::new(), Vec::new());
    let mut task = 0;
    for (seq, passes) in launch.seqs.iter().enumerate() {
        for p in passes {
            for i in 0..p.count {
                for o in p.ops.iter().filter(|o| o.buf == 0) {
                    let s = at(*o, i);
                    reads.push(Access {
                        start: s,
                        end: s + 1,
                        task,
                        seq,
                    });
                }
                for d in &p.dsts {
                    let s = at(*d, i);
                    // A copy onto itself is nothing (backends skip it).
                    if let [o] = p.ops[..] {
                        if at(o, i) == s {
                            continue;
                        }
                    }
                    writes.push(Access {
                        start: s,
                        end: s + 1,
                        task,
                        seq,
                    });
                }
                task += 1;
            }
        }
    }
    reads_before_writes(&reads, &writes)
}
