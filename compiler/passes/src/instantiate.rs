//! Instantiation: an algorithm's syntax tree and a shape (N, NODES, G, ROOT) to the flat
//! list of chunk operations its sequential execution performs ([`OpProgram`]).
//!
//! Applies dsl.md's index rules exactly: rank expressions wrap modulo N, chunk expressions
//! do not; every reference must lie inside a buffer that exists on its rank. The work is
//! bounded by a step budget charged before it is done ([`crate::budget`]), and the
//! buffers by [`LOCATION_BUDGET`].

use crate::budget::{block_cost, iterations, nested_work, step_budget, Budget};
use crate::eval::{floor_mod, Bound, Env, EvalError};
use braid_ir::{
    Collective, Layout, Mode, ModeSet, Op, OpKind, OpProgram, Protocol, Ref, Shape, Span,
};
use braid_lang::ast::{Algorithm, BufRef, ChunkSel, Expr, HeaderKind, OpStmt, Stmt};
use braid_lang::names::{Builtin, Constant};
use braid_lang::Diagnostic;
use std::collections::HashSet;
use std::sync::Arc;

/// Chunk locations (all ranks, all buffers) one instantiation may declare.
pub const LOCATION_BUDGET: u64 = 1 << 28;
/// Diagnostics one instantiation reports before giving up.
const MAX_DIAGNOSTICS: usize = 20;

/// A `where` condition that does not hold, with the values that made it fail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailedCondition {
    pub span: Span,
}

/// Evaluates the `where` conditions. `Ok(failed)` lists those that do not hold.
pub fn failed_conditions(
    alg: &Algorithm,
    shape: &Shape,
    root: Option<u32>,
) -> Result<Vec<FailedCondition>, Vec<Diagnostic>> {
    let mut diags = non_uniform_uses(alg, shape);
    if !diags.is_empty() {
        return Err(diags);
    }
    let env = Env::new(shape.clone(), root);
    let mut failed = Vec::new();
    for cond in &alg.conditions {
        match env.eval(cond) {
            Ok(0) => failed.push(FailedCondition { span: cond.span }),
            Ok(_) => {}
            Err(e) => diags.push(eval_diag(e, &env)),
        }
    }
    if diags.is_empty() {
        Ok(failed)
    } else {
        Err(diags)
    }
}

/// The diagnostic for conditions that fail, naming each and the shape's values.
pub fn conditions_diagnostic(
    alg: &Algorithm,
    shape: &Shape,
    root: Option<u32>,
    failed: &[FailedCondition],
) -> Diagnostic {
    let mut values = shape.to_string();
    if let Some(r) = root {
        values.push_str(&format!(" ROOT={r}"));
    }
    let mut d = Diagnostic::new(
        "where",
        format!(
            "algorithm `{}` does not apply to this topology ({values})",
            alg.name.name
        ),
    );
    for f in failed {
        d = d.with_label(f.span, format!("this condition does not hold for {values}"));
    }
    d
}

/// Instantiates `alg` for `shape` (and `root`, for rooted collectives). Fails with every
/// problem found (deduplicated by source location) if the program is wrong for this shape.
pub fn instantiate(
    alg: &Algorithm,
    shape: &Shape,
    root: Option<u32>,
) -> Result<OpProgram, Vec<Diagnostic>> {
    instantiate_within(alg, shape, root, step_budget(shape))
}

/// [`instantiate`] within a step budget of `max_steps` instead of the one in force
/// ([`step_budget`]): see [`crate::budget`].
pub fn instantiate_within(
    alg: &Algorithm,
    shape: &Shape,
    root: Option<u32>,
    max_steps: u64,
) -> Result<OpProgram, Vec<Diagnostic>> {
    assert!(
        root.is_some() == alg.collective.is_rooted(),
        "ROOT must be given exactly for rooted collectives"
    );
    let failed = failed_conditions(alg, shape, root)?;
    if !failed.is_empty() {
        return Err(vec![conditions_diagnostic(alg, shape, root, &failed)]);
    }
    let mut inst = Instantiator {
        env: Env::new(shape.clone(), root),
        layout: None,
        ops: Vec::new(),
        diags: Vec::new(),
        reported: HashSet::new(),
        budget: Budget::new(max_steps),
        over_budget: false,
    };
    let header = inst.headers(alg);
    let Some(h) = header else {
        return Err(inst.diags);
    };
    inst.layout = Some(Layout::new(
        alg.collective,
        shape.n,
        h.chunks,
        h.scratch,
        root,
        Mode::OutOfPlace,
    ));
    if inst.charge_block(&alg.body, alg.decl_span) {
        inst.block(&alg.body);
    }
    if !inst.diags.is_empty() {
        return Err(inst.diags);
    }
    Ok(OpProgram {
        algorithm: alg.name.name.clone(),
        collective: alg.collective,
        shape: shape.clone(),
        root,
        chunks: h.chunks,
        scratch: h.scratch,
        channels: h.channels,
        protocol: h.protocol,
        modes: h.modes,
        decl_span: alg.decl_span,
        ops: inst.ops,
    })
}

