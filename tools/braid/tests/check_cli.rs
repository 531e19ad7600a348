//! `braid check` and `braid topo` end to end: output lines, exit codes (cli.md), files.

mod common;

use common::braid;

#[test]
fn correct_program_prints_one_ok_line_per_algorithm() {
    let out = braid(
        &[
            "check",
            "algorithms/ring_allreduce.braid",
            "--topo",
            "nvswitch:8",
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{}", out.stdout);
    assert!(lines[0].starts_with("ok ring_allreduce"), "{}", lines[0]);
    assert!(lines[0].contains("outofplace + inplace"), "{}", lines[0]);
}

#[test]
fn rooted_collectives_are_checked_for_every_root_unless_one_is_given() {
    let all = braid(
        &[
            "check",
            "algorithms/binomial_broadcast.braid",
            "--topo",
            "nvswitch:5",
        ],
        &[],
    );
    assert_eq!(all.code, 0, "{}", all.stderr);
    assert!(all.stdout.contains("roots 0-4"), "{}", all.stdout);
    let one = braid(
        &[
            "check",
            "algorithms/binomial_broadcast.braid",
            "--topo",
            "nvswitch:5",
            "--root",
            "3",
        ],
        &[],
    );
    assert!(one.stdout.contains("roots 3"), "{}", one.stdout);
    let bad = braid(
        &[
            "check",
            "algorithms/binomial_broadcast.braid",
            "--topo",
            "nvswitch:5",
            "--root",
            "5",
        ],
        &[],
    );
    assert_eq!(bad.code, 2, "{}", bad.stderr);
}

#[test]
fn algorithms_whose_conditions_fail_are_skipped_unless_none_applies() {
    let dir = std::env::temp_dir().join(format!("braid-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("two.braid");
    std::fs::write(
        &file,
        "algorithm pow2_only : allreduce where N & (N - 1) == 0 {
             mode outofplace;
             for r in 0 .. N { copy out[r][0] <- in[r][0]; }
             for r in 0 .. N { for p in 1 .. N { reduce out[r][0] <- in[r + p][0]; } }
         }
         algorithm any : allreduce {
             mode outofplace;
             for r in 0 .. N { copy out[r][0] <- in[r][0]; }
             for r in 0 .. N { for p in 1 .. N { reduce out[r][0] <- in[r + p][0]; } }
         }",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let out = braid(&["check", f, "--topo", "nvswitch:6"], &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("skipped pow2_only"), "{}", out.stdout);
    assert!(out.stdout.contains("ok any"), "{}", out.stdout);
    let only = braid(
        &[
            "check",
            f,
            "--topo",
            "nvswitch:6",
            "--algorithm",
            "pow2_only",
        ],
        &[],
    );
    assert_eq!(only.code, 1);
    assert!(only.stderr.contains("does not apply"), "{}", only.stderr);
    let none = braid(
        &[
            "check",
            "algorithms/hierarchical_allreduce.braid",
            "--topo",
            "nvswitch:8",
        ],
        &[],
    );
    assert_eq!(none.code, 1, "{}", none.stdout);
    assert!(
        none.stderr.contains("no algorithm applies"),
        "{}",
        none.stderr
    );
    let missing = braid(
        &["check", f, "--topo", "nvswitch:6", "--algorithm", "nope"],
        &[],
    );
    assert_eq!(missing.code, 1);
    assert!(
        missing.stderr.contains("pow2_only, any"),
        "{}",
        missing.stderr
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn mode_selection_checks_only_the_requested_mode() {
    let out = braid(
        &[
            "check",
            "tests/diagnostics/postcondition_inplace_only.braid",
            "--topo",
            "nvswitch:2",
            "--mode",
            "outofplace",
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains(": outofplace;"), "{}", out.stdout);
    let a2a = braid(
        &[
            "check",
            "algorithms/direct_alltoall.braid",
            "--topo",
            "nvswitch:4",
            "--mode",
            "inplace",
        ],
        &[],
    );
    assert_eq!(a2a.code, 1, "alltoall has no in-place mode: {}", a2a.stdout);
}

#[test]
fn stats_report_the_dataflow_graph() {
    let out = braid(
        &[
            "check",
            "algorithms/ring_allreduce.braid",
            "--topo",
            "nvswitch:4",
            "--stats",
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    // Ring allreduce on 4 ranks: 4 local copies, 2 * 3 * 4 transfers; the chain of one
    // chunk is copy + 3 reduce + 3 copy steps = 7 deep; 4 transfers run at once.
    assert!(
        out.stdout.contains("operations 28, transfers 24,"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("critical path 7, max parallel width 4"),
        "{}",
        out.stdout
    );
}

#[test]
fn dot_is_written_only_when_the_check_passes() {
    let dir = std::env::temp_dir().join(format!("braid-dot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.dot");
    let out = braid(
        &[
            "check",
            "algorithms/tree_allreduce.braid",
            "--topo",
            "nvswitch:4",
            "--dot",
            good.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let dot = std::fs::read_to_string(&good).unwrap();
    assert!(dot.starts_with("digraph \"tree_allreduce\""), "{dot}");
    assert!(dot.contains("->"), "{dot}");
    let bad = dir.join("bad.dot");
    let out = braid(
        &[
            "check",
            "tests/diagnostics/undefined_read.braid",
            "--topo",
            "nvswitch:4",
            "--dot",
            bad.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.code, 1);
    assert!(!bad.exists(), "a failed check must not leave a file behind");
    let leftovers: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "no temporary files remain");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(
        braid(&["check", "algorithms/ring_allreduce.braid"], &[]).code,
        2,
        "missing --topo"
    );
    assert_eq!(
        braid(
            &[
                "check",
                "algorithms/ring_allreduce.braid",
                "--topo",
                "nvswitch:4",
                "--frobnicate"
            ],
            &[]
        )
        .code,
        2
    );
    let bad_topo = braid(
        &[
            "check",
            "algorithms/ring_allreduce.braid",
            "--topo",
            "mesh:4",
        ],
        &[],
    );
    assert_eq!(bad_topo.code, 2, "{}", bad_topo.stderr);
    assert!(
        bad_topo.stderr.contains("nvswitch:N"),
        "{}",
        bad_topo.stderr
    );
}

#[test]
fn unreadable_program_is_an_input_error() {
    let out = braid(
        &["check", "no/such/file.braid", "--topo", "nvswitch:4"],
        &[],
    );
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("no/such/file.braid"), "{}", out.stderr);
}

#[test]
fn topo_prints_a_file_that_reads_back() {
    let out = braid(&["topo", "cluster:2x4"], &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("NET"), "{}", out.stdout);
    let dir = std::env::temp_dir().join(format!("braid-topo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("c.topo");
    std::fs::write(&file, &out.stdout).unwrap();
    let again = braid(&["topo", file.to_str().unwrap()], &[]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    let body = |s: &str| {
        s.lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(body(&out.stdout), body(&again.stdout));
    // The file drives check like a preset: G = 4, NODES = 2.
    let chk = braid(
        &[
            "check",
            "algorithms/hierarchical_allreduce.braid",
            "--topo",
            file.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(chk.code, 0, "{}", chk.stderr);
    assert!(chk.stdout.contains("N=8 NODES=2 G=4"), "{}", chk.stdout);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn detect_without_a_gpu_is_a_runtime_error_with_a_clear_message() {
    if braid_detect_present() {
        eprintln!("skipped: a CUDA driver is present on this machine");
        return;
    }
    let out = braid(&["topo", "detect"], &[]);
    assert_eq!(out.code, 3);
    assert!(
        out.stderr.contains("no CUDA driver found"),
        "{}",
        out.stderr
    );
}

fn braid_detect_present() -> bool {
    [
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "/usr/lib64/libcuda.so.1",
    ]
    .iter()
    .any(|p| std::path::Path::new(p).exists())
}
