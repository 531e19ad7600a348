//! Compiling a generated source with NVRTC for one architecture, through the disk cache.

use crate::cache;
use crate::error::{CudaError, Result};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileError, CompileOptions};

/// NVRTC's version, `(major, minor)`.
pub fn nvrtc_version() -> Result<(i32, i32)> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: plain out-parameters; the caller checked that NVRTC loads.
    let r = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    if r != cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(CudaError::Compile(format!("nvrtcVersion: {r:?}")));
    }
    Ok((major, minor))
}

/// Whether the NVRTC library can be loaded.
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to load the library.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// PTX for `source` on `arch` (e.g. `sm_90`), from the cache when it has it. Returns the
/// PTX and whether it came from the cache.
pub fn compile(source: &str, arch: &str, driver_version: i32) -> Result<(String, bool)> {
    if !nvrtc_present() {
        return Err(CudaError::Compile(
            "the NVRTC library (libnvrtc) could not be loaded".into(),
        ));
    }
    let key = cache::key(source, arch, driver_version, nvrtc_version()?);
    let dir = cache::dir();
    if let Some(ptx) = dir.as_deref().and_then(|d| cache::load(d, &key)) {
        return Ok((ptx, true));
    }
    let opts = CompileOptions {
        options: vec![format!("--gpu-architecture={arch}"), "--std=c++17".into()],
        ..Default::default()
    };
    let ptx = compile_ptx_with_opts(source, opts).map_err(|e| match e {
        CompileError::CompileError { log, .. } => {
            CudaError::Compile(log.to_string_lossy().into_owned())
        }
        other => CudaError::Compile(other.to_string()),
    })?;
    let text = ptx.to_src();
    if let Some(d) = dir {
        cache::store(&d, &key, &text);
    }
    Ok((text, false))
}