/// Every use of `G` (or of the builtins defined through it) when nodes differ in size,
/// reported wherever it appears.
fn non_uniform_uses(alg: &Algorithm, shape: &Shape) -> Vec<Diagnostic> {
    if shape.g.is_some() {
        return Vec::new();
    }
    let mut spans = Vec::new();
    let mut visit = |e: &Expr| collect_g_uses(e, &mut spans);
    alg.conditions.iter().for_each(&mut visit);
    for h in &alg.headers {
        if let HeaderKind::Chunks(e) | HeaderKind::Scratch(e) | HeaderKind::Channels(e) = &h.kind {
            visit(e);
        }
    }
    walk_exprs(&alg.body, &mut visit);
    spans
        .into_iter()
        .map(|s| {
            Diagnostic::new(
                "non-uniform",
                "`G` is undefined on this topology: its nodes differ in size",
            )
            .with_label(s, "uses `G`")
        })
        .collect()
}

fn collect_g_uses(e: &Expr, out: &mut Vec<Span>) {
    use braid_lang::ast::ExprKind;
    match &e.kind {
        ExprKind::Name(n) if Constant::from_name(n) == Some(Constant::G) => out.push(e.span),
        ExprKind::Call(f, args) => {
            if Builtin::from_name(&f.name).is_some_and(|b| b.uses_g()) {
                out.push(e.span);
            }
            args.iter().for_each(|a| collect_g_uses(a, out));
        }
        ExprKind::Unary(_, a) => collect_g_uses(a, out),
        ExprKind::Binary(_, a, b) => {
            collect_g_uses(a, out);
            collect_g_uses(b, out);
        }
        _ => {}
    }
}

fn walk_exprs(stmts: &[Stmt], f: &mut impl FnMut(&Expr)) {
    let buf_ref = |r: &BufRef, f: &mut dyn FnMut(&Expr)| {
        f(&r.rank);
        match &r.chunks {
            ChunkSel::One(e) => f(e),
            ChunkSel::Range(a, b) => {
                f(a);
                f(b);
            }
        }
    };
    for s in stmts {
        match s {
            Stmt::Let { value, .. } => f(value),
            Stmt::For {
                lo, hi, step, body, ..
            } => {
                f(lo);
                f(hi);
                step.iter().for_each(&mut *f);
                walk_exprs(body, f);
            }
            Stmt::If {
                arms, otherwise, ..
            } => {
                for (c, body) in arms {
                    f(c);
                    walk_exprs(body, f);
                }
                if let Some(body) = otherwise {
                    walk_exprs(body, f);
                }
            }
            Stmt::Op(op) => {
                for r in std::iter::once(&op.dst).chain(&op.srcs) {
                    buf_ref(r, f);
                }
                op.channel.iter().for_each(&mut *f);
            }
        }
    }
}

/// The evaluated headers.
struct Headers {
    chunks: u32,
    scratch: u32,
    channels: u32,
    protocol: Protocol,
    modes: ModeSet,
}

struct Instantiator {
    env: Env,
    layout: Option<Layout>,
    ops: Vec<Op>,
    diags: Vec<Diagnostic>,
    /// Source locations already reported: a bad statement inside a loop is reported once.
    reported: HashSet<(Span, &'static str)>,
    budget: Budget,
    over_budget: bool,
}

fn eval_diag(e: EvalError, env: &Env) -> Diagnostic {
    let mut d = Diagnostic::new(e.code, e.message).with_label(e.span, "");
    if let Some(note) = bindings_note(env) {
        d = d.with_note(note);
    }
    d
}

fn bindings_note(env: &Env) -> Option<String> {
    if env.bound.is_empty() {
        return None;
    }
    let (shown, left_out) = env.bound.shown();
    let mut parts: Vec<String> = shown
        .iter()
        .map(|b| format!("{} = {}", b.name, b.value))
        .collect();
    if left_out > 0 {
        parts.push(format!("and {left_out} earlier `let`s"));
    }
    Some(format!("with {} ({})", parts.join(", "), env.shape))
}

impl Instantiator {
    fn layout(&self) -> &Layout {
        self.layout.as_ref().expect("headers evaluated first")
    }

