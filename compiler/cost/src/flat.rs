//! The price of a flat launch: a call whose every step the ranks of one launch do by
//! reading each other's inputs ([`braid_plan::flat`]) runs, on a GPU its ranks share, as
//! one small kernel whose blocks read their passes from the launch's arguments and never
//! wait: no step, slice or flag costs, only the launch and the passes' memory traffic.
//!
//! Where the profile prices flat launches (`flat_call_us` > 0, measured by `braid tune`
//! on ranks sharing a GPU) and the call's ranks launch together with direct reads, a plan
//! whose every rank has a flat program costs
//!
//! `max(host, flat_gpu_us + body)`, where `host = flat_call_us + argument + ranks` and
//! `body = combine(bytes from memory / shared rate, busiest block)`, a block's time being
//! `its sequence's bytes / (parts x block rate) + (its passes over a chunk - 1) x flat_pass_us`
//!
//! (the block rate: `flat_block_gbps`, a flat launch's block as the tune timed it, where
//! measured; else the interpreter's block)
//!
//! (back to back, the GPU runs one call while the host issues the next, so the slower of
//! the two sets the pace; a profile without the GPU's share, `flat_gpu_us` = 0, adds
//! `host + body`)
//!
//! (`combine`: the larger of the two, or near the memory's rate more, as the profile's
//! `shared_knee` says: [`crate::memory::combine`]), where `argument` is what the launch's kernel argument costs beyond the smallest
//! (`Profile::flat_arg_us`, by the bytes [`braid_plan::flat::LaunchProgram::arg_bytes`]
//! says it takes; a launch that no argument holds does not run flat); every pass over
//! one chunk reads each operand and writes each destination once (passes that several
//! ranks share are one pass with a destination per rank, as [`braid_plan::flat::launch`]
//! makes them);
//! `ranks` is what the ranks of the launch beyond two add (`Profile::ranks_us`); the
//! memory serves every write and each chunk read once however many ranks read it (the
//! ranks of one launch stream through a peer's input together: a one-shot all-reduce's
//! eight ranks reading the same eight inputs, a broadcast's seven readers of the root's);
//! a sequence is one block's passes in order; and each chunk is cut into parts run by
//! blocks of their own, a part per [`PART_ACCESS_BYTES`] the busiest sequence reads and
//! writes, up to [`FLAT_BLOCKS`] blocks for the launch (the runtime's
//! `braid_cuda::flat`). Replicas and protocol do not change it.

use crate::profile::Profile;
use crate::sim::{chunk_bytes, Call, Prediction, StepTime, FUSE_MAX};
use braid_plan::Plan;

pub use braid_plan::flat::PART_ACCESS_BYTES;
/// Blocks a flat launch takes at most: one per multiprocessor of an H100 or H200.
pub const FLAT_BLOCKS: u64 = 132;

/// The flat launch's prediction for `call` of `plan`, or `None` where the call does not
/// run flat (ranks in launches of their own, a profile without flat launches, a rank
/// whose plan does not qualify, or, in place, a launch that writes an input before every
/// read of it).
pub fn predict(
    plan: &Plan,
    profile: &Profile,
    call: &Call,
    direct: &braid_plan::direct::Direct,
) -> Option<Prediction> {
    // The flat kernel runs no protocol: plain loads and stores, as Simple's (whose
    // constants price it whatever protocol the call names, so that the call's choices
    // of protocol price alike).
    let proto = braid_ir::Protocol::Simple;
    let shared = profile.shared_gbps.get(proto);
    let Flat {
        launch,
        chunk,
        arg_bytes,
        parts,
    } = launch_of(plan, profile, call, direct)?;
    // What its kernel argument adds.
    let arg_us = profile.flat_arg_us(arg_bytes);
    // Bytes each sequence reads and writes, in its order of passes; and the bytes the
    // memory serves: every write, and each chunk of each buffer read once however many
    // passes read it (they stream through it together, the later ones from the cache).
    let mut accessed = 0f64;
    let mut seq_bytes = Vec::with_capacity(launch.seqs.len());
    let mut read: std::collections::HashSet<(u32, u8, u32)> = Default::default();
    for seq in &launch.seqs {
        let mut bytes = 0f64;
        let tasks: u32 = seq.iter().map(|p| p.count).sum();
        for pass in seq {
            let count = f64::from(pass.count);
            bytes += count * (pass.ops.len() + pass.dsts.len()) as f64 * chunk as f64;
            accessed += count * pass.dsts.len() as f64 * chunk as f64;
            for op in &pass.ops {
                for i in 0..pass.count {
                    if read.insert((op.rank, op.buf, op.chunk + i)) {
                        accessed += chunk as f64;
                    }
                }
            }
        }
        seq_bytes.push((bytes, tasks));
    }
    // A flat block's rate where the tune measured one; else the interpreter's.
    let block = if profile.flat_block_gbps > 0.0 {
        profile.flat_block_gbps
    } else {
        match profile.copy_gbps.get(proto) {
            r if r > 0.0 => r,
            _ => profile.block_gbps.get(proto),
        }
    };
    // The busiest block: its part of its sequence's bytes (a block's rate was measured
    // on copies, 2 accesses per byte), and each pass over a chunk beyond the first (the
    // launch's GPU share has one) a pass's own cost; the memory's and the blocks' times
    // combine as sharply as the profile's knee says.
    let busiest = seq_bytes
        .iter()
        .map(|&(bytes, tasks)| {
            bytes / parts as f64 / 2.0 / (block * 1e3)
                + f64::from(tasks.saturating_sub(1)) * profile.flat_pass_us
        })
        .fold(0.0, f64::max);
    let body = crate::memory::combine(
        accessed / (shared * 1e3),
        busiest,
        profile.shared_knee.get(proto),
    );
    // Every step in the one pass of the launch (the trace shows it so).
    let timeline = plan
        .ranks
        .iter()
        .flat_map(|rp| {
            rp.blocks.iter().flat_map(move |b| {
                b.steps.iter().enumerate().map(move |(si, s)| StepTime {
                    rank: rp.rank,
                    block: b.id,
                    step: si as u32,
                    kind: crate::sim::kind_name(s.kind),
                    start_us: profile.flat_call_us,
                    end_us: profile.flat_call_us + body,
                })
            })
        })
        .collect();
    // Back to back the GPU runs a call while the host issues the next: the larger share
    // sets the pace, where the GPU's is measured.
    let host = profile.flat_call_us + arg_us + profile.ranks_us(proto, plan.n_ranks);
    let total_us = if profile.flat_gpu_us > 0.0 {
        host.max(profile.flat_gpu_us + body)
    } else {
        host + body
    };
    Some(Prediction {
        total_us,
        timeline,
        chunk_bytes: chunk,
        bound: None,
    })
}

