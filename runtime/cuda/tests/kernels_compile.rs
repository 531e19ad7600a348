//! Every kernel variant compiles with NVRTC, and NVRTC's output assembles for the GPU
//! architecture (a template error would otherwise show only on a GPU machine). Needs the
//! NVRTC library, not a GPU or a driver; without NVRTC it prints why it skips.
//! `BRAID_KERNELS_ARCH` picks the architecture (default `sm_90`).

use braid_cuda::compile::{compile, nvrtc_present};
use braid_cuda::kernel::{all_variants, source};

#[test]
fn every_variant_compiles() {
    if !nvrtc_present() {
        eprintln!("skipping every_variant_compiles: the NVRTC library is not on this machine");
        return;
    }
    let arch = std::env::var("BRAID_KERNELS_ARCH").unwrap_or_else(|_| "sm_90".into());
    let only = std::env::var("BRAID_KERNELS_ONLY").ok();
    let mut failed = Vec::new();
    let mut n = 0;
    for host in [false, true] {
        for v in all_variants(host) {
            if let Some(o) = &only {
                if !format!("{v:?}").contains(o.as_str()) {
                    continue;
                }
            }
            n += 1;
            let t = std::time::Instant::now();
            match compile(&source(v), &arch) {
                Ok(c) => {
                    assert!(c.cubin.starts_with(b"\x7fELF"), "{v:?}: not an ELF image");
                    eprintln!("{v:?}: {} bytes in {:.2?}{}", c.cubin.len(), t.elapsed(), if c.cached { " (cached)" } else { "" });
                }
                Err(e) => failed.push(format!("{v:?}: {e}")),
            }
        }
    }
    assert!(failed.is_empty(), "{} of {n} variants failed:\n{}", failed.len(), failed.join("\n"));
}
