//! Flat launches: a call that the ranks of one launch can do entirely by reading each
//! other's inputs runs as a short list of passes (`dst = op0 (+) op1 (+) ...`, element by
//! element), given to a small kernel (`braid_flat`) in its launch arguments, instead of
//! through the plan interpreter.
//!
//! The interpreter already lets such a call skip its FIFOs (direct pairs, chains as one
//! pass: [`braid_plan::direct`]), but every block still loads its table, its descriptor
//! and its step program before its first step, each a dependent round trip to memory, and
//! runs through a large kernel whose instructions are fetched cold: for a small call that
//! is most of its time. Here the host resolves the plan's steps to addresses when it
//! launches (it knows every rank's buffers), so a block reads its whole program from the
//! kernel's parameters and its first load is data.
//!
//! A rank's plan qualifies when [`braid_plan::flat::program`] makes it a flat program
//! (every step a direct read, a chain run as one pass, a local copy or reduce, a receive
//! of what a peer wrote, or a send its receiver reads itself; see there). The ranks of a
//! launch run as one launch program ([`braid_plan::flat::launch`]: a receive of what a
//! peer wrote done by the pass that writes it, passes several ranks share done once,
//! written to each). A launch runs flat ([`resolve`]) when every rank of it qualifies,
//! every peer it reads or is read by is in the launch with the buffers read, all run one
//! plan on one geometry, and, where some call is in place, every read of an input
//! happens before any write to it ([`braid_plan::flat::reads_before_writes`], on the
//! addresses launched). The passes keep the operand order of the steps they replace, so
//! the bits are the interpreter's.

use braid_plan::flat::Access;
pub use braid_plan::flat::{FlatProgram, LaunchProgram, Loc, Operand};
use braid_runtime::geometry::Geometry;

/// What one flat launch holds: sequences, passes over one chunk, operands of those
/// passes ([`braid_plan::flat`], which the cost model prices with).
pub use braid_plan::flat::{MAX_OPS, MAX_SEQS, MAX_TASKS};
/// Operands of one pass (the kernel's `FUSE_MAX`).
pub const MAX_PASS_OPS: usize = crate::kernel::MAX_LOCAL;

/// `rank`'s plan as a flat program for this backend, where it qualifies.
pub fn program(
    plan: &braid_plan::Plan,
    rank: u32,
    direct: &braid_plan::direct::Direct,
) -> Option<FlatProgram> {
    braid_plan::flat::program(plan, rank, direct, MAX_PASS_OPS)
}

/// One rank's call in a launch, as [`resolve`] needs it.
#[derive(Clone, Copy, Debug)]
pub struct RankCall<'a> {
    pub rank: u32,
    pub program: &'a FlatProgram,
    pub input: u64,
    pub output: u64,
    pub geometry: &'a Geometry,
    /// The plan's digest (with replicas): calls of one launch read each other only when
    /// they run the same plan.
    pub plan: u64,
    /// The call never writes its `in` (out of place). Where a call does (in place), the
    /// launch runs flat only if no pass writes an input before every read of it.
    pub in_untouched: bool,
    pub avg: bool,
}

/// The kernel's `FlatTask`: one pass over one chunk.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlatTask {
    pub dst: u64,
    /// Elements of the chunk that exist at `dst` (the rest is padding, not written).
    pub valid: u32,
    pub op0: u16,
    /// Operands `op[op0 .. op0 + nops)`.
    pub nops: u8,
    /// Destinations: `dst`, then `op[op0 + nops .. op0 + nops + ndst - 1)` (the same
    /// valid length).
    pub ndst: u8,
}

/// The kernel's `FlatOp`: one operand of a pass over one chunk.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlatOp {
    pub ptr: u64,
    /// Elements of the chunk that exist there (the rest reads as zero).
    pub valid: u64,
}

/// A resolved flat launch: grid block `b` runs part `b % parts` of every chunk of
/// sequence `b / parts`'s passes, in order. The kernel takes it packed ([`FlatLaunch::pack`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlatLaunch {
    pub nseq: u32,
    pub parts: u32,
    pub chunk_elems: u64,
    pub first: [u16; MAX_SEQS + 1],
    pub task: [FlatTask; MAX_TASKS],
    pub op: [FlatOp; MAX_OPS],
}

