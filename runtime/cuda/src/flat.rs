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

/// Sequences (grid blocks before parts) one flat launch holds: `FLAT_SEQS` in the kernel.
pub const MAX_SEQS: usize = 64;
/// Passes over one chunk one flat launch holds: `FLAT_TASKS`.
pub const MAX_TASKS: usize = 96;
/// Operands of all those passes: `FLAT_OPS`.
pub const MAX_OPS: usize = 128;
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

/// Bytes of a chunk each part of a pass gets at least ([`braid_plan::flat::PART_BYTES`]).
pub const PART_BYTES: usize = braid_plan::flat::PART_BYTES as usize;

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

/// The kernel's argument (`FlatLaunch` in `braid_kernel.cuh`): grid block `b` runs
/// part `b % parts` of every chunk of sequence `b / parts`'s passes, in order.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
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
    ("FlatLaunch", "nseq", std::mem::offset_of!(FlatLaunch, nseq)),
    (
        "FlatLaunch",
        "parts",
        std::mem::offset_of!(FlatLaunch, parts),
    ),
    (
        "FlatLaunch",
        "chunk_elems",
        std::mem::offset_of!(FlatLaunch, chunk_elems),
    ),
    (
        "FlatLaunch",
        "first",
        std::mem::offset_of!(FlatLaunch, first),
    ),
    ("FlatLaunch", "task", std::mem::offset_of!(FlatLaunch, task)),
    ("FlatLaunch", "op", std::mem::offset_of!(FlatLaunch, op)),
    ("FlatLaunch", "sizeof", std::mem::size_of::<FlatLaunch>()),
];

/// The launch program of `calls` ([`braid_plan::flat::launch`]: their programs, with the
/// passes several ranks share done once).
pub fn launch_program(calls: &[RankCall<'_>]) -> Option<LaunchProgram> {
    let programs: Vec<(u32, &FlatProgram)> = calls.iter().map(|c| (c.rank, c.program)).collect();
    braid_plan::flat::launch(&programs, MAX_PASS_OPS)
}

/// The flat launch of `calls` (every rank of one launch), or `None` where it may not run
/// flat (module docs) or does not fit the kernel's argument. `max_grid`: grid blocks it
/// may take at most (parts are cut to fit).
pub fn resolve(calls: &[RankCall<'_>], max_grid: u32) -> Option<FlatLaunch> {
    resolve_program(calls, &launch_program(calls)?, max_grid)
}

/// [`resolve`] with the calls' launch program ([`launch_program`] of the same calls).
pub fn resolve_program(
    calls: &[RankCall<'_>],
    prog: &LaunchProgram,
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
    let call_of = |r: u32| calls.iter().find(|c| c.rank == r);
    for c in calls {
        for &r in &c.program.reads {
            if call_of(r).is_none_or(|p| p.input == 0) {
                return None;
            }
        }
        for &r in &c.program.reads_out {
            if call_of(r).is_none_or(|p| p.output == 0) {
                return None;
            }
        }
        for &r in &c.program.read_by {
            call_of(r)?;
        }
    }
    let nseq = prog.seqs.len();
    if nseq == 0 || nseq > MAX_SEQS {
        return None;
    }
    let mut l = FlatLaunch {
        nseq: nseq as u32,
        chunk_elems: g.chunk_elems as u64,
        ..FlatLaunch::default()
    };
    // In place, some call writes where it or its peers read: the launch is checked.
    let checked = calls.iter().any(|c| !c.in_untouched);
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
    for (s, seq) in prog.seqs.iter().enumerate() {
        l.first[s] = nt as u16;
        for p in seq {
            for i in 0..p.count {
                let mut ops = [FlatOp::default(); MAX_PASS_OPS];
                for (k, op) in p.ops.iter().enumerate() {
                    let (ptr, valid) = at(*op, i)?;
                    *ops.get_mut(k)? = FlatOp { ptr, valid };
                }
                let ops = &ops[..p.ops.len()];
                let mut dsts = [(0u64, 0u64); MAX_PASS_OPS];
                let mut nd = 0;
                for d in &p.dsts {
                    let (ptr, valid) = at(*d, i)?;
                    // A copy onto itself (in place): nothing to do, and nothing may be
                    // written where peers read.
                    if ops.len() == 1 && ops[0].ptr == ptr {
                        continue;
                    }
                    *dsts.get_mut(nd)? = (ptr, valid);
                    nd += 1;
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
    let chunk_bytes = g.chunk_elems * g.elem;
    let want = chunk_bytes.div_ceil(PART_BYTES).max(1);
    let room = (max_grid as usize / nseq).max(1);
    l.parts = want.min(room) as u32;
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
