//! `braid ... --explain`: a plan as readable text, one line per step.
//!
//! The same one-line step descriptions are used in diagnostics, so what a user reads in an
//! error is exactly what `--explain` prints for that step.

use crate::plan::{Block, Plan, Slice, Step, StepKind};
use std::fmt::Write;

fn peer(p: Option<u32>) -> String {
    p.map_or_else(|| "?".to_string(), |p| p.to_string())
}

fn slice(s: &Option<Slice>) -> String {
    s.map_or_else(|| "?".to_string(), |s| s.to_string())
}

/// What the step does, e.g. `recv from 2, out[4] = out[4] (+) recv`.
pub fn describe_step(block: &Block, step: &Step) -> String {
    let (src, dst) = (slice(&step.src), slice(&step.dst));
    let (to, from) = (peer(block.send_peer), peer(block.recv_peer));
    match step.kind {
        StepKind::Send => format!("send {src} to {to}"),
        StepKind::Recv => format!("recv from {from}, {dst} = recv"),
        StepKind::RecvCopySend => format!("recv from {from}, {dst} = recv, send recv to {to}"),
        StepKind::RecvReduceSend => format!("recv from {from}, send {src} (+) recv to {to}"),
        StepKind::RecvReduceCopy => format!("recv from {from}, {dst} = {src} (+) recv"),
        StepKind::RecvReduceCopySend => {
            format!("recv from {from}, {dst} = {src} (+) recv, send {dst} to {to}")
        }
        StepKind::Copy => format!("{dst} = {src}"),
        StepKind::Reduce => format!("{dst} = {dst} (+) {src}"),
        StepKind::Nop => "synchronise".to_string(),
    }
}

/// `rrc  recv from 2, out[4] = out[4] (+) recv`: the kind, then the description.
pub(crate) fn step_summary(block: &Block, step: &Step) -> String {
    format!("{}: {}", step.kind, describe_step(block, step))
}

/// The whole plan as text: a header, then per rank, per block, numbered steps with their
/// dependencies and the source statement they came from.
pub fn explain(plan: &Plan) -> String {
    let mut out = String::new();
    let modes: Vec<&str> = plan.modes.iter().map(|m| m.name()).collect();
    let _ = writeln!(
        out,
        "plan {}: {} on {} ranks{}, C = {} (in {}, out {}, scratch {}), protocol {}, {} channel replica(s), modes {}, {} slots, {}",
        plan.name,
        plan.collective,
        plan.n_ranks,
        plan.root.map_or(String::new(), |r| format!(" (root {r})")),
        plan.chunks,
        plan.in_chunks,
        plan.out_chunks,
        plan.scratch_chunks,
        plan.protocol.name(),
        plan.channels,
        if modes.is_empty() { "none".to_string() } else { modes.join("+") },
        plan.slots,
        if plan.execution.is_streaming() {
            "streaming"
        } else {
            "tiled (the steps run once per tile of a FIFO slot)"
        },
    );
    let _ = writeln!(
        out,
        "topology {} (fingerprint {})",
        plan.topology.name, plan.topology.fingerprint
    );
    for rank in &plan.ranks {
        let _ = writeln!(out, "rank {}", rank.rank);
        for block in &rank.blocks {
            explain_block(&mut out, plan, rank.rank, block);
        }
    }
    out
}

fn explain_block(out: &mut String, plan: &Plan, rank: u32, block: &Block) {
    let mut head = format!("  block {}  channel {}", block.id, block.channel);
    if let Some(p) = block.send_peer {
        let _ = write!(head, "  send -> {p}");
        if let Some(c) = plan.connection(rank, p, block.channel) {
            let _ = write!(head, " ({} {})", c.path, c.transport);
        }
    }
    if let Some(p) = block.recv_peer {
        let _ = write!(head, "  recv <- {p}");
    }
    let _ = writeln!(out, "{head}");
    let lines: Vec<(String, String)> = block
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let left = format!(
                "{i:>3}: {:<4} {}",
                s.kind.short_name(),
                describe_step(block, s)
            );
            let mut right = String::new();
            if !s.deps.is_empty() {
                let deps: Vec<String> = s
                    .deps
                    .iter()
                    .map(|d| format!("({},{})", d.block, d.step))
                    .collect();
                let _ = write!(right, "deps {}", deps.join(" "));
            }
            if let Some(o) = &s.origin {
                if !right.is_empty() {
                    right.push_str("  ");
                }
                let _ = write!(right, "<- {o}");
            }
            (left, right)
        })
        .collect();
    let width = lines.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
    for (left, right) in lines {
        if right.is_empty() {
            let _ = writeln!(out, "    {left}");
        } else {
            let _ = writeln!(out, "    {left:<width$}   {right}");
        }
    }
}