    fn stopped(&self) -> bool {
        self.over_budget || self.diags.len() >= MAX_DIAGNOSTICS
    }

    fn report(&mut self, code: &'static str, span: Span, d: Diagnostic) {
        if self.reported.insert((span, code)) && self.diags.len() < MAX_DIAGNOSTICS {
            self.diags.push(d);
        }
    }

    fn report_eval(&mut self, e: EvalError) {
        let (code, span) = (e.code, e.span);
        let d = eval_diag(e, &self.env);
        self.report(code, span, d);
    }

    fn eval(&mut self, e: &Expr) -> Option<i64> {
        match self.env.eval(e) {
            Ok(v) => Some(v),
            Err(err) => {
                self.report_eval(err);
                None
            }
        }
    }

    fn range_error(&mut self, code: &'static str, span: Span, message: String, label: String) {
        let mut d = Diagnostic::new(code, message).with_label(span, label);
        if let Some(n) = bindings_note(&self.env) {
            d = d.with_note(n);
        }
        self.report(code, span, d);
    }

    fn headers(&mut self, alg: &Algorithm) -> Option<Headers> {
        let n = self.env.shape.n;
        let c = alg.collective;
        let mut h = Headers {
            chunks: c.default_chunks(n),
            scratch: 0,
            channels: 1,
            protocol: Protocol::Auto,
            modes: c.default_modes(),
        };
        let mut ok = true;
        let int_header = |this: &mut Self, e: &Expr, kw: &str, min: i64| -> Option<u32> {
            let v = this.eval(e)?;
            if v < min || v > u32::MAX as i64 {
                this.range_error(
                    "header-range",
                    e.span,
                    format!("`{kw}` is {v}, outside its allowed range"),
                    format!("must be >= {min}"),
                );
                return None;
            }
            Some(v as u32)
        };
        // `chunks` first: `scratch` and `channels` may use C and K.
        for hd in &alg.headers {
            if let HeaderKind::Chunks(e) = &hd.kind {
                match int_header(self, e, "chunks", 1) {
                    Some(v) if c.has_k() && v % n != 0 => {
                        self.range_error(
                            "header-range",
                            e.span,
                            format!("`chunks` is {v}, which is not a multiple of N = {n} as {c} requires"),
                            "must be a multiple of N".into(),
                        );
                        ok = false;
                    }
                    Some(v) => h.chunks = v,
                    None => ok = false,
                }
            }
        }
        self.env.chunks = Some(h.chunks as i64);
        for hd in &alg.headers {
            match &hd.kind {
                HeaderKind::Chunks(_) => {}
                HeaderKind::Scratch(e) => match int_header(self, e, "scratch", 0) {
                    Some(v) => h.scratch = v,
                    None => ok = false,
                },
                HeaderKind::Channels(e) => match int_header(self, e, "channels", 1) {
                    Some(v) => h.channels = v,
                    None => ok = false,
                },
                HeaderKind::Protocol(p) => h.protocol = *p,
                HeaderKind::Mode(m) => h.modes = m.modes(),
            }
        }
        let locations = n as u64 * (2 * h.chunks as u64 + h.scratch as u64);
        if ok && locations > LOCATION_BUDGET {
            self.diags.push(
                Diagnostic::new(
                    "too-large",
                    format!(
                        "the buffers declare {locations} chunk locations over all ranks, more than the {LOCATION_BUDGET} a program may use"
                    ),
                )
                .with_label(alg.decl_span, ""),
            );
            ok = false;
        }
        // Verification holds a value per location: declaring them is work too.
        if ok {
            ok = self.charge(1, locations, alg.decl_span, || {
                format!("its buffers hold {locations} chunk locations over all ranks")
            });
        }
        ok.then_some(h)
    }

    /// Charges the budget for a loop's iterations and bodies, before the first runs. An
    /// outermost loop is refused at once if the loops nested in it with fixed bounds
    /// would take too much with it.
    fn charge_loop(&mut self, count: u64, var: &str, body: &[Stmt], at: Span) -> bool {
        let each = 1 + block_cost(body);
        if !self.over_budget && !self.env.bound.in_loop() {
            let env = &self.env;
            let nested = nested_work(var, body, &mut |e| env.eval(e).ok());
            let with_nested = each.saturating_add(nested);
            if nested > 0 && !self.budget.fits(count, with_nested) {
                let label =
                    format!("{count} iterations × {with_nested} steps, counting its inner loops");
                return self.refuse(label, at, count as u128 * with_nested as u128);
            }
        }
        self.charge(count, each, at, || {
            if count > 1 {
                format!("{count} iterations × {each} steps")
            } else {
                format!("{each} more steps")
            }
        })
    }

