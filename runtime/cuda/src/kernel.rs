//! The kernel's source: one per (element type, reduction, wire), generated from the
//! templates in `kernels_templates/` and compiled once with NVRTC (then cached on disk).
//! Plans are not part of the source: `braid_kernel` interprets any plan's step program
//! (see [`crate::program`]), so the number of kernels is bounded by the types and
//! operators, not by the plans, rank counts or sizes a program uses.

use braid_runtime::dtype::{DType, RedOp};

/// The device primitives and the interpreter, pasted after the generated prologue.
pub const PRIMITIVES: &str = include_str!("../../../kernels_templates/braid_prims.cuh");
pub const INTERPRETER: &str = include_str!("../../../kernels_templates/braid_kernel.cuh");

/// The kernel's entry point.
pub const ENTRY: &str = "braid_kernel";
/// The flat launch's entry points ([`crate::flat`]), in every module: for the small,
/// middle and full argument ([`crate::flat::Packed`]).
pub const FLAT_ENTRIES: [&str; 3] = ["braid_flat_s", "braid_flat_m", "braid_flat"];
/// The point-to-point entry point, in the [`p2p_variant`]'s module only.
pub const P2P_ENTRY: &str = "braid_p2p";
/// PreMulSum's scaling entry point, in each [`scale_variant`]'s module only.
pub const SCALE_ENTRY: &str = "braid_scale";
/// Lanes (grid blocks) one point-to-point launch can serve.
pub const P2P_LANES: usize = 128;
/// Messages (or parts of messages) one point-to-point launch can carry.
pub const P2P_TASKS: usize = 192;

/// Threads of every thread block.
pub const THREADS: u32 = 512;

/// Ranks one launch can run (ranks sharing a GPU in one group; more take more launches).
pub const MAX_LOCAL: usize = 8;

/// Bytes of one Simple FIFO slot: the unit of flow control, as on the host backend.
pub const SIMPLE_SLOT_BYTES: usize = braid_runtime::exec::SLICE_BYTES;
/// Bytes of one LL FIFO slot (half of it data).
pub const LL_SLOT_BYTES: usize = 64 << 10;
/// Bytes of one LL128 FIFO slot: 512 lines of 128 bytes, 120 of each data.
pub const LL128_SLOT_BYTES: usize = 64 << 10;
/// Data bytes of one LL128 line (the other 8 hold the flag).
pub const LL128_LINE_DATA: usize = 120;

/// A connection end's lanes, one per wire protocol, in this order: each has its own
/// counters and slots, so calls of different protocols never see each other's flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Lane {
    /// A counter per slice (`head`), fenced.
    #[default]
    Simple = 0,
    /// Flags inside every 16-byte line (8 data bytes).
    Ll = 1,
    /// A flag in every 128-byte line (120 data bytes), on links where a stress test
    /// showed that a warp's 128-byte stores arrive whole ([`crate::ll128`]).
    Ll128 = 2,
}

/// Lanes of every connection end.
pub const LANES: usize = 3;

impl Lane {
    pub const ALL: [Lane; LANES] = [Lane::Simple, Lane::Ll, Lane::Ll128];

    /// The lane a protocol runs on (`auto` is resolved before a kernel is chosen).
    pub fn of(p: braid_ir::Protocol) -> Lane {
        match p {
            braid_ir::Protocol::Ll => Lane::Ll,
            braid_ir::Protocol::Ll128 => Lane::Ll128,
            _ => Lane::Simple,
        }
    }

    /// Bytes of one slot.
    pub fn slot_bytes(self) -> usize {
        match self {
            Lane::Simple => SIMPLE_SLOT_BYTES,
            Lane::Ll => LL_SLOT_BYTES,
            Lane::Ll128 => LL128_SLOT_BYTES,
        }
    }

    /// Data bytes one slot carries.
    pub fn piece_bytes(self) -> usize {
        match self {
            Lane::Simple => SIMPLE_SLOT_BYTES,
            Lane::Ll => LL_SLOT_BYTES / 2,
            Lane::Ll128 => LL128_SLOT_BYTES / 128 * LL128_LINE_DATA,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Lane::Simple => "Simple",
            Lane::Ll => "LL",
            Lane::Ll128 => "LL128",
        }
    }
}

