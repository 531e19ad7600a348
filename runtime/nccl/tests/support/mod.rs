//! Building and running C programs against the library `cargo test` just built.
//!
//! Programs link against `libnccl.so` in one directory and find `libnccl.so.2` in
//! another at run time: one that runs proves the library carries NCCL's soname.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub struct CLib {
    /// `libnccl.so` for the linker.
    pub link_dir: PathBuf,
    /// Only `libnccl.so.2`, for the loader.
    pub run_dir: PathBuf,
    pub work: PathBuf,
}

/// The shared object cargo built next to this test (target/<profile>/deps).
pub fn built_library() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let deps = exe.parent().expect("the test's directory");
    let lib = deps.join("libnccl.so");
    assert!(lib.is_file(), "cargo did not build {}", lib.display());
    lib
}

pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A fresh directory for one test's programs.
pub fn setup(name: &str) -> CLib {
    let lib = built_library();
    let work = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("capi-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let link_dir = work.join("link");
    let run_dir = work.join("run");
    std::fs::create_dir_all(&link_dir).unwrap();
    std::fs::create_dir_all(&run_dir).unwrap();
    std::os::unix::fs::symlink(&lib, link_dir.join("libnccl.so")).unwrap();
    std::os::unix::fs::symlink(&lib, run_dir.join("libnccl.so.2")).unwrap();
    CLib {
        link_dir,
        run_dir,
        work,
    }
}

fn compiler() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

fn check(what: &str, out: Output) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl CLib {
    /// Compiles `tests/c/<src>` into a program linked with the library.
    pub fn program(&self, src: &str) -> PathBuf {
        let out = self.work.join(src.trim_end_matches(".c"));
        let r = Command::new(compiler())
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
            .arg(crate_dir().join("include"))
            .arg(crate_dir().join("tests/c").join(src))
            .arg("-o")
            .arg(&out)
            .arg("-L")
            .arg(&self.link_dir)
            .arg("-lnccl")
            .arg(format!("-Wl,-rpath,{}", self.run_dir.display()))
            .args(["-lpthread", "-lm"])
            .output()
            .expect("a C compiler (cc, or CC)");
        check(&format!("compiling {src}"), r);
        out
    }

    /// Compiles `tests/c/<src>` into a shared library of its own.
    pub fn shared(&self, src: &str, name: &str) -> PathBuf {
        let out = self.work.join(name);
        let r = Command::new(compiler())
            .args([
                "-std=c11",
                "-D_GNU_SOURCE",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-shared",
                "-fPIC",
            ])
            .arg(crate_dir().join("tests/c").join(src))
            .arg("-o")
            .arg(&out)
            .arg("-lpthread")
            .output()
            .expect("a C compiler (cc, or CC)");
        check(&format!("compiling {src}"), r);
        out
    }
}

/// Runs `program` with a clean Braid/NCCL environment plus `env`, killing it (and
/// failing) after `limit`.
pub fn run(program: &Path, args: &[&str], env: &[(&str, &str)], limit: Duration) -> Output {
    // Output goes to files (a full pipe would stall the program while we wait).
    let base = program.with_extension(format!("{}.{}", args.join("_"), std::process::id()));
    let (out_path, err_path) = (base.with_extension("stdout"), base.with_extension("stderr"));
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap());
    for (k, _) in std::env::vars() {
        if k.starts_with("BRAID_") || k.starts_with("NCCL_") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().copied());
    let mut child = cmd.spawn().expect("start the program");
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{} {args:?} hung (killed after {limit:?}):\n{}{}",
                program.display(),
                std::fs::read_to_string(&out_path).unwrap_or_default(),
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: std::fs::read(&out_path).unwrap_or_default(),
        stderr: std::fs::read(&err_path).unwrap_or_default(),
    }
}

/// The program's stdout, after checking that it exited 0.
pub fn succeeded(what: &str, out: Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
