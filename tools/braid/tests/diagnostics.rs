//! Golden tests for diagnostics: every `tests/diagnostics/NAME.braid` must make
//! `braid check` exit 1, and its stderr must equal `NAME.stderr` (BLESS=1 to update).
//! A program's first comment lines may give `// args: ...` (default `--topo nvswitch:4`)
//! and `// env: K=V`.

mod common;

use common::{braid, directives, golden, root};

fn check(name: &str) {
    let rel = format!("tests/diagnostics/{name}.braid");
    let text = std::fs::read_to_string(root().join(&rel)).unwrap();
    let (mut args, env) = directives(&text);
    if !args.iter().any(|a| a == "--topo") {
        args.extend(["--topo".to_string(), "nvswitch:4".to_string()]);
    }
    let mut argv = vec!["check".to_string(), rel.clone()];
    argv.extend(args);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let out = braid(&argv, &env);
    assert_eq!(
        out.code, 1,
        "{rel}: expected exit 1\nstdout:\n{}\nstderr:\n{}",
        out.stdout, out.stderr
    );
    assert!(
        out.stderr.contains(&format!("{rel}:")),
        "{rel}: the diagnostic must name the file and line:\n{}",
        out.stderr
    );
    golden(
        &root().join(format!("tests/diagnostics/{name}.stderr")),
        &out.stderr,
    );
}

#[test]
fn every_broken_program_has_its_golden_diagnostic() {
    let dir = root().join("tests/diagnostics");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            if p.extension()? != "braid" {
                return None;
            }
            Some(p.file_stem()?.to_string_lossy().into_owned())
        })
        .collect();
    names.sort();
    assert!(names.len() >= 20, "fixtures missing: {names:?}");
    let mut failures = Vec::new();
    for name in &names {
        if let Err(e) = std::panic::catch_unwind(|| check(name)) {
            failures.push(format!(
                "{name}: {}",
                e.downcast_ref::<String>().cloned().unwrap_or_default()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
