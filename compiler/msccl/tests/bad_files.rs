//! Every malformed file under `tests/msccl/bad` is refused with exactly the messages in its
//! `.stderr` (the CLI's `import-msccl` prints the same; `tools/braid/tests/msccl.rs`
//! checks it there). `BLESS=1` rewrites the expectations.

use std::path::Path;

/// What importing (and, when that succeeds, verifying) `rel` reports.
fn report(root: &Path, rel: &str) -> String {
    let text = std::fs::read_to_string(root.join(rel)).unwrap();
    match braid_msccl::import_with_lines(&text, rel) {
        Err(e) => braid_msccl::render_errors(&e, rel),
        Ok((plan, index)) => match braid_plan::verify(&plan) {
            Ok(r) => panic!("{rel} verified: {}", r.summary()),
            Err(d) => braid_msccl::render_for_xml(&d, &index, rel),
        },
    }
}

#[test]
fn bad_files_are_refused_with_their_pinned_messages() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut names: Vec<String> = std::fs::read_dir(root.join("tests/msccl/bad"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".xml"))
        .collect();
    names.sort();
    assert!(names.len() >= 8);
    let bless = std::env::var_os("BLESS").is_some_and(|v| v == "1");
    let mut wrong = Vec::new();
    for name in names {
        let rel = format!("tests/msccl/bad/{name}");
        let got = report(&root, &rel);
        let golden = root.join(rel.replace(".xml", ".stderr"));
        if bless {
            std::fs::write(&golden, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&golden).unwrap_or_default();
        if got != want {
            wrong.push(format!("{rel}\n--- want\n{want}--- got\n{got}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
