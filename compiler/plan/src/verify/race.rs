//! Phase e: no two steps of one rank touch the same physical location, one of them
//! writing, unless happens-before orders them.
//!
//! Happens-before comes from program order inside a block, `deps`, and messages. A step's
//! accesses fall in two groups: *local* accesses (reading `src`; `cpy` and `re` entirely)
//! may happen as soon as the step starts, while *arriving* writes (the `dst` of a receiving
//! step) happen only once data has arrived, i.e. after the sender started. So with
//! vector clocks (one component per block), computed in a topological order:
//!
//! * `begin(X)` = join of `end` of the previous step of X's block and of X's deps;
//! * `arrive(X)` = `begin(X)` joined with `arrive(sender of X)` when X receives;
//! * `end(X)` = `begin(X)` joined with `end(sender of X)`, plus X itself.
//!
//! A local access of X is ordered after step W iff `begin(X)` covers W; an arriving write
//! iff `arrive(X)` does. Conflicts are found per location with the last write and the reads
//! since it (reads ordered before a newer read are dropped), which finds every location
//! that has a race. All modes are checked in the same pass, since happens-before does not
//! depend on the mode.
//!
//! Cost: races happen within one rank, so a clock only needs components for the blocks of
//! the ranks being checked. Ranks are checked in groups of at most [`GROUP_BLOCKS`] blocks;
//! a clock that is still all zeros (no step of the group is in its past) is not stored,
//! and a clock is dropped as soon as no later step needs it. A 64-rank ring is one pass
//! with three components per rank; an all-to-all with tens of thousands of blocks touches
//! only the few steps each group reaches.

use super::connections::Wiring;
use super::index::NONE;
use super::Ctx;
use crate::diag::{Check, PlanDiagnostic};
use crate::plan::{Slice, StepKind};
use braid_ir::{Buf, Layout, Mode};
use std::collections::HashSet;

/// Races reported per mode before the rest are only counted.
const MAX_RACES: usize = 20;

/// Per-location access history for one mode.
struct History {
    last_write: Vec<u32>,
    reads: Vec<Vec<u32>>,
}

/// One access of the step being processed.
#[derive(Clone, Copy)]
struct Access {
    write: bool,
    /// Uses `arrive` rather than `begin`.
    arriving: bool,
    buf: Buf,
    chunk: u32,
}

/// A race found: (earlier step, whether it wrote), later step's access.
struct Found {
    other: u32,
    other_wrote: bool,
    access: Access,
}

fn accesses(kind: StepKind, src: Option<Slice>, dst: Option<Slice>) -> Vec<(Slice, bool, bool)> {
    // (slice, write, arriving)
    let mut v = Vec::new();
    match kind {
        StepKind::Send | StepKind::RecvReduceSend => v.extend(src.map(|s| (s, false, false))),
        StepKind::Recv | StepKind::RecvCopySend => v.extend(dst.map(|d| (d, true, true))),
        StepKind::RecvReduceCopy | StepKind::RecvReduceCopySend => {
            v.extend(src.map(|s| (s, false, false)));
            v.extend(dst.map(|d| (d, true, true)));
        }
        StepKind::Copy => {
            v.extend(src.map(|s| (s, false, false)));
            v.extend(dst.map(|d| (d, true, false)));
        }
        StepKind::Reduce => {
            v.extend(src.map(|s| (s, false, false)));
            v.extend(dst.map(|d| (d, false, false)));
            v.extend(dst.map(|d| (d, true, false)));
        }
        StepKind::Nop => {}
    }
    v
}

/// Clock components per pass: bounds memory to (live clocks) x this.
const GROUP_BLOCKS: usize = 1024;

/// A vector clock over the blocks of one group; `None` is all zeros.
type Clock = Option<Vec<u32>>;

/// `into = max(into, from)`, component-wise.
fn join(into: &mut Clock, from: &Clock) {
    match (into.as_mut(), from) {
        (_, None) => {}
        (None, Some(f)) => *into = Some(f.clone()),
        (Some(i), Some(f)) => {
            for (a, b) in i.iter_mut().zip(f) {
                *a = (*a).max(*b);
            }
        }
    }
}

/// The saved clock of `t` for one more consumer; dropped after its last one.
fn take(saved: &mut [Clock], uses: &mut [u32], t: u32) -> Clock {
    let t = t as usize;
    uses[t] -= 1;
    if uses[t] == 0 {
        saved[t].take()
    } else {
        saved[t].clone()
    }
}

/// Static facts for one group of ranks.
struct Group {
    /// Component of each global block in this group's clocks, or [`NONE`].
    comp: Vec<u32>,
    dim: usize,
    /// Global block and index in block of every step.
    block_of: Vec<u32>,
    index_in_block: Vec<u32>,
}

impl Group {
    /// Whether step `w` (of this group) is ordered before an access with clock `clock`.
    fn before(&self, w: u32, clock: &Clock) -> bool {
        let c = self.comp[self.block_of[w as usize] as usize] as usize;
        clock
            .as_ref()
            .is_some_and(|k| k[c] > self.index_in_block[w as usize])
    }
}

