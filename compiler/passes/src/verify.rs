//! Sequential symbolic verification (dsl.md section 4).
//!
//! Runs the operations in program order over symbolic values (which ranks' contributions
//! of which input chunk each location holds), once per call mode, and checks that nothing
//! reads an undefined location and that the collective's postcondition holds.

use braid_ir::value::{postcondition, RankSet};
use braid_ir::{Layout, LocId, Mode, ModeSet, Op, OpId, OpKind, OpProgram, Ref, Value};
use braid_lang::Diagnostic;
use std::collections::HashSet;

/// Distinct undefined reads reported per mode before stopping.
const MAX_UNDEFINED_READS: usize = 5;
/// Wrong output locations described per mode (all are counted).
const MAX_WRONG_SHOWN: usize = 3;

/// What a successful verification established.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    pub modes: Vec<Mode>,
    pub ops: usize,
}

/// Verifies `prog` in each of `modes`, out-of-place first (dsl.md section 3). The first
/// mode that fails ends the check: its diagnostics say which mode it was, and a program
/// wrong in both would otherwise repeat every error.
pub fn verify(prog: &OpProgram, modes: ModeSet) -> Result<Verified, Vec<Diagnostic>> {
    let mut checked = Vec::new();
    for mode in modes.iter() {
        let diags = verify_mode(prog, mode);
        if !diags.is_empty() {
            return Err(diags);
        }
        checked.push(mode);
    }
    Ok(Verified {
        modes: checked,
        ops: prog.ops.len(),
    })
}

fn mode_label(mode: Mode) -> &'static str {
    match mode {
        Mode::OutOfPlace => "out-of-place call",
        Mode::InPlace => "in-place call",
    }
}

/// The layout of `prog`'s buffers in `mode`.
pub fn layout(prog: &OpProgram, mode: Mode) -> Layout {
    Layout::new(
        prog.collective,
        prog.shape.n,
        prog.chunks,
        prog.scratch,
        prog.root,
        mode,
    )
}

struct State {
    layout: Layout,
    values: Vec<Value>,
    /// The last operation that wrote each location (`u32::MAX`: none).
    writer: Vec<u32>,
    /// Locations whose value derives from an undefined read already reported.
    poisoned: Vec<bool>,
}

impl State {
    fn loc(&self, r: &Ref, i: u32) -> LocId {
        self.layout
            .loc(r.buf, r.rank, r.lo + i)
            .expect("instantiation checked bounds")
    }
}

fn verify_mode(prog: &OpProgram, mode: Mode) -> Vec<Diagnostic> {
    let layout = layout(prog, mode);
    let n = layout.num_locs();
    let mut st = State {
        values: vec![Value::Undef; n],
        writer: vec![u32::MAX; n],
        poisoned: vec![false; n],
        layout,
    };
    for (loc, rank, chunk) in st.layout.initial_inputs() {
        st.values[loc.index()] = Value::Input { rank, chunk };
    }
    let mut diags = Vec::new();
    let mut reported_spans = HashSet::new();
    let mut reads: Vec<(Value, bool)> = Vec::new();
    for (i, op) in prog.ops.iter().enumerate() {
        if let Some(d) = aliased_overlap(prog, op, &st.layout, mode) {
            if reported_spans.insert(op.span) {
                diags.push(d);
            }
            continue;
        }
        // All sources are read before the destination is written.
        reads.clear();
        for s in &op.srcs {
            for j in 0..s.len() {
                let loc = st.loc(s, j);
                let v = &st.values[loc.index()];
                let poisoned = st.poisoned[loc.index()];
                if !v.is_defined() && !poisoned && reported_spans.insert(op.span) {
                    diags.push(undefined_read(prog, op, &st.layout, s.at(j), mode));
                    if reported_spans.len() >= MAX_UNDEFINED_READS {
                        return diags;
                    }
                }
                reads.push((v.clone(), poisoned || !v.is_defined()));
            }
        }
        let len = op.dst.len() as usize;
        for j in 0..len {
            let (value, bad) = match op.kind {
                OpKind::Copy => reads[j].clone(),
                OpKind::Reduce => {
                    let (a, b) = (&reads[j], &reads[len + j]);
                    if a.1 || b.1 {
                        (Value::Undef, true)
                    } else {
                        (Value::reduce(&a.0, &b.0), false)
                    }
                }
            };
            let loc = st.loc(&op.dst, j as u32).index();
            st.values[loc] = value;
            st.poisoned[loc] = bad;
            st.writer[loc] = i as u32;
        }
    }
    if diags.is_empty() {
        diags.extend(check_postcondition(prog, &st, mode));
    }
    diags
}

