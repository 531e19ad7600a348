//! Source text to [`ast::File`](crate::ast::File), through the pest grammar in `grammar/braid.pest`.
//!
//! pest stops at the first syntax error. To report more than one, the file is first cut
//! into segments at each top-level `algorithm` keyword (outside comments, first on its
//! line), and every segment is parsed on its own: one syntax error per algorithm at most,
//! and the algorithms that parse are still checked.

use crate::ast::*;
use crate::diag::Diagnostic;
use crate::limits::{scan_nesting, MAX_EXPR_DEPTH};
use pest::iterators::Pair;
use pest::Parser as _;

#[derive(pest_derive::Parser)]
#[grammar = "../../grammar/braid.pest"]
struct BraidParser;

/// Parses a whole file. Returns the algorithms that parsed and every syntax error.
pub fn parse(text: &str) -> (File, Vec<Diagnostic>) {
    // Track the literal tokens pest tried at the failure point, for "expected `;`".
    pest::set_error_detail(true);
    let mut algorithms = Vec::new();
    let mut diags = Vec::new();
    for (start, end) in segments(text) {
        let segment = &text[start..end];
        // Refuse nesting that would make pest and the passes after it recurse too deep.
        if let Some(d) = scan_nesting(segment, start) {
            diags.push(d);
            continue;
        }
        match BraidParser::parse(Rule::file, segment) {
            Ok(mut pairs) => {
                let file = pairs.next().expect("file rule");
                let mut b = Builder {
                    base: start,
                    diags: &mut diags,
                    too_deep: false,
                };
                for pair in file.into_inner() {
                    if pair.as_rule() == Rule::algorithm {
                        algorithms.push(b.algorithm(pair));
                    }
                }
            }
            Err(e) => diags.push(syntax_error(e, start, segment)),
        }
    }
    (File { algorithms }, diags)
}

/// Byte ranges of the segments: a prologue, then one per top-level `algorithm`.
fn segments(text: &str) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut cuts = vec![0];
    let mut i = 0;
    let mut line_blank = true; // only whitespace since the start of the line
    while i < bytes.len() {
        match bytes[i] {
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < bytes.len() && !(bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                i += 2;
                line_blank = false;
                continue;
            }
            b'\n' => line_blank = true,
            b' ' | b'\t' | b'\r' => {}
            _ => {
                if line_blank && text[i..].starts_with("algorithm") {
                    let after = bytes.get(i + "algorithm".len());
                    if !after.is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_') && i > 0 {
                        cuts.push(i);
                    }
                }
                line_blank = false;
            }
        }
        i += 1;
    }
    cuts.dedup();
    let mut out: Vec<(usize, usize)> = cuts.windows(2).map(|w| (w[0], w[1])).collect();
    out.push((*cuts.last().unwrap(), text.len()));
    out
}

/// What a grammar rule is called in "expected ..." messages.
fn describe(rule: Rule) -> &'static str {
    match rule {
        Rule::EOI => "end of file",
        Rule::algorithm | Rule::kw_algorithm => "`algorithm`",
        Rule::name => "a name",
        Rule::int => "an integer",
        Rule::collective => {
            "a collective (allreduce, allgather, reduce_scatter, alltoall, broadcast, reduce)"
        }
        Rule::where_list | Rule::kw_where => "`where`",
        Rule::header => "a header",
        Rule::protocol_name => "a protocol (simple, ll, ll128, auto)",
        Rule::mode_name => "a mode (inplace, outofplace, both)",
        Rule::let_stmt | Rule::kw_let => "`let`",
        Rule::for_stmt | Rule::kw_for => "`for`",
        Rule::if_stmt | Rule::kw_if => "`if`",
        Rule::kw_else | Rule::else_clause => "`else`",
        Rule::copy_stmt | Rule::kw_copy => "`copy`",
        Rule::reduce_stmt | Rule::kw_reduce => "`reduce`",
        Rule::kw_in => "`in`",
        Rule::rev | Rule::kw_rev => "`rev`",
        Rule::step_clause | Rule::kw_step => "`step`",
        Rule::chunks_header | Rule::kw_chunks => "`chunks`",
        Rule::scratch_header | Rule::kw_scratch => "`scratch`",
        Rule::channels_header | Rule::kw_channels => "`channels`",
        Rule::protocol_header | Rule::kw_protocol => "`protocol`",
        Rule::mode_header | Rule::kw_mode => "`mode`",
        Rule::channel_hint => "`@ch(...)`",
        Rule::block => "`{`",
        Rule::buf_ref | Rule::buf_name => "a buffer (in, out, scratch)",
        Rule::chunk_sel => "a chunk index or range",
        Rule::expr
        | Rule::or_expr
        | Rule::and_expr
        | Rule::cmp_expr
        | Rule::bor_expr
        | Rule::xor_expr
        | Rule::band_expr
        | Rule::shift_expr
        | Rule::add_expr
        | Rule::mul_expr
        | Rule::unary
        | Rule::call => "an expression",
        Rule::cmp_op => "a comparison",
        Rule::or_op
        | Rule::and_op
        | Rule::bor_op
        | Rule::xor_op
        | Rule::band_op
        | Rule::shift_op
        | Rule::add_op
        | Rule::mul_op => "an operator",
        Rule::unary_op => "`-` or `!`",
        _ => "something else",
    }
}

