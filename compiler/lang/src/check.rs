//! Static checks: every error that does not depend on the topology, reported wherever it
//! appears in the file, even in code that never runs for a given shape (dsl.md section 2).

use crate::ast::*;
use crate::diag::Diagnostic;
use crate::names::{is_reserved, Builtin, Constant};
use std::collections::HashMap;

/// Checks a parsed file, collecting every problem.
pub fn check(file: &File) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    let mut seen: HashMap<&str, &Algorithm> = HashMap::new();
    for alg in &file.algorithms {
        if let Some(first) = seen.get(alg.name.name.as_str()) {
            diags.push(
                Diagnostic::new(
                    "duplicate-algorithm",
                    format!("two algorithms are named `{}`", alg.name.name),
                )
                .with_label(alg.name.span, "second definition")
                .with_label(first.name.span, "first defined here"),
            );
        } else {
            seen.insert(&alg.name.name, alg);
        }
        AlgorithmChecker {
            alg,
            diags: &mut diags,
            scopes: Scopes::default(),
        }
        .run();
    }
    diags
}

/// Where an expression sits, which decides the constants it may use.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    /// `where` conditions and the `chunks` header: `C` and `K` are not known yet.
    BeforeChunks,
    Body,
}

struct AlgorithmChecker<'a, 'd> {
    alg: &'a Algorithm,
    diags: &'d mut Vec<Diagnostic>,
    scopes: Scopes<'a>,
}

/// Names in scope. Lookups take constant time, so that a file of 100,000 `let`s is checked
/// in linear time.
#[derive(Default)]
struct Scopes<'a> {
    /// How many bindings of each name are visible.
    count: HashMap<&'a str, u32>,
    /// The names bound by each open scope, innermost last.
    open: Vec<Vec<&'a str>>,
    /// Distinct visible names in the order they were first bound, and for each open
    /// scope, how many of them came before it.
    visible: Vec<&'a str>,
    marks: Vec<usize>,
}

impl<'a> Scopes<'a> {
    fn push(&mut self) {
        self.open.push(Vec::new());
        self.marks.push(self.visible.len());
    }

    fn pop(&mut self) {
        for name in self.open.pop().expect("a scope is open") {
            let c = self.count.get_mut(name).expect("bound");
            *c -= 1;
        }
        // Names first bound in this scope are the last visible ones.
        self.visible
            .truncate(self.marks.pop().expect("a scope is open"));
    }

    fn bind(&mut self, name: &'a str) {
        let c = self.count.entry(name).or_insert(0);
        if *c == 0 {
            self.visible.push(name);
        }
        *c += 1;
        self.open.last_mut().expect("a scope is open").push(name);
    }

    fn contains(&self, name: &str) -> bool {
        self.count.get(name).is_some_and(|c| *c > 0)
    }

    /// What "names in scope" shows: the first few distinct ones.
    fn shown(&self) -> String {
        const SHOWN: usize = 10;
        let mut s = self.visible[..self.visible.len().min(SHOWN)].join(", ");
        if self.visible.len() > SHOWN {
            s.push_str(&format!(" and {} more", self.visible.len() - SHOWN));
        }
        s
    }
}

