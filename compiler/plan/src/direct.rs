//! Steps that ranks of one launch can do without the FIFO. When a sender's step sends
//! chunks of its `in` (which an out-of-place call never writes) and the matching receive
//! only stores or reduces them (`recv`, `rrc`), the receiver can read the sender's `in`
//! where the sender would have read it: one pass over the bytes instead of a copy into
//! the FIFO and a copy out of it, and no flag round trip. Whether a call may do so is for
//! the backend to decide when it runs (the CUDA kernel decides per launch, from what both
//! ends see alike); this module marks the pairs of steps that qualify, from the plan
//! alone, and the cost model prices them. Pure data.
//!
//! Pairs come from [`crate::wiring::links`] (the k-th sending step of a connection meets
//! its k-th receiving step). Only connections whose two sequences pair up step by step,
//! each pair moving the same number of chunks, are considered: both ends then cut each
//! pair into the same slices, and leaving a pair out of the FIFO on both ends keeps every
//! other slice where it was.

use crate::plan::{Plan, Slice, Step, StepKind};
use crate::wiring::Link;
use braid_ir::{Buf, Collective, Layout};
use std::collections::{BTreeMap, BTreeSet};

/// A step of a plan: (rank, block, step), each an index.
pub type At = (u32, u32, u32);

/// The steps that may go without the FIFO.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Direct {
    /// Sending steps the sender skips when its receiver reads them itself.
    pub sends: BTreeSet<At>,
    /// Receiving steps that read the sender's `in`, from its chunk `value` on.
    pub recvs: BTreeMap<At, u32>,
    /// Plain receives (`recv`) whose sender sends chunks of its `out`: (sender's rank,
    /// its chunk). Not direct pairs (the sender's `out` is written while the call runs);
    /// a flat launch may still do one as part of the pass that writes those chunks
    /// ([`crate::flat::launch`]). The interpreter keeps them in the FIFO.
    pub forwards: BTreeMap<At, (u32, u32)>,
    /// The sending steps of `forwards`.
    pub forward_sends: BTreeSet<At>,
}

impl Direct {
    /// Whether step `at` is either end of a direct pair.
    pub fn contains(&self, at: At) -> bool {
        self.sends.contains(&at) || self.recvs.contains_key(&at)
    }
}

/// Whether rank index `rank` of `plan` has an `in` it never writes (else no peer may
/// read it while the call runs).
fn lends_in(plan: &Plan, rank: usize) -> bool {
    let rp = &plan.ranks[rank];
    let has_in = !(plan.collective == Collective::Broadcast && plan.root != Some(rp.rank));
    has_in
        && !rp
            .blocks
            .iter()
            .flat_map(|b| &b.steps)
            .any(|s| s.dst.is_some_and(|d| d.buf == Buf::In))
}

/// Whether rank index `rank`'s steps leave its buffer unchanged when the call is in place
/// (`in` and `out` one buffer, from the same element): they never write `in`, and write
/// `out` only by copying the same chunks of `in` (a broadcast root's own copy), which in
/// place is the identity. Such a call may lend its `in` to direct reads while it runs,
/// provided the copies onto themselves are skipped, as the backends do.
pub fn identity_in_place(plan: &Plan, rank: usize) -> bool {
    let Some(rp) = plan.ranks.get(rank) else {
        return false;
    };
    plan.in_chunks == plan.out_chunks
        && rp
            .blocks
            .iter()
            .flat_map(|b| &b.steps)
            .all(|s| match s.dst {
                None => true,
                Some(d) if d.buf == Buf::In || d.buf == Buf::Scratch => false,
                Some(d) => {
                    s.kind == StepKind::Copy
                        && s.src.is_some_and(|src| {
                            src.buf == Buf::In && src.offset == d.offset && src.count == d.count
                        })
                }
            })
}

/// Whether `step` of rank index `rank` copies bytes onto themselves when the call is in
/// place, `in` and `out` aliased as NCCL aliases them (`Layout::loc` of the in-place
/// layout: one buffer for an all-reduce, a rank's `in` at its own place in `out` for an
/// all-gather, ...). The backends skip such a copy (a broadcast root's own copy, an
/// all-gather's own chunk). The same question for a whole layout is
/// `braid_ir::Op::is_identity_in`; `layout` is `plan.layout(Mode::InPlace)`, made once
/// by callers that ask for many steps.
pub fn copies_onto_itself_in_place(plan: &Plan, layout: &Layout, rank: usize, step: &Step) -> bool {
    let (StepKind::Copy, Some(src), Some(dst), Some(rp)) =
        (step.kind, step.src, step.dst, plan.ranks.get(rank))
    else {
        return false;
    };
    let loc = |s: Slice, i: u32| layout.loc(s.buf, rp.rank, s.offset + i);
    src.count == dst.count
        && (0..src.count).all(|i| matches!(loc(src, i), Some(l) if Some(l) == loc(dst, i)))
}

