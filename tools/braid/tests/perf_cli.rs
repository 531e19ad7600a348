//! `braid perf` on the host backend: the nccl-tests columns, busbw factors, #wrong, JSON.

mod common;

use common::braid;

#[test]
fn the_table_has_one_row_per_size_with_no_wrong_elements() {
    let out = braid(
        &[
            "perf",
            "allreduce",
            "-b",
            "1K",
            "-e",
            "64K",
            "-f",
            "4",
            "--topo",
            "nvswitch:4",
            "-n",
            "1",
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let rows: Vec<Vec<&str>> = out
        .stdout
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows.iter().map(|r| r[0]).collect::<Vec<_>>(),
        ["1024", "4096", "16384", "65536"]
    );
    for r in &rows {
        assert_eq!(r[7 + 1], "0", "#wrong: {r:?}");
        let (algbw, busbw): (f64, f64) = (r[6].parse().unwrap(), r[7].parse().unwrap());
        // allreduce on 4 ranks: busbw = algbw * 2 * 3 / 4 (to the printed precision).
        assert!((busbw - algbw * 1.5).abs() <= 0.002, "{r:?}");
    }
}

#[test]
fn json_lines_name_the_plan_and_a_forced_algorithm_is_used() {
    let out = braid(
        &[
            "perf",
            "allgather",
            "-b",
            "4K",
            "-e",
            "8K",
            "--topo",
            "nvswitch:3",
            "--algo",
            "ring_allgather",
            "--json",
            "-n",
            "1",
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", out.stdout);
    for l in lines {
        assert!(l.starts_with('{') && l.ends_with('}'), "{l}");
        assert!(
            l.contains("\"plan\": \"ring_allgather\"") && l.contains("\"wrong\": 0"),
            "{l}"
        );
    }
}

#[test]
fn nccl_comparison_needs_the_cuda_backend() {
    let out = braid(&["perf", "allreduce", "--vs-nccl", "-e", "1K"], &[]);
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert_eq!(
        braid(&["perf", "allreduce", "-b", "2K", "-e", "1K"], &[]).code,
        2
    );
}

#[test]
fn replicated_plans_stay_correct_and_too_many_replicas_are_refused() {
    let out = braid(
        &[
            "perf",
            "allreduce",
            "-b",
            "64K",
            "-e",
            "64K",
            "--topo",
            "nvswitch:3",
            "--algo",
            "ring_allreduce",
            "--channels",
            "4",
            "-n",
            "1",
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let row: Vec<&str> = out
        .stdout
        .lines()
        .find(|l| !l.starts_with('#'))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(row[8], "0", "#wrong: {row:?}");
    let too_many = braid(
        &[
            "perf",
            "allreduce",
            "-b",
            "64K",
            "-e",
            "64K",
            "--topo",
            "nvswitch:3",
            "--channels",
            "40",
            "-n",
            "1",
        ],
        &[],
    );
    assert_eq!(too_many.code, 1, "{}", too_many.stderr);
    assert!(
        too_many.stderr.contains("at most 32"),
        "{}",
        too_many.stderr
    );
}

#[test]
fn the_cuda_backend_without_a_driver_fails_with_one_line() {
    // Only meaningful where no driver can be loaded (CI); on a GPU machine the sweep runs.
    if braid_cuda::driver_present() {
        return;
    }
    for args in [
        &[
            "perf",
            "allreduce",
            "--backend",
            "cuda",
            "--topo",
            "nvswitch:2",
            "-e",
            "1K",
        ][..],
        &[
            "run",
            "algorithms/ring_allreduce.braid",
            "--backend",
            "cuda",
            "--topo",
            "nvswitch:2",
        ][..],
    ] {
        let out = braid(args, &[]);
        assert_eq!(out.code, 3, "{args:?}: {}", out.stderr);
        let lines: Vec<&str> = out
            .stderr
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect();
        assert_eq!(lines.len(), 1, "{args:?}: {}", out.stderr);
        assert!(lines[0].contains("no CUDA driver"), "{}", lines[0]);
        assert!(out.stdout.is_empty(), "{args:?} printed: {}", out.stdout);
    }
}