impl<'a> AlgorithmChecker<'a, '_> {
    fn run(&mut self) {
        let alg = self.alg;
        for cond in &alg.conditions {
            self.expr(cond, Context::BeforeChunks);
        }
        self.headers();
        self.scopes.push();
        for stmt in &alg.body {
            self.stmt(stmt);
        }
        self.scopes.pop();
    }

    fn headers(&mut self) {
        let alg = self.alg;
        let first_stmt = alg.body.first().map(|s| s.span());
        let mut seen: HashMap<&str, &Header> = HashMap::new();
        for h in &alg.headers {
            let kw = h.kind.keyword();
            if let Some(first) = seen.get(kw) {
                self.diags.push(
                    Diagnostic::new("duplicate-header", format!("header `{kw}` is given twice"))
                        .with_label(h.span, "second time")
                        .with_label(first.span, "first given here"),
                );
            } else {
                seen.insert(kw, h);
            }
            if let Some(s) = first_stmt {
                if h.span.start > s.start {
                    self.diags.push(
                        Diagnostic::new(
                            "header-after-statement",
                            format!("header `{kw}` comes after a statement"),
                        )
                        .with_label(h.span, "headers must come before the first statement")
                        .with_label(s, "first statement"),
                    );
                }
            }
            match &h.kind {
                HeaderKind::Chunks(e) => self.expr(e, Context::BeforeChunks),
                HeaderKind::Scratch(e) | HeaderKind::Channels(e) => self.expr(e, Context::Body),
                HeaderKind::Mode(m) => {
                    if alg.collective == Collective::Alltoall && *m != ModeDecl::OutOfPlace {
                        self.diags.push(
                            Diagnostic::new(
                                "header-range",
                                "alltoall has no in-place mode: its `mode` must be `outofplace`",
                            )
                            .with_label(h.span, "not allowed for alltoall"),
                        );
                    }
                }
                HeaderKind::Protocol(_) => {}
            }
        }
    }

    fn bind(&mut self, name: &'a Ident, what: &str) {
        if is_reserved(&name.name) {
            self.diags.push(
                Diagnostic::new(
                    "reserved-name",
                    format!(
                        "`{}` is a reserved word and cannot name a {what}",
                        name.name
                    ),
                )
                .with_label(name.span, "reserved"),
            );
        }
        self.scopes.bind(&name.name);
    }

    fn block(&mut self, stmts: &'a [Stmt]) {
        self.scopes.push();
        for s in stmts {
            self.stmt(s);
        }
        self.scopes.pop();
    }

    fn stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::Let { name, value, .. } => {
                self.expr(value, Context::Body);
                self.bind(name, "variable");
            }
            Stmt::For {
                var,
                lo,
                hi,
                step,
                body,
                ..
            } => {
                self.expr(lo, Context::Body);
                self.expr(hi, Context::Body);
                if let Some(s) = step {
                    self.expr(s, Context::Body);
                }
                self.scopes.push();
                self.bind(var, "loop variable");
                self.block(body);
                self.scopes.pop();
            }
            Stmt::If {
                arms, otherwise, ..
            } => {
                for (cond, body) in arms {
                    self.expr(cond, Context::Body);
                    self.block(body);
                }
                if let Some(body) = otherwise {
                    self.block(body);
                }
            }
            Stmt::Op(op) => {
                if op.dst.buf == Buf::In {
                    self.diags.push(
                        Diagnostic::new("write-to-in", "an operation writes to `in`")
                            .with_label(op.dst.buf_span, "`in` is read-only")
                            .with_help("write to `out` or `scratch`"),
                    );
                }
                for r in std::iter::once(&op.dst).chain(&op.srcs) {
                    self.buf_ref(r);
                }
                if let Some(ch) = &op.channel {
                    self.expr(ch, Context::Body);
                }
            }
        }
    }

    fn buf_ref(&mut self, r: &'a BufRef) {
        self.expr(&r.rank, Context::Body);
        match &r.chunks {
            ChunkSel::One(e) => self.expr(e, Context::Body),
            ChunkSel::Range(lo, hi) => {
                self.expr(lo, Context::Body);
                self.expr(hi, Context::Body);
            }
        }
    }

    fn expr(&mut self, e: &Expr, ctx: Context) {
        match &e.kind {
            ExprKind::Int(_) => {}
            ExprKind::Name(n) => self.name(n, e.span, ctx),
            ExprKind::Unary(_, a) => self.expr(a, ctx),
            ExprKind::Binary(_, a, b) => {
                self.expr(a, ctx);
                self.expr(b, ctx);
            }
            ExprKind::Call(f, args) => {
                for a in args {
                    self.expr(a, ctx);
                }
                match Builtin::from_name(&f.name) {
                    Some(b) if b.arity() != args.len() => self.diags.push(
                        Diagnostic::new(
                            "arity",
                            format!(
                                "`{}` takes {} argument(s) but {} were given",
                                f.name,
                                b.arity(),
                                args.len()
                            ),
                        )
                        .with_label(e.span, "wrong number of arguments"),
                    ),
                    Some(_) => {}
                    None => self.diags.push(
                        Diagnostic::new("unknown-name", format!("unknown function `{}`", f.name))
                            .with_label(f.span, "not a builtin")
                            .with_help(
                                "the builtins are node, local, rank, log2, ilog2, pow2, min, max",
                            ),
                    ),
                }
            }
        }
    }

    fn name(&mut self, name: &str, span: Span, ctx: Context) {
        if let Some(c) = Constant::from_name(name) {
            let coll = self.alg.collective;
            let problem = match c {
                Constant::Root if !coll.is_rooted() => Some(format!(
                    "`ROOT` exists only in broadcast and reduce, not in {coll}"
                )),
                Constant::K if !coll.has_k() => Some(format!(
                    "`K` exists only in allgather, reduce_scatter and alltoall, not in {coll}"
                )),
                Constant::C | Constant::K if ctx == Context::BeforeChunks => Some(format!(
                    "`{name}` cannot be used in `where` conditions or in the `chunks` header"
                )),
                _ => None,
            };
            if let Some(msg) = problem {
                self.diags.push(
                    Diagnostic::new("constant-misuse", msg).with_label(span, "not available here"),
                );
            }
            return;
        }
        if self.scopes.contains(name) {
            return;
        }
        let d = if Builtin::from_name(name).is_some() {
            Diagnostic::new(
                "unknown-name",
                format!("`{name}` is a builtin function, not a value"),
            )
            .with_label(span, format!("call it: `{name}(...)`"))
        } else if is_reserved(name) {
            Diagnostic::new(
                "unknown-name",
                format!("`{name}` is a reserved word, not a value"),
            )
            .with_label(span, "reserved")
        } else {
            let mut d = Diagnostic::new("unknown-name", format!("unknown name `{name}`"))
                .with_label(span, "not defined here");
            if !self.scopes.visible.is_empty() {
                d = d.with_help(format!(
                    "names in scope: {}, and the constants N, NODES, G, ...",
                    self.scopes.shown()
                ));
            }
            d
        };
        self.diags.push(d);
    }
}

