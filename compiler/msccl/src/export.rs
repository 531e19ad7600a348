//! A plan as executor-dialect MSCCL XML.
//!
//! MSCCL cannot say everything a plan says, so export first rewrites the plan into
//! [`msccl_form`] (the plan MSCCL can express) and then writes that form verbatim. The
//! round-trip contract is therefore exact: `import(export(p)) == msccl_form(p)`, and
//! `export(import(export(p))) == export(p)` byte for byte.

use braid_ir::{Buf, Protocol};
use braid_plan::{Dep, Execution, Plan, Step, StepKind, Topology, DEFAULT_SLOTS};
use std::collections::HashSet;
use std::fmt::Write;

/// Why a plan cannot be written as MSCCL XML.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExportError {
    /// MSCCL has no replication: its emitters expand instances into tbs and chunks.
    #[error("the plan runs {0} replicas (channels = {0}); MSCCL XML has no replication, so only plans with channels = 1 can be exported")]
    Replicated(u32),
}

/// The plan as MSCCL can express it:
///
/// * a step with several dependencies becomes `nop` steps carrying all but the last one,
///   followed by the step with the last (MSCCL allows one dependency per step); step
///   indices and the dependencies naming them shift accordingly;
/// * origins, connections and the topology are dropped (the XML has no place for them);
/// * `protocol: auto` becomes `simple` (MSCCL needs a concrete protocol);
/// * `execution` is `tiled` and `slots` the default, as every import has them.
pub fn msccl_form(plan: &Plan) -> Plan {
    let mut p = plan.clone();
    p.topology = Topology {
        name: "msccl-xml".into(),
        fingerprint: String::new(),
    };
    p.connections.clear();
    if p.protocol == Protocol::Auto {
        p.protocol = Protocol::Simple;
    }
    p.execution = Execution::Tiled;
    p.slots = DEFAULT_SLOTS;
    p.bytes = p.bytes.filter(|r| r.min != 0 || r.max.is_some());
    for rank in &mut p.ranks {
        // new_index[b][s]: where old step s of block b lands once nops are inserted.
        let new_index: Vec<Vec<u32>> = rank
            .blocks
            .iter()
            .map(|b| {
                let mut at = 0u32;
                b.steps
                    .iter()
                    .map(|s| {
                        at += s.deps.len().saturating_sub(1) as u32;
                        let here = at;
                        at += 1;
                        here
                    })
                    .collect()
            })
            .collect();
        let remap = |d: &Dep| Dep {
            block: d.block,
            step: new_index
                .get(d.block as usize)
                .and_then(|b| b.get(d.step as usize))
                .copied()
                .unwrap_or(d.step),
        };
        for b in &mut rank.blocks {
            let mut steps = Vec::with_capacity(b.steps.len());
            for s in &b.steps {
                let deps: Vec<Dep> = s.deps.iter().map(remap).collect();
                let (last, extra) = match deps.split_last() {
                    Some((l, e)) => (Some(*l), e),
                    None => (None, &[][..]),
                };
                for d in extra {
                    steps.push(Step {
                        kind: StepKind::Nop,
                        src: None,
                        dst: None,
                        deps: vec![*d],
                        origin: None,
                    });
                }
                steps.push(Step {
                    deps: last.into_iter().collect(),
                    origin: None,
                    ..s.clone()
                });
            }
            b.steps = steps;
        }
    }
    p
}

fn buf_name(b: Buf) -> &'static str {
    match b {
        Buf::In => "i",
        Buf::Out => "o",
        Buf::Scratch => "s",
    }
}

fn proto_name(p: Protocol) -> &'static str {
    match p {
        Protocol::Ll => "LL",
        Protocol::Ll128 => "LL128",
        Protocol::Simple | Protocol::Auto => "Simple",
    }
}

