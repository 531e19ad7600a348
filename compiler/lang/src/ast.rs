//! The typed syntax tree. Every node keeps the byte span it came from.
//!
//! Names are kept as written: deciding what a name means (a constant, a `let`, a loop
//! variable, a reserved word) is the static checker's job, so that misuse is reported as a
//! diagnostic with a span rather than as a syntax error.

pub use braid_ir::{Buf, Collective, OpKind, Protocol, Span};

/// A parsed source file.
#[derive(Clone, Debug, PartialEq)]
pub struct File {
    pub algorithms: Vec<Algorithm>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Algorithm {
    pub name: Ident,
    pub collective: Collective,
    pub collective_span: Span,
    /// `where` conditions, all of which must hold.
    pub conditions: Vec<Expr>,
    /// Headers in source order (possibly misplaced: the checker reports that).
    pub headers: Vec<Header>,
    pub body: Vec<Stmt>,
    /// `algorithm NAME : COLLECTIVE`, the line blamed when no statement is.
    pub decl_span: Span,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    pub kind: HeaderKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum HeaderKind {
    Chunks(Expr),
    Scratch(Expr),
    Channels(Expr),
    Protocol(Protocol),
    Mode(ModeDecl),
}

impl HeaderKind {
    pub fn keyword(&self) -> &'static str {
        match self {
            HeaderKind::Chunks(_) => "chunks",
            HeaderKind::Scratch(_) => "scratch",
            HeaderKind::Channels(_) => "channels",
            HeaderKind::Protocol(_) => "protocol",
            HeaderKind::Mode(_) => "mode",
        }
    }
}

/// The `mode` header's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeDecl {
    InPlace,
    OutOfPlace,
    Both,
}

impl ModeDecl {
    pub fn modes(self) -> braid_ir::ModeSet {
        match self {
            ModeDecl::InPlace => braid_ir::ModeSet::IN_PLACE,
            ModeDecl::OutOfPlace => braid_ir::ModeSet::OUT_OF_PLACE,
            ModeDecl::Both => braid_ir::ModeSet::BOTH,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    Let {
        name: Ident,
        value: Expr,
        span: Span,
    },
    For {
        var: Ident,
        rev: bool,
        lo: Expr,
        hi: Expr,
        step: Option<Expr>,
        body: Vec<Stmt>,
        span: Span,
    },
    If {
        /// `if` and `else if` arms in order.
        arms: Vec<(Expr, Vec<Stmt>)>,
        otherwise: Option<Vec<Stmt>>,
        span: Span,
    },
    Op(OpStmt),
}

impl Stmt {
    pub fn span(&self) -> Span {
        match self {
            Stmt::Let { span, .. } | Stmt::For { span, .. } | Stmt::If { span, .. } => *span,
            Stmt::Op(op) => op.span,
        }
    }
}

/// `copy DST <- SRC` or `reduce DST <- SRC[, SRC2]`, with an optional `@ch(k)`.
#[derive(Clone, Debug, PartialEq)]
pub struct OpStmt {
    pub kind: OpKind,
    pub dst: BufRef,
    /// As written: one source, or two for the three-operand reduce.
    pub srcs: Vec<BufRef>,
    pub channel: Option<Expr>,
    pub span: Span,
}

/// `BUF[RANK][CHUNK]` or `BUF[RANK][LO .. HI]`.
#[derive(Clone, Debug, PartialEq)]
pub struct BufRef {
    pub buf: Buf,
    pub buf_span: Span,
    pub rank: Expr,
    pub chunks: ChunkSel,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ChunkSel {
    One(Expr),
    Range(Expr, Expr),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    Int(i64),
    Name(String),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    Call(Ident, Vec<Expr>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    Not,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    BitOr,
    BitXor,
    BitAnd,
    Shl,
    Shr,
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

impl BinOp {
    pub fn from_token(s: &str) -> Option<BinOp> {
        Some(match s {
            "||" => BinOp::Or,
            "&&" => BinOp::And,
            "==" => BinOp::Eq,
            "!=" => BinOp::Ne,
            "<" => BinOp::Lt,
            "<=" => BinOp::Le,
            ">" => BinOp::Gt,
            ">=" => BinOp::Ge,
            "|" => BinOp::BitOr,
            "^" => BinOp::BitXor,
            "&" => BinOp::BitAnd,
            "<<" => BinOp::Shl,
            ">>" => BinOp::Shr,
            "+" => BinOp::Add,
            "-" => BinOp::Sub,
            "*" => BinOp::Mul,
            "/" => BinOp::Div,
            "%" => BinOp::Rem,
            _ => return None,
        })
    }
}

impl Expr {
    /// Calls `f` on every name this expression uses, with its span.
    pub fn visit_names(&self, f: &mut impl FnMut(&str, Span)) {
        match &self.kind {
            ExprKind::Int(_) => {}
            ExprKind::Name(n) => f(n, self.span),
            ExprKind::Unary(_, e) => e.visit_names(f),
            ExprKind::Binary(_, a, b) => {
                a.visit_names(f);
                b.visit_names(f);
            }
            ExprKind::Call(_, args) => args.iter().for_each(|a| a.visit_names(f)),
        }
    }
}
