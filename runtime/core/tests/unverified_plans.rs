//! Compile-fail tests: no executor accepts a plan the verifier has not proved, and no
//! code can claim a plan is proved without the verifier.
//!
//! Each program in `tests/compile_fail/` is built as its own small crate against this
//! workspace's `braid-plan` and `braid-runtime` (`cargo check --offline`, the workspace's
//! lock file, a target directory of its own) and must fail with the error named below, at
//! the line named below. A build that fails for any other reason (a missing dependency,
//! a killed compiler) fails the test with the compiler's whole output, rather than being
//! taken for the expected error.

use std::path::{Path, PathBuf};
use std::process::Command;

struct Case {
    file: &'static str,
    /// The error code and words the compiler must print, and the line it must point at.
    code: &'static str,
    words: &'static str,
    line: u32,
}

const CASES: &[Case] = &[
    Case {
        file: "forged_verified.rs",
        code: "E0451",
        words: "of struct `Verified` are private",
        line: 4,
    },
    Case {
        file: "unverified_plan.rs",
        code: "E0308",
        words: "expected `&Verified`, found `&Plan`",
        line: 14,
    },
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|p| if p.is_absolute() { p } else { root.join(p) })
        .unwrap_or_else(|| root.join("target"))
}

/// Builds `case` as a crate of its own; the compiler's exit status and its diagnostics.
fn check(case: &Case, root: &Path, work: &Path) -> (bool, String) {
    let name = case.file.trim_end_matches(".rs").replace('_', "-");
    let dir = work.join(&name);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    let manifest = format!(
        "[package]\nname = \"cf-{name}\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
         [dependencies]\nbraid-plan = {{ path = {plan:?} }}\nbraid-runtime = {{ path = {runtime:?} }}\n\n\
         [workspace]\n",
        plan = root.join("compiler/plan"),
        runtime = root.join("runtime/core"),
    );
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/compile_fail")
        .join(case.file);
    std::fs::copy(&source, dir.join("src/main.rs")).unwrap();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", work.join("target"))
        .env_remove("RUSTFLAGS")
        .args([
            "check",
            "--offline",
            "--quiet",
            "--color=never",
            "--message-format=short",
        ])
        .output()
        .expect("cargo runs");
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.success(), text)
}

#[test]
fn an_executor_refuses_an_unverified_plan() {
    let root = workspace_root();
    let work = target_dir(&root).join("compile_fail");
    let mut failures = Vec::new();
    for case in CASES {
        let (ok, stderr) = check(case, &root, &work);
        let want = format!("src/main.rs:{}:", case.line);
        let found = stderr.lines().any(|l| {
            l.starts_with(&want)
                && l.contains(&format!("error[{}]", case.code))
                && l.contains(case.words)
        });
        if ok {
            failures.push(format!("{}: compiled, but must not\n{stderr}", case.file));
        } else if !found {
            failures.push(format!(
                "{}: did not fail with error[{}] \"{}\" at line {}; the compiler said:\n{stderr}",
                case.file, case.code, case.words, case.line
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