/// The pairs of `plan` that qualify (see the module docs).
pub fn direct(plan: &Plan) -> Direct {
    direct_over(plan, &crate::wiring::links(plan))
}

/// [`direct`], for a caller that has the plan's links already.
pub fn direct_over(plan: &Plan, links: &[Link]) -> Direct {
    let mut out = Direct::default();
    for l in links {
        let (Some((sr, sb)), Some((rr, rb))) = (l.sender, l.receiver) else {
            continue;
        };
        if l.sends.len() != l.recvs.len() {
            continue;
        }
        let lends = lends_in(plan, sr);
        let sblock = &plan.ranks[sr].blocks[sb];
        let rblock = &plan.ranks[rr].blocks[rb];
        let pairs: Vec<_> = l
            .sends
            .iter()
            .zip(&l.recvs)
            .map(|(&s, &r)| (s, &sblock.steps[s], r, &rblock.steps[r]))
            .collect();
        if pairs.iter().any(|(_, s, _, r)| s.count() != r.count()) {
            continue;
        }
        for (si, s, ri, r) in pairs {
            let Some(src) = s.src else { continue };
            let end = u64::from(src.offset) + u64::from(src.count);
            let reads_only = matches!(r.kind, StepKind::Recv | StepKind::RecvReduceCopy);
            let (send, recv) = (
                (sr as u32, sb as u32, si as u32),
                (rr as u32, rb as u32, ri as u32),
            );
            if s.kind != StepKind::Send {
                continue;
            }
            if src.buf == Buf::In && lends && end <= u64::from(plan.in_chunks) && reads_only {
                out.sends.insert(send);
                out.recvs.insert(recv, src.offset);
            } else if src.buf == Buf::Out
                && end <= u64::from(plan.out_chunks)
                && r.kind == StepKind::Recv
            {
                out.forward_sends.insert(send);
                out.forwards.insert(recv, (l.sender_rank, src.offset));
            }
        }
    }
    out
}

/// A chain of reductions of one rank into one destination, each waiting for the one
/// before: a direct receive starts it (`dst = p0`, or `dst = src (+) p0`), and each later
/// step adds one operand: a direct receive-reduce (`dst = dst (+) p1`) or a local reduce
/// (`dst = dst (+) src`). It is how a one-shot reduction is lowered for blocks that
/// each receive from one peer. When every peer of the chain reads directly, the backend
/// may run it as one pass over the destination, reading every operand at once
/// (`src (+) p0 (+) p1 ...`, in the chain's order, so the bits are the chain's), instead
/// of one step per operand, each waiting for the previous one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    /// The rank's index in the plan.
    pub rank: u32,
    /// The steps, in order, as (block, step): the first (the head) is a direct `recv`
    /// or `rrc`; each later one is its block's only step, a direct `rrc` or a `re` into
    /// the head's destination, and depends on exactly the step before it.
    pub steps: Vec<(u32, u32)>,
    /// Whether the one pass may be shared among the chain's blocks (each its part of the
    /// destination, none waiting for another): nothing comes before the head (it is its
    /// block's first step and waits for no other) and every operand is an input (a
    /// peer's `in` read directly, or the rank's own `in`), so what every block reads
    /// is there when the call starts. No step waits for a chain's steps but its own
    /// links, and every link is its block's only step: only the call's end needs the
    /// destination whole.
    pub splits: bool,
}

impl Chain {
    /// How many operands the chain combines: one per step, and the head's own source
    /// too when it reduces (`dst = src (+) p0`).
    pub fn operands(&self, plan: &Plan) -> usize {
        let (b, s) = self.steps[0];
        let head = &plan.ranks[self.rank as usize].blocks[b as usize].steps[s as usize];
        self.steps.len() + usize::from(head.kind == StepKind::RecvReduceCopy)
    }
}

/// The chains of `plan` (see [`Chain`]), given its direct pairs: maximal, of two steps
/// or more, and none that another step depends on (a step that waited for a link of
/// the chain would see the destination half reduced; run as one pass, it would not).
pub fn chains(plan: &Plan, direct: &Direct) -> Vec<Chain> {
    chains_with(plan, direct, false)
}

/// [`chains`] as a flat launch takes them ([`crate::flat`]), whose passes never wait for
/// each other's blocks: a link may also be the first of several steps of its block,
/// where the later ones touch nothing of the chain's destination, and sends may wait for
/// the last link (a flat launch does them as part of the chain's pass, or they do
/// nothing). A two-shot all-reduce's first shot is such a chain: each block that adds a
/// peer's block then receives another rank's result.
pub fn flat_chains(plan: &Plan, direct: &Direct) -> Vec<Chain> {
    chains_with(plan, direct, true)
}

