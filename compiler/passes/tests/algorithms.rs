//! Every shipped algorithm, checked for every shape it applies to: N = 2..16 on one node
//! and NODES x G from 2x2 to 4x8, both call modes it declares, every root.
//!
//! Which shapes each algorithm applies to is pinned in `tests/algorithms.applies` (a
//! golden file; `BLESS=1` rewrites it), so an algorithm cannot silently stop applying.

use braid_ir::Shape;
use braid_passes::{failed_conditions, instantiate, verify};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn shapes() -> Vec<(String, Shape)> {
    let mut v: Vec<(String, Shape)> = (1..=16)
        .map(|n| (format!("nvswitch:{n}"), Shape::single_node(n)))
        .collect();
    for (m, g) in [
        (2, 2),
        (2, 4),
        (2, 8),
        (3, 2),
        (3, 4),
        (4, 2),
        (4, 4),
        (4, 8),
    ] {
        v.push((format!("cluster:{m}x{g}"), Shape::uniform(m, g)));
    }
    v
}

/// Checks one algorithm on one shape: `Ok(true)` verified, `Ok(false)` does not apply.
fn check(alg: &braid_lang::ast::Algorithm, shape: &Shape) -> Result<bool, String> {
    let roots: Vec<Option<u32>> = if alg.collective.is_rooted() {
        (0..shape.n).map(Some).collect()
    } else {
        vec![None]
    };
    let mut applied = false;
    for root in roots {
        let failed = failed_conditions(alg, shape, root).map_err(|d| format!("{d:?}"))?;
        if !failed.is_empty() {
            continue;
        }
        applied = true;
        let prog = instantiate(alg, shape, root).map_err(|d| format!("{root:?}: {d:#?}"))?;
        let done = verify(&prog, prog.modes).map_err(|d| format!("{root:?}: {d:#?}"))?;
        assert_eq!(done.modes.len(), prog.modes.iter().count());
    }
    Ok(applied)
}

#[test]
fn every_shipped_algorithm_verifies_wherever_it_applies() {
    let dir = root().join("algorithms");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "braid"))
        .collect();
    files.sort();
    assert!(files.len() >= 15, "the library lost algorithms: {files:?}");
    let mut table = String::new();
    let mut failures = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        assert!(
            text.trim_start().starts_with("//"),
            "{} must start with a comment documenting it",
            file.display()
        );
        let (parsed, diags) = braid_lang::parse_and_check(&text);
        assert!(diags.is_empty(), "{}: {diags:#?}", file.display());
        for alg in &parsed.algorithms {
            let mut applies = Vec::new();
            for (name, shape) in shapes() {
                match check(alg, &shape) {
                    Ok(true) => applies.push(name),
                    Ok(false) => {}
                    Err(e) => failures.push(format!("{} on {name}: {e}", alg.name.name)),
                }
            }
            assert!(!applies.is_empty(), "{} applies nowhere", alg.name.name);
            table.push_str(&format!("{}: {}\n", alg.name.name, applies.join(" ")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let golden = root().join("tests/algorithms.applies");
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&golden, &table).unwrap();
    } else {
        let expected = std::fs::read_to_string(&golden).expect("BLESS=1 to create");
        assert_eq!(expected, table, "applicability changed (BLESS=1 to accept)");
    }
}
