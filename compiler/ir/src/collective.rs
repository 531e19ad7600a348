//! The collectives, call modes and wire protocols.

use serde::{Deserialize, Serialize};
use std::fmt;

/// One of the six collectives of the language (dsl.md section 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Collective {
    Allreduce,
    Allgather,
    ReduceScatter,
    Alltoall,
    Broadcast,
    Reduce,
}

impl Collective {
    pub const ALL: [Collective; 6] = [
        Collective::Allreduce,
        Collective::Allgather,
        Collective::ReduceScatter,
        Collective::Alltoall,
        Collective::Broadcast,
        Collective::Reduce,
    ];

    /// The keyword that names this collective in source and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Collective::Allreduce => "allreduce",
            Collective::Allgather => "allgather",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::Alltoall => "alltoall",
            Collective::Broadcast => "broadcast",
            Collective::Reduce => "reduce",
        }
    }

    pub fn from_name(s: &str) -> Option<Collective> {
        Collective::ALL.into_iter().find(|c| c.name() == s)
    }

    /// Broadcast and reduce have a root rank; `ROOT` exists only in them.
    pub fn is_rooted(self) -> bool {
        matches!(self, Collective::Broadcast | Collective::Reduce)
    }

    /// Whether `K = C / N` exists, i.e. whether `in` and `out` differ in size by `N`.
    pub fn has_k(self) -> bool {
        matches!(
            self,
            Collective::Allgather | Collective::ReduceScatter | Collective::Alltoall
        )
    }

    /// Whether the postcondition combines contributions with the reduction operator.
    pub fn reduces(self) -> bool {
        matches!(
            self,
            Collective::Allreduce | Collective::ReduceScatter | Collective::Reduce
        )
    }

    /// The default `chunks` value (dsl.md: 1 for allreduce/broadcast/reduce, N otherwise).
    pub fn default_chunks(self, n: u32) -> u32 {
        if self.has_k() {
            n
        } else {
            1
        }
    }

    /// The call modes assumed when the program has no `mode` header.
    pub fn default_modes(self) -> ModeSet {
        if self == Collective::Alltoall {
            ModeSet::OUT_OF_PLACE
        } else {
            ModeSet::BOTH
        }
    }
}

impl fmt::Display for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a call's `in` and `out` buffers relate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Distinct buffers.
    OutOfPlace,
    /// Aliased as NCCL aliases them (dsl.md section 4).
    InPlace,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::OutOfPlace => "outofplace",
            Mode::InPlace => "inplace",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The set of call modes an algorithm is written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ModeSet {
    pub out_of_place: bool,
    pub in_place: bool,
}

impl ModeSet {
    pub const BOTH: ModeSet = ModeSet {
        out_of_place: true,
        in_place: true,
    };
    pub const OUT_OF_PLACE: ModeSet = ModeSet {
        out_of_place: true,
        in_place: false,
    };
    pub const IN_PLACE: ModeSet = ModeSet {
        out_of_place: false,
        in_place: true,
    };

    pub fn contains(self, mode: Mode) -> bool {
        match mode {
            Mode::OutOfPlace => self.out_of_place,
            Mode::InPlace => self.in_place,
        }
    }

    /// The modes in checking order: out-of-place first, then in-place (dsl.md section 3).
    pub fn iter(self) -> impl Iterator<Item = Mode> {
        [Mode::OutOfPlace, Mode::InPlace]
            .into_iter()
            .filter(move |m| self.contains(*m))
    }
}

/// The wire protocol requested by the `protocol` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    Simple,
    Ll,
    Ll128,
    /// Let the runtime choose per message size.
    Auto,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Simple => "simple",
            Protocol::Ll => "ll",
            Protocol::Ll128 => "ll128",
            Protocol::Auto => "auto",
        }
    }

    /// Whether every line carries its own flag (LL, LL128): a receiver may take up each
    /// line as it lands, where Simple publishes a slice only once it is written whole.
    pub fn flags_each_line(self) -> bool {
        matches!(self, Protocol::Ll | Protocol::Ll128)
    }
}
