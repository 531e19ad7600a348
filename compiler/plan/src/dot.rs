//! A plan as a Graphviz graph: one node per step, clustered by rank and block; program
//! order, dependency and message edges. Works on plans that fail verification too, which
//! is when a picture helps most.

use crate::explain::describe_step;
use crate::plan::Plan;
use crate::wiring::links;
use std::fmt::Write;

fn node(rank: u32, block: usize, step: usize) -> String {
    format!("s{rank}_{block}_{step}")
}

/// Escape for a double-quoted DOT string.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Graphviz source. Solid grey edges are program order, dashed blue edges dependencies,
/// bold red edges messages (labelled with their chunk count).
pub fn to_dot(plan: &Plan) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "digraph {} {{", quote(&plan.name));
    let _ = writeln!(out, "  compound=true;");
    let _ = writeln!(
        out,
        "  node [shape=box, fontname=\"monospace\", fontsize=10];"
    );
    for r in &plan.ranks {
        let _ = writeln!(out, "  subgraph cluster_r{} {{", r.rank);
        let _ = writeln!(out, "    label={};", quote(&format!("rank {}", r.rank)));
        for (bi, b) in r.blocks.iter().enumerate() {
            let mut label = format!("block {} (channel {}", b.id, b.channel);
            if let Some(p) = b.send_peer {
                let _ = write!(label, ", send -> {p}");
            }
            if let Some(p) = b.recv_peer {
                let _ = write!(label, ", recv <- {p}");
            }
            label.push(')');
            let _ = writeln!(out, "    subgraph cluster_r{}_b{} {{", r.rank, bi);
            let _ = writeln!(out, "      label={};", quote(&label));
            for (si, s) in b.steps.iter().enumerate() {
                let text = format!("{si}: {} {}", s.kind, describe_step(b, s));
                let _ = writeln!(
                    out,
                    "      {} [label={}];",
                    node(r.rank, bi, si),
                    quote(&text)
                );
            }
            for si in 1..b.steps.len() {
                let _ = writeln!(
                    out,
                    "      {} -> {} [color=gray];",
                    node(r.rank, bi, si - 1),
                    node(r.rank, bi, si)
                );
            }
            let _ = writeln!(out, "    }}");
        }
        let _ = writeln!(out, "  }}");
    }
    for r in &plan.ranks {
        for (bi, b) in r.blocks.iter().enumerate() {
            for (si, s) in b.steps.iter().enumerate() {
                for d in &s.deps {
                    let exists = r
                        .blocks
                        .get(d.block as usize)
                        .is_some_and(|t| (d.step as usize) < t.steps.len());
                    if exists {
                        let _ = writeln!(
                            out,
                            "  {} -> {} [style=dashed, color=blue];",
                            node(r.rank, d.block as usize, d.step as usize),
                            node(r.rank, bi, si)
                        );
                    }
                }
            }
        }
    }
    for link in links(plan) {
        let (Some((sr, sb)), Some((rr, rb))) = (link.sender, link.receiver) else {
            continue;
        };
        let sender = &plan.ranks[sr];
        let receiver = &plan.ranks[rr];
        for (&si, &ti) in link.sends.iter().zip(&link.recvs) {
            let count = sender.blocks[sb].steps[si].count();
            let _ = writeln!(
                out,
                "  {} -> {} [color=red, penwidth=2, label={}];",
                node(sender.rank, sb, si),
                node(receiver.rank, rb, ti),
                quote(&count.to_string())
            );
        }
    }
    let _ = writeln!(out, "}}");
    out
}