/// How a call's connections carry data: fixed per kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Wire {
    /// The protocol's lane.
    pub lane: Lane,
    /// FIFOs live in host memory (no peer-to-peer): loads bypass the caches.
    pub host_fifo: bool,
}

impl Wire {
    /// Bytes of one slot of this wire's lane.
    pub fn slot_bytes(self) -> usize {
        self.lane.slot_bytes()
    }

    /// Data bytes one slot carries.
    pub fn piece_bytes(self) -> usize {
        self.lane.piece_bytes()
    }

    /// The lane index in a connection end.
    pub fn lane(self) -> usize {
        self.lane as usize
    }
}

/// 16-byte vectors each thread keeps in flight in bulk copies: `BRAID_UNROLL` (1 to 16)
/// for tuning, else 8.
pub fn unroll() -> u32 {
    std::env::var("BRAID_UNROLL")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|u| (1..=16).contains(u))
        .unwrap_or(8)
}

/// What a kernel is compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Variant {
    pub dtype: DType,
    pub op: RedOp,
    pub wire: Wire,
}

/// The variant whose module also holds the point-to-point kernel: bytes, no reduction.
pub fn p2p_variant(host_fifo: bool) -> Variant {
    Variant {
        dtype: DType::U8,
        op: RedOp::Sum,
        wire: Wire {
            lane: Lane::Simple,
            host_fifo,
        },
    }
}

/// The variant whose module also holds the scaling kernel of PreMulSum for `dtype`: the
/// product's, Simple.
pub fn scale_variant(dtype: DType, host_fifo: bool) -> Variant {
    Variant {
        dtype,
        op: RedOp::Prod,
        wire: Wire {
            lane: Lane::Simple,
            host_fifo,
        },
    }
}

/// The CUDA type the primitives use for a dtype (inside `namespace braid`).
pub fn c_type(d: DType) -> &'static str {
    match d {
        DType::F16 => "half_t",
        DType::Bf16 => "bf16_t",
        DType::F32 => "float",
        DType::F64 => "double",
        DType::I8 => "signed char",
        DType::U8 => "unsigned char",
        DType::I32 => "int",
        DType::U32 => "unsigned int",
        DType::I64 => "long long",
        DType::U64 => "unsigned long long",
    }
}

/// The primitives' operator for a reduction.
pub fn c_op(op: RedOp) -> &'static str {
    match op {
        RedOp::Sum => "0",
        RedOp::Prod => "1",
        RedOp::Min => "2",
        RedOp::Max => "3",
        RedOp::Avg => "4",
    }
}

/// The full source of one kernel variant.
pub fn source(v: Variant) -> String {
    let mut t = String::new();
    t.push_str(&format!(
        "// Generated by braid-cuda: the plan interpreter for {} {}, {} over {} FIFOs.\n",
        v.dtype.name(),
        v.op.name(),
        v.wire.lane.name(),
        if v.wire.host_fifo { "host" } else { "device" }
    ));
    let defines = [
        ("BRAID_T", c_type(v.dtype).to_string()),
        ("BRAID_OP", c_op(v.op).to_string()),
        ("BRAID_LL", u8::from(v.wire.lane == Lane::Ll).to_string()),
        (
            "BRAID_LL128",
            u8::from(v.wire.lane == Lane::Ll128).to_string(),
        ),
        ("BRAID_LANE", (v.wire.lane as usize).to_string()),
        ("BRAID_HOST_FIFO", u8::from(v.wire.host_fifo).to_string()),
        ("BRAID_SLOT_BYTES", format!("{}ull", v.wire.slot_bytes())),
        ("BRAID_PIECE_BYTES", format!("{}ull", v.wire.piece_bytes())),
        ("BRAID_UNROLL", unroll().to_string()),
        ("BRAID_THREADS", THREADS.to_string()),
        ("BRAID_MAX_LOCAL", MAX_LOCAL.to_string()),
        ("BRAID_BLOCKS_AT", crate::program::BLOCKS_AT.to_string()),
        ("BRAID_SIMPLE_SLOT_BYTES", format!("{SIMPLE_SLOT_BYTES}ull")),
        ("BRAID_LL_SLOT_BYTES", format!("{LL_SLOT_BYTES}ull")),
        ("BRAID_LANES", LANES.to_string()),
        (
            "BRAID_P2P",
            u8::from(v == p2p_variant(v.wire.host_fifo)).to_string(),
        ),
        (
            "BRAID_SCALE",
            u8::from(v == scale_variant(v.dtype, v.wire.host_fifo)).to_string(),
        ),
        ("BRAID_P2P_LANES", P2P_LANES.to_string()),
        ("BRAID_P2P_TASKS", P2P_TASKS.to_string()),
    ];
    for (k, val) in defines {
        t.push_str(&format!("#define {k} {val}\n"));
    }
    t.push_str(PRIMITIVES);
    t.push_str(INTERPRETER);
    t
}

