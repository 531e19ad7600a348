//! MSCCL XML to a braid [`Plan`]: `<gpu>` to ranks, `<tb>` to blocks, `<step>` to steps.
//!
//! The importer checks what only the XML can show (syntax, attributes, ids, offsets
//! against each `<gpu>`'s own buffer sizes, dependency targets) and names the element
//! and line of every problem. Everything about meaning (matching, deadlock, races, the
//! postcondition) is left to `braid_plan::verify`, whose diagnostics
//! [`crate::render_for_xml`] ties back to lines through the [`LineIndex`] built here.

use crate::attrs::Attrs;
use crate::error::{shorten, Lines, Pos, XmlError};
use crate::header::{self, Header};
use crate::numbering::number;
use crate::parse::{self, label, Elem, RawGpu, RawTb};
use braid_ir::{Buf, Collective, Mode};
use braid_plan::verify::MAX_LOCATIONS;
use braid_plan::{
    Block, Dep, Execution, Plan, RankPlan, Slice, Step, StepId, StepKind, Topology, DEFAULT_SLOTS,
    FORMAT_VERSION,
};
use std::collections::HashMap;

/// Where every rank, block and step of an imported plan came from in the XML.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LineIndex {
    /// The `<algo>` element.
    pub algo: Pos,
    /// `<gpu>` per rank.
    pub ranks: HashMap<u32, Pos>,
    /// `<tb>` per (rank, block).
    pub blocks: HashMap<(u32, u32), Pos>,
    /// `<step>` per step.
    pub steps: HashMap<StepId, Pos>,
}

/// Parses MSCCL XML (either dialect) into a plan; `name` is used when `<algo>` has none.
/// The plan still has to pass `braid_plan::verify` before anything runs it.
pub fn import(text: &str, name: &str) -> Result<Plan, Vec<XmlError>> {
    import_with_lines(text, name).map(|(p, _)| p)
}

/// [`import`], also returning where each step came from, for [`crate::render_for_xml`].
pub fn import_with_lines(text: &str, name: &str) -> Result<(Plan, LineIndex), Vec<XmlError>> {
    let lines = Lines::new(text);
    let raw = parse::parse(text, &lines)?;
    let mut errors = Vec::new();
    let Some(h) = header::read(&raw.elem, name, &mut errors) else {
        return Err(errors);
    };
    let mut index = LineIndex {
        algo: raw.elem.pos,
        ..LineIndex::default()
    };
    let mut by_rank: Vec<Option<&RawGpu>> = vec![None; h.n_ranks as usize];
    for g in &raw.gpus {
        let glabel = || label("gpu", "id", &g.elem);
        let mut a = Attrs {
            elem: &g.elem,
            label: &glabel,
            errors: &mut errors,
        };
        let Some(id) = a.int_in("id", 0, i64::from(h.n_ranks) - 1) else {
            continue;
        };
        match &by_rank[id as usize] {
            Some(first) => a.error(format!(
                "duplicate gpu id {id} (first at line {})",
                first.elem.pos.line
            )),
            None => by_rank[id as usize] = Some(g),
        }
    }
    let layout = braid_ir::Layout::new(
        h.collective,
        h.n_ranks,
        h.chunks,
        0,
        h.root,
        Mode::OutOfPlace,
    );
    let mut ranks = Vec::new();
    let mut scratch = 0;
    // Missing ranks, as runs: one message for `ngpus="65536"` with one `<gpu>`.
    let mut missing: Vec<(u32, u32)> = Vec::new();
    for (r, g) in by_rank.iter().enumerate() {
        let r = r as u32;
        let Some(g) = g else {
            // With no `<gpu>` at all, the first missing one says enough.
            match missing.last_mut() {
                _ if raw.gpus.is_empty() && r > 0 => {}
                Some((_, last)) if *last + 1 == r => *last = r,
                _ => missing.push((r, r)),
            }
            continue;
        };
        index.ranks.insert(r, g.elem.pos);
        if let Some((rank, s)) = read_gpu(&h, &layout, r, g, &mut index, &mut errors) {
            scratch = scratch.max(s);
            ranks.push(rank);
        }
    }
    for (first, last) in missing {
        let which = if first == last {
            format!("no <gpu id=\"{first}\">")
        } else {
            format!("no <gpu id=\"{first}\"> to <gpu id=\"{last}\">")
        };
        errors.push(XmlError::new(
            raw.elem.pos,
            "<algo>",
            format!("{which}, but ngpus=\"{}\"", h.n_ranks),
        ));
    }
    if !errors.is_empty() {
        errors.sort_by_key(|e| e.pos);
        return Err(errors);
    }
    let plan = Plan {
        format_version: FORMAT_VERSION,
        name: h.name.clone(),
        collective: h.collective,
        n_ranks: h.n_ranks,
        root: h.root,
        topology: Topology {
            name: "msccl-xml".into(),
            fingerprint: String::new(),
        },
        chunks: h.chunks,
        in_chunks: layout.size(Buf::In, h.root.unwrap_or(0)).unwrap_or(0),
        out_chunks: layout.size(Buf::Out, h.root.unwrap_or(0)).unwrap_or(0),
        scratch_chunks: scratch,
        protocol: h.protocol,
        // MSCCL's `chan` is a per-tb connection channel, not replication: replicas
        // ("instances") are already expanded into tbs by the emitters.
        channels: 1,
        modes: h.modes,
        slots: DEFAULT_SLOTS,
        connections: Vec::new(),
        execution: Execution::Tiled,
        bytes: h.bytes,
        ranks,
    };
    Ok((plan, index))
}

