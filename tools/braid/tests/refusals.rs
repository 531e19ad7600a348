//! The CLI never quietly does something other than what was asked: a plan that cannot
//! serve a call is refused (never replaced by another), a --root a plan was not compiled
//! for is refused, sizes that run rounded say so, counts of zero and sizes too small or too
//! large for a call or for the machine are refused before anything runs, with the exit
//! codes of cli.md.

mod common;

use common::{braid, Output};
use std::path::PathBuf;

/// A directory of its own for each test (tests run in parallel).
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("braid-refusals-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Compiles `algorithms/ALG.braid` for `topo` (and `extra` options) into `dir`.
fn compile(dir: &std::path::Path, alg: &str, topo: &str, extra: &[&str]) -> String {
    let plan = dir.join(format!("{alg}.json"));
    let p = plan.to_str().unwrap().to_string();
    let file = format!("algorithms/{alg}.braid");
    let mut args = vec!["compile", file.as_str(), "--topo", topo, "-o", p.as_str()];
    args.extend_from_slice(extra);
    let out = braid(&args, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    p
}

/// Asserts the exit code, that `needles` are all in stderr, and that nothing ran.
fn refused(out: &Output, code: i32, needles: &[&str]) {
    assert_eq!(
        out.code, code,
        "stdout: {}\nstderr: {}",
        out.stdout, out.stderr
    );
    for n in needles {
        assert!(out.stderr.contains(n), "`{n}` not in: {}", out.stderr);
    }
    assert!(out.stdout.is_empty(), "nothing may run: {}", out.stdout);
}

/// The out-of-place rows of a perf table, as words.
fn out_rows(table: &str) -> Vec<Vec<&str>> {
    table
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w[5] == "out")
        .collect()
}

/// The plan names of a perf table's out-of-place rows (the plan, its replicas and
/// protocol end each row).
fn plans_of(table: &str) -> Vec<String> {
    out_rows(table)
        .iter()
        .map(|w| w[w.len() - 3].to_string())
        .collect()
}

#[test]
fn perf_refuses_a_plan_that_cannot_serve_the_call() {
    let dir = scratch("perf-plan");
    let ag = compile(&dir, "ring_allgather", "nvswitch:3", &[]);
    // Another collective: exit 1 (the plan is wrong for the call), never a shipped plan.
    let out = braid(
        &[
            "perf",
            "allreduce",
            "--plan",
            &ag,
            "--topo",
            "nvswitch:3",
            "-b",
            "4K",
            "-e",
            "4K",
        ],
        &[],
    );
    refused(
        &out,
        1,
        &[
            "`ring_allgather` is an allgather",
            "cannot serve `braid perf allreduce`",
        ],
    );
    // Another rank count.
    let out = braid(
        &[
            "perf",
            "allgather",
            "--plan",
            &ag,
            "--topo",
            "nvswitch:4",
            "-b",
            "4K",
            "-e",
            "4K",
        ],
        &[],
    );
    refused(&out, 1, &["is for 3 ranks", "nvswitch:4 has 4"]);
    // A plan valid in place only.
    let inplace = dir.join("inplace.json");
    let p = inplace.to_str().unwrap();
    let c = braid(
        &[
            "compile",
            "algorithms/ring_allreduce.braid",
            "--topo",
            "nvswitch:2",
            "--mode",
            "inplace",
            "-o",
            p,
        ],
        &[],
    );
    assert_eq!(c.code, 0, "{}", c.stderr);
    let out = braid(
        &[
            "perf",
            "allreduce",
            "--plan",
            p,
            "--topo",
            "nvswitch:2",
            "-b",
            "1K",
            "-e",
            "1K",
        ],
        &[],
    );
    refused(&out, 1, &["not valid out of place"]);
    // The plan fits: every row runs it.
    let out = braid(
        &[
            "perf",
            "allgather",
            "--plan",
            &ag,
            "--topo",
            "nvswitch:3",
            "-b",
            "3K",
            "-e",
            "6K",
            "-n",
            "1",
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        plans_of(&out.stdout),
        ["ring_allgather", "ring_allgather"],
        "{}",
        out.stdout
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn perf_runs_a_plan_outside_its_stated_byte_range_and_says_so() {
    let dir = scratch("perf-range");
    let plan = compile(&dir, "ring_allreduce", "nvswitch:2", &[]);
    let text = std::fs::read_to_string(&plan).unwrap();
    let ranged = text.replacen(
        '{',
        "{\n  \"bytes\": {\"min\": 1048576, \"max\": 2097152},",
        1,
    );
    std::fs::write(&plan, ranged).unwrap();
    let out = braid(
        &[
            "perf",
            "allreduce",
            "--plan",
            &plan,
            "--topo",
            "nvswitch:2",
            "-b",
            "1K",
            "-e",
            "2K",
            "-n",
            "1",
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("states it serves 1048576 to 2097151 bytes; 2 of 2 sizes"),
        "{}",
        out.stderr
    );
    assert_eq!(
        plans_of(&out.stdout),
        ["ring_allreduce", "ring_allreduce"],
        "{}",
        out.stdout
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn perf_takes_a_rooted_plans_root_and_refuses_another() {
    let dir = scratch("perf-root");
    let bcast = compile(&dir, "binomial_broadcast", "nvswitch:4", &["--root", "1"]);
    let out = braid(
        &[
            "perf",
            "broadcast",
            "--plan",
            &bcast,
            "--topo",
            "nvswitch:4",
            "-r",
            "2",
            "-e",
            "1K",
        ],
        &[],
    );
    refused(&out, 2, &["-r 2", "compiled for root 1, not root 2"]);
    let out = braid(
        &[
            "perf",
            "broadcast",
            "--plan",
            &bcast,
            "--topo",
            "nvswitch:4",
            "-b",
            "1K",
            "-e",
            "1K",
            "-n",
            "1",
            "--json",
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("\"root\": 1,"), "{}", out.stdout);
    let out = braid(
        &[
            "perf",
            "broadcast",
            "--topo",
            "nvswitch:4",
            "-r",
            "4",
            "-e",
            "1K",
        ],
        &[],
    );
    refused(&out, 2, &["-r 4 is not a rank of nvswitch:4"]);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn an_algorithm_asked_for_wins_over_braid_plans() {
    let dir = scratch("perf-algo");
    let tree = compile(&dir, "tree_allreduce", "nvswitch:4", &[]);
    let out = braid(
        &[
            "perf",
            "allreduce",
            "--algo",
            "ring_allreduce",
            "--topo",
            "nvswitch:4",
            "-b",
            "1K",
            "-e",
            "1K",
            "-n",
            "1",
        ],
        &[("BRAID_PLANS", tree.as_str())],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(plans_of(&out.stdout), ["ring_allreduce"], "{}", out.stdout);
    assert!(
        out.stderr
            .contains("BRAID_PLANS is not used: --algo chooses the plan"),
        "{}",
        out.stderr
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn run_refuses_a_root_the_plan_is_not_for() {
    let dir = scratch("run-root");
    let bcast = compile(&dir, "binomial_broadcast", "nvswitch:4", &["--root", "1"]);
    let out = braid(&["run", &bcast, "--topo", "nvswitch:4", "--root", "2"], &[]);
    refused(&out, 2, &["--root 2", "compiled for root 1, not root 2"]);
    for ok in [&["--root", "1"][..], &[][..]] {
        let mut args = vec![
            "run",
            bcast.as_str(),
            "--topo",
            "nvswitch:4",
            "--size",
            "4K",
        ];
        args.extend_from_slice(ok);
        let out = braid(&args, &[]);
        assert_eq!(out.code, 0, "{ok:?}: {}", out.stderr);
        assert!(
            out.stdout.contains("correct on every rank"),
            "{}",
            out.stdout
        );
    }
    // A collective without a root, and a root that is not a rank.
    let out = braid(
        &[
            "run",
            "algorithms/ring_allreduce.braid",
            "--topo",
            "nvswitch:2",
            "--root",
            "1",
        ],
        &[],
    );
    refused(&out, 2, &["--root 1", "an allreduce, which has no root"]);
    let out = braid(
        &[
            "run",
            "algorithms/tree_reduce.braid",
            "--topo",
            "cluster:2x2",
            "--root",
            "4",
        ],
        &[],
    );
    refused(&out, 2, &["--root 4 is not a rank of cluster:2x2"]);
    // --algorithm means nothing for a plan file.
    let out = braid(
        &["run", &bcast, "--topo", "nvswitch:4", "--algorithm", "x"],
        &[],
    );
    refused(&out, 2, &["--algorithm", "is one plan"]);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn run_refuses_a_mode_the_plan_is_not_valid_for() {
    let dir = scratch("run-mode");
    let plan = dir.join("oop.json");
    let p = plan.to_str().unwrap();
    let c = braid(
        &[
            "compile",
            "algorithms/ring_allreduce.braid",
            "--topo",
            "nvswitch:2",
            "--mode",
            "outofplace",
            "-o",
            p,
        ],
        &[],
    );
    assert_eq!(c.code, 0, "{}", c.stderr);
    let out = braid(&["run", p, "--topo", "nvswitch:2", "--mode", "both"], &[]);
    refused(
        &out,
        1,
        &[
            "not valid in the requested mode inplace",
            "valid outofplace",
        ],
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn rounded_sizes_say_what_runs() {
    // allgather on 3 ranks of f32: multiples of 12 bytes.
    let ag = [
        "run",
        "algorithms/ring_allgather.braid",
        "--topo",
        "nvswitch:3",
        "--mode",
        "outofplace",
    ];
    let mut args = ag.to_vec();
    args.extend(["--size", "1000"]);
    let out = braid(&args, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.stderr.trim(),
        "note: --size 1000 runs as 996 bytes (allgather on 3 ranks moves whole f32 elements \
         per rank: a multiple of 12 bytes)"
    );
    assert!(out.stdout.contains(", 996 bytes, "), "{}", out.stdout);
    let mut args = ag.to_vec();
    args.extend(["--size", "1020"]);
    let out = braid(&args, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr.is_empty(),
        "no notice for an exact size: {}",
        out.stderr
    );
    // perf: one notice for the sweep; the size column shows what runs.
    let out = braid(
        &[
            "perf",
            "allgather",
            "--topo",
            "nvswitch:3",
            "-b",
            "4K",
            "-e",
            "8K",
            "-n",
            "1",
            "-w",
            "0",
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr.contains("note: 2 of 2 sizes run rounded down")
            && out.stderr.contains("4096 runs as 4092 bytes and 1 more"),
        "{}",
        out.stderr
    );
    let sizes: Vec<&str> = out_rows(&out.stdout).iter().map(|w| w[0]).collect();
    assert_eq!(sizes, ["4092", "8184"]);
}

#[test]
fn counts_of_zero_are_refused_but_no_warmup_is_fine() {
    let cases: [&[&str]; 4] = [
        &[
            "run",
            "algorithms/ring_allreduce.braid",
            "--topo",
            "nvswitch:2",
            "--iters",
            "0",
        ],
        &[
            "perf",
            "allreduce",
            "--topo",
            "nvswitch:2",
            "-e",
            "1K",
            "-n",
            "0",
        ],
        &[
            "perf",
            "allreduce",
            "--topo",
            "nvswitch:2",
            "-e",
            "1K",
            "--channels",
            "0",
        ],
        &["rank", "allreduce", "--topo", "nvswitch:2", "--iters", "0"],
    ];
    for args in cases {
        let out = braid(args, &[]);
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
        assert!(
            out.stderr.contains("must be at least 1"),
            "{args:?}: {}",
            out.stderr
        );
        assert!(out.stdout.is_empty(), "{args:?}: {}", out.stdout);
    }
    let out = braid(
        &[
            "perf",
            "allreduce",
            "--topo",
            "nvswitch:2",
            "-b",
            "1K",
            "-e",
            "1K",
            "-n",
            "1",
            "-w",
            "0",
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
}

#[test]
fn sizes_below_one_element_are_refused() {
    let out = braid(
        &[
            "run",
            "algorithms/ring_allreduce.braid",
            "--topo",
            "nvswitch:2",
            "--size",
            "1",
        ],
        &[],
    );
    refused(
        &out,
        2,
        &[
            "--size 1: one f32 element is 4 bytes",
            "give --size 4 or more",
        ],
    );
    let out = braid(
        &[
            "run",
            "algorithms/ring_allgather.braid",
            "--topo",
            "nvswitch:8",
            "--size",
            "16",
        ],
        &[],
    );
    refused(
        &out,
        2,
        &[
            "allgather on 8 ranks needs at least one f32 element",
            "give --size 32 or more",
        ],
    );
    let out = braid(
        &[
            "perf",
            "alltoall",
            "--topo",
            "nvswitch:8",
            "-b",
            "8",
            "-e",
            "1K",
        ],
        &[],
    );
    refused(&out, 2, &["-b 8", "give -b 32 or more"]);
    // Without -b, the sweep starts at the smallest call.
    let out = braid(
        &[
            "perf",
            "alltoall",
            "--topo",
            "nvswitch:8",
            "-e",
            "64",
            "-n",
            "1",
            "--json",
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["rows"][0]["size"], 32, "{}", out.stdout);
}

#[test]
fn sizes_too_large_are_refused_before_allocating() {
    let run = |size: &str| {
        braid(
            &[
                "run",
                "algorithms/ring_allreduce.braid",
                "--topo",
                "nvswitch:8",
                "--size",
                size,
            ],
            &[],
        )
    };
    // Past 64 bits: a usage error from the parser.
    refused(&run("18446744073709551616"), 2, &["too large"]);
    refused(&run("16777216T"), 2, &["too large"]);
    // A buffer no machine can hold.
    refused(
        &run("18446744073709551615"),
        2,
        &["more than any machine can allocate"],
    );
    // More than this machine has: a run-time failure, named.
    if std::path::Path::new("/proc/meminfo").exists() {
        refused(
            &run("1T"),
            3,
            &["--size 1T", "of host memory", "MemAvailable"],
        );
        let out = braid(
            &["perf", "allreduce", "--topo", "nvswitch:8", "-e", "1T"],
            &[],
        );
        refused(&out, 3, &["-e 1T", "MemAvailable"]);
        let out = braid(
            &["rank", "allreduce", "--topo", "nvswitch:2", "--size", "1T"],
            &[
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                ("MASTER_ADDR", "127.0.0.1"),
                ("MASTER_PORT", "9"),
                ("BRAID_SECRET", "00112233445566778899aabbccddeeff"),
            ],
        );
        refused(&out, 3, &["--size 1T", "MemAvailable"]);
    }
}

/// A knob of the CUDA backend with a value it cannot take is refused with a usage error
/// (exit 2) naming it, before any GPU is looked for.
#[test]
fn a_bad_flat_launch_knob_is_refused_before_anything_runs() {
    for (var, v, why) in [
        ("BRAID_FLAT_BLOCKS", "0", "expected a block count"),
        ("BRAID_FLAT_BLOCKS", "lots", "expected a block count"),
        ("BRAID_FLAT_BLOCKS", "99999", "expected a block count"),
        ("BRAID_FLAT_ARGS", "small", "expected packed or full"),
    ] {
        let out = braid(
            &[
                "run",
                "algorithms/ring_allreduce.braid",
                "--topo",
                "nvswitch:2",
                "--backend",
                "cuda",
            ],
            &[(var, v)],
        );
        refused(&out, 2, &[var, why]);
    }
}
