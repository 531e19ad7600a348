//! Integer expression evaluation with the language's exact rules: 64-bit checked
//! arithmetic, floor division and modulo, shifts in 0..63, the builtins.

pub use crate::bindings::{Bindings, Bound};
use braid_ir::{Shape, Span};
use braid_lang::ast::{BinOp, Expr, ExprKind, UnOp};
use braid_lang::names::{Builtin, Constant};

/// An evaluation failure at a span.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvalError {
    pub code: &'static str,
    pub span: Span,
    pub message: String,
}

fn err<T>(code: &'static str, span: Span, message: impl Into<String>) -> Result<T, EvalError> {
    Err(EvalError {
        code,
        span,
        message: message.into(),
    })
}

/// The values names have at one point of an instantiation.
#[derive(Clone, Debug)]
pub struct Env {
    pub shape: Shape,
    pub root: Option<u32>,
    /// `C`, once the `chunks` header is evaluated.
    pub chunks: Option<i64>,
    /// `let` and loop bindings, innermost last.
    pub bound: Bindings,
}

impl Env {
    pub fn new(shape: Shape, root: Option<u32>) -> Env {
        Env {
            shape,
            root,
            chunks: None,
            bound: Bindings::default(),
        }
    }

    fn g(&self, span: Span) -> Result<i64, EvalError> {
        match self.shape.g {
            Some(g) => Ok(g as i64),
            None => err(
                "non-uniform",
                span,
                "`G` is undefined on this topology: its nodes differ in size",
            ),
        }
    }

    fn lookup(&self, name: &str, span: Span) -> Result<i64, EvalError> {
        if let Some(v) = self.bound.get(name) {
            return Ok(v);
        }
        let n = self.shape.n as i64;
        match Constant::from_name(name) {
            Some(Constant::N) => Ok(n),
            Some(Constant::Nodes) => Ok(self.shape.nodes as i64),
            Some(Constant::G) => self.g(span),
            Some(Constant::Root) => match self.root {
                Some(r) => Ok(r as i64),
                None => err("constant-misuse", span, "`ROOT` is not defined here"),
            },
            Some(Constant::C) => match self.chunks {
                Some(c) => Ok(c),
                None => err("constant-misuse", span, "`C` is not defined here"),
            },
            Some(Constant::K) => match self.chunks {
                Some(c) => Ok(c.div_euclid(n.max(1))),
                None => err("constant-misuse", span, "`K` is not defined here"),
            },
            // The static checker rejects unknown names before anything is evaluated.
            None => err("unknown-name", span, format!("unknown name `{name}`")),
        }
    }

    /// Evaluates an expression.
    pub fn eval(&self, e: &Expr) -> Result<i64, EvalError> {
        let overflow = |what: &str| EvalError {
            code: "overflow",
            span: e.span,
            message: format!("arithmetic overflow in {what}"),
        };
        match &e.kind {
            ExprKind::Int(v) => Ok(*v),
            ExprKind::Name(n) => self.lookup(n, e.span),
            ExprKind::Unary(op, a) => {
                let a = self.eval(a)?;
                match op {
                    UnOp::Neg => a.checked_neg().ok_or_else(|| overflow("negation")),
                    UnOp::Not => Ok((a == 0) as i64),
                }
            }
            ExprKind::Binary(BinOp::And, a, b) => {
                Ok((self.eval(a)? != 0 && self.eval(b)? != 0) as i64)
            }
            ExprKind::Binary(BinOp::Or, a, b) => {
                Ok((self.eval(a)? != 0 || self.eval(b)? != 0) as i64)
            }
            ExprKind::Binary(op, a, b) => {
                let (x, y) = (self.eval(a)?, self.eval(b)?);
                binary(*op, x, y, e.span, b.span)
            }
            ExprKind::Call(f, args) => {
                let vals = args
                    .iter()
                    .map(|a| self.eval(a))
                    .collect::<Result<Vec<_>, _>>()?;
                let Some(b) = Builtin::from_name(&f.name) else {
                    return err(
                        "unknown-name",
                        f.span,
                        format!("unknown function `{}`", f.name),
                    );
                };
                self.call(b, &vals, e.span)
            }
        }
    }

    fn call(&self, b: Builtin, v: &[i64], span: Span) -> Result<i64, EvalError> {
        let div = |x, y| binary(BinOp::Div, x, y, span, span);
        let rem = |x, y| binary(BinOp::Rem, x, y, span, span);
        match b {
            Builtin::Node => div(v[0], self.g(span)?),
            Builtin::Local => rem(v[0], self.g(span)?),
            Builtin::Rank => {
                let g = self.g(span)?;
                let node = rem(v[0], self.shape.nodes as i64)?;
                let local = rem(v[1], g)?;
                node.checked_mul(g)
                    .and_then(|x| x.checked_add(local))
                    .ok_or_else(|| EvalError {
                        code: "overflow",
                        span,
                        message: "arithmetic overflow in rank()".into(),
                    })
            }
            Builtin::Log2 => {
                if v[0] > 0 && v[0] & (v[0] - 1) == 0 {
                    Ok(v[0].trailing_zeros() as i64)
                } else {
                    err(
                        "log2",
                        span,
                        format!(
                            "log2({}) is undefined: the argument is not a power of two",
                            v[0]
                        ),
                    )
                }
            }
            Builtin::Ilog2 => {
                if v[0] >= 1 {
                    Ok(63 - v[0].leading_zeros() as i64)
                } else {
                    err(
                        "log2",
                        span,
                        format!("ilog2({}) is undefined: the argument must be >= 1", v[0]),
                    )
                }
            }
            Builtin::Pow2 => {
                if (0..=62).contains(&v[0]) {
                    Ok(1 << v[0])
                } else {
                    err(
                        "log2",
                        span,
                        format!(
                            "pow2({}) is undefined: the argument must be in 0..=62",
                            v[0]
                        ),
                    )
                }
            }
            Builtin::Min => Ok(v[0].min(v[1])),
            Builtin::Max => Ok(v[0].max(v[1])),
        }
    }
}

