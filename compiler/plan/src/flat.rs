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

/// Bytes of a chunk each part of a pass gets at least: a backend cuts a larger chunk into
/// parts, each run by a block of its own (the CUDA backend's flat launches, and the cost
/// model's price for them).
pub const PART_BYTES: u64 = 64 << 10;

/// One operand of a pass: the rank's own `in`, `out` or scratch (0, 1, 2) from chunk `chunk` on,
/// or a peer's `in` from chunk `chunk` on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operand {
    Own { buf: u8, chunk: u32 },
    Peer { rank: u32, chunk: u32 },
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

/// `rank`'s chains ([`crate::direct::chains`]) with their operands, those of at most
/// `max` operands and steps (what one pass of a backend takes).
pub fn rank_chains(plan: &Plan, rank: u32, direct: &Direct, max: usize) -> Vec<RankChain> {
    let Some(rp) = plan.ranks.get(rank as usize) else {
        return Vec::new();
    };
    crate::direct::chains(plan, direct)
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
    let chains = rank_chains(plan, rank, direct, max_ops);
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
                    StepKind::Send if direct.sends.contains(&dat) => {
                        out.read_by.push(b.send_peer?);
                        None
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
    out.read_by.sort_unstable();
    out.read_by.dedup();
    Some(out)
}