/// Literal tokens worth naming in "expected ..." messages.
const STRUCTURAL_TOKENS: &[&str] = &[
    ";", ",", ":", "=", "(", ")", "[", "]", "{", "}", "<-", "..", "@",
];

fn syntax_error(e: pest::error::Error<Rule>, base: usize, segment: &str) -> Diagnostic {
    use pest::error::{ErrorVariant, InputLocation};
    let pos = match e.location {
        InputLocation::Pos(p) => p,
        InputLocation::Span((s, _)) => s,
    };
    if let ErrorVariant::CustomError { message } = &e.variant {
        // pest's own guard: it stops before the stack runs out. `scan_nesting` keeps
        // programs far from it, so this is only reached on a very small thread stack.
        if message.contains("limit reached") {
            let at = base + pos;
            let len = segment[pos..].chars().next().map_or(0, |c| c.len_utf8());
            return Diagnostic::new(
                "too-deep",
                format!("the program nests too deeply to parse ({message})"),
            )
            .with_label(Span::new(at, at + len), "nesting gave up here");
        }
    }
    let mut names: Vec<String> = match &e.variant {
        ErrorVariant::ParsingError { positives, .. } => {
            positives.iter().map(|r| describe(*r).to_string()).collect()
        }
        ErrorVariant::CustomError { message } => vec![message.clone()],
    };
    if let Some(attempts) = e.parse_attempts() {
        if attempts.max_position == pos {
            for t in attempts.expected_tokens() {
                // Structural punctuation only: keywords and operators already appear
                // through their rules ("an operator"), and comments are always allowed.
                let token = t.to_string();
                if STRUCTURAL_TOKENS.contains(&token.as_str()) {
                    names.push(format!("`{token}`"));
                }
            }
        }
    }
    names.sort();
    names.dedup();
    if names.len() > 1 {
        names.retain(|n| n != "something else");
    }
    let message = match names.as_slice() {
        [] => "something else".to_string(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {}", init.join(", "), last),
    };
    let found = segment[pos..]
        .chars()
        .next()
        .map_or("end of file".to_string(), |c| {
            let word: String = segment[pos..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if word.is_empty() {
                format!("`{c}`")
            } else {
                format!("`{word}`")
            }
        });
    let start = base + pos;
    let len = segment[pos..].chars().next().map_or(0, |c| c.len_utf8());
    Diagnostic::new(
        "syntax",
        format!("syntax error: expected {message}, found {found}"),
    )
    .with_label(Span::new(start, start + len), format!("expected {message}"))
}

struct Builder<'d> {
    base: usize,
    diags: &'d mut Vec<Diagnostic>,
    /// The expression being built is too deep: it was reported, and is being abandoned.
    too_deep: bool,
}

impl Builder<'_> {
    fn span(&self, pair: &Pair<Rule>) -> Span {
        let s = pair.as_span();
        Span::new(self.base + s.start(), self.base + s.end())
    }

    fn ident(&self, pair: Pair<Rule>) -> Ident {
        Ident {
            name: pair.as_str().to_string(),
            span: self.span(&pair),
        }
    }

    fn algorithm(&mut self, pair: Pair<Rule>) -> Algorithm {
        let span = self.span(&pair);
        let mut inner = pair.into_inner().filter(|p| !is_keyword(p.as_rule()));
        let name = self.ident(inner.next().expect("name"));
        let coll = inner.next().expect("collective");
        let collective_span = self.span(&coll);
        let collective = Collective::from_name(coll.as_str()).expect("grammar lists collectives");
        let decl_span = Span {
            start: span.start,
            end: collective_span.end,
        };
        let mut alg = Algorithm {
            name,
            collective,
            collective_span,
            conditions: Vec::new(),
            headers: Vec::new(),
            body: Vec::new(),
            decl_span,
            span,
        };
        for item in inner {
            match item.as_rule() {
                Rule::where_list => {
                    alg.conditions = item
                        .into_inner()
                        .filter(|p| p.as_rule() == Rule::expr)
                        .map(|p| self.expr(p))
                        .collect();
                }
                Rule::header => alg.headers.push(self.header(item)),
                _ => alg.body.push(self.stmt(item)),
            }
        }
        alg
    }

    fn header(&mut self, pair: Pair<Rule>) -> Header {
        let span = self.span(&pair);
        let h = pair.into_inner().next().expect("header kind");
        let rule = h.as_rule();
        let value = h
            .into_inner()
            .find(|p| !is_keyword(p.as_rule()))
            .expect("header value");
        let kind = match rule {
            Rule::chunks_header => HeaderKind::Chunks(self.expr(value)),
            Rule::scratch_header => HeaderKind::Scratch(self.expr(value)),
            Rule::channels_header => HeaderKind::Channels(self.expr(value)),
            Rule::protocol_header => HeaderKind::Protocol(match value.as_str() {
                "simple" => Protocol::Simple,
                "ll" => Protocol::Ll,
                "ll128" => Protocol::Ll128,
                _ => Protocol::Auto,
            }),
            _ => HeaderKind::Mode(match value.as_str() {
                "inplace" => ModeDecl::InPlace,
                "outofplace" => ModeDecl::OutOfPlace,
                _ => ModeDecl::Both,
            }),
        };
        Header { kind, span }
    }

    fn block(&mut self, pair: Pair<Rule>) -> Vec<Stmt> {
        pair.into_inner().map(|p| self.stmt(p)).collect()
    }

    fn stmt(&mut self, pair: Pair<Rule>) -> Stmt {
        let span = self.span(&pair);
        let rule = pair.as_rule();
        let mut inner = pair.into_inner().filter(|p| !is_keyword(p.as_rule()));
        match rule {
            Rule::let_stmt => {
                let name = self.ident(inner.next().expect("name"));
                let value = self.expr(inner.next().expect("value"));
                Stmt::Let { name, value, span }
            }
            Rule::for_stmt => {
                let var = self.ident(inner.next().expect("var"));
                let mut rev = false;
                let mut exprs = Vec::new();
                let mut step = None;
                let mut body = Vec::new();
                for p in inner {
                    match p.as_rule() {
                        Rule::rev => rev = true,
                        Rule::expr => exprs.push(self.expr(p)),
                        Rule::step_clause => {
                            let e = p.into_inner().find(|p| p.as_rule() == Rule::expr);
                            step = Some(self.expr(e.expect("step expr")));
                        }
                        Rule::block => body = self.block(p),
                        r => unreachable!("for: {r:?}"),
                    }
                }
                let mut exprs = exprs.into_iter();
                Stmt::For {
                    var,
                    rev,
                    lo: exprs.next().expect("lo"),
                    hi: exprs.next().expect("hi"),
                    step,
                    body,
                    span,
                }
            }
            Rule::if_stmt => {
                let mut arms = Vec::new();
                let mut otherwise = None;
                let mut cond = None;
                for p in inner {
                    match p.as_rule() {
                        Rule::expr => cond = Some(self.expr(p)),
                        Rule::block => {
                            let c = cond.take().expect("condition before block");
                            arms.push((c, self.block(p)));
                        }
                        Rule::else_clause => {
                            let b = p.into_inner().find(|p| p.as_rule() == Rule::block);
                            otherwise = Some(self.block(b.expect("else block")));
                        }
                        r => unreachable!("if: {r:?}"),
                    }
                }
                Stmt::If {
                    arms,
                    otherwise,
                    span,
                }
            }
            Rule::copy_stmt | Rule::reduce_stmt => {
                let kind = if rule == Rule::copy_stmt {
                    OpKind::Copy
                } else {
                    OpKind::Reduce
                };
                let mut refs = Vec::new();
                let mut channel = None;
                for p in inner {
                    match p.as_rule() {
                        Rule::buf_ref => refs.push(self.buf_ref(p)),
                        Rule::channel_hint => {
                            let e = p.into_inner().next().expect("channel expr");
                            channel = Some(self.expr(e));
                        }
                        r => unreachable!("op: {r:?}"),
                    }
                }
                let dst = refs.remove(0);
                Stmt::Op(OpStmt {
                    kind,
                    dst,
                    srcs: refs,
                    channel,
                    span,
                })
            }
            r => unreachable!("statement rule {r:?}"),
        }
    }

    fn buf_ref(&mut self, pair: Pair<Rule>) -> BufRef {
        let span = self.span(&pair);
        let mut inner = pair.into_inner();
        let b = inner.next().expect("buffer");
        let buf_span = self.span(&b);
        let buf = match b.as_str() {
            "in" => Buf::In,
            "out" => Buf::Out,
            _ => Buf::Scratch,
        };
        let rank = self.expr(inner.next().expect("rank"));
        let mut sel = inner.next().expect("chunks").into_inner();
        let lo = self.expr(sel.next().expect("chunk"));
        let chunks = match sel.next() {
            Some(hi) => ChunkSel::Range(lo, self.expr(hi)),
            None => ChunkSel::One(lo),
        };
        BufRef {
            buf,
            buf_span,
            rank,
            chunks,
            span,
        }
    }

    /// Builds one whole expression (a `let` value, an index, a condition, ...).
    fn expr(&mut self, pair: Pair<Rule>) -> Expr {
        self.too_deep = false;
        let (e, _) = self.sub_expr(pair);
        self.too_deep = false;
        e
    }

    /// Builds an expression and returns its depth (operators on its longest path).
    /// Recurses only into parenthesised operands and call arguments, whose nesting
    /// [`scan_nesting`] bounded; precedence levels holding a single operand are walked in
    /// a loop, operator chains iteratively.
    fn sub_expr(&mut self, mut pair: Pair<Rule>) -> (Expr, usize) {
        loop {
            match pair.as_rule() {
                Rule::expr
                | Rule::or_expr
                | Rule::and_expr
                | Rule::cmp_expr
                | Rule::bor_expr
                | Rule::xor_expr
                | Rule::band_expr
                | Rule::shift_expr
                | Rule::add_expr
                | Rule::mul_expr
                | Rule::unary => {
                    let mut inner = pair.clone().into_inner();
                    let first = inner.next().expect("operand");
                    if inner.next().is_some() {
                        return if pair.as_rule() == Rule::unary {
                            self.unary(pair)
                        } else {
                            self.chain(pair)
                        };
                    }
                    pair = first;
                }
                Rule::int => {
                    let span = self.span(&pair);
                    return (ExprKind::Int(self.int(&pair)).with_span(span), 0);
                }
                Rule::name => {
                    let span = self.span(&pair);
                    return (ExprKind::Name(pair.as_str().to_string()).with_span(span), 0);
                }
                Rule::call => return self.call(pair),
                r => unreachable!("expression rule {r:?}"),
            }
        }
    }

    /// A left-associative chain: operand (op operand)*.
    fn chain(&mut self, pair: Pair<Rule>) -> (Expr, usize) {
        let whole = self.span(&pair);
        let mut inner = pair.into_inner();
        let (mut acc, mut depth) = self.sub_expr(inner.next().expect("operand"));
        while let Some(op) = inner.next() {
            if self.too_deep {
                return (placeholder(whole), 0);
            }
            let (rhs, rhs_depth) = self.sub_expr(inner.next().expect("rhs"));
            depth = depth.max(rhs_depth) + 1;
            if depth > MAX_EXPR_DEPTH {
                self.expr_too_deep(self.span(&op));
            }
            let op = BinOp::from_token(op.as_str()).expect("operator token");
            let span = Span {
                start: acc.span.start,
                end: rhs.span.end,
            };
            acc = Expr {
                kind: ExprKind::Binary(op, Box::new(acc), Box::new(rhs)),
                span,
            };
        }
        if self.too_deep {
            return (placeholder(whole), 0);
        }
        (acc, depth)
    }

    /// Unary operators (`- ! x`), applied innermost first.
    fn unary(&mut self, pair: Pair<Rule>) -> (Expr, usize) {
        let whole = self.span(&pair);
        let mut ops = Vec::new();
        let mut operand = None;
        for p in pair.into_inner() {
            if p.as_rule() == Rule::unary_op {
                ops.push((p.as_str() == "-", self.span(&p)));
            } else {
                operand = Some(self.sub_expr(p));
            }
        }
        let (mut e, mut depth) = operand.expect("unary operand");
        for (neg, op_span) in ops.into_iter().rev() {
            depth += 1;
            if depth > MAX_EXPR_DEPTH {
                self.expr_too_deep(op_span);
            }
            if self.too_deep {
                return (placeholder(whole), 0);
            }
            let op = if neg { UnOp::Neg } else { UnOp::Not };
            let span = Span {
                start: op_span.start,
                end: e.span.end,
            };
            e = Expr {
                kind: ExprKind::Unary(op, Box::new(e)),
                span,
            };
        }
        (e, depth)
    }

    fn call(&mut self, pair: Pair<Rule>) -> (Expr, usize) {
        let span = self.span(&pair);
        let mut inner = pair.into_inner();
        let f = self.ident(inner.next().expect("callee"));
        let mut args = Vec::new();
        let mut depth = 0;
        for a in inner {
            let (arg, d) = self.sub_expr(a);
            if self.too_deep {
                return (placeholder(span), 0);
            }
            depth = depth.max(d);
            args.push(arg);
        }
        depth += 1;
        if depth > MAX_EXPR_DEPTH {
            self.expr_too_deep(f.span);
            return (placeholder(span), 0);
        }
        (ExprKind::Call(f, args).with_span(span), depth)
    }

    /// Reports an expression deeper than [`MAX_EXPR_DEPTH`] (once per expression); the
    /// builder then abandons the expression.
    fn expr_too_deep(&mut self, at: Span) {
        if !self.too_deep {
            self.too_deep = true;
            self.diags.push(
                Diagnostic::new(
                    "too-deep",
                    format!("expression nests more than {MAX_EXPR_DEPTH} operators deep"),
                )
                .with_label(at, format!("operator {} levels deep", MAX_EXPR_DEPTH + 1))
                .with_help("bind parts of the expression with `let`"),
            );
        }
    }

    fn int(&mut self, pair: &Pair<Rule>) -> i64 {
        let s = pair.as_str();
        let parsed = match s.strip_prefix("0x") {
            Some(hex) => i64::from_str_radix(hex, 16),
            None => s.parse::<i64>(),
        };
        parsed.unwrap_or_else(|_| {
            self.diags.push(
                Diagnostic::new(
                    "overflow",
                    format!("integer literal `{s}` does not fit in 64 bits"),
                )
                .with_label(self.span(pair), "too large for a signed 64-bit integer"),
            );
            0
        })
    }
}