impl Default for FlatLaunch {
    fn default() -> Self {
        FlatLaunch {
            nseq: 0,
            parts: 1,
            chunk_elems: 0,
            first: [0; MAX_SEQS + 1],
            task: [FlatTask::default(); MAX_TASKS],
            op: [FlatOp::default(); MAX_OPS],
        }
    }
}

impl FlatLaunch {
    /// Grid blocks of the launch.
    pub fn grid(&self) -> u32 {
        self.nseq * self.parts
    }

    /// Tasks of the launch.
    pub fn tasks(&self) -> usize {
        self.first[self.nseq as usize] as usize
    }

    /// Operands the launch's tasks use (they use `op[..ops()]`).
    pub fn ops(&self) -> usize {
        self.task[..self.tasks()]
            .iter()
            .map(|t| t.op0 as usize + t.nops as usize + t.ndst as usize - 1)
            .max()
            .unwrap_or(0)
    }

    /// The launch as the kernel takes it: its sequences, tasks and operands packed after
    /// the head, in the smallest of the kernel's arguments that holds them (`full`: the
    /// largest whatever the launch, for comparisons).
    pub fn pack(&self, full: bool) -> Packed {
        let (nseq, nt, no) = (self.nseq as usize, self.tasks(), self.ops());
        let braid_plan::flat::ArgLayout {
            task_at,
            op_at,
            words,
        } = braid_plan::flat::arg_layout(nseq, nt, no);
        let head = FlatHead {
            nseq: self.nseq,
            parts: self.parts,
            chunk_elems: self.chunk_elems,
            task_at: task_at as u32,
            op_at: op_at as u32,
        };
        let fill = |w: &mut [u64]| {
            for (i, f) in self.first[..=nseq].iter().enumerate() {
                w[i / 4] |= u64::from(*f) << (16 * (i % 4));
            }
            for (i, t) in self.task[..nt].iter().enumerate() {
                let at = task_at / 8 + 2 * i;
                w[at] = t.dst;
                w[at + 1] = u64::from(t.valid)
                    | u64::from(t.op0) << 32
                    | u64::from(t.nops) << 48
                    | u64::from(t.ndst) << 56;
            }
            for (i, o) in self.op[..no].iter().enumerate() {
                let at = op_at / 8 + 2 * i;
                w[at] = o.ptr;
                w[at + 1] = o.valid;
            }
        };
        if !full && words <= WORDS_S {
            let mut a = FlatArgs {
                head,
                w: [0; WORDS_S],
            };
            fill(&mut a.w);
            Packed::S(a)
        } else if !full && words <= WORDS_M {
            let mut a = FlatArgs {
                head,
                w: [0; WORDS_M],
            };
            fill(&mut a.w);
            Packed::M(a)
        } else {
            let mut a = FlatArgs {
                head,
                w: [0; WORDS_L],
            };
            fill(&mut a.w);
            Packed::L(a)
        }
    }
}

/// The head of the kernel's argument (`FlatHead`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlatHead {
    pub nseq: u32,
    pub parts: u32,
    pub chunk_elems: u64,
    /// Byte offsets in `w` of the tasks and of the operands.
    pub task_at: u32,
    pub op_at: u32,
}

/// The kernel's argument (`FlatArgs<W>`): the head, then `W` words holding the
/// sequences' first tasks (16 bits each), the tasks and the operands.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlatArgs<const W: usize> {
    pub head: FlatHead,
    pub w: [u64; W],
}

/// Words of the kernel's three arguments (`FLAT_WORDS_S`, `_M`, `_L`:
/// [`braid_plan::flat::ARG_WORDS`]).
pub const WORDS_S: usize = braid_plan::flat::ARG_WORDS[0];
pub const WORDS_M: usize = braid_plan::flat::ARG_WORDS[1];
pub const WORDS_L: usize = braid_plan::flat::ARG_WORDS[2];

// `w` follows the head, as in the kernel's `FlatArgs`, whose size the plan's layout uses.
const _: () =
    assert!(std::mem::offset_of!(FlatArgs<WORDS_S>, w) == std::mem::size_of::<FlatHead>());
const _: () = assert!(std::mem::size_of::<FlatHead>() == braid_plan::flat::ARG_HEAD_BYTES);