/// Check one access against a location's history and record it.
fn record(
    g: &Group,
    h: &mut History,
    loc: usize,
    x: u32,
    a: Access,
    clock: &Clock,
    found: &mut Vec<Found>,
) {
    let lw = h.last_write[loc];
    if lw != NONE && lw != x && !g.before(lw, clock) {
        found.push(Found {
            other: lw,
            other_wrote: true,
            access: a,
        });
    }
    if a.write {
        for &rd in &h.reads[loc] {
            if rd != x && !g.before(rd, clock) {
                found.push(Found {
                    other: rd,
                    other_wrote: false,
                    access: a,
                });
            }
        }
        h.last_write[loc] = x;
        h.reads[loc].clear();
    } else {
        let reads = &mut h.reads[loc];
        reads.retain(|&rd| rd != x && !g.before(rd, clock));
        reads.push(x);
    }
}

/// How step `g` names `loc` in `layout` (for the other step of a race, which may use an
/// alias).
fn name_of(cx: &Ctx, layout: &Layout, g: u32, loc: usize) -> String {
    let step = cx.ix.step(g);
    let rank = cx.ix.id(g).rank;
    for s in [step.src, step.dst].into_iter().flatten() {
        for i in 0..s.count {
            if layout.loc(s.buf, rank, s.offset + i).map(|l| l.index()) == Some(loc) {
                return format!("{}[{}]", s.buf, s.offset + i);
            }
        }
    }
    "it".to_string()
}

/// Consecutive ranks whose blocks add up to at most [`GROUP_BLOCKS`] (at least one rank).
fn groups(cx: &Ctx) -> Vec<std::ops::Range<u32>> {
    let plan = cx.ix.plan;
    let mut out = Vec::new();
    let (mut start, mut size) = (0u32, 0usize);
    for (r, rp) in plan.ranks.iter().enumerate() {
        let b = rp.blocks.len();
        if size > 0 && size + b > GROUP_BLOCKS {
            out.push(start..r as u32);
            (start, size) = (r as u32, 0);
        }
        size += b;
    }
    out.push(start..plan.ranks.len() as u32);
    out
}

/// Everything found so far, shared by the passes.
struct Findings {
    out: Vec<PlanDiagnostic>,
    seen: HashSet<(u32, u32)>,
    counts: Vec<usize>,
}

pub(crate) fn check(cx: &Ctx, w: &Wiring, order: &[u32]) -> Vec<PlanDiagnostic> {
    let ix = &cx.ix;
    let ns = ix.n_steps();
    // Each location belongs to one rank, so one history serves every group's pass.
    let mut histories: Vec<History> = cx
        .layouts
        .iter()
        .map(|(_, l)| History {
            last_write: vec![NONE; l.num_locs()],
            reads: vec![Vec::new(); l.num_locs()],
        })
        .collect();
    let mut f = Findings {
        out: Vec::new(),
        seen: HashSet::new(),
        counts: vec![0; cx.layouts.len()],
    };
    let block_of: Vec<u32> = (0..ns as u32).map(|g| ix.block_of(g)).collect();
    let index_in_block: Vec<u32> = (0..ns as u32).map(|g| ix.index_in_block(g)).collect();
    let mut group = Group {
        comp: Vec::new(),
        dim: 0,
        block_of,
        index_in_block,
    };
    for ranks in groups(cx) {
        group.comp = vec![NONE; ix.n_blocks()];
        group.dim = 0;
        for r in ranks.clone() {
            for b in 0..ix.plan.ranks[r as usize].blocks.len() as u32 {
                group.comp[ix.gblock(r, b) as usize] = group.dim as u32;
                group.dim += 1;
            }
        }
        pass(cx, w, order, &group, &ranks, &mut histories, &mut f);
    }
    for (m, (mode, _)) in cx.layouts.iter().enumerate() {
        if f.counts[m] > MAX_RACES {
            f.out.push(PlanDiagnostic::new(
                Check::Race,
                crate::diag::Site::Plan,
                format!(
                    "{} more race(s) in mode {} not shown",
                    f.counts[m] - MAX_RACES,
                    mode.name()
                ),
            ));
        }
    }
    f.out
}