    /// Charges the budget for one run of a block's own statements (an `if` arm, the body).
    fn charge_block(&mut self, body: &[Stmt], at: Span) -> bool {
        let each = block_cost(body);
        self.charge(1, each, at, || format!("{each} more steps"))
    }

    /// Charges the budget for `times` runs of `each` steps before any of them happens.
    /// On refusal, reports it at `at` (with `label`) and stops the instantiation.
    fn charge(&mut self, times: u64, each: u64, at: Span, label: impl FnOnce() -> String) -> bool {
        if self.over_budget {
            return false;
        }
        if self.budget.charge(times, each) {
            return true;
        }
        self.refuse(label(), at, times as u128 * each as u128)
    }

    /// Reports that `needed` more steps do not fit in the budget.
    fn refuse(&mut self, label: String, at: Span, needed: u128) -> bool {
        let mut d = Diagnostic::new(
            "too-large",
            format!(
                "the program would take more than {} evaluation steps for {}",
                self.budget.limit, self.env.shape
            ),
        )
        .with_label(at, label)
        .with_help("BRAID_MAX_STEPS raises the limit");
        if needed <= self.budget.limit as u128 {
            // Not too much on its own: say what came before.
            d = d.with_note(format!("{} steps were taken before it", self.budget.spent));
        }
        if let Some(note) = bindings_note(&self.env) {
            d = d.with_note(note);
        }
        self.diags.push(d);
        self.over_budget = true;
        false
    }

    fn block(&mut self, stmts: &[Stmt]) {
        let depth = self.env.bound.len();
        for s in stmts {
            if self.stopped() {
                break;
            }
            self.stmt(s);
        }
        self.env.bound.truncate(depth);
    }

    fn stmt(&mut self, stmt: &Stmt) {
        match stmt {
            Stmt::Let { name, value, .. } => {
                // On error, bind 0 so that later statements still get checked; the
                // error itself keeps the instantiation from succeeding.
                let v = self.eval(value).unwrap_or(0);
                self.env.bound.push(Bound {
                    name: Arc::from(name.name.as_str()),
                    value: v,
                    is_loop: false,
                });
            }
            Stmt::For {
                var,
                rev,
                lo,
                hi: hi_e,
                step,
                body,
                span,
            } => {
                let (Some(lo), Some(hi)) = (self.eval(lo), self.eval(hi_e)) else {
                    return;
                };
                let step_v = match step {
                    Some(e) => match self.eval(e) {
                        Some(s) if s > 0 => s,
                        Some(s) => {
                            self.range_error(
                                "bad-step",
                                e.span,
                                format!("loop step is {s}, but it must be > 0"),
                                "step must be positive".into(),
                            );
                            return;
                        }
                        None => return,
                    },
                    None => 1,
                };
                let count = iterations(lo, hi, step_v);
                let header = Span {
                    start: span.start,
                    end: step.as_ref().unwrap_or(hi_e).span.end,
                };
                // The body's cost is only computed for a loop that runs: computing it is
                // work too, and is covered by the charge.
                if count > 0 && !self.charge_loop(count, &var.name, body, header) {
                    return;
                }
                let name: Arc<str> = Arc::from(var.name.as_str());
                for i in 0..count {
                    if self.stopped() {
                        return;
                    }
                    let k = if *rev { count - 1 - i } else { i };
                    let v = (lo as i128 + k as i128 * step_v as i128) as i64;
                    self.env.bound.push(Bound {
                        name: name.clone(),
                        value: v,
                        is_loop: true,
                    });
                    self.block(body);
                    self.env.bound.pop();
                }
            }
            Stmt::If {
                arms,
                otherwise,
                span,
            } => {
                let at = |cond: &Expr| Span {
                    start: span.start,
                    end: cond.span.end,
                };
                for (cond, body) in arms {
                    match self.eval(cond) {
                        Some(0) => continue,
                        Some(_) => {
                            if self.charge_block(body, at(cond)) {
                                self.block(body);
                            }
                            return;
                        }
                        None => return,
                    }
                }
                if let Some(body) = otherwise {
                    let first = &arms[0].0;
                    if self.charge_block(body, at(first)) {
                        self.block(body);
                    }
                }
            }
            Stmt::Op(op) => self.op(op),
        }
    }