/// Buffer names of one `<gpu>`: how many chunks each has there.
struct Sizes {
    input: Option<u32>,
    output: Option<u32>,
    scratch: u32,
}

/// One `<gpu>`: its rank program and its scratch size.
fn read_gpu(
    h: &Header,
    layout: &braid_ir::Layout,
    r: u32,
    g: &RawGpu,
    index: &mut LineIndex,
    errors: &mut Vec<XmlError>,
) -> Option<(RankPlan, u32)> {
    let before = errors.len();
    let glabel = label("gpu", "id", &g.elem);
    let gl = || glabel.clone();
    let mut a = Attrs {
        elem: &g.elem,
        label: &gl,
        errors,
    };
    let (i_chunks, o_chunks, s_chunks) = (a.u32("i_chunks"), a.u32("o_chunks"), a.u32("s_chunks"));
    // The verifier's bound, checked here so the message points at the `<gpu>`.
    if let Some(s) = s_chunks {
        let total = u64::from(h.n_ranks) * (2 * u64::from(h.chunks) + u64::from(s));
        if total > MAX_LOCATIONS {
            a.error(format!(
                "s_chunks=\"{s}\" on {} gpus with nchunksperloop=\"{}\" makes {total} chunk locations, more than the {MAX_LOCATIONS} braid verifies",
                h.n_ranks, h.chunks
            ));
        }
    }
    let sizes = Sizes {
        input: layout.size(Buf::In, r),
        output: layout.size(Buf::Out, r),
        scratch: s_chunks.unwrap_or(0),
    };
    // 0 means "this program does not name the buffer" (in-place programs name only the
    // aliased one); any other value must be braid's size for the collective and C.
    for (given, want, key, buf) in [
        (i_chunks, sizes.input, "i_chunks", "in"),
        (o_chunks, sizes.output, "o_chunks", "out"),
    ] {
        if let Some(v) = given.filter(|&v| v != 0 && Some(v) != want) {
            a.error(format!(
                "{key}=\"{v}\", but {} with nchunksperloop=\"{}\" on {} ranks has {} chunks of {buf} on rank {r}",
                h.collective,
                h.chunks,
                h.n_ranks,
                want.unwrap_or(0)
            ));
        }
    }
    // Blocks by id: dense, no duplicates.
    let tlabel = |t: &RawTb| format!("{} of {glabel}", label("tb", "id", &t.elem));
    let mut ids = Vec::with_capacity(g.tbs.len());
    for t in &g.tbs {
        let tl = || tlabel(t);
        let mut a = Attrs {
            elem: &t.elem,
            label: &tl,
            errors,
        };
        if let Some(id) = a.int_in("id", 0, 1 << 16) {
            ids.push((id as u64, t));
        }
    }
    let numbered = number(ids);
    for (id, t, first) in numbered.duplicates {
        errors.push(XmlError::new(
            t.elem.pos,
            tlabel(t),
            format!(
                "duplicate tb id {id} in {glabel} (first at line {})",
                first.elem.pos.line
            ),
        ));
    }
    if let Some((gap, count)) = numbered.gap {
        errors.push(XmlError::new(
            g.elem.pos,
            glabel.clone(),
            format!(
                "no <tb id=\"{gap}\">, but a tb with a higher id exists; tb ids must be 0..{count}"
            ),
        ));
    }
    let tbs = numbered.in_order;
    // Step counts first, so dependencies on later tbs can be checked.
    let counts: Vec<usize> = tbs.iter().map(|t| t.steps.len()).collect();
    let mut blocks = Vec::new();
    for (b, t) in tbs.iter().enumerate() {
        let b = b as u32;
        index.blocks.insert((r, b), t.elem.pos);
        if let Some(block) = read_tb(h, r, b, t, &tlabel(t), &sizes, &counts, index, errors) {
            blocks.push(block);
        }
    }
    (errors.len() == before).then_some((RankPlan { rank: r, blocks }, sizes.scratch))
}

