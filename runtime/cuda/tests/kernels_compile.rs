//! Kernel variants compile with NVRTC to machine code for the GPU architecture (a
//! template error would otherwise show only on a GPU machine), in parallel. Needs the
//! NVRTC library, not a GPU or a driver: CI installs it (`.ci/nvrtc.txt`) and sets
//! `BRAID_REQUIRE_NVRTC=1`, which turns a missing NVRTC into a failure; elsewhere the test
//! prints why it skips. By default a covering set compiles, in which every data type,
//! reduction, protocol and FIFO placement appears, and both variants holding the
//! point-to-point kernel (a dozen variants, a minute);
//! `BRAID_KERNELS_ALL=1` compiles all of them (200, several minutes on two cores), which
//! also fills the disk cache (`BRAID_CACHE_DIR`) to carry to GPU machines.
//! `BRAID_KERNELS_ARCH` picks the architecture (default `sm_90`).

use braid_cuda::compile::{compile, nvrtc_present};
use braid_cuda::kernel::{
    all_variants, p2p_variant, scale_variant, source, Variant, P2P_ENTRY, SCALE_ENTRY,
};
use braid_runtime::dtype::{DType, RedOp};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

#[test]
fn every_variant_compiles() {
    if !nvrtc_present() {
        assert!(
            std::env::var("BRAID_REQUIRE_NVRTC").is_err(),
            "BRAID_REQUIRE_NVRTC is set but the NVRTC library cannot be loaded (install the version \
             .ci/nvrtc.txt pins and put its lib directory on LD_LIBRARY_PATH)"
        );
        eprintln!("skipping every_variant_compiles: the NVRTC library is not on this machine");
        return;
    }
    let arch = std::env::var("BRAID_KERNELS_ARCH").unwrap_or_else(|_| "sm_90".into());
    let all: Vec<Variant> = [false, true].into_iter().flat_map(all_variants).collect();
    let variants = if std::env::var("BRAID_KERNELS_ALL").is_ok_and(|v| v == "1") {
        all
    } else {
        covering(&all)
    };
    let next = AtomicUsize::new(0);
    let failed = Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&v) = variants.get(i) else { break };
                let has = |cubin: &[u8], entry: &str| {
                    cubin.windows(entry.len()).any(|w| w == entry.as_bytes())
                };
                // Each extra entry in exactly the modules that should hold it.
                let extras = [
                    (P2P_ENTRY, v == p2p_variant(v.wire.host_fifo)),
                    (SCALE_ENTRY, v == scale_variant(v.dtype, v.wire.host_fifo)),
                ];
                match compile(&source(v), &arch) {
                    Ok(c)
                        if c.cubin.starts_with(b"\x7fELF")
                            && extras.iter().any(|(e, want)| has(&c.cubin, e) != *want) =>
                    {
                        failed
                            .lock()
                            .unwrap()
                            .push(format!("{v:?}: an extra entry (point to point, scaling) is missing or misplaced"))
                    }
                    Ok(c) if c.cubin.starts_with(b"\x7fELF") => {}
                    Ok(_) => failed
                        .lock()
                        .unwrap()
                        .push(format!("{v:?}: not an ELF image")),
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

/// Variants in which every dtype, reduction, protocol and FIFO placement appears at least
/// once: dtype `i` with reduction `i mod 5` on wire `i mod 4`, then any reduction or
/// wire still missing.
fn covering(all: &[Variant]) -> Vec<Variant> {
    let wires: Vec<_> = {
        let mut w = Vec::new();
        for v in all {
            if !w.contains(&v.wire) {
                w.push(v.wire);
            }
        }
        w
    };
    let mut out: Vec<Variant> = Vec::new();
    for (i, dtype) in DType::ALL.into_iter().enumerate() {
        let op = RedOp::ALL[i % RedOp::ALL.len()];
        let wire = wires[i % wires.len()];
        if let Some(v) = all
            .iter()
            .find(|v| v.dtype == dtype && v.op == op && v.wire == wire)
        {
            out.push(*v);
        }
    }
    for op in RedOp::ALL {
        if !out.iter().any(|v| v.op == op) {
            out.extend(all.iter().find(|v| v.op == op).copied());
        }
    }
    for w in &wires {
        if !out.iter().any(|v| v.wire == *w) {
            out.extend(all.iter().find(|v| v.wire == *w).copied());
        }
    }
    // The point-to-point kernel lives in the byte variant's module, on both placements;
    // one scaling kernel (PreMulSum) on each placement.
    for host_fifo in [false, true] {
        for v in [p2p_variant(host_fifo), scale_variant(DType::F16, host_fifo)] {
            if !out.contains(&v) {
                out.push(v);
            }
        }
    }
    for d in DType::ALL {
        assert!(out.iter().any(|v| v.dtype == d), "{d:?} not covered");
    }
    out
}

/// The roofline's copy kernel (`braid perf --backend cuda`) compiles too.
#[test]
fn the_roofline_copy_kernel_compiles() {
    if !nvrtc_present() {
        assert!(
            std::env::var("BRAID_REQUIRE_NVRTC").is_err(),
            "BRAID_REQUIRE_NVRTC is set but the NVRTC library cannot be loaded"
        );
        eprintln!(
            "skipping the_roofline_copy_kernel_compiles: the NVRTC library is not on this machine"
        );
        return;
    }
    let arch = std::env::var("BRAID_KERNELS_ARCH").unwrap_or_else(|_| "sm_90".into());
    let c = compile(braid_cuda::roofline::COPY_SOURCE, &arch).expect("the copy kernel compiles");
    assert!(c.cubin.starts_with(b"\x7fELF"), "not an ELF image");
}

/// LL128's stress-test kernel (`braid tune`, `braid doctor`) compiles too.
#[test]
fn the_ll128_stress_kernel_compiles() {
    if !nvrtc_present() {
        assert!(
            std::env::var("BRAID_REQUIRE_NVRTC").is_err(),
            "BRAID_REQUIRE_NVRTC is set but the NVRTC library cannot be loaded"
        );
        eprintln!(
            "skipping the_ll128_stress_kernel_compiles: the NVRTC library is not on this machine"
        );
        return;
    }
    let arch = std::env::var("BRAID_KERNELS_ARCH").unwrap_or_else(|_| "sm_90".into());
    let c = compile(braid_cuda::ll128::STRESS_SOURCE, &arch).expect("the stress kernel compiles");
    assert!(c.cubin.starts_with(b"\x7fELF"), "not an ELF image");
    let entry = b"braid_ll128_stress";
    assert!(c.cubin.windows(entry.len()).any(|w| w == entry));
}
