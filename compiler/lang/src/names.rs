//! The language's fixed vocabulary: constants, builtins and reserved words.

/// A predefined constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Constant {
    N,
    Nodes,
    G,
    Root,
    C,
    K,
}

impl Constant {
    pub fn from_name(s: &str) -> Option<Constant> {
        Some(match s {
            "N" => Constant::N,
            "NODES" => Constant::Nodes,
            "G" => Constant::G,
            "ROOT" => Constant::Root,
            "C" => Constant::C,
            "K" => Constant::K,
            _ => return None,
        })
    }
}

/// A builtin function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Builtin {
    Node,
    Local,
    Rank,
    Log2,
    Ilog2,
    Pow2,
    Min,
    Max,
}

impl Builtin {
    pub fn from_name(s: &str) -> Option<Builtin> {
        Some(match s {
            "node" => Builtin::Node,
            "local" => Builtin::Local,
            "rank" => Builtin::Rank,
            "log2" => Builtin::Log2,
            "ilog2" => Builtin::Ilog2,
            "pow2" => Builtin::Pow2,
            "min" => Builtin::Min,
            "max" => Builtin::Max,
            _ => return None,
        })
    }

    pub fn arity(self) -> usize {
        match self {
            Builtin::Rank | Builtin::Min | Builtin::Max => 2,
            _ => 1,
        }
    }

    /// Whether the builtin is defined through `G` (so unusable on non-uniform topologies).
    pub fn uses_g(self) -> bool {
        matches!(self, Builtin::Node | Builtin::Local | Builtin::Rank)
    }
}

/// Words that cannot be bound by `let` or `for`.
#[rustfmt::skip]
const RESERVED: &[&str] = &[
    // Keywords and header values (`in` and `scratch` are also buffer names).
    "algorithm", "where", "chunks", "scratch", "channels", "protocol", "mode", "let", "for",
    "in", "rev", "step", "if", "else", "copy", "reduce", "simple", "ll", "ll128", "auto",
    "inplace", "outofplace", "both",
    // The remaining buffer name.
    "out",
    // Collectives (`reduce` is above).
    "allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast",
    // Constants.
    "N", "NODES", "G", "ROOT", "C", "K",
    // Builtins.
    "node", "local", "rank", "log2", "ilog2", "pow2", "min", "max",
];

pub fn is_reserved(s: &str) -> bool {
    RESERVED.contains(&s)
}
