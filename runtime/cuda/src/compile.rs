//! Compiling a kernel source with NVRTC to machine code (CUBIN) for one architecture,
//! through the disk cache ([`crate::cache`]). NVRTC needs no GPU and no driver: the
//! `braid kernels` command compiles every variant ahead of time on any machine with the
//! library.

use crate::cache;
use crate::error::{CudaError, Result};
use cudarc::nvrtc::{result, sys};
use std::ffi::CString;

/// NVRTC's version, `(major, minor)`.
pub fn nvrtc_version() -> Result<(i32, i32)> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: plain out-parameters; the caller checked that NVRTC loads.
    let r = unsafe { sys::nvrtcVersion(&mut major, &mut minor) };
    if r != sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(CudaError::Compile(format!("nvrtcVersion: {r:?}")));
    }
    Ok((major, minor))
}

/// Whether the NVRTC library can be loaded.
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to load the library.
    unsafe { sys::is_culib_present() }
}

/// What a compilation produced: the machine code and whether it came from the cache.
pub struct Compiled {
    pub cubin: Vec<u8>,
    pub cached: bool,
}

/// Machine code for `source` on `arch` (e.g. `sm_90`), from the cache when it has it.
pub fn compile(source: &str, arch: &str) -> Result<Compiled> {
    if !nvrtc_present() {
        return Err(CudaError::Compile(
            "the NVRTC library (libnvrtc) could not be loaded".into(),
        ));
    }
    let key = cache::key(source, arch, nvrtc_version()?);
    let dir = cache::dir();
    if let Some(cubin) = dir.as_deref().and_then(|d| cache::load(d, &key)) {
        return Ok(Compiled {
            cubin,
            cached: true,
        });
    }
    let cubin = nvrtc_cubin(source, arch)?;
    if let Some(d) = dir {
        cache::store(&d, &key, &cubin);
    }
    Ok(Compiled {
        cubin,
        cached: false,
    })
}

fn err(what: &str, e: impl std::fmt::Debug) -> CudaError {
    CudaError::Compile(format!("{what}: {e:?}"))
}

/// One NVRTC run to CUBIN for a real architecture.
fn nvrtc_cubin(source: &str, arch: &str) -> Result<Vec<u8>> {
    let src = CString::new(source).map_err(|e| err("source", e))?;
    let name = CString::new("braid_kernel.cu").expect("no NUL");
    let prog =
        result::create_program(&src, Some(&name)).map_err(|e| err("nvrtcCreateProgram", e))?;
    let opts = [
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
    ];
    // SAFETY: `prog` is a live program; options are plain strings.
    let compiled = unsafe { result::compile_program(prog, &opts) };
    let out = match compiled {
        Err(_) => {
            // SAFETY: as above.
            let log = unsafe { result::get_program_log(prog) }.unwrap_or_default();
            let bytes: Vec<u8> = log
                .iter()
                .take_while(|&&c| c != 0)
                .map(|&c| c as u8)
                .collect();
            Err(CudaError::Compile(
                String::from_utf8_lossy(&bytes).into_owned(),
            ))
        }
        Ok(()) => {
            let mut size = 0usize;
            // SAFETY: out-parameter of a compiled program.
            let r = unsafe { sys::nvrtcGetCUBINSize(prog, &mut size) };
            if r != sys::nvrtcResult::NVRTC_SUCCESS {
                Err(err("nvrtcGetCUBINSize", r))
            } else {
                let mut cubin = vec![0u8; size];
                // SAFETY: `cubin` has the size NVRTC reported.
                let r = unsafe { sys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr().cast()) };
                if r != sys::nvrtcResult::NVRTC_SUCCESS {
                    Err(err("nvrtcGetCUBIN", r))
                } else {
                    Ok(cubin)
                }
            }
        }
    };
    // SAFETY: destroyed once.
    let _ = unsafe { result::destroy_program(prog) };
    out
}