/// A flat launch packed for one of the kernel's entry points. Made on the stack for one
/// launch (boxing the larger ones would allocate on every call).
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug)]
pub enum Packed {
    /// `braid_flat_s`.
    S(FlatArgs<WORDS_S>),
    /// `braid_flat_m`.
    M(FlatArgs<WORDS_M>),
    /// `braid_flat`.
    L(FlatArgs<WORDS_L>),
}

impl Packed {
    /// Bytes of the kernel's parameter.
    pub fn bytes(&self) -> usize {
        match self {
            Packed::S(a) => std::mem::size_of_val(a),
            Packed::M(a) => std::mem::size_of_val(a),
            Packed::L(a) => std::mem::size_of_val(a),
        }
    }

    fn parts(&self) -> (&FlatHead, &[u64]) {
        match self {
            Packed::S(a) => (&a.head, &a.w),
            Packed::M(a) => (&a.head, &a.w),
            Packed::L(a) => (&a.head, &a.w),
        }
    }

    /// The launch read back as the kernel reads it (for tests).
    pub fn unpack(&self) -> FlatLaunch {
        let (h, w) = self.parts();
        let mut l = FlatLaunch {
            nseq: h.nseq,
            parts: h.parts,
            chunk_elems: h.chunk_elems,
            ..FlatLaunch::default()
        };
        let nseq = h.nseq as usize;
        for i in 0..=nseq {
            l.first[i] = (w[i / 4] >> (16 * (i % 4))) as u16;
        }
        let nt = l.first[nseq] as usize;
        for i in 0..nt {
            let at = h.task_at as usize / 8 + 2 * i;
            l.task[i] = FlatTask {
                dst: w[at],
                valid: w[at + 1] as u32,
                op0: (w[at + 1] >> 32) as u16,
                nops: (w[at + 1] >> 48) as u8,
                ndst: (w[at + 1] >> 56) as u8,
            };
        }
        let no = l.ops();
        for i in 0..no {
            let at = h.op_at as usize / 8 + 2 * i;
            l.op[i] = FlatOp {
                ptr: w[at],
                valid: w[at + 1],
            };
        }
        l
    }
}

/// The layout checked against the kernel's structures (as [`crate::program::LAYOUT`]).
pub const FLAT_LAYOUT: &[(&str, &str, usize)] = &[
    ("FlatTask", "dst", std::mem::offset_of!(FlatTask, dst)),
    ("FlatTask", "valid", std::mem::offset_of!(FlatTask, valid)),
    ("FlatTask", "op0", std::mem::offset_of!(FlatTask, op0)),
    ("FlatTask", "nops", std::mem::offset_of!(FlatTask, nops)),
    ("FlatTask", "ndst", std::mem::offset_of!(FlatTask, ndst)),
    ("FlatTask", "sizeof", std::mem::size_of::<FlatTask>()),
    ("FlatOp", "ptr", std::mem::offset_of!(FlatOp, ptr)),
    ("FlatOp", "valid", std::mem::offset_of!(FlatOp, valid)),
    ("FlatOp", "sizeof", std::mem::size_of::<FlatOp>()),
    ("FlatHead", "nseq", std::mem::offset_of!(FlatHead, nseq)),
    ("FlatHead", "parts", std::mem::offset_of!(FlatHead, parts)),
    (
        "FlatHead",
        "chunk_elems",
        std::mem::offset_of!(FlatHead, chunk_elems),
    ),
    (
        "FlatHead",
        "task_at",
        std::mem::offset_of!(FlatHead, task_at),
    ),
    ("FlatHead", "op_at", std::mem::offset_of!(FlatHead, op_at)),
    ("FlatHead", "sizeof", std::mem::size_of::<FlatHead>()),
];

/// A launch program ([`braid_plan::flat::launch`]) with what resolving it needs of its
/// plan.
#[derive(Clone, Debug)]
pub struct Program {
    pub launch: LaunchProgram,
    collective: braid_ir::Collective,
    n: u32,
    in_chunks: u32,
    out_chunks: u32,
    /// The plan's verdict ([`braid_plan::flat::runs_in_place`]): the launch may run in
    /// place where the buffers are laid out as NCCL lays out calls in place.
    in_place: bool,
    /// Of every rank's program, the ranks whose `in` it reads, whose `out` it reads, and
    /// that read it: each must be in the launch (with that buffer), as once for all.
    reads: Vec<u32>,
    reads_out: Vec<u32>,
    read_by: Vec<u32>,
    /// The last launch resolved from it and what it was resolved for
    /// ([`Program::resolve_cached`]).
    last: LastResolved,
}

