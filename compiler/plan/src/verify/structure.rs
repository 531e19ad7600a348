//! Phase a: the plan is well-formed enough for the other phases to index it.
//!
//! Header fields agree with each other and with the collective's buffer layout, every rank
//! appears once in order, blocks have valid distinct peers, every step carries exactly the
//! fields its kind uses, and every dependency points at an existing, earlier-or-other step.

use crate::diag::{Check, PlanDiagnostic, Site};
use crate::plan::{Plan, Step, StepId, FORMAT_VERSION};
use braid_ir::{Buf, Mode};
use std::collections::hash_map::Entry;
use std::collections::HashMap;

/// Connection channels the runtime can open per peer pair (NCCL's `MAXCHANNELS`); a plan
/// needs `(largest block channel + 1) * channels` of them.
pub const MAX_CHANNELS: u64 = 32;

/// Chunk locations (all ranks, all buffers) the verifier is willing to track; well above
/// any real plan, low enough that symbolic execution fits in memory.
pub const MAX_LOCATIONS: u64 = 1 << 24;

fn plan_diag(message: impl Into<String>) -> PlanDiagnostic {
    PlanDiagnostic::new(Check::Structure, Site::Plan, message)
}

/// Header and rank-list checks. Returns `false` when the rank list cannot be indexed, so
/// the per-block checks must not run.
fn check_header(plan: &Plan, out: &mut Vec<PlanDiagnostic>) -> bool {
    if plan.format_version != FORMAT_VERSION {
        out.push(plan_diag(format!(
            "format_version is {} but this verifier reads version {FORMAT_VERSION}",
            plan.format_version
        )));
    }
    let n = plan.n_ranks;
    if n == 0 {
        out.push(plan_diag("n_ranks is 0; a plan needs at least one rank"));
        return false;
    }
    let coll = plan.collective;
    match (coll.is_rooted(), plan.root) {
        (true, None) => out.push(plan_diag(format!("{coll} needs a root, but root is null"))),
        (false, Some(r)) => out.push(plan_diag(format!(
            "{coll} has no root, but root is {r}; use null"
        ))),
        (true, Some(r)) if r >= n => {
            out.push(plan_diag(format!("root {r} is not a rank (n_ranks = {n})")))
        }
        _ => {}
    }
    if plan.modes.iter().next().is_none() {
        out.push(plan_diag(
            "modes allows neither outofplace nor inplace; the plan would never be used",
        ));
    }
    if coll == braid_ir::Collective::Alltoall && plan.modes.in_place {
        out.push(plan_diag(
            "alltoall has no in-place mode (dsl.md section 4)",
        ));
    }
    if plan.channels == 0 {
        out.push(plan_diag("channels is 0; at least one replica must run"));
    }
    if plan.slots == 0 {
        out.push(plan_diag(
            "slots is 0; every connection needs at least one FIFO slot",
        ));
    }
    check_chunks(plan, out);
    if let Some(b) = plan.bytes {
        match b.max {
            Some(max) if max < b.min => out.push(plan_diag(format!(
                "bytes {{min: {}, max: {max}}} is inverted: it serves sizes s with min <= s < max, so max must be greater than min",
                b.min
            ))),
            Some(max) if max == b.min => out.push(plan_diag(format!(
                "bytes {{min: {}, max: {max}}} is empty: it serves sizes s with min <= s < max, so no call would use the plan",
                b.min
            ))),
            _ => {}
        }
    }

    let mut ranks_ok = true;
    if plan.ranks.len() as u64 != u64::from(n) {
        out.push(plan_diag(format!(
            "the plan lists {} ranks but n_ranks is {n}",
            plan.ranks.len()
        )));
        ranks_ok = false;
    }
    for (i, r) in plan.ranks.iter().enumerate() {
        if r.rank as usize != i {
            out.push(PlanDiagnostic::new(
                Check::Structure,
                Site::Rank(r.rank),
                format!("listed at ranks[{i}]; ranks must list 0..{n} once each, in order"),
            ));
            ranks_ok = false;
        }
    }
    if plan.step_count() as u64 > super::MAX_STEPS {
        ranks_ok = false; // reported by the limits check
    }
    ranks_ok
}

/// `chunks`, `in_chunks`, `out_chunks` and the total size agree with the layout.
fn check_chunks(plan: &Plan, out: &mut Vec<PlanDiagnostic>) {
    let (n, c, coll) = (plan.n_ranks, plan.chunks, plan.collective);
    if c == 0 {
        out.push(plan_diag("chunks is 0; C must be at least 1"));
        return;
    }
    if coll.has_k() && c % n != 0 {
        out.push(plan_diag(format!(
            "chunks is {c}, but {coll} needs a multiple of n_ranks ({n})"
        )));
        return;
    }
    // An upper bound of what the layout allocates (`in` and `out` are at most C each),
    // checked before building a layout so that nothing can overflow.
    let total = u64::from(n) * (2 * u64::from(c) + u64::from(plan.scratch_chunks));
    if total > MAX_LOCATIONS {
        out.push(plan_diag(format!(
            "n_ranks x (2 x chunks + scratch_chunks) is {total} chunk locations, more than the {MAX_LOCATIONS} the verifier tracks"
        )));
        return;
    }
    if coll.is_rooted() && plan.root.is_none_or(|r| r >= n) {
        return; // reported above; the layout needs a valid root
    }
    let layout = plan.layout(Mode::OutOfPlace);
    let holder = plan.root.unwrap_or(0);
    for (buf, given, field) in [
        (Buf::In, plan.in_chunks, "in_chunks"),
        (Buf::Out, plan.out_chunks, "out_chunks"),
    ] {
        let want = layout.size(buf, holder).unwrap_or(0);
        if given != want {
            out.push(plan_diag(format!(
                "{field} is {given}, but {coll} with C = {c} on {n} ranks has {want} chunks of {buf}"
            )));
        }
    }
}