fn chains_with(plan: &Plan, direct: &Direct, flat: bool) -> Vec<Chain> {
    let mut out = Vec::new();
    for (ri, rp) in plan.ranks.iter().enumerate() {
        let r = ri as u32;
        let step = |(b, s): (u32, u32)| &rp.blocks[b as usize].steps[s as usize];
        let direct_recv = |at: (u32, u32)| direct.recvs.contains_key(&(r, at.0, at.1));
        let head = |at: (u32, u32)| {
            let st = step(at);
            direct_recv(at)
                && matches!(st.kind, StepKind::Recv | StepKind::RecvReduceCopy)
                && st.dst.is_some()
        };
        // How many steps wait for each step (sends apart, where flat), and which steps
        // sends wait for.
        let mut waiters: BTreeMap<(u32, u32), u32> = BTreeMap::new();
        let mut send_waited: BTreeSet<(u32, u32)> = BTreeSet::new();
        for st in rp.blocks.iter().flat_map(|b| &b.steps) {
            for d in &st.deps {
                if flat && st.kind == StepKind::Send {
                    send_waited.insert((d.block, d.step));
                } else {
                    *waiters.entry((d.block, d.step)).or_insert(0) += 1;
                }
            }
        }
        // next[x] = y: y adds one operand to x's destination after x.
        let mut next: BTreeMap<(u32, u32), Option<(u32, u32)>> = BTreeMap::new();
        for (bi, b) in rp.blocks.iter().enumerate() {
            let y = (bi as u32, 0u32);
            let s = match b.steps.as_slice() {
                [s] => s,
                [s, ..] if flat => s,
                _ => continue,
            };
            let [d] = s.deps.as_slice() else { continue };
            let x = (d.block, d.step);
            let adds = match s.kind {
                StepKind::RecvReduceCopy => direct_recv(y) && s.src == s.dst,
                StepKind::Reduce => s.src.is_some() && s.src != s.dst,
                _ => false,
            };
            let Some(xs) = rp
                .blocks
                .get(x.0 as usize)
                .and_then(|b| b.steps.get(x.1 as usize))
            else {
                continue;
            };
            if !adds || x.0 == y.0 || s.dst.is_none() || s.dst != xs.dst {
                continue;
            }
            // Two steps continuing one: neither does.
            next.entry(x).and_modify(|n| *n = None).or_insert(Some(y));
        }
        let next: BTreeMap<_, _> = next
            .into_iter()
            .filter_map(|(x, y)| y.map(|y| (x, y)))
            .collect();
        let continued: BTreeSet<_> = next.values().copied().collect();
        for &first in next.keys().filter(|x| !continued.contains(x)) {
            if !head(first) {
                continue;
            }
            let mut steps = vec![first];
            let mut at = first;
            while let Some(&y) = next.get(&at) {
                if steps.contains(&y) {
                    break;
                }
                steps.push(y);
                at = y;
            }
            // Only the chain's own links wait for its steps.
            let inner = |k: usize| u32::from(k + 1 < steps.len());
            let closed = steps
                .iter()
                .enumerate()
                .all(|(k, s)| waiters.get(s).copied().unwrap_or(0) == inner(k))
                && steps[..steps.len() - 1]
                    .iter()
                    .all(|s| !send_waited.contains(s));
            // A link's later steps (flat) keep off the chain's destination.
            let dst = step(first).dst;
            let apart = |x: Option<crate::plan::Slice>| match (x, dst) {
                (Some(a), Some(d)) => {
                    a.buf != d.buf
                        || a.offset + a.count <= d.offset
                        || d.offset + d.count <= a.offset
                }
                _ => true,
            };
            let closed = closed
                && steps[1..].iter().all(|&(b, _)| {
                    rp.blocks[b as usize].steps[1..]
                        .iter()
                        .all(|st| apart(st.src) && apart(st.dst))
                });
            if steps.len() >= 2 && closed {
                // A direct receive's operand is its peer's `in`; a head that reduces and
                // every local reduce add their own `src`.
                let own_inputs = steps.iter().all(|&at| {
                    let st = step(at);
                    let own = !direct_recv(at) || (at == first && st.kind != StepKind::Recv);
                    !own || st.src.is_some_and(|s| s.buf == Buf::In)
                });
                let splits = first.1 == 0 && step(first).deps.is_empty() && own_inputs;
                out.push(Chain {
                    rank: r,
                    steps,
                    splits,
                });
            }
        }
    }
    out
}
