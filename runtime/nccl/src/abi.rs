//! NCCL 2.28's C types as the library's callers lay them out (`include/nccl.h` declares the
//! same): result codes, data types, reductions, the unique id, the configuration and
//! simulation structs, the team struct of the device API.

#![allow(non_camel_case_types, non_snake_case)]

use braid_runtime::dtype::{DType, RedOp};
use std::ffi::{c_char, c_int, c_uint};

/// `ncclResult_t`.
pub type ncclResult_t = c_int;
pub const SUCCESS: ncclResult_t = 0;
pub const UNHANDLED_CUDA_ERROR: ncclResult_t = 1;
pub const SYSTEM_ERROR: ncclResult_t = 2;
pub const INTERNAL_ERROR: ncclResult_t = 3;
pub const INVALID_ARGUMENT: ncclResult_t = 4;
pub const INVALID_USAGE: ncclResult_t = 5;
pub const REMOTE_ERROR: ncclResult_t = 6;
pub const IN_PROGRESS: ncclResult_t = 7;
pub const NUM_RESULTS: ncclResult_t = 8;

/// `ncclDataType_t`.
pub type ncclDataType_t = c_int;
pub const FLOAT8_E4M3: ncclDataType_t = 10;
pub const FLOAT8_E5M2: ncclDataType_t = 11;
pub const NUM_TYPES: ncclDataType_t = 12;

/// `ncclRedOp_t`: 0-4 built in, dynamic ops (`ncclRedOpCreatePreMulSum`) from 5.
pub type ncclRedOp_t = c_int;
pub const NUM_OPS: ncclRedOp_t = 5;

/// `ncclScalarResidence_t`.
pub type ncclScalarResidence_t = c_int;
pub const SCALAR_DEVICE: ncclScalarResidence_t = 0;
pub const SCALAR_HOST_IMMEDIATE: ncclScalarResidence_t = 1;

/// `NCCL_VERSION(2, 28, 9)`: the version this library's API is.
pub const VERSION_CODE: c_int = 22809;

pub const UNIQUE_ID_BYTES: usize = 128;

/// `ncclUniqueId`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ncclUniqueId {
    pub internal: [c_char; UNIQUE_ID_BYTES],
}

/// `NCCL_CONFIG_UNDEF_INT`.
pub const CONFIG_UNDEF_INT: c_int = c_int::MIN;
/// The magic `NCCL_CONFIG_INITIALIZER` writes.
pub const CONFIG_MAGIC: c_uint = 0xcafe_beef;
/// The magic `NCCL_SIM_INFO_INITIALIZER` writes.
pub const SIM_INFO_MAGIC: c_uint = 0x7468_5283;
pub const SPLIT_NOCOLOR: c_int = -1;

/// `ncclConfig_t` of NCCL 2.28 (`ncclConfig_v22800`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclConfig_t {
    pub size: usize,
    pub magic: c_uint,
    pub version: c_uint,
    pub blocking: c_int,
    pub cgaClusterSize: c_int,
    pub minCTAs: c_int,
    pub maxCTAs: c_int,
    pub netName: *const c_char,
    pub splitShare: c_int,
    pub trafficClass: c_int,
    pub commName: *const c_char,
    pub collnetEnable: c_int,
    pub CTAPolicy: c_int,
    pub shrinkShare: c_int,
    pub nvlsCTAs: c_int,
    pub nChannelsPerNetPeer: c_int,
    pub nvlinkCentricSched: c_int,
}

/// `ncclSimInfo_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclSimInfo_t {
    pub size: usize,
    pub magic: c_uint,
    pub version: c_uint,
    pub estimatedTime: f32,
}

/// `ncclTeam_t` of the device API.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ncclTeam_t {
    pub nRanks: c_int,
    pub rank: c_int,
    pub stride: c_int,
}

/// Braid's element type for an NCCL data type; fp8 types are bytes to collectives that
/// only move data (the caller says whether the collective reduces).
pub fn dtype(t: ncclDataType_t, reduces: bool) -> Result<DType, String> {
    Ok(match t {
        0 => DType::I8,
        1 => DType::U8,
        2 => DType::I32,
        3 => DType::U32,
        4 => DType::I64,
        5 => DType::U64,
        6 => DType::F16,
        7 => DType::F32,
        8 => DType::F64,
        9 => DType::Bf16,
        FLOAT8_E4M3 | FLOAT8_E5M2 if !reduces => DType::U8,
        FLOAT8_E4M3 | FLOAT8_E5M2 => {
            return Err(format!(
                "data type {t} (fp8): Braid does not reduce fp8 yet (moving it works)"
            ))
        }
        _ => return Err(format!("unknown data type {t} (NCCL 2.28 has 0 to 11)")),
    })
}

/// Braid's reduction for a built-in NCCL op.
pub fn red_op(op: ncclRedOp_t) -> Option<RedOp> {
    Some(match op {
        0 => RedOp::Sum,
        1 => RedOp::Prod,
        2 => RedOp::Max,
        3 => RedOp::Min,
        4 => RedOp::Avg,
        _ => return None,
    })
}

/// `ncclGetErrorString`'s texts (NCCL's wording where callers match on it).
pub fn error_string(r: ncclResult_t) -> &'static std::ffi::CStr {
    match r {
        SUCCESS => c"no error",
        UNHANDLED_CUDA_ERROR => c"unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
        SYSTEM_ERROR => c"unhandled system error (run with NCCL_DEBUG=INFO for details)",
        INTERNAL_ERROR => c"internal error - please report this issue to the NCCL developers",
        INVALID_ARGUMENT => c"invalid argument (run with NCCL_DEBUG=WARN for details)",
        INVALID_USAGE => c"invalid usage (run with NCCL_DEBUG=WARN for details)",
        REMOTE_ERROR => c"remote process exited or there was a network error",
        IN_PROGRESS => c"NCCL operation in progress",
        _ => c"unknown result code",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_are_nccl_2_28s() {
        assert_eq!(std::mem::size_of::<ncclUniqueId>(), 128);
        assert_eq!(std::mem::size_of::<ncclConfig_t>(), 80);
        assert_eq!(std::mem::offset_of!(ncclConfig_t, blocking), 16);
        assert_eq!(std::mem::offset_of!(ncclConfig_t, netName), 32);
        assert_eq!(std::mem::offset_of!(ncclConfig_t, commName), 48);
        assert_eq!(std::mem::offset_of!(ncclConfig_t, nvlinkCentricSched), 76);
        assert_eq!(std::mem::size_of::<ncclSimInfo_t>(), 24);
        assert_eq!(std::mem::size_of::<ncclTeam_t>(), 12);
    }

    #[test]
    fn types_and_ops_map_to_braids() {
        for d in DType::ALL {
            assert_eq!(dtype(d.nccl_value(), true).unwrap(), d);
        }
        for o in RedOp::ALL {
            assert_eq!(red_op(o.nccl_value()), Some(o));
        }
        assert_eq!(dtype(FLOAT8_E4M3, false).unwrap(), DType::U8);
        assert!(dtype(FLOAT8_E5M2, true).is_err());
        assert!(dtype(12, false).is_err());
        assert!(dtype(-1, false).is_err());
        assert_eq!(red_op(5), None);
    }
}