/// One `<tb>`: peers, channel and its steps in `s` order.
#[allow(clippy::too_many_arguments)]
fn read_tb(
    h: &Header,
    r: u32,
    b: u32,
    t: &RawTb,
    tlabel: &str,
    sizes: &Sizes,
    counts: &[usize],
    index: &mut LineIndex,
    errors: &mut Vec<XmlError>,
) -> Option<Block> {
    let before = errors.len();
    let tl = || tlabel.to_string();
    let mut a = Attrs {
        elem: &t.elem,
        label: &tl,
        errors,
    };
    let peer_max = i64::from(h.n_ranks) - 1;
    let send = a.int_in("send", -1, peer_max);
    let recv = a.int_in("recv", -1, peer_max);
    let chan = a.int_in("chan", 0, i64::from(h.nchannels) - 1);
    // Steps by `s`: dense, no duplicates.
    let slabel = |e: &Elem| format!("{} of {tlabel}", label("step", "s", e));
    let mut numbers = Vec::with_capacity(t.steps.len());
    for e in &t.steps {
        let sl = || slabel(e);
        let mut a = Attrs {
            elem: e,
            label: &sl,
            errors,
        };
        if let Some(s) = a.int_in("s", 0, 1 << 16) {
            numbers.push((s as u64, e));
        }
    }
    let numbered = number(numbers);
    for (s, e, first) in numbered.duplicates {
        errors.push(XmlError::new(
            e.pos,
            slabel(e),
            format!(
                "duplicate step s=\"{s}\" (first at line {})",
                first.pos.line
            ),
        ));
    }
    if let Some((gap, count)) = numbered.gap {
        errors.push(XmlError::new(
            t.elem.pos,
            tlabel.to_string(),
            format!("no <step s=\"{gap}\">, but a step with a higher s exists; steps must be numbered 0..{count}"),
        ));
    }
    let mut steps = Vec::with_capacity(numbered.in_order.len());
    for (s, e) in numbered.in_order.into_iter().enumerate() {
        let id = StepId {
            rank: r,
            block: b,
            step: s as u32,
        };
        index.steps.insert(id, e.pos);
        let sl = || slabel(e);
        let mut a = Attrs {
            elem: e,
            label: &sl,
            errors,
        };
        if let Some(step) = read_step(h, r, &mut a, sizes, counts) {
            steps.push(step);
        }
    }
    if errors.len() != before {
        return None;
    }
    let peer = |p: i64| (p >= 0).then_some(p as u32);
    Some(Block {
        id: b,
        channel: chan? as u32,
        send_peer: peer(send?),
        recv_peer: peer(recv?),
        steps,
    })
}

fn kind(name: &str) -> Option<StepKind> {
    StepKind::ALL.into_iter().find(|k| k.short_name() == name)
}

fn buffer(name: &str) -> Option<Buf> {
    Some(match name {
        "i" => Buf::In,
        "o" => Buf::Out,
        "s" => Buf::Scratch,
        _ => return None,
    })
}

