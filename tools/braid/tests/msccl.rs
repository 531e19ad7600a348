//! MSCCL XML through the CLI and the host runtime: every corpus file imports, verifies
//! and runs correctly (or fails for the pinned, documented reason), malformed files are
//! rejected with the element and line, and import/export round-trip through the CLI.

mod common;

use braid_ir::Mode;
use braid_plan::Plan;
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::selfcheck::run_checked;
use common::{braid, golden, root};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Corpus files the verifier proves wrong; docs/msccl.md says why. Their `braid verify`
/// output is pinned in `tests/msccl/wrong/NAME.stderr`.
const WRONG: [&str; 3] = [
    "allreduce_dgx1_2n_1i.xml",
    "allreduce_pcie_hier_8r_LL.xml",
    "pipeline_ring_4r_2ch_1i.xml",
];

/// `.xml` files under `dir`, recursively, relative to the workspace root.
fn xml_under(dir: &str, out: &mut Vec<String>) {
    let Ok(rd) = std::fs::read_dir(root().join(dir)) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let rel = format!("{dir}/{name}");
        if e.path().is_dir() {
            xml_under(&rel, out);
        } else if name.ends_with(".xml") {
            out.push(rel);
        }
    }
}

/// The MSCCL corpus shipped in `tests/msccl/corpus` (with its licences); each file name
/// once.
fn corpus() -> Vec<String> {
    let mut all = Vec::new();
    xml_under("tests/msccl/corpus", &mut all);
    let mut seen = std::collections::HashSet::new();
    all.retain(|p| seen.insert(Path::new(p).file_name().unwrap().to_owned()));
    all
}

/// One call on every rank; Err names the first wrong element. `run_checked` runs the
/// plan whatever byte range it states, so small sizes are fine.
fn run(plan: &Plan, dtype: DType, op: RedOp, count: usize, mode: Mode) -> Result<(), String> {
    let checked = run_checked(plan, dtype, op, count, mode, 11, Duration::from_secs(20))
        .map_err(|e| e.to_string())?;
    match checked.wrong.first() {
        None => Ok(()),
        Some((r, _, i, want, got)) => {
            Err(format!("rank {r} element {i}: expected {want}, got {got}"))
        }
    }
}

#[test]
fn every_corpus_file_imports_verifies_and_runs_on_the_host_backend() {
    let files = corpus();
    assert!(files.len() >= 6, "the MSCCL corpus is missing: {files:?}");
    let mut failures = Vec::new();
    for f in &files {
        let name = Path::new(f)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if WRONG.contains(&name.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(root().join(f)).unwrap();
        let plan = match braid_msccl::import(&text, &name) {
            Ok(p) => p,
            Err(e) => {
                failures.push(braid_msccl::render_errors(&e, f));
                continue;
            }
        };
        if let Err(d) = braid_plan::verify(&plan) {
            failures.push(format!("{f}: {}", braid_plan::render_diagnostics(&d)));
            continue;
        }
        // Per-rank counts: a multiple of nchunksperloop, and an odd one.
        let c = plan.chunks as usize;
        let cases = [
            (DType::F32, RedOp::Sum, 3 * c),
            (DType::F32, RedOp::Sum, 2 * c + 3),
            (DType::I32, RedOp::Max, 2 * c + 1),
        ];
        for mode in plan.modes.iter() {
            for (dtype, op, count) in cases {
                if let Err(e) = run(&plan, dtype, op, count, mode) {
                    failures.push(format!(
                        "{f} {mode} {} {} count {count}: {e}",
                        dtype.name(),
                        op.name()
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn wrong_corpus_files_fail_verification_for_the_documented_reason() {
    let files = corpus();
    for name in WRONG {
        let f = files
            .iter()
            .find(|f| f.ends_with(name))
            .unwrap_or_else(|| panic!("{name} is not in tests/msccl/corpus"));
        let out = braid(&["verify", f], &[]);
        assert_eq!(out.code, 1, "{f}: {}", out.stderr);
        let stem = name.trim_end_matches(".xml");
        golden(
            &root().join(format!("tests/msccl/wrong/{stem}.stderr")),
            &out.stderr,
        );
    }
}

#[test]
fn malformed_xml_is_rejected_naming_the_element_and_line() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("tests/msccl/bad"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "xml"))
        .collect();
    files.sort();
    assert!(files.len() >= 8);
    for p in files {
        let rel = format!(
            "tests/msccl/bad/{}",
            p.file_name().unwrap().to_string_lossy()
        );
        let out = braid(&["import-msccl", &rel], &[]);
        assert_eq!(out.code, 1, "{rel}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{rel}: nothing on stdout");
        assert!(
            out.stderr.contains(&format!("{rel}:")),
            "{rel}: {}",
            out.stderr
        );
        golden(&p.with_extension("stderr"), &out.stderr);
    }
}

#[test]
fn import_export_verify_and_run_through_the_cli() {
    let dir = std::env::temp_dir().join(format!("braid-msccl-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let xml = "tests/msccl/corpus/msccl-tools-examples/allreduce_ring_2r_1i.xml";
    let json = dir.join("ring.json");
    let back = dir.join("ring.xml");
    let json_s = json.to_str().unwrap();
    let back_s = back.to_str().unwrap();
    let out = braid(&["import-msccl", xml, "-o", json_s], &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(braid(&["verify", json_s], &[]).code, 0);
    let out = braid(&["export-msccl", json_s, "-o", back_s], &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let out = braid(&["verify", back_s], &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("ok: plan `allreduce_ring_inplace`"));
    let out = braid(&["run", xml, "--topo", "nvswitch:2", "--size", "4K"], &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("correct on every rank"),
        "{}",
        out.stdout
    );
    // A failed import writes nothing.
    let bad = dir.join("bad.json");
    let out = braid(
        &[
            "import-msccl",
            "tests/msccl/bad/truncated.xml",
            "-o",
            bad.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.code, 1);
    assert!(!bad.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