/// Every variant a program can need on one kind of FIFO placement: each dtype with each
/// reduction for reducing collectives, and the four copy widths (what collectives that
/// only move data run), over every protocol the placement has (LL128 needs device
/// FIFOs). What `braid kernels` compiles ahead.
pub fn all_variants(host_fifo: bool) -> Vec<Variant> {
    let mut v = Vec::new();
    let lanes: &[Lane] = if host_fifo {
        &[Lane::Simple, Lane::Ll]
    } else {
        &Lane::ALL
    };
    for &lane in lanes {
        let wire = Wire { lane, host_fifo };
        for dtype in DType::ALL {
            for op in RedOp::ALL {
                v.push(Variant { dtype, op, wire });
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variant_is_fixed_in_the_prologue() {
        let v = Variant {
            dtype: DType::Bf16,
            op: RedOp::Avg,
            wire: Wire {
                lane: Lane::Ll,
                host_fifo: true,
            },
        };
        let s = source(v);
        assert!(s.starts_with("// Generated by braid-cuda"));
        for line in [
            "#define BRAID_T bf16_t\n",
            "#define BRAID_OP 4\n",
            "#define BRAID_LL 1\n",
            "#define BRAID_HOST_FIFO 1\n",
            &format!("#define BRAID_SLOT_BYTES {LL_SLOT_BYTES}ull\n"),
            &format!("#define BRAID_PIECE_BYTES {}ull\n", LL_SLOT_BYTES / 2),
        ] {
            assert!(s.contains(line), "{line} missing");
        }
        assert!(s.contains(
            "extern \"C\" __global__ void __launch_bounds__(BRAID_THREADS) braid_kernel("
        ));
        let simple = source(Variant {
            wire: Wire::default(),
            ..v
        });
        assert!(simple.contains(&format!(
            "#define BRAID_PIECE_BYTES {SIMPLE_SLOT_BYTES}ull\n"
        )));
        assert_ne!(s, simple);
        assert!(s.contains("#define BRAID_P2P 0\n"));
        let bytes = source(p2p_variant(true));
        assert!(bytes.contains("#define BRAID_P2P 1\n"));
        assert!(bytes.contains("#define BRAID_T unsigned char\n"));
        assert!(bytes.contains("braid_p2p("));
        assert!(bytes.contains("#define BRAID_SCALE 0\n"));
        assert!(source(scale_variant(DType::Bf16, false)).contains("#define BRAID_SCALE 1\n"));
    }

    #[test]
    fn every_dtype_and_op_has_a_variant() {
        let all = all_variants(false);
        assert_eq!(all.len(), LANES * DType::ALL.len() * RedOp::ALL.len());
        assert_eq!(
            all_variants(true).len(),
            2 * DType::ALL.len() * RedOp::ALL.len(),
            "host FIFOs have no LL128"
        );
        assert!(source(Variant {
            wire: Wire {
                lane: Lane::Ll128,
                host_fifo: false
            },
            ..all[0]
        })
        .contains("#define BRAID_LL128 1\n#define BRAID_LANE 2\n"));
        for d in DType::ALL {
            assert!(source(all.iter().find(|v| v.dtype == d).copied().unwrap())
                .contains(&format!("#define BRAID_T {}\n", c_type(d))));
        }
    }
}