#[cfg(test)]
mod tests {
    use crate::parse_and_check;

    fn codes(text: &str) -> Vec<&'static str> {
        parse_and_check(text).1.iter().map(|d| d.code).collect()
    }

    #[test]
    fn clean_program_has_no_diagnostics() {
        let text = "algorithm a : broadcast where ROOT >= 0 { chunks N; scratch C;
            let x = ROOT; for r in 0 .. N { if r != x { copy out[r][0] <- in[x][0]; } } }";
        assert_eq!(codes(text), Vec::<&str>::new());
    }

    #[test]
    fn many_independent_errors_are_all_reported() {
        let text = "algorithm a : allreduce {
            let x = y;
            copy in[0][0] <- out[0][K];
            chunks 2;
            let ROOT = 1;
            let z = ROOT;
            let w = min(1);
            let v = foo(1);
        }
        algorithm a : allgather where C > 1 { mode inplace; mode both; }
        algorithm t : alltoall { mode both; }";
        let c = codes(text);
        for expected in [
            "unknown-name",
            "write-to-in",
            "constant-misuse",
            "header-after-statement",
            "reserved-name",
            "arity",
            "duplicate-algorithm",
            "duplicate-header",
            "header-range",
        ] {
            assert!(c.contains(&expected), "missing {expected} in {c:?}");
        }
        assert!(c.len() >= 11, "{c:?}");
    }

    #[test]
    fn scopes_end_with_their_block() {
        let c = codes("algorithm a : allreduce { for i in 0 .. N { let j = i; } let k = j + i; }");
        assert_eq!(c, vec!["unknown-name", "unknown-name"]);
    }

    #[test]
    fn let_sees_the_outer_binding_it_shadows() {
        assert!(codes("algorithm a : allreduce { let x = 1; let x = x + 1; }").is_empty());
        assert_eq!(
            codes("algorithm a : allreduce { let x = x; }"),
            vec!["unknown-name"]
        );
    }
}
