//! The GPUs as the CUDA driver sees them: count, names, PCI bus ids, and
//! which pairs may access each other's memory.
//!
//! The only module that calls the driver, and only after checking the driver
//! library loads, so that a machine without one gets an error, not a panic.

use std::ffi::{c_char, c_int, CStr};

use cudarc::driver::{result, sys};

use crate::sysfs::normalize_bus_id;
use crate::DetectError;

/// One GPU as the driver lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaGpu {
    pub model: String,
    pub bus: String,
}

/// The GPUs in ordinal order, and `peer[i][j]`: whether GPU `i` can access GPU
/// `j`'s memory (`cuDeviceCanAccessPeer`; the diagonal is true).
pub fn gpus() -> Result<(Vec<CudaGpu>, Vec<Vec<bool>>), DetectError> {
    if !crate::cuda_driver_present() {
        let mut searched = cudarc::get_lib_name_candidates("cuda");
        let mut seen = std::collections::HashSet::new();
        searched.retain(|name| seen.insert(name.clone()));
        return Err(DetectError::NoDriver {
            searched: searched.join(", "),
        });
    }
    if let Err(e) = result::init() {
        if e.0 == sys::CUresult::CUDA_ERROR_NO_DEVICE {
            return Err(DetectError::NoGpu {
                reason: "cuInit reports no CUDA-capable device".into(),
            });
        }
        return Err(driver("cuInit", e));
    }
    let count = result::device::get_count().map_err(|e| driver("cuDeviceGetCount", e))?;
    if count == 0 {
        return Err(DetectError::NoGpu {
            reason: "cuDeviceGetCount returned 0".into(),
        });
    }
    let mut devs = Vec::new();
    let mut gpus = Vec::new();
    for ordinal in 0..count {
        let dev = result::device::get(ordinal).map_err(|e| driver("cuDeviceGet", e))?;
        let model = result::device::get_name(dev).map_err(|e| driver("cuDeviceGetName", e))?;
        let bus = bus_id(dev)?;
        devs.push(dev);
        gpus.push(CudaGpu { model, bus });
    }
    let mut peer = vec![vec![true; devs.len()]; devs.len()];
    for (i, &a) in devs.iter().enumerate() {
        for (j, &b) in devs.iter().enumerate() {
            if i != j {
                let mut can: c_int = 0;
                // SAFETY: both are devices returned by cuDeviceGet; `can` is a valid out-pointer.
                unsafe { sys::cuDeviceCanAccessPeer(&mut can, a, b) }
                    .result()
                    .map_err(|e| driver("cuDeviceCanAccessPeer", e))?;
                peer[i][j] = can != 0;
            }
        }
    }
    Ok((gpus, peer))
}

/// The PCI bus id of `dev` in sysfs form.
fn bus_id(dev: sys::CUdevice) -> Result<String, DetectError> {
    let mut buf = [0 as c_char; 64];
    // SAFETY: `buf` holds `len` bytes and the driver NUL-terminates within them.
    unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as c_int, dev) }
        .result()
        .map_err(|e| driver("cuDeviceGetPCIBusId", e))?;
    // SAFETY: NUL-terminated by the driver (and by our zeroed buffer).
    let raw = unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    normalize_bus_id(&raw).ok_or_else(|| DetectError::Driver {
        call: "cuDeviceGetPCIBusId".into(),
        message: format!("unexpected bus id `{raw}`"),
    })
}

fn driver(call: &str, e: result::DriverError) -> DetectError {
    DetectError::Driver {
        call: call.into(),
        message: e.to_string(),
    }
}