/// What stands for an abandoned expression (its error is already reported).
fn placeholder(span: Span) -> Expr {
    ExprKind::Int(0).with_span(span)
}

trait WithSpan {
    fn with_span(self, span: Span) -> Expr;
}

impl WithSpan for ExprKind {
    fn with_span(self, span: Span) -> Expr {
        Expr { kind: self, span }
    }
}

fn is_keyword(rule: Rule) -> bool {
    matches!(
        rule,
        Rule::kw_algorithm
            | Rule::kw_channels
            | Rule::kw_chunks
            | Rule::kw_copy
            | Rule::kw_else
            | Rule::kw_for
            | Rule::kw_if
            | Rule::kw_in
            | Rule::kw_let
            | Rule::kw_mode
            | Rule::kw_protocol
            | Rule::kw_reduce
            | Rule::kw_rev
            | Rule::kw_scratch
            | Rule::kw_step
            | Rule::kw_where
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_ok(text: &str) -> File {
        let (file, diags) = parse(text);
        assert!(diags.is_empty(), "{diags:?}");
        file
    }

    fn first_expr(text: &str) -> Expr {
        let f = parse_ok(&format!("algorithm a : allreduce {{ let x = {text}; }}"));
        match &f.algorithms[0].body[0] {
            Stmt::Let { value, .. } => value.clone(),
            s => panic!("{s:?}"),
        }
    }

    fn shape(e: &Expr) -> String {
        match &e.kind {
            ExprKind::Int(i) => i.to_string(),
            ExprKind::Name(n) => n.clone(),
            ExprKind::Unary(op, e) => format!("({op:?} {})", shape(e)),
            ExprKind::Binary(op, a, b) => format!("({op:?} {} {})", shape(a), shape(b)),
            ExprKind::Call(f, args) => {
                let a: Vec<String> = args.iter().map(shape).collect();
                format!("{}({})", f.name, a.join(", "))
            }
        }
    }

    #[test]
    fn precedence_follows_rust() {
        assert_eq!(
            shape(&first_expr("N & (N - 1) == 0")),
            "(Eq (BitAnd N (Sub N 1)) 0)"
        );
        assert_eq!(
            shape(&first_expr("1 + 2 * 3 << 1")),
            "(Shl (Add 1 (Mul 2 3)) 1)"
        );
        assert_eq!(shape(&first_expr("a || b && c")), "(Or a (And b c))");
        assert_eq!(shape(&first_expr("-a - -1")), "(Sub (Neg a) (Neg 1))");
        assert_eq!(shape(&first_expr("8 - 4 - 2")), "(Sub (Sub 8 4) 2)");
        assert_eq!(
            shape(&first_expr("a | b ^ c & d")),
            "(BitOr a (BitXor b (BitAnd c d)))"
        );
        assert_eq!(shape(&first_expr("min(0x10, !x)")), "min(16, (Not x))");
    }

    #[test]
    fn comparisons_do_not_chain() {
        let (_, diags) = parse("algorithm a : allreduce { let x = 1 < 2 < 3; }");
        assert_eq!(diags.len(), 1);
        assert_eq!(diags[0].code, "syntax");
    }

    #[test]
    fn arrow_is_one_token() {
        parse_ok("algorithm a : allreduce { if 1 < -1 { } }");
        let (_, diags) = parse("algorithm a : allreduce { if 1 <-1 { } }");
        assert_eq!(diags.len(), 1, "{diags:?}");
    }

    #[test]
    fn keywords_need_a_word_boundary() {
        let f = parse_ok("algorithm a : allreduce { let input = 1; let outx = input; }");
        assert_eq!(f.algorithms[0].body.len(), 2);
    }

    #[test]
    fn statements_and_headers_parse() {
        let f = parse_ok(
            "/* lib */ algorithm a : allgather where N > 1, G >= 2 {
                chunks 2 * N; scratch 1; channels 2; protocol ll128; mode both;
                for r in rev 0 .. N step 2 {
                    if r == 0 { copy out[r][0 .. K] <- in[r][0 .. K] @ch(1); }
                    else if r == 1 { reduce scratch[r][0] <- out[r - 1][0], out[r][0]; }
                    else { reduce out[r][0] <- out[r + 1][0]; }
                }
            }",
        );
        let a = &f.algorithms[0];
        assert_eq!(a.conditions.len(), 2);
        assert_eq!(a.headers.len(), 5);
        match &a.body[0] {
            Stmt::For {
                rev, step, body, ..
            } => {
                assert!(*rev);
                assert!(step.is_some());
                match &body[0] {
                    Stmt::If {
                        arms, otherwise, ..
                    } => {
                        assert_eq!(arms.len(), 2);
                        assert!(otherwise.is_some());
                    }
                    s => panic!("{s:?}"),
                }
            }
            s => panic!("{s:?}"),
        }
    }

    #[test]
    fn one_syntax_error_per_algorithm_is_reported() {
        let text = "algorithm a : allreduce { copy out[0][0] in[0][0]; }\n\
                    algorithm b : allreduce { }\n\
                    algorithm c : allreduce { let = 3; }\n";
        let (file, diags) = parse(text);
        assert_eq!(diags.len(), 2, "{diags:?}");
        assert_eq!(file.algorithms.len(), 1);
        assert_eq!(file.algorithms[0].name.name, "b");
    }

    #[test]
    fn commented_out_algorithm_does_not_split() {
        let f = parse_ok("algorithm a : allreduce {\n/*\nalgorithm b : x\n*/\n}\n");
        assert_eq!(f.algorithms.len(), 1);
    }

    #[test]
    fn huge_literal_is_an_error_not_a_panic() {
        let (_, diags) = parse("algorithm a : allreduce { let x = 99999999999999999999; }");
        assert_eq!(diags[0].code, "overflow");
    }
}
