//! `braid compile` end to end: where the plan goes, exit codes (cli.md), and that nothing
//! is written when compilation fails.

mod common;

use braid_plan::Plan;
use common::root;
use std::path::{Path, PathBuf};

/// Runs `braid ARGS` in the workspace root.
fn braid(args: &[&str]) -> common::Output {
    common::braid(args, &[])
}

/// A fresh scratch directory for one test.
fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("compile-{test}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn output_file_holds_a_verified_plan_and_stdout_a_summary() {
    let dir = scratch("output");
    let plan_path = dir.join("ring.plan.json");
    let out = braid(&[
        "compile",
        "algorithms/ring_allreduce.braid",
        "--topo",
        "nvswitch:8",
        "-o",
        s(&plan_path),
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.starts_with("ok: compiled ring_allreduce"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("outofplace + inplace"),
        "{}",
        out.stdout
    );
    let text = std::fs::read_to_string(&plan_path).unwrap();
    let plan = Plan::from_json(&text).expect("the file is a plan");
    braid_plan::verify(&plan).expect("the written plan verifies");
    assert_eq!(plan.to_json_pretty(), text, "the file is in canonical form");
    assert_eq!(plan.topology.name, "nvswitch:8");
}

#[test]
fn without_output_the_json_goes_to_stdout() {
    let out = braid(&[
        "compile",
        "algorithms/ring_allgather.braid",
        "--topo",
        "pcie:4",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let plan = Plan::from_json(&out.stdout).expect("stdout is a plan");
    assert_eq!(plan.name, "ring_allgather");
    assert_eq!(plan.n_ranks, 4);
}

#[test]
fn explain_and_dot_render_the_plan() {
    let dir = scratch("explain");
    let dot = dir.join("tree.dot");
    let out = braid(&[
        "compile",
        "algorithms/tree_allreduce.braid",
        "--topo",
        "nvswitch:4",
        "--explain",
        "--dot",
        s(&dot),
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.starts_with("plan tree_allreduce"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("line "), "steps show their source line");
    let graph = std::fs::read_to_string(&dot).unwrap();
    assert!(graph.starts_with("digraph"), "{graph}");
}

#[test]
fn rooted_collectives_use_the_given_root() {
    let out = braid(&[
        "compile",
        "algorithms/binomial_broadcast.braid",
        "--topo",
        "cluster:2x8",
        "--root",
        "5",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let plan = Plan::from_json(&out.stdout).unwrap();
    assert_eq!(plan.root, Some(5));
    let bad = braid(&[
        "compile",
        "algorithms/binomial_broadcast.braid",
        "--topo",
        "nvswitch:4",
        "--root",
        "4",
    ]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
}

#[test]
fn mode_restricts_the_plan() {
    let out = braid(&[
        "compile",
        "algorithms/ring_allreduce.braid",
        "--topo",
        "nvswitch:4",
        "--mode",
        "outofplace",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let plan = Plan::from_json(&out.stdout).unwrap();
    assert!(plan.modes.out_of_place && !plan.modes.in_place);
    let none = braid(&[
        "compile",
        "algorithms/direct_alltoall.braid",
        "--topo",
        "nvswitch:4",
        "--mode",
        "inplace",
    ]);
    assert_eq!(none.code, 1, "{}", none.stderr);
}

#[test]
fn a_file_with_several_algorithms_needs_algorithm() {
    let dir = scratch("several");
    let file = dir.join("two.braid");
    let ring = std::fs::read_to_string(root().join("algorithms/ring_allgather.braid")).unwrap();
    let tree = std::fs::read_to_string(root().join("algorithms/tree_allreduce.braid")).unwrap();
    std::fs::write(&file, format!("{ring}\n{tree}")).unwrap();
    let out = braid(&["compile", s(&file), "--topo", "nvswitch:4"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("--algorithm"), "{}", out.stderr);
    assert!(out.stderr.contains("ring_allgather") && out.stderr.contains("tree_allreduce"));
    let one = braid(&[
        "compile",
        s(&file),
        "--topo",
        "nvswitch:4",
        "--algorithm",
        "tree_allreduce",
    ]);
    assert_eq!(one.code, 0, "{}", one.stderr);
    assert_eq!(Plan::from_json(&one.stdout).unwrap().name, "tree_allreduce");
}

#[test]
fn failures_write_nothing() {
    let dir = scratch("failures");
    let plan_path = dir.join("never.json");
    // `where NODES >= 2` does not hold on one node.
    let out = braid(&[
        "compile",
        "algorithms/hierarchical_allreduce.braid",
        "--topo",
        "nvswitch:8",
        "-o",
        s(&plan_path),
    ]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("hierarchical_allreduce.braid:"),
        "{}",
        out.stderr
    );
    assert!(!plan_path.exists());
    // A program that does not compute its collective fails the check first.
    let wrong = dir.join("wrong.braid");
    std::fs::write(
        &wrong,
        "algorithm half : allgather {\n    for r in 0 .. N { copy out[r][r] <- in[r][0]; }\n}\n",
    )
    .unwrap();
    let out = braid(&[
        "compile",
        s(&wrong),
        "--topo",
        "nvswitch:2",
        "-o",
        s(&plan_path),
    ]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("wrong.braid:"), "{}", out.stderr);
    assert!(!plan_path.exists());
    let leftovers: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(
        leftovers.len(),
        1,
        "only the program remains: {leftovers:?}"
    );
}

#[test]
fn channel_hints_beyond_the_runtime_are_input_errors() {
    let dir = scratch("channels");
    let file = dir.join("wide.braid");
    std::fs::write(
        &file,
        "algorithm wide : allgather {\n    channels 4;\n    for r in 0 .. N { copy out[r][r] <- in[r][0] @ch(8); }\n    for r in 0 .. N { copy out[r + 1][r] <- out[r][r]; }\n}\n",
    )
    .unwrap();
    let out = braid(&["compile", s(&file), "--topo", "nvswitch:2"]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("@ch(8)"), "{}", out.stderr);
    assert!(out.stderr.contains("wide.braid:3:"), "{}", out.stderr);
}