/// A call as the flat launch it runs as.
struct Flat {
    launch: braid_plan::flat::LaunchProgram,
    /// Bytes of one chunk.
    chunk: u64,
    /// Bytes of its kernel argument.
    arg_bytes: usize,
    /// Parts each chunk is cut into (a block each, per sequence).
    parts: u64,
}

/// The flat launch `call` of `plan` runs as, where it runs flat (see [`predict`]): a
/// launch with at least one sequence whose kernel argument holds it.
fn launch_of(
    plan: &Plan,
    profile: &Profile,
    call: &Call,
    direct: &braid_plan::direct::Direct,
) -> Option<Flat> {
    if !may_run_flat(profile, call) {
        return None;
    }
    // In place, the ranks of one launch read no inputs directly (the interpreter's
    // rule), but the flat launch may still run where it reads every input before
    // writing it.
    let in_place = !call.direct && call.together;
    let all;
    let direct = if in_place {
        all = braid_plan::direct::direct(plan);
        &all
    } else {
        direct
    };
    let programs = (0..plan.n_ranks)
        .map(|r| braid_plan::flat::program(plan, r, direct, FUSE_MAX))
        .collect::<Option<Vec<_>>>()?;
    let chunk = chunk_bytes(plan, call.bytes, call.elem);
    // The ranks' programs as one launch, passes several ranks share done once (as the
    // runtime runs them).
    let pairs: Vec<(u32, &braid_plan::flat::FlatProgram)> =
        (0..plan.n_ranks).zip(programs.iter()).collect();
    let launch = braid_plan::flat::launch(&pairs, braid_plan::flat::MAX_DSTS)?;
    if in_place && !braid_plan::flat::runs_in_place(plan, &launch) {
        return None;
    }
    // A launch too large for a kernel argument runs otherwise.
    let arg_bytes = launch.arg_bytes()?;
    let seqs = launch.seqs.len() as u64;
    if seqs == 0 {
        return None;
    }
    let parts = braid_plan::flat::parts(chunk, launch.accesses(), seqs, FLAT_BLOCKS);
    Some(Flat {
        launch,
        chunk,
        arg_bytes,
        parts,
    })
}

/// The thread blocks a flat launch of `call` on `plan` takes (its sequences times the
/// parts of a chunk), or `None` where the call does not run flat: what the launch holds
/// of the GPU, where the plan's own blocks describe the interpreter's launch.
pub fn blocks(plan: &Plan, profile: &Profile, call: &Call) -> Option<u64> {
    if !may_run_flat(profile, call) {
        return None;
    }
    let direct = if call.direct {
        braid_plan::direct::direct(plan)
    } else {
        braid_plan::direct::Direct::default()
    };
    let f = launch_of(plan, profile, call, &direct)?;
    Some(f.launch.seqs.len() as u64 * f.parts)
}

/// Whether the profile prices flat launches and the call's ranks launch together (what
/// any flat launch needs, before its plan is looked at).
fn may_run_flat(profile: &Profile, call: &Call) -> bool {
    (call.direct || call.together)
        && profile.flat_call_us > 0.0
        && profile.shared_gbps.get(braid_ir::Protocol::Simple) > 0.0
}
