//! Detection on the machine the tests run on.

use crate::{cuda_driver_present, detect, detect_report, DetectError};

#[test]
fn detect_says_what_is_missing_or_finds_gpus() {
    let driver = cuda_driver_present();
    match detect() {
        Err(e @ DetectError::NoDriver { .. }) => {
            assert!(!driver, "the driver loads, yet: {e}");
            let m = e.to_string();
            assert!(m.starts_with("no CUDA driver found"), "{m}");
            assert!(m.contains("libcuda.so"), "{m}");
            assert!(m.contains("nvswitch:N, pcie:N, cluster:MxG"), "{m}");
        }
        Err(e @ DetectError::NoGpu { .. }) => assert!(driver, "{e}"),
        Err(e) => panic!("detection failed: {e}"),
        Ok(t) => {
            assert!(driver);
            assert!(t.n_ranks() >= 1);
            assert_eq!(t.n_nodes(), 1);
            let report = detect_report().unwrap();
            assert_eq!(report.peer_access.len(), t.n_ranks() as usize);
            // Printed here so a run on a GPU machine shows what it found.
            println!("{}\nnotes: {:?}", t.to_annotated_text(), report.notes);
        }
    }
}