    fn op(&mut self, op: &OpStmt) {
        let Some(dst) = self.buf_ref(&op.dst) else {
            return;
        };
        let mut srcs = Vec::with_capacity(2);
        for s in &op.srcs {
            srcs.push((self.buf_ref(s), s));
        }
        let channel = match &op.channel {
            Some(e) => match self.eval(e) {
                Some(v) if (0..=u32::MAX as i64).contains(&v) => Some(v as u32),
                Some(v) => {
                    return self.range_error(
                        "bad-channel",
                        e.span,
                        format!("channel hint is {v}, but it must be >= 0"),
                        "must be >= 0".into(),
                    )
                }
                None => return,
            },
            None => None,
        };
        let mut resolved = Vec::with_capacity(2);
        for (r, ast) in srcs {
            let Some(r) = r else { return };
            resolved.push((r, ast));
        }
        for (s, ast) in &resolved {
            if s.len() != dst.len() {
                return self.range_error(
                    "length-mismatch",
                    ast.span,
                    format!(
                        "ranges of unequal length: the destination {dst} has {} chunk(s), this source {s} has {}",
                        dst.len(),
                        s.len()
                    ),
                    format!("{} chunk(s)", s.len()),
                );
            }
        }
        for (i, (s, ast)) in resolved.iter().enumerate() {
            let exact_first_of_two = i == 0 && resolved.len() == 2 && *s == dst;
            if overlaps(&dst, s) && !exact_first_of_two {
                return self.range_error(
                    "overlap",
                    ast.span,
                    format!("the destination {dst} overlaps the source {s}"),
                    "overlaps the destination".into(),
                );
            }
        }
        if dst.is_empty() {
            return; // an empty range is a no-op once it is known to be in bounds
        }
        // Later passes work per chunk: a range costs its length.
        let len = dst.len() as u64;
        if !self.charge(1, len, op.span, || format!("writes {len} chunks")) {
            return;
        }
        let srcs: Vec<Ref> = match (op.kind, resolved.len()) {
            (OpKind::Reduce, 1) => vec![dst, resolved[0].0],
            _ => resolved.iter().map(|(r, _)| *r).collect(),
        };
        let bindings = self
            .env
            .bound
            .loops()
            .map(|b| braid_ir::Binding {
                name: b.name.clone(),
                value: b.value,
            })
            .collect();
        self.ops.push(Op {
            kind: op.kind,
            dst,
            srcs,
            channel,
            span: op.span,
            bindings,
        });
    }

    fn buf_ref(&mut self, r: &BufRef) -> Option<Ref> {
        let n = self.env.shape.n as i64;
        let rank = floor_mod(self.eval(&r.rank)?, n).expect("N > 0") as u32;
        let (lo, hi, single) = match &r.chunks {
            ChunkSel::One(e) => {
                let c = self.eval(e)?;
                (c, c.saturating_add(1), true)
            }
            ChunkSel::Range(a, b) => {
                let (lo, hi) = (self.eval(a)?, self.eval(b)?);
                if lo > hi {
                    self.range_error(
                        "bad-range",
                        r.span,
                        format!("chunk range {lo} .. {hi} has its start after its end"),
                        "LO > HI".into(),
                    );
                    return None;
                }
                (lo, hi, false)
            }
        };
        let layout = self.layout();
        let Some(size) = layout.size(r.buf, rank) else {
            let why = match layout.collective {
                Collective::Broadcast => "for broadcast, `in` exists only on ROOT",
                _ => "for reduce, `out` exists only on ROOT (use `scratch` elsewhere)",
            };
            let root = layout.root.unwrap_or(0);
            self.range_error(
                "no-such-buffer",
                r.buf_span,
                format!(
                    "`{}` does not exist on rank {rank}: {why} (ROOT = {root})",
                    r.buf
                ),
                format!("`{}[{rank}]` does not exist", r.buf),
            );
            return None;
        };
        if lo < 0 || hi > size as i64 {
            let what = if single {
                format!("chunk index {lo}")
            } else {
                format!("chunk range {lo} .. {hi}")
            };
            self.range_error(
                "out-of-bounds",
                r.span,
                format!(
                    "{what} is outside `{}[{rank}]`, which has {size} chunk(s)",
                    r.buf
                ),
                format!("valid chunks are 0 .. {size}"),
            );
            return None;
        }
        Some(Ref {
            buf: r.buf,
            rank,
            lo: lo as u32,
            hi: hi as u32,
        })
    }
}

fn overlaps(a: &Ref, b: &Ref) -> bool {
    a.buf == b.buf && a.rank == b.rank && a.lo < b.hi && b.lo < a.hi
}
