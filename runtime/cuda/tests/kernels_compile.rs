//! Every kernel variant compiles with NVRTC to machine code for the GPU architecture (a
//! template error would otherwise show only on a GPU machine), in parallel. Needs the
//! NVRTC library, not a GPU or a driver; without NVRTC it prints why it skips. Compiled
//! kernels land in the disk cache (`BRAID_CACHE_DIR`), so this also fills a cache to
//! carry to GPU machines. `BRAID_KERNELS_ARCH` picks the architecture (default `sm_90`).

use braid_cuda::compile::{compile, nvrtc_present};
use braid_cuda::kernel::{all_variants, source};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

#[test]
fn every_variant_compiles() {
    if !nvrtc_present() {
        eprintln!("skipping every_variant_compiles: the NVRTC library is not on this machine");
        return;
    }
    let arch = std::env::var("BRAID_KERNELS_ARCH").unwrap_or_else(|_| "sm_90".into());
    let variants: Vec<_> = [false, true].into_iter().flat_map(all_variants).collect();
    let next = AtomicUsize::new(0);
    let failed = Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&v) = variants.get(i) else { break };
                match compile(&source(v), &arch) {
                    Ok(c) if c.cubin.starts_with(b"\x7fELF") => {}
                    Ok(_) => failed.lock().unwrap().push(format!("{v:?}: not an ELF image")),
                    Err(e) => failed.lock().unwrap().push(format!("{v:?}: {e}")),
                }
            });
        }
    });
    let failed = failed.into_inner().unwrap();
    assert!(
        failed.is_empty(),
        "{} of {} variants failed:\n{}",
        failed.len(),
        variants.len(),
        failed.join("\n")
    );
}