/// One sweep over all steps in topological order, checking the accesses of the steps of
/// `ranks` with clocks over those ranks' blocks.
fn pass(
    cx: &Ctx,
    w: &Wiring,
    order: &[u32],
    g: &Group,
    ranks: &std::ops::Range<u32>,
    histories: &mut [History],
    f: &mut Findings,
) {
    let ix = &cx.ix;
    let ns = ix.n_steps();
    // How many later steps still need a step's end clock (dependents and its receiver).
    let mut end_uses = vec![0u32; ns];
    for x in 0..ns as u32 {
        let rank = ix.id(x).rank;
        for d in &ix.step(x).deps {
            end_uses[ix.gid(rank, d.block, d.step) as usize] += 1;
        }
        if w.receiver_of[x as usize] != NONE {
            end_uses[x as usize] += 1;
        }
    }
    let mut arrive_uses: Vec<u32> = w
        .receiver_of
        .iter()
        .map(|&r| u32::from(r != NONE))
        .collect();
    let mut saved_end: Vec<Clock> = vec![None; ns];
    let mut saved_arrive: Vec<Clock> = vec![None; ns];
    let mut block_clock: Vec<Clock> = vec![None; ix.n_blocks()];
    let mut found = Vec::new();

    for &x in order {
        let b = ix.block_of(x) as usize;
        let step = ix.step(x);
        let rank = ix.id(x).rank;
        let mut begin = block_clock[b].take();
        for d in &step.deps {
            let t = ix.gid(rank, d.block, d.step);
            join(&mut begin, &take(&mut saved_end, &mut end_uses, t));
        }
        let sender = w.sender_of[x as usize];
        let arrive: Option<Clock> = (sender != NONE).then(|| {
            let mut a = begin.clone();
            join(&mut a, &take(&mut saved_arrive, &mut arrive_uses, sender));
            a
        });

        if ranks.contains(&rank) {
            let clocks = (&begin, arrive.as_ref().unwrap_or(&begin));
            check_step(cx, g, x, clocks, histories, f, &mut found);
        }

        if w.receiver_of[x as usize] != NONE {
            // What the receiver's arriving writes are ordered after: for a pure send,
            // everything before it started.
            saved_arrive[x as usize] = arrive.unwrap_or_else(|| begin.clone());
        }
        let mut end = begin;
        if sender != NONE {
            join(&mut end, &take(&mut saved_end, &mut end_uses, sender));
        }
        let c = g.comp[b];
        if c != NONE {
            end.get_or_insert_with(|| vec![0; g.dim])[c as usize] =
                g.index_in_block[x as usize] + 1;
        }
        if end_uses[x as usize] > 0 {
            saved_end[x as usize] = end.clone();
        }
        block_clock[b] = end;
    }
}

/// Check and record every access step `x` makes, in every mode.
fn check_step(
    cx: &Ctx,
    g: &Group,
    x: u32,
    (begin, arrive): (&Clock, &Clock),
    histories: &mut [History],
    f: &mut Findings,
    found: &mut Vec<Found>,
) {
    let step = cx.ix.step(x);
    let rank = cx.ix.id(x).rank;
    for (m, (mode, layout)) in cx.layouts.iter().enumerate() {
        let identical_copy = step.kind == StepKind::Copy
            && match (step.src, step.dst) {
                (Some(s), Some(d)) => {
                    layout.loc(s.buf, rank, s.offset) == layout.loc(d.buf, rank, d.offset)
                }
                _ => false,
            };
        if identical_copy {
            continue; // copying a location onto itself touches nothing
        }
        for (slice, write, arriving) in accesses(step.kind, step.src, step.dst) {
            let clock = if arriving { arrive } else { begin };
            for i in 0..slice.count {
                let chunk = slice.offset + i;
                let loc = layout
                    .loc(slice.buf, rank, chunk)
                    .expect("in bounds")
                    .index();
                let a = Access {
                    write,
                    arriving,
                    buf: slice.buf,
                    chunk,
                };
                record(g, &mut histories[m], loc, x, a, clock, found);
                for r in found.drain(..) {
                    if !f.seen.insert((r.other, x)) {
                        continue;
                    }
                    f.counts[m] += 1;
                    if f.counts[m] <= MAX_RACES {
                        f.out.push(report(cx, layout, *mode, x, loc, &r));
                    }
                }
            }
        }
    }
}

/// The diagnostic for a race between step `x` (processed now) and an earlier step.
fn report(cx: &Ctx, layout: &Layout, mode: Mode, x: u32, loc: usize, f: &Found) -> PlanDiagnostic {
    let ix = &cx.ix;
    let rank = ix.id(x).rank;
    let a = f.access;
    let verb = if a.write { "writes" } else { "reads" };
    let other_verb = if f.other_wrote { "writes" } else { "reads" };
    let when = if a.arriving { " as data arrives" } else { "" };
    let other_name = name_of(cx, layout, f.other, loc);
    let here_name = format!("{}[{}]", a.buf, a.chunk);
    let alias = if other_name != here_name && other_name != "it" {
        format!(" (which it calls {other_name})")
    } else {
        String::new()
    };
    ix.at(
        Check::Race,
        x,
        format!(
            "race on {here_name} of rank {rank} in mode {}: this step {verb} it{when}, while {} {other_verb} it{alias}, and nothing orders the two",
            mode.name(),
            ix.id(f.other)
        ),
    )
    .note(format!("the other step is {}", ix.describe(f.other)))
    .note("steps are ordered only by program order within a block, deps, and chains of messages; add a dependency between them")
}