/// XML attribute text: the five predefined entities escaped.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// The plan as executor-dialect XML (`reducescatter`, `outofplace`, `minBytes` /
/// `maxBytes` inclusive with 0 = unbounded), one `<step>` per line. Rooted collectives
/// also get a `root` attribute, which MSCCL runtimes ignore and braid's import reads.
pub fn export(plan: &Plan) -> Result<String, ExportError> {
    if plan.channels != 1 {
        return Err(ExportError::Replicated(plan.channels));
    }
    let p = msccl_form(plan);
    let coll = match p.collective {
        braid_ir::Collective::ReduceScatter => "reducescatter",
        c => c.name(),
    };
    let nchannels = p
        .ranks
        .iter()
        .flat_map(|r| &r.blocks)
        .map(|b| b.channel + 1)
        .max()
        .unwrap_or(1);
    let (min, max) = match p.bytes {
        None => (0, 0),
        // Exclusive in braid, inclusive in the executor; 0 would mean unbounded, so a
        // range serving nothing but size 0 cannot be written and is widened to [0, 1].
        Some(r) => (r.min, r.max.map_or(0, |m| m.saturating_sub(1).max(1))),
    };
    let mut x = String::new();
    let _ = write!(
        x,
        "<algo name=\"{}\" proto=\"{}\" nchannels=\"{nchannels}\" nchunksperloop=\"{}\" ngpus=\"{}\" coll=\"{coll}\" inplace=\"{}\" outofplace=\"{}\" minBytes=\"{min}\" maxBytes=\"{max}\"",
        escape(&p.name),
        proto_name(p.protocol),
        p.chunks,
        p.n_ranks,
        u8::from(p.modes.in_place),
        u8::from(p.modes.out_of_place),
    );
    if let Some(root) = p.root {
        let _ = write!(x, " root=\"{root}\"");
    }
    x.push_str(">\n");
    let layout = p.layout(braid_ir::Mode::OutOfPlace);
    for r in &p.ranks {
        let has = |b: Buf| layout.size(b, r.rank).unwrap_or(0);
        let _ = writeln!(
            x,
            "  <gpu id=\"{}\" i_chunks=\"{}\" o_chunks=\"{}\" s_chunks=\"{}\">",
            r.rank,
            has(Buf::In),
            has(Buf::Out),
            p.scratch_chunks
        );
        let targets: HashSet<Dep> = r
            .blocks
            .iter()
            .flat_map(|b| &b.steps)
            .flat_map(|s| s.deps.iter().copied())
            .collect();
        for b in &r.blocks {
            let peer = |p: Option<u32>| p.map_or(-1, i64::from);
            let _ = writeln!(
                x,
                "    <tb id=\"{}\" send=\"{}\" recv=\"{}\" chan=\"{}\">",
                b.id,
                peer(b.send_peer),
                peer(b.recv_peer),
                b.channel
            );
            for (si, s) in b.steps.iter().enumerate() {
                // MSCCL writes both sides on every step; the side a kind does not use
                // repeats the other (what MSCCLang writes for local sides), -1 for nop.
                let src = s.src.or(s.dst);
                let dst = s.dst.or(s.src);
                let side = |sl: Option<braid_plan::Slice>, dflt: &'static str| {
                    sl.map_or((dflt, -1i64), |v| (buf_name(v.buf), i64::from(v.offset)))
                };
                let (sb, so) = side(src, "i");
                let (db, doff) = side(dst, "o");
                let (depid, deps) = s
                    .deps
                    .first()
                    .map_or((-1i64, -1i64), |d| (i64::from(d.block), i64::from(d.step)));
                let hasdep = targets.contains(&Dep {
                    block: b.id,
                    step: si as u32,
                });
                let _ = writeln!(
                    x,
                    "      <step s=\"{si}\" type=\"{}\" srcbuf=\"{sb}\" srcoff=\"{so}\" dstbuf=\"{db}\" dstoff=\"{doff}\" cnt=\"{}\" depid=\"{depid}\" deps=\"{deps}\" hasdep=\"{}\"/>",
                    s.kind.short_name(),
                    s.count(),
                    u8::from(hasdep)
                );
            }
            x.push_str("    </tb>\n");
        }
        x.push_str("  </gpu>\n");
    }
    x.push_str("</algo>\n");
    Ok(x)
}