/// Floor division.
pub fn floor_div(x: i64, y: i64) -> Option<i64> {
    let q = x.checked_div(y)?;
    if x % y != 0 && ((x < 0) != (y < 0)) {
        Some(q - 1)
    } else {
        Some(q)
    }
}

/// Floor modulo: the result has the sign of the divisor.
pub fn floor_mod(x: i64, y: i64) -> Option<i64> {
    if y == 0 {
        return None;
    }
    if y == -1 {
        return Some(0);
    }
    let r = x % y;
    if r != 0 && ((r < 0) != (y < 0)) {
        Some(r + y)
    } else {
        Some(r)
    }
}

fn binary(op: BinOp, x: i64, y: i64, span: Span, rhs: Span) -> Result<i64, EvalError> {
    let over = || EvalError {
        code: "overflow",
        span,
        message: format!("arithmetic overflow: {x} {} {y}", symbol(op)),
    };
    match op {
        BinOp::Add => x.checked_add(y).ok_or_else(over),
        BinOp::Sub => x.checked_sub(y).ok_or_else(over),
        BinOp::Mul => x.checked_mul(y).ok_or_else(over),
        BinOp::Div | BinOp::Rem if y == 0 => err(
            "division-by-zero",
            rhs,
            format!(
                "{} by zero",
                if op == BinOp::Div {
                    "division"
                } else {
                    "modulo"
                }
            ),
        ),
        BinOp::Div => floor_div(x, y).ok_or_else(over),
        BinOp::Rem => floor_mod(x, y).ok_or_else(over),
        BinOp::Shl | BinOp::Shr if !(0..=63).contains(&y) => {
            err("bad-shift", rhs, format!("shift by {y} is outside 0..63"))
        }
        BinOp::Shl => {
            let r = x << y;
            if r >> y == x {
                Ok(r)
            } else {
                Err(over())
            }
        }
        BinOp::Shr => Ok(x >> y),
        BinOp::BitAnd => Ok(x & y),
        BinOp::BitOr => Ok(x | y),
        BinOp::BitXor => Ok(x ^ y),
        BinOp::Eq => Ok((x == y) as i64),
        BinOp::Ne => Ok((x != y) as i64),
        BinOp::Lt => Ok((x < y) as i64),
        BinOp::Le => Ok((x <= y) as i64),
        BinOp::Gt => Ok((x > y) as i64),
        BinOp::Ge => Ok((x >= y) as i64),
        BinOp::And | BinOp::Or => unreachable!("short-circuit operators are handled by eval"),
    }
}

fn symbol(op: BinOp) -> &'static str {
    match op {
        BinOp::Add => "+",
        BinOp::Sub => "-",
        BinOp::Mul => "*",
        BinOp::Div => "/",
        BinOp::Rem => "%",
        BinOp::Shl => "<<",
        _ => "?",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(text: &str, shape: Shape) -> Result<i64, EvalError> {
        let src = format!("algorithm a : broadcast {{ let x = {text}; }}");
        let (file, diags) = braid_lang::parser::parse(&src);
        assert!(diags.is_empty(), "{diags:?}");
        let braid_lang::ast::Stmt::Let { value, .. } = &file.algorithms[0].body[0] else {
            panic!()
        };
        Env::new(shape, Some(1)).eval(value)
    }

    fn ev(text: &str) -> i64 {
        eval(text, Shape::uniform(2, 4)).unwrap()
    }

    #[test]
    fn floor_semantics() {
        assert_eq!(ev("-1 / 4"), -1);
        assert_eq!(ev("-1 % 4"), 3);
        assert_eq!(ev("7 / -2"), -4);
        assert_eq!(ev("7 % -2"), -1);
        assert_eq!(ev("-8 / 4"), -2);
    }

    #[test]
    fn builtins_and_constants() {
        assert_eq!(
            ev("N + NODES * 10 + G * 100 + ROOT * 1000"),
            8 + 20 + 400 + 1000
        );
        assert_eq!(ev("node(5) * 10 + local(5)"), 11);
        assert_eq!(ev("rank(3, -1)"), 4 + 3);
        assert_eq!(ev("log2(64) + ilog2(100) + pow2(10)"), 6 + 6 + 1024);
        assert_eq!(ev("min(3, -2) + max(3, -2)"), 1);
        assert_eq!(ev("N & (N - 1) == 0"), 1);
        assert_eq!(ev("0 && 1 / 0"), 0, "&& short-circuits");
        assert_eq!(ev("1 || 1 / 0"), 1, "|| short-circuits");
    }

    #[test]
    fn arithmetic_errors() {
        let s = Shape::single_node(4);
        for (text, code) in [
            ("1 / 0", "division-by-zero"),
            ("1 % (N - 4)", "division-by-zero"),
            ("9223372036854775807 + 1", "overflow"),
            ("1 << 64", "bad-shift"),
            ("1 << -1", "bad-shift"),
            ("3 << 62", "overflow"),
            ("log2(6)", "log2"),
            ("ilog2(0)", "log2"),
            ("pow2(63)", "log2"),
            ("-(-9223372036854775807 - 1)", "overflow"),
        ] {
            assert_eq!(eval(text, s.clone()).unwrap_err().code, code, "{text}");
        }
        let nonuniform = Shape {
            n: 5,
            nodes: 2,
            g: None,
        };
        assert_eq!(eval("node(1)", nonuniform).unwrap_err().code, "non-uniform");
    }
}