/// One `<step>`.
fn read_step(h: &Header, r: u32, a: &mut Attrs, sizes: &Sizes, counts: &[usize]) -> Option<Step> {
    let before = a.errors.len();
    let kind = a.text("type").and_then(|t| {
        let k = kind(t);
        if k.is_none() {
            a.error(format!(
                "type=\"{}\" is not an MSCCL step type braid runs (s r rcs rrs rrc rrcs cpy re nop)",
                shorten(t)
            ));
        }
        k
    });
    let cnt = a.int_in("cnt", 0, i64::from(u32::MAX)).map(|v| v as u32);
    let depid = a.opt_int_in("depid", -1, i64::from(u32::MAX));
    let deps = a.opt_int_in("deps", -1, i64::from(u32::MAX));
    let kind = kind?;
    let cnt = cnt?;
    let mut slice = |role: &str, used: bool| -> Option<Option<Slice>> {
        if !used {
            return Some(None);
        }
        let (bkey, okey) = (format!("{role}buf"), format!("{role}off"));
        let bname = a.text(&bkey)?;
        let Some(buf) = buffer(bname) else {
            a.error(format!(
                "{bkey}=\"{}\" is not a buffer (expected i, o or s)",
                shorten(bname)
            ));
            return None;
        };
        let off = a.int_in(&okey, -1, i64::from(u32::MAX))?;
        if off < 0 {
            a.error(format!(
                "{okey}=\"-1\", but a `{kind}` step {} its {role} buffer",
                if role == "src" { "reads" } else { "writes" }
            ));
            return None;
        }
        let buf = rename_absent(h, buf, sizes);
        let size = match buf {
            Buf::In => sizes.input,
            Buf::Out => sizes.output,
            Buf::Scratch => Some(sizes.scratch),
        };
        let s = Slice {
            buf,
            offset: off as u32,
            count: cnt,
        };
        match size {
            None => a.error(format!(
                "{bkey}=\"{bname}\": rank {r} has no {buf} buffer in {}",
                h.collective
            )),
            Some(n) if s.end() > u64::from(n) => a.error(format!(
                "{role} chunks {off}..{} lie past the end of {bname} ({} chunks on this gpu)",
                s.end(),
                n
            )),
            Some(_) => {}
        }
        Some(Some(s))
    };
    let src = slice("src", kind.has_src());
    let dst = slice("dst", kind.has_dst());
    let dep = match (depid?, deps?) {
        (None | Some(-1), _) => None,
        (Some(tb), step) => {
            let step = step.unwrap_or(-1);
            match counts.get(tb as usize) {
                None => {
                    a.error(format!(
                        "depid=\"{tb}\" names a tb that does not exist (this gpu has {})",
                        counts.len()
                    ));
                    None
                }
                Some(&n) if step < 0 || step as usize >= n => {
                    a.error(format!(
                        "depends on step deps=\"{step}\" of tb {tb}, which has {n} step{} (0..{})",
                        if n == 1 { "" } else { "s" },
                        n
                    ));
                    None
                }
                Some(_) => Some(Dep {
                    block: tb as u32,
                    step: step as u32,
                }),
            }
        }
    };
    if a.errors.len() != before {
        return None;
    }
    Some(Step {
        kind,
        src: src?,
        dst: dst?,
        deps: dep.into_iter().collect(),
        origin: None,
    })
}

/// In MSCCL an in-place call passes one pointer as both `i` and `o`, so a program may
/// name either. Braid's layout aliases them too, but for broadcast and reduce one of the
/// names does not exist off the root; such a reference is renamed to the name that does.
/// Every other reference keeps its name: the verifier already accepts writes to `in`
/// where `in` aliases `out`.
fn rename_absent(h: &Header, buf: Buf, sizes: &Sizes) -> Buf {
    let in_place_only = h.modes.in_place && !h.modes.out_of_place;
    if !in_place_only {
        return buf;
    }
    match (h.collective, buf) {
        (Collective::Broadcast, Buf::In) if sizes.input.is_none() => Buf::Out,
        (Collective::Reduce, Buf::Out) if sizes.output.is_none() => Buf::In,
        _ => buf,
    }
}
