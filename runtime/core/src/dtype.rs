//! Element types and reduction operators of a call, with the names the command line and
//! NCCL use for them (cli.md: `--dtype`, `--op`).
//!
//! Both short names (`f32`, `sum`) and NCCL's enumerator names (`ncclFloat32`, `ncclSum`,
//! including NCCL's aliases such as `ncclHalf` and `ncclInt`) parse, case-sensitively as
//! NCCL spells them, so a command line copied from nccl-tests or an NCCL program works.

use std::fmt;
use std::str::FromStr;

/// An element type of a collective's buffers. Layout is the host's native byte order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F16,
    Bf16,
    F32,
    F64,
    I8,
    U8,
    I32,
    U32,
    I64,
    U64,
}

impl DType {
    /// Every element type, in the order of cli.md.
    pub const ALL: [DType; 10] = [
        DType::F16,
        DType::Bf16,
        DType::F32,
        DType::F64,
        DType::I8,
        DType::U8,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::U64,
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::I8 | DType::U8 => 1,
            DType::F16 | DType::Bf16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }

    /// The short name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::U64 => "u64",
        }
    }

    /// NCCL's canonical enumerator name (`ncclDataType_t`).
    pub fn nccl_name(self) -> &'static str {
        match self {
            DType::F16 => "ncclFloat16",
            DType::Bf16 => "ncclBfloat16",
            DType::F32 => "ncclFloat32",
            DType::F64 => "ncclFloat64",
            DType::I8 => "ncclInt8",
            DType::U8 => "ncclUint8",
            DType::I32 => "ncclInt32",
            DType::U32 => "ncclUint32",
            DType::I64 => "ncclInt64",
            DType::U64 => "ncclUint64",
        }
    }

    /// The value of NCCL's `ncclDataType_t` enumerator, for calling NCCL itself.
    pub fn nccl_value(self) -> i32 {
        match self {
            DType::I8 => 0,
            DType::U8 => 1,
            DType::I32 => 2,
            DType::U32 => 3,
            DType::I64 => 4,
            DType::U64 => 5,
            DType::F16 => 6,
            DType::F32 => 7,
            DType::F64 => 8,
            DType::Bf16 => 9,
        }
    }

    /// Floating-point types (reductions round; `avg` multiplies by `1/n`).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::Bf16 | DType::F32 | DType::F64)
    }

    /// Signed integer types (`avg` divides with truncation toward zero).
    pub fn is_signed_int(self) -> bool {
        matches!(self, DType::I8 | DType::I32 | DType::I64)
    }

    /// NCCL's aliases, which parse but are never printed.
    fn nccl_aliases(self) -> &'static [&'static str] {
        match self {
            DType::F16 => &["ncclHalf"],
            DType::F32 => &["ncclFloat"],
            DType::F64 => &["ncclDouble"],
            DType::I8 => &["ncclChar"],
            DType::I32 => &["ncclInt"],
            _ => &[],
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = ParseNameError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DType::ALL
            .into_iter()
            .find(|d| s == d.name() || s == d.nccl_name() || d.nccl_aliases().contains(&s))
            .ok_or_else(|| ParseNameError {
                what: "data type",
                input: s.to_string(),
                short: DType::ALL.map(DType::name).to_vec(),
                nccl: DType::ALL
                    .iter()
                    .flat_map(|d| {
                        std::iter::once(d.nccl_name()).chain(d.nccl_aliases().iter().copied())
                    })
                    .collect(),
            })
    }
}

/// A reduction operator. `Avg` reduces as `Sum` and scales once at the end
/// ([`crate::reduce::finish_avg`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RedOp {
    Sum,
    Prod,
    Min,
    Max,
    Avg,
}

impl RedOp {
    /// Every operator, in the order of cli.md.
    pub const ALL: [RedOp; 5] = [RedOp::Sum, RedOp::Prod, RedOp::Min, RedOp::Max, RedOp::Avg];

    /// The short name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            RedOp::Sum => "sum",
            RedOp::Prod => "prod",
            RedOp::Min => "min",
            RedOp::Max => "max",
            RedOp::Avg => "avg",
        }
    }

    /// NCCL's enumerator name (`ncclRedOp_t`).
    pub fn nccl_name(self) -> &'static str {
        match self {
            RedOp::Sum => "ncclSum",
            RedOp::Prod => "ncclProd",
            RedOp::Min => "ncclMin",
            RedOp::Max => "ncclMax",
            RedOp::Avg => "ncclAvg",
        }
    }

    /// The value of NCCL's `ncclRedOp_t` enumerator (note: max before min).
    pub fn nccl_value(self) -> i32 {
        match self {
            RedOp::Sum => 0,
            RedOp::Prod => 1,
            RedOp::Max => 2,
            RedOp::Min => 3,
            RedOp::Avg => 4,
        }
    }
}

impl fmt::Display for RedOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for RedOp {
    type Err = ParseNameError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RedOp::ALL
            .into_iter()
            .find(|o| s == o.name() || s == o.nccl_name())
            .ok_or_else(|| ParseNameError {
                what: "reduction op",
                input: s.to_string(),
                short: RedOp::ALL.map(RedOp::name).to_vec(),
                nccl: RedOp::ALL.map(RedOp::nccl_name).to_vec(),
            })
    }
}

/// An unknown `--dtype` or `--op` name; the message lists every name that parses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} '{input}': expected one of {} (or NCCL's {})", short.join(" "), nccl.join(" "))]
pub struct ParseNameError {
    what: &'static str,
    input: String,
    short: Vec<&'static str>,
    nccl: Vec<&'static str>,
}
