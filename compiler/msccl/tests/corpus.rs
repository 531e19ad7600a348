//! Every file of the MSCCL corpus imports, and the verifier's verdict on each is pinned:
//! the correct ones are proved, the wrong ones fail for the reason docs/msccl.md gives.

use std::path::{Path, PathBuf};

/// The MSCCL corpus shipped in `tests/msccl/corpus` (MSCCLang examples and the Azure
/// msccl-scheduler algorithms, with their licences).
fn corpus_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    for dir in [
        "tests/msccl/corpus/msccl-tools-examples",
        "tests/msccl/corpus/azure-msccl-scheduler",
        "tests/msccl/corpus/azure-msccl-scheduler/ncv4",
        "tests/msccl/corpus/azure-msccl-scheduler/ndv4",
    ] {
        let Ok(rd) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for e in rd.flatten() {
            if e.path().extension().is_some_and(|x| x == "xml") {
                files.push(e.path());
            }
        }
    }
    files.sort();
    files
}

#[test]
fn every_corpus_file_imports_and_verifies() {
    let files = corpus_files();
    assert!(
        files.len() >= 41,
        "the corpus has {} files, not 41",
        files.len()
    );
    let mut report = Vec::new();
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(f).unwrap();
        match braid_msccl::import_with_lines(&text, &name) {
            Err(e) => report.push(format!(
                "{name}: IMPORT\n{}",
                braid_msccl::render_errors(&e, &name)
            )),
            Ok((plan, idx)) => match braid_plan::verify(&plan) {
                Ok(_) => report.push(format!("{name}: ok")),
                Err(d) => report.push(format!(
                    "{name}: VERIFY\n{}",
                    braid_msccl::render_for_xml(&d, &idx, &name)
                )),
            },
        }
    }
    // The three files docs/msccl.md explains; everything else is proved correct.
    let bad: Vec<&String> = report.iter().filter(|r| !r.ends_with(": ok")).collect();
    for b in &bad {
        assert!(
            b.starts_with("allreduce_dgx1_2n_1i.xml: IMPORT")
                || b.starts_with("allreduce_pcie_hier_8r_LL.xml: VERIFY")
                || b.starts_with("pipeline_ring_4r_2ch_1i.xml: VERIFY"),
            "unexpected verdict:\n{b}"
        );
    }
}