/// Per-block checks: ids, channels, peers, and one block per (peer, channel, direction).
fn check_blocks(plan: &Plan, out: &mut Vec<PlanDiagnostic>) {
    let n = plan.n_ranks;
    for r in &plan.ranks {
        let mut ends: HashMap<(u32, u32, bool), u32> = HashMap::new();
        for (bi, b) in r.blocks.iter().enumerate() {
            let bi = bi as u32;
            let site = Site::Block {
                rank: r.rank,
                block: bi,
            };
            let diag = |m: String| PlanDiagnostic::new(Check::Structure, site, m);
            if b.id != bi {
                out.push(diag(format!(
                    "block id is {}, but blocks must be numbered by position (this is block {bi})",
                    b.id
                )));
            }
            let needed = (u64::from(b.channel) + 1) * u64::from(plan.channels.max(1));
            if needed > MAX_CHANNELS {
                out.push(diag(format!(
                    "channel {} with {} replica(s) needs {needed} connection channels; at most {MAX_CHANNELS} exist",
                    b.channel, plan.channels
                )));
            }
            for (peer, dir, word) in [
                (b.send_peer, true, "send_peer"),
                (b.recv_peer, false, "recv_peer"),
            ] {
                let Some(p) = peer else { continue };
                if p >= n {
                    out.push(diag(format!("{word} {p} is not a rank (n_ranks = {n})")));
                } else if p == r.rank {
                    out.push(diag(format!(
                        "{word} is rank {p} itself; local data movement needs no peer"
                    )));
                } else if let Entry::Occupied(first) = ends.entry((p, b.channel, dir)) {
                    let first = *first.get();
                    let verb = if dir { "sends to" } else { "receives from" };
                    out.push(diag(format!(
                        "{verb} rank {p} on channel {}, but block {first} already does; at most one block per peer, channel and direction",
                        b.channel
                    )));
                } else {
                    ends.insert((p, b.channel, dir), bi);
                }
            }
        }
    }
}

/// Per-step checks: fields the kind needs, peers the kind uses, dependency targets.
fn check_steps(plan: &Plan, out: &mut Vec<PlanDiagnostic>) {
    for r in &plan.ranks {
        for (bi, b) in r.blocks.iter().enumerate() {
            for (si, s) in b.steps.iter().enumerate() {
                let id = StepId {
                    rank: r.rank,
                    block: bi as u32,
                    step: si as u32,
                };
                let diag = |m: String| {
                    PlanDiagnostic::new(Check::Structure, Site::Step(id), m)
                        .with_origin(s.origin.as_ref())
                };
                check_fields(s, &mut |m| out.push(diag(m)));
                let k = s.kind;
                if k.sends() && b.send_peer.is_none() {
                    out.push(diag(format!("{k} sends, but block {bi} has no send_peer")));
                }
                if k.receives() && b.recv_peer.is_none() {
                    out.push(diag(format!(
                        "{k} receives, but block {bi} has no recv_peer"
                    )));
                }
                for d in &s.deps {
                    let Some(target) = r.blocks.get(d.block as usize) else {
                        out.push(diag(format!(
                            "depends on block {} step {}, but rank {} has {} block(s)",
                            d.block,
                            d.step,
                            r.rank,
                            r.blocks.len()
                        )));
                        continue;
                    };
                    if d.step as usize >= target.steps.len() {
                        out.push(diag(format!(
                            "depends on block {} step {}, but that block has {} step(s)",
                            d.block,
                            d.step,
                            target.steps.len()
                        )));
                    } else if d.block as usize == bi && d.step as usize == si {
                        out.push(diag("depends on itself".to_string()));
                    } else if d.block as usize == bi && d.step as usize > si {
                        out.push(diag(format!(
                            "depends on step {} of its own block, which can only run after it",
                            d.step
                        )));
                    }
                }
            }
        }
    }
}

/// `src` / `dst` present exactly when the kind uses them.
fn check_fields(s: &Step, report: &mut dyn FnMut(String)) {
    let k = s.kind;
    for (present, needed, name) in [
        (s.src.is_some(), k.has_src(), "src"),
        (s.dst.is_some(), k.has_dst(), "dst"),
    ] {
        if needed && !present {
            report(format!("{k} needs a {name}, but it has none"));
        } else if present && !needed {
            report(format!(
                "{k} has a {name}, but {k} does not use one; remove it"
            ));
        }
    }
}

/// All structural problems. Later phases run only when this returns nothing.
pub(crate) fn check(plan: &Plan) -> Vec<PlanDiagnostic> {
    let mut out = Vec::new();
    super::limits::check(plan, &mut out);
    if check_header(plan, &mut out) {
        check_blocks(plan, &mut out);
        check_steps(plan, &mut out);
        super::annotations::check(plan, &mut out);
    }
    out
}