/// What a launch was resolved for: every call's rank, plan, buffers and flags, the
/// geometry and the grid cap (everything [`resolve_program`] reads besides the program).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ResolvedFor {
    n: usize,
    calls: [(u32, u64, u64, u64, bool, bool); crate::kernel::MAX_LOCAL],
    geometry: Geometry,
    max_grid: u32,
}

impl ResolvedFor {
    fn of(calls: &[RankCall<'_>], max_grid: u32) -> Option<ResolvedFor> {
        let first = calls.first()?;
        let mut key = ResolvedFor {
            n: calls.len(),
            calls: [(0, 0, 0, 0, false, false); crate::kernel::MAX_LOCAL],
            geometry: *first.geometry,
            max_grid,
        };
        for (slot, c) in key.calls.iter_mut().zip(calls) {
            *slot = (c.rank, c.plan, c.input, c.output, c.in_untouched, c.avg);
        }
        (calls.len() <= crate::kernel::MAX_LOCAL
            && calls.iter().all(|c| *c.geometry == *first.geometry))
        .then_some(key)
    }
}

/// The last launch a program resolved (a new program's is empty; a copy of a program
/// starts empty too).
#[derive(Debug, Default)]
struct LastResolved(std::sync::Mutex<Option<(ResolvedFor, Option<FlatLaunch>)>>);

impl Clone for LastResolved {
    fn clone(&self) -> Self {
        LastResolved::default()
    }
}

/// The launch program of `calls` of `plan` (their programs, with receives done by the
/// pass that writes what they receive and the passes several ranks share done once), or
/// `None` where they cannot run as one. `max_dsts`: destinations a pass writes at most
/// (at most [`MAX_PASS_OPS`]).
pub fn launch_program(
    plan: &braid_plan::Plan,
    calls: &[RankCall<'_>],
    max_dsts: usize,
) -> Option<Program> {
    let programs: Vec<(u32, &FlatProgram)> = calls.iter().map(|c| (c.rank, c.program)).collect();
    let launch = braid_plan::flat::launch(&programs, max_dsts.min(MAX_PASS_OPS))?;
    let union = |of: fn(&FlatProgram) -> &Vec<u32>| -> Vec<u32> {
        let mut v: Vec<u32> = programs
            .iter()
            .flat_map(|(_, p)| of(p).iter().copied())
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    Some(Program {
        in_place: braid_plan::flat::runs_in_place(plan, &launch),
        collective: plan.collective,
        n: plan.n_ranks,
        in_chunks: plan.in_chunks,
        out_chunks: plan.out_chunks,
        reads: union(|p| &p.reads),
        reads_out: union(|p| &p.reads_out),
        read_by: union(|p| &p.read_by),
        launch,
        last: LastResolved::default(),
    })
}

impl Program {
    /// The plan's verdict on running in place ([`braid_plan::flat::runs_in_place`]).
    pub fn runs_in_place(&self) -> bool {
        self.in_place
    }

    /// [`resolve_program`] of `calls` with this program, taken from the last launch it
    /// resolved where that was for the same calls (ranks, plans, buffers, flags,
    /// geometry) and grid cap: an application that calls again on the same buffers, as
    /// training loops do, does not resolve the same passes again.
    pub fn resolve_cached(&self, calls: &[RankCall<'_>], max_grid: u32) -> Option<FlatLaunch> {
        let Some(key) = ResolvedFor::of(calls, max_grid) else {
            return resolve_program(calls, self, max_grid);
        };
        if let Ok(last) = self.last.0.lock() {
            if let Some((k, l)) = &*last {
                if *k == key {
                    return *l;
                }
            }
        }
        let l = resolve_program(calls, self, max_grid);
        if let Ok(mut last) = self.last.0.lock() {
            *last = Some((key, l));
        }
        l
    }

    /// The same program without the plan's verdict: a launch in place is checked on its
    /// addresses whatever they are (what the verdict stands for, which tests compare).
    pub fn checked_on_addresses(mut self) -> Program {
        self.in_place = false;
        self
    }
}

/// The flat launch of `calls` (every rank of one launch) of `plan`, or `None` where it
/// may not run flat (module docs) or does not fit the kernel's argument. `max_grid`:
/// grid blocks it may take at most (parts are cut to fit).
pub fn resolve(
    plan: &braid_plan::Plan,
    calls: &[RankCall<'_>],
    max_grid: u32,
) -> Option<FlatLaunch> {
    resolve_program(
        calls,
        &launch_program(plan, calls, braid_plan::flat::MAX_DSTS)?,
        max_grid,
    )
}

/// Whether the calls' buffers lie as the plan's verdict on running in place assumes:
/// each call's `in` and `out` apart, or one place as NCCL lays a call in place out
/// ([`braid_plan::flat::in_place_anchor`]), and no two calls' buffers overlapping.
fn laid_out_as_planned(calls: &[RankCall<'_>], prog: &Program) -> bool {
    let g = calls[0].geometry;
    let elem = g.elem as u64;
    let (ie, oe) = braid_runtime::geometry::buffer_elems(prog.collective, prog.n, g.count);
    let mut extents = Vec::with_capacity(2 * calls.len());
    for c in calls {
        let i = (c.input, c.input + ie as u64 * elem);
        let o = (c.output, c.output + oe as u64 * elem);
        match (c.input != 0, c.output != 0) {
            (true, true) if i.0 < o.1 && o.0 < i.1 => {
                let (a, b) = braid_plan::flat::in_place_anchor(
                    prog.collective,
                    c.rank,
                    prog.in_chunks,
                    prog.out_chunks,
                );
                if c.input + g.span(a).start as u64 * elem
                    != c.output + g.span(b).start as u64 * elem
                {
                    return false;
                }
                extents.push((i.0.min(o.0), i.1.max(o.1)));
            }
            (has_in, has_out) => {
                if has_in {
                    extents.push(i);
                }
                if has_out {
                    extents.push(o);
                }
            }
        }
    }
    extents.sort_unstable();
    extents.windows(2).all(|w| w[0].1 <= w[1].0)
}

/// [`resolve`] with the calls' launch program ([`launch_program`] of the same calls).
pub fn resolve_program(
    calls: &[RankCall<'_>],
    prog: &Program,
    max_grid: u32,
) -> Option<FlatLaunch> {
    let first = calls.first()?;
    let g = first.geometry;
    let elem = g.elem as u64;
    // One geometry and one plan for all (what `direct_pair` checks on the device), no
    // avg (its division needs every pass done), chunk lengths the task's u32 holds.
    if calls
        .iter()
        .any(|c| c.plan != first.plan || c.geometry != g || c.avg)
        || g.chunk_elems > u32::MAX as usize
        || g.round_elems != g.chunk_elems
    {
        return None;
    }
    // Calls usually come in rank order, one per rank from the first: found by position,
    // else by search.
    let base = first.rank;
    let call_of = |r: u32| match calls.get(r.wrapping_sub(base) as usize) {
        Some(c) if c.rank == r => Some(c),
        _ => calls.iter().find(|c| c.rank == r),
    };
    // `prog` is these calls' launch program: the ranks it reads and that read it are
    // here, with the buffers read.
    for &r in &prog.reads {
        if call_of(r).is_none_or(|p| p.input == 0) {
            return None;
        }
    }
    for &r in &prog.reads_out {
        if call_of(r).is_none_or(|p| p.output == 0) {
            return None;
        }
    }
    for &r in &prog.read_by {
        call_of(r)?;
    }
    let nseq = prog.launch.seqs.len();
    if nseq == 0 || nseq > MAX_SEQS {
        return None;
    }
    let mut l = FlatLaunch {
        nseq: nseq as u32,
        chunk_elems: g.chunk_elems as u64,
        ..FlatLaunch::default()
    };
    // In place, some call writes where it or its peers read: the launch is checked, on
    // its addresses, unless the plan's verdict applies to how the buffers lie.
    let checked = calls.iter().any(|c| !c.in_untouched)
        && !(prog.in_place && laid_out_as_planned(calls, prog));
    let mut hazards = Hazards::default();
    let (mut nt, mut no) = (0usize, 0usize);
    let at = |l: Loc, i: u32| -> Option<(u64, u64)> {
        let c = call_of(l.rank)?;
        let base = if l.buf == 0 { c.input } else { c.output };
        if base == 0 {
            return None;
        }
        let sp = g.span(l.chunk + i);
        Some((base + sp.start as u64 * elem, sp.valid as u64))
    };
    for (s, seq) in prog.launch.seqs.iter().enumerate() {
        l.first[s] = nt as u16;
        for p in seq {
            for i in 0..p.count {
                // Destinations first: a chunk that is padding only (a small call's empty
                // chunks) has nothing to write, and its operands need no resolving.
                let mut dsts = [(0u64, 0u64); MAX_PASS_OPS];
                let mut nd = 0;
                for d in &p.dsts {
                    let (ptr, valid) = at(*d, i)?;
                    if valid > 0 {
                        *dsts.get_mut(nd)? = (ptr, valid);
                        nd += 1;
                    }
                }
                if nd == 0 {
                    continue;
                }
                let mut ops = [FlatOp::default(); MAX_PASS_OPS];
                for (k, op) in p.ops.iter().enumerate() {
                    let (ptr, valid) = at(*op, i)?;
                    *ops.get_mut(k)? = FlatOp { ptr, valid };
                }
                let ops = &ops[..p.ops.len()];
                // A copy onto itself (in place): nothing to do, and nothing may be
                // written where peers read.
                if let [only] = ops {
                    let mut kept = 0;
                    for k in 0..nd {
                        if dsts[k].0 != only.ptr {
                            dsts[kept] = dsts[k];
                            kept += 1;
                        }
                    }
                    nd = kept;
                }
                // One task per run of destinations with the same valid length (the
                // task's), in order.
                let mut dsts = &mut dsts[..nd];
                while let Some(&(_, valid)) = dsts.first() {
                    let same = dsts.iter().take_while(|d| d.1 == valid).count();
                    let (these, rest) = dsts.split_at_mut(same);
                    if nt == MAX_TASKS || no + ops.len() + these.len() - 1 > MAX_OPS {
                        return None;
                    }
                    l.task[nt] = FlatTask {
                        dst: these[0].0,
                        valid: valid as u32,
                        op0: no as u16,
                        nops: ops.len() as u8,
                        ndst: these.len() as u8,
                    };
                    for (k, o) in ops.iter().enumerate() {
                        l.op[no] = *o;
                        no += 1;
                        if checked && p.ops[k].buf == 0 {
                            let len = o.valid.min(g.chunk_elems as u64) * elem;
                            hazards.reads.push(Access {
                                start: o.ptr,
                                end: o.ptr + len,
                                task: nt,
                                seq: s,
                            });
                        }
                    }
                    for &(ptr, v) in these.iter() {
                        if ptr != these[0].0 {
                            l.op[no] = FlatOp { ptr, valid: v };
                            no += 1;
                        }
                        if checked {
                            hazards.writes.push(Access {
                                start: ptr,
                                end: ptr + v * elem,
                                task: nt,
                                seq: s,
                            });
                        }
                    }
                    nt += 1;
                    dsts = rest;
                }
            }
        }
    }
    l.first[nseq] = nt as u16;
    if checked && !hazards.none() {
        return None;
    }
    let chunk_bytes = (g.chunk_elems * g.elem) as u64;
    l.parts = braid_plan::flat::parts(
        chunk_bytes,
        prog.launch.accesses(),
        nseq as u64,
        u64::from(max_grid),
    ) as u32;
    Some(l)
}

/// The reads of inputs and the writes of a launch whose calls may write where they or
/// their peers read (in place), in bytes ([`braid_plan::flat::reads_before_writes`]).
#[derive(Default)]
struct Hazards {
    reads: Vec<Access>,
    writes: Vec<Access>,
}

impl Hazards {
    fn none(&self) -> bool {
        braid_plan::flat::reads_before_writes(&self.reads, &self.writes)
    }
}

/// What the kernel does with a flat launch, on host memory: the addresses are byte
/// offsets into `mem` (elements of `elem` bytes), which the tests check results with.
/// Grid blocks run one after another, so a launch whose sequences raced would not show it
/// here: the plan verifier rules that out for the steps the passes replace, `launch` for
/// the passes it moves, and [`resolve`]'s check for calls in place.
pub fn emulate<T: Copy + Default>(
    l: &FlatLaunch,
    mem: &mut [T],
    elem: usize,
    combine: impl Fn(T, T) -> T,
) {
    let unit = braid_runtime::geometry::unit(elem) as u64;
    let per = (l.chunk_elems.div_ceil(l.parts as u64)).div_ceil(unit) * unit;
    for b in 0..l.grid() {
        let (s, p) = ((b / l.parts) as usize, b % l.parts);
        let from = (per * p as u64).min(l.chunk_elems);
        let to = (from + per).min(l.chunk_elems);
        for t in &l.task[l.first[s] as usize..l.first[s + 1] as usize] {
            let dv = (t.valid as u64).min(to).saturating_sub(from);
            let nops = t.nops as usize;
            let all = &l.op[t.op0 as usize..t.op0 as usize + nops + t.ndst as usize - 1];
            let (ops, extra) = all.split_at(nops);
            for e in 0..dv {
                let at = from + e;
                let val = |o: &FlatOp| {
                    if at < o.valid {
                        mem[(o.ptr / elem as u64 + at) as usize]
                    } else {
                        T::default()
                    }
                };
                let mut acc = val(&ops[0]);
                for o in &ops[1..] {
                    acc = combine(acc, val(o));
                }
                mem[(t.dst / elem as u64 + at) as usize] = acc;
                for d in extra {
                    mem[(d.ptr / elem as u64 + at) as usize] = acc;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A launch of `nseq` sequences, `nt` tasks and `no` operands, every field distinct.
    fn launch(nseq: usize, nt: usize, no: usize) -> FlatLaunch {
        let mut l = FlatLaunch {
            nseq: nseq as u32,
            parts: 3,
            chunk_elems: 1 << 40,
            ..FlatLaunch::default()
        };
        for s in 0..=nseq {
            l.first[s] = (s * nt / nseq) as u16;
        }
        // Operands shared out in order; the last task takes what is left.
        let per = no / nt;
        for t in 0..nt {
            let take = if t + 1 == nt { no - per * t } else { per };
            l.task[t] = FlatTask {
                dst: 0xdead_0000_0000 + t as u64,
                valid: 0x8000_0000 | t as u32,
                op0: (per * t) as u16,
                nops: 1,
                ndst: take as u8,
            };
        }
        for o in 0..no {
            l.op[o] = FlatOp {
                ptr: 0xbeef_0000_0000_0000 | o as u64,
                valid: u64::MAX - o as u64,
            };
        }
        l
    }

    fn variant(p: &Packed) -> char {
        match p {
            Packed::S(_) => 's',
            Packed::M(_) => 'm',
            Packed::L(_) => 'l',
        }
    }

    /// Every launch round-trips through the argument it is launched with, and takes the
    /// smallest that holds it: 8 bytes of sequence starts, then 16 per task and operand.
    #[test]
    fn a_launch_packs_into_the_smallest_argument_that_holds_it() {
        // 5 sequence starts take 2 words; with 1 task and 30 operands that is 64 words,
        // what the small argument holds, and one operand more is 66.
        for (nseq, nt, no, want) in [
            (1, 1, 1, 's'),
            (4, 1, 30, 's'),
            (4, 1, 31, 'm'),
            (4, 2, 30, 'm'),
            (3, 1, 30, 's'),
            (MAX_SEQS, MAX_TASKS, MAX_OPS, 'l'),
            (8, 8, 120, 'm'),
            (8, 16, 120, 'l'),
        ] {
            let l = launch(nseq, nt, no);
            assert_eq!((l.tasks(), l.ops()), (nt, no));
            let p = l.pack(false);
            assert_eq!(
                variant(&p),
                want,
                "{nseq} sequences, {nt} tasks, {no} operands"
            );
            assert_eq!(p.unpack(), l);
            let full = l.pack(true);
            assert_eq!(variant(&full), 'l');
            assert_eq!(full.unpack(), l);
            assert!(p.bytes() <= full.bytes());
            // The plan's layout (what the cost model prices) is the packing's.
            let words = braid_plan::flat::arg_layout(nseq, nt, no).words;
            assert_eq!(braid_plan::flat::arg_bytes(words), Some(p.bytes()));
        }
        assert_eq!(launch(1, 1, 1).pack(false).bytes(), 24 + 8 * WORDS_S);
        assert_eq!(launch(1, 1, 1).pack(true).bytes(), 24 + 8 * WORDS_L);
    }
}