/// In-place calls alias buffers, so names that differ may be one location: the overlap
/// rule of dsl.md section 2 applies to locations. A copy onto itself (`copy out[r] <-
/// in[r]` in place) is a no-op and allowed; a reduce may have its first source exactly
/// equal to its destination; any other overlap is an error. Ranges map to contiguous
/// locations (aliases are shifts), so comparing intervals is exact.
fn aliased_overlap(prog: &OpProgram, op: &Op, layout: &Layout, mode: Mode) -> Option<Diagnostic> {
    if mode != Mode::InPlace {
        return None; // instantiation already rejected overlapping names
    }
    let start = |r: &Ref| layout.loc(r.buf, r.rank, r.lo).expect("in bounds").0;
    let len = op.dst.len();
    let d = start(&op.dst);
    for (i, s) in op.srcs.iter().enumerate() {
        let a = start(s);
        let exact = a == d;
        let allowed = exact && (op.kind == OpKind::Copy || i == 0);
        if a < d + len && d < a + len && !allowed {
            let mut diag = Diagnostic::new(
                "overlap",
                format!(
                    "{}: the destination {} and the source {s} of `{op}` are the same memory in this mode",
                    mode_label(mode),
                    op.dst
                ),
            )
            .with_label(op.span, "destination overlaps a source through in-place aliasing");
            if let Some(b) = bindings(op, prog) {
                diag = diag.with_note(b);
            }
            return Some(diag);
        }
    }
    None
}

fn undefined_read(prog: &OpProgram, op: &Op, layout: &Layout, at: Ref, mode: Mode) -> Diagnostic {
    let mut d = Diagnostic::new(
        "undefined-read",
        format!(
            "{}: `{op}` reads {at}, which nothing has written yet",
            mode_label(mode)
        ),
    )
    .with_label(op.span, format!("reads {at} before anything writes it"));
    if let Some(b) = bindings(op, prog) {
        d = d.with_note(b);
    }
    let aliases = layout.names(layout.loc(at.buf, at.rank, at.lo).expect("in bounds"));
    if aliases.len() > 1 {
        let names: Vec<String> = aliases
            .iter()
            .map(|(b, r, c)| format!("{b}[{r}][{c}]"))
            .collect();
        d = d.with_note(format!(
            "in this mode {} are one location",
            names.join(" and ")
        ));
    }
    d.with_help(
        "`out` and `scratch` start undefined; in an in-place call only the `out` chunks that alias `in` start with the input",
    )
}

fn bindings(op: &Op, prog: &OpProgram) -> Option<String> {
    if op.bindings.is_empty() {
        return None;
    }
    let parts: Vec<String> = op
        .bindings
        .iter()
        .map(|b| format!("{} = {}", b.name, b.value))
        .collect();
    Some(format!("with {} ({})", parts.join(", "), prog.shape))
}

fn check_postcondition(prog: &OpProgram, st: &State, mode: Mode) -> Vec<Diagnostic> {
    let all = RankSet::all(prog.shape.n);
    let mut wrong = Vec::new();
    let mut total = 0usize;
    let mut blamed = HashSet::new();
    for (rank, chunk, expected) in postcondition(&st.layout) {
        let loc = st
            .layout
            .loc(braid_ir::Buf::Out, rank, chunk)
            .expect("postcondition lists existing locations");
        let value = &st.values[loc.index()];
        if expected.holds(value, &all) {
            continue;
        }
        total += 1;
        let writer = st.writer[loc.index()];
        // Describe a few wrong locations, preferring ones blamed on different lines.
        let span = match writer {
            u32::MAX => prog.decl_span,
            w => prog.op(OpId(w)).span,
        };
        if wrong.len() < MAX_WRONG_SHOWN && blamed.insert(span) {
            wrong.push((rank, chunk, expected, value.clone(), writer, span));
        }
    }
    let count = wrong.len();
    wrong
        .into_iter()
        .map(|(rank, chunk, expected, value, writer, span)| {
            let mut d = Diagnostic::new(
                "postcondition",
                format!(
                    "{}: {} postcondition fails: out[{rank}][{chunk}] holds {value}, but should hold {}",
                    mode_label(mode),
                    prog.collective,
                    expected.describe(prog.shape.n)
                ),
            );
            d = if writer == u32::MAX {
                d.with_label(span, format!("nothing writes out[{rank}][{chunk}]"))
            } else {
                let op = prog.op(OpId(writer));
                let d = d.with_label(span, format!("out[{rank}][{chunk}] was last written here"));
                match bindings(op, prog) {
                    Some(b) => d.with_note(format!("last written by `{op}` {b}")),
                    None => d.with_note(format!("last written by `{op}`")),
                }
            };
            if total > count {
                d = d.with_note(format!("{total} output chunk(s) are wrong in all"));
            }
            d
        })
        .collect()
}
