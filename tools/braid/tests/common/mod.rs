//! Shared helpers for the CLI's integration tests: run the real `braid` binary from the
//! workspace root, and compare output with golden files (`BLESS=1` rewrites them).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root, so that paths in diagnostics are the same on every machine.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `braid ARGS` in the workspace root with extra environment variables.
pub fn braid(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_braid"));
    cmd.args(args).current_dir(root()).env_remove("BRAID_DEBUG");
    // What the runtime (and `braid explain`) read from the environment: only what a test
    // passes.
    for var in [
        "BRAID_PROFILE",
        "BRAID_ALGO",
        "NCCL_ALGO",
        "BRAID_PROTO",
        "NCCL_PROTO",
        "BRAID_CHANNELS",
        "BRAID_MAX_CTAS",
        "NCCL_MAX_CTAS",
        "BRAID_SELECT",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("braid runs");
    Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Compares `actual` with the golden file at `path`, or rewrites it under `BLESS=1`.
pub fn golden(path: &Path, actual: &str) {
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(path).unwrap_or_else(|_| {
        panic!(
            "missing golden file {}; run with BLESS=1 to create it",
            path.display()
        )
    });
    if expected != actual {
        panic!(
            "output differs from {} (run with BLESS=1 to accept):\n--- expected\n{expected}\n--- actual\n{actual}",
            path.display()
        );
    }
}

/// Directives at the top of a test program: `// args: ...` and `// env: K=V ...`.
pub fn directives(text: &str) -> (Vec<String>, Vec<(String, String)>) {
    let mut args = Vec::new();
    let mut env = Vec::new();
    for line in text.lines().take_while(|l| l.starts_with("//")) {
        if let Some(a) = line.strip_prefix("// args:") {
            args.extend(a.split_whitespace().map(String::from));
        } else if let Some(e) = line.strip_prefix("// env:") {
            for kv in e.split_whitespace() {
                let (k, v) = kv.split_once('=').expect("K=V");
                env.push((k.to_string(), v.to_string()));
            }
        }
    }
    (args, env)
}

/// Writes, in `dir`, the constants of a two-core machine as `braid tune` measured them
/// (blocks are threads, so plans with many blocks cost more than on a GPU) and returns
/// the file.
pub fn host_profile(dir: &Path) -> PathBuf {
    let file = dir.join("host.json");
    let per = |v: f64| format!(r#"{{"simple": {v}, "ll": {v}}}"#);
    let profile = format!(
        r#"{{"version": 2, "source": "braid tune, host backend, 2 cores", "fingerprint": null,
        "call_us": {z}, "hop_us": {{"nvlink": {hop}, "pci": {hop}, "net": {hop}}},
        "block_gbps": {}, "efficiency": {}, "slice_bytes": {}, "slice_us": {z},
        "net_post_us": {z}, "block_us": {}, "cores": 2, "copy_gbps": {}, "shared_gbps": {z}}}"#,
        per(0.8),
        per(1.0),
        per(262144.0),
        per(102.0),
        per(6.6),
        z = per(0.0),
        hop = per(60.0),
    );
    std::fs::write(&file, profile).unwrap();
    file
}

/// A Chrome trace file (`BRAID_TRACE`, `braid explain --trace`) and its slices (one per
/// step).
pub fn trace_slices(path: &Path) -> (serde_json::Value, Vec<serde_json::Value>) {
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let slices = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .cloned()
        .collect();
    (t, slices)
}

/// A MASTER_PORT for a job: rank 0's bootstrap listens on MASTER_PORT + 1, so both must
/// be free, and both lie below the kernel's range of automatic ports (from 32768), so no
/// other test's sockets can be given them between this check and rank 0's bind.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let start = 12000 + (std::process::id() % 900) as u16 * 20;
    for _ in 0..2000 {
        let p = 12000 + (start - 12000 + NEXT.fetch_add(2, Ordering::Relaxed)) % 20000;
        let free = |q: u16| std::net::TcpListener::bind(("127.0.0.1", q)).is_ok();
        if free(p) && free(p + 1) {
            return p;
        }
    }
    panic!("no two adjacent free ports below 32000");
}
