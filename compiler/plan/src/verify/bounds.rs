//! Phase b: every slice lies inside a buffer that exists on its rank, in every mode.
//!
//! Also: data-moving steps move at least one chunk, `src` and `dst` have equal lengths,
//! `in` is written only where an in-place call aliases it to `out` (it is the caller's
//! read-only input otherwise), and a step's `src` and `dst` are either the very same chunks
//! or disjoint (a partial overlap makes the result depend on copy order). All arithmetic
//! is in `u64`, so no offset can overflow.

use super::Ctx;
use crate::diag::{Check, PlanDiagnostic};
use crate::plan::{Slice, StepKind};
use braid_ir::{Buf, Collective, Layout, LocId, Mode};
use std::collections::HashSet;

/// " in mode inplace" when only some of the plan's modes fail, "" when all do.
fn mode_suffix(failing: &[Mode], all: usize) -> String {
    if failing.is_empty() || failing.len() == all {
        String::new()
    } else {
        let names: Vec<&str> = failing.iter().map(|m| m.name()).collect();
        format!(" in mode {}", names.join(" and "))
    }
}

/// Why `buf` is missing on `rank`, for the rooted collectives.
fn absent_reason(layout: &Layout, buf: Buf) -> String {
    let root = layout.root.unwrap_or(0);
    match (layout.collective, buf) {
        (Collective::Broadcast, Buf::In) => {
            format!("for broadcast only the root, rank {root}, has in")
        }
        (Collective::Reduce, Buf::Out) => {
            format!("for reduce only the root, rank {root}, has out")
        }
        _ => "it does not exist".to_string(),
    }
}

/// Whether `slice` lies inside its buffer in `layout`; the problem otherwise.
fn slice_problem(layout: &Layout, rank: u32, role: &str, s: &Slice) -> Option<String> {
    match layout.size(s.buf, rank) {
        None => Some(format!(
            "{role} {s} names {} on rank {rank}, which has no {} buffer: {}",
            s.buf,
            s.buf,
            absent_reason(layout, s.buf)
        )),
        Some(size) if s.end() > u64::from(size) => Some(format!(
            "{role} {s} lies outside {}, which has {size} chunks on rank {rank}",
            s.buf
        )),
        Some(_) => None,
    }
}

fn locs(layout: &Layout, rank: u32, s: &Slice) -> Vec<LocId> {
    (0..s.count)
        .map(|i| {
            layout
                .loc(s.buf, rank, s.offset + i)
                .expect("slice checked in bounds")
        })
        .collect()
}

/// Physical locations that some `out` chunk names, per rank (so writing them through an
/// `in` alias is writing output, which is allowed).
fn out_locations(layout: &Layout) -> Vec<bool> {
    let mut is_out = vec![false; layout.num_locs()];
    for r in 0..layout.n {
        for c in 0..layout.size(Buf::Out, r).unwrap_or(0) {
            if let Some(l) = layout.loc(Buf::Out, r, c) {
                is_out[l.index()] = true;
            }
        }
    }
    is_out
}

/// What is wrong with how `src` and `dst` of one step share locations in one mode.
fn overlap_problem(kind: StepKind, src: &[LocId], dst: &[LocId]) -> Option<&'static str> {
    if src == dst {
        return (kind == StepKind::Reduce)
            .then_some("src and dst are the same chunks, so re would compute dst (+) dst");
    }
    let (Some(smin), Some(smax)) = (src.iter().min(), src.iter().max()) else {
        return None;
    };
    let disjoint_ranges = dst.iter().all(|d| d < smin || d > smax);
    if disjoint_ranges {
        return None;
    }
    let set: HashSet<&LocId> = src.iter().collect();
    dst.iter()
        .any(|d| set.contains(d))
        .then_some("src and dst partially overlap, so the result would depend on the order chunks are copied in")
}

pub(crate) fn check(cx: &Ctx) -> Vec<PlanDiagnostic> {
    let ix = &cx.ix;
    let n_modes = cx.layouts.len();
    let out_locs: Vec<Vec<bool>> = cx.layouts.iter().map(|(_, l)| out_locations(l)).collect();
    let mut out = Vec::new();
    for gid in 0..ix.n_steps() as u32 {
        let step = ix.step(gid);
        let rank = ix.id(gid).rank;
        let kind = step.kind;
        let mut ok = true;
        for (role, slice) in [("src", &step.src), ("dst", &step.dst)] {
            let Some(s) = slice else { continue };
            if kind.moves_data() && s.count == 0 {
                out.push(ix.at(
                    Check::Bounds,
                    gid,
                    format!(
                        "{role} {}[{}..{}] is empty; {kind} must move at least one chunk",
                        s.buf, s.offset, s.offset
                    ),
                ));
                ok = false;
                continue;
            }
            let mut failing = Vec::new();
            let mut first = None;
            for (mode, layout) in &cx.layouts {
                if let Some(p) = slice_problem(layout, rank, role, s) {
                    failing.push(*mode);
                    first.get_or_insert(p);
                }
            }
            if let Some(p) = first {
                out.push(ix.at(Check::Bounds, gid, p + &mode_suffix(&failing, n_modes)));
                ok = false;
            }
        }
        if let (Some(s), Some(d)) = (&step.src, &step.dst) {
            if s.count != d.count {
                out.push(ix.at(
                    Check::Bounds,
                    gid,
                    format!(
                        "src {s} has {} chunk(s) but dst {d} has {}; both sides of a step must have the same length",
                        s.count, d.count
                    ),
                ));
                ok = false;
            }
        }
        if !ok {
            continue;
        }
        // Aliasing depends on the mode: collect the failing modes per problem.
        let mut read_only: Vec<Mode> = Vec::new();
        let mut overlap: Option<(&str, Vec<Mode>)> = None;
        for (m, (mode, layout)) in cx.layouts.iter().enumerate() {
            if let Some(d) = &step.dst {
                let dl = locs(layout, rank, d);
                if d.buf == Buf::In && dl.iter().any(|l| !out_locs[m][l.index()]) {
                    read_only.push(*mode);
                }
                if let Some(s) = &step.src {
                    if let Some(p) = overlap_problem(kind, &locs(layout, rank, s), &dl) {
                        overlap.get_or_insert((p, Vec::new())).1.push(*mode);
                    }
                }
            }
        }
        if !read_only.is_empty() {
            let d = step.dst.expect("checked");
            out.push(ix.at(
                Check::Bounds,
                gid,
                format!(
                    "dst {d} writes the caller's input buffer, which is read-only{}",
                    mode_suffix(&read_only, n_modes)
                ),
            ));
        }
        if let Some((p, modes)) = overlap {
            out.push(ix.at(
                Check::Bounds,
                gid,
                format!("{p}{}", mode_suffix(&modes, n_modes)),
            ));
        }
    }
    out
}
