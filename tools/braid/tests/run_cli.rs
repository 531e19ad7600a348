//! `braid run` end to end: programs and plan files on the host backend, both modes,
//! refused plans, and the exit codes of cli.md.

mod common;

use common::braid;

#[test]
fn a_program_runs_correctly_in_both_modes() {
    let out = braid(
        &[
            "run",
            "algorithms/ring_allreduce.braid",
            "--topo",
            "nvswitch:4",
            "--size",
            "100K",
            "--dtype",
            "f16",
            "--op",
            "min",
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("outofplace: correct on every rank"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("inplace: correct on every rank"),
        "{}",
        out.stdout
    );
}

#[test]
fn a_compiled_plan_file_runs_and_a_tampered_one_is_refused() {
    let dir = std::env::temp_dir().join(format!("braid-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("ag.json");
    let p = plan.to_str().unwrap();
    assert_eq!(
        braid(
            &[
                "compile",
                "algorithms/ring_allgather.braid",
                "--topo",
                "nvswitch:3",
                "-o",
                p
            ],
            &[]
        )
        .code,
        0
    );
    let out = braid(
        &[
            "run",
            p,
            "--topo",
            "nvswitch:3",
            "--size",
            "3001",
            "--dtype",
            "u8",
            "--iters",
            "2",
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout.matches("correct on every rank").count(),
        4,
        "{}",
        out.stdout
    );
    // Pointing a step past its buffer must be refused before anything runs.
    let text = std::fs::read_to_string(&plan).unwrap();
    std::fs::write(&plan, text.replacen("\"offset\": 1", "\"offset\": 99", 1)).unwrap();
    let out = braid(&["run", p, "--topo", "nvswitch:3"], &[]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.is_empty(), "nothing ran: {}", out.stdout);
    // A plan for 3 ranks on a 4-rank topology is bad input too.
    std::fs::write(&plan, text).unwrap();
    assert_eq!(braid(&["run", p, "--topo", "nvswitch:4"], &[]).code, 1);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn rooted_collectives_use_the_given_root() {
    let out = braid(
        &[
            "run",
            "algorithms/tree_reduce.braid",
            "--topo",
            "cluster:2x2",
            "--root",
            "3",
            "--op",
            "prod",
            "--dtype",
            "i64",
            "--size",
            "777",
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("correct on every rank"),
        "{}",
        out.stdout
    );
}

#[test]
fn the_cuda_backend_without_a_gpu_is_a_runtime_error() {
    let out = braid(
        &[
            "run",
            "algorithms/ring_allreduce.braid",
            "--topo",
            "nvswitch:2",
            "--backend",
            "cuda",
        ],
        &[],
    );
    assert_eq!(out.code, 3, "{}", out.stderr);
}

#[test]
fn bad_arguments_are_usage_errors() {
    for args in [
        vec![
            "run",
            "algorithms/ring_allreduce.braid",
            "--topo",
            "nvswitch:2",
            "--dtype",
            "f128",
        ],
        vec![
            "run",
            "algorithms/ring_allreduce.braid",
            "--topo",
            "nvswitch:2",
            "--op",
            "xor",
        ],
        vec![
            "run",
            "algorithms/ring_allreduce.braid",
            "--topo",
            "nvswitch:2",
            "--size",
            "12Q",
        ],
    ] {
        let out = braid(&args, &[]);
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
    }
}

#[test]
fn an_msccl_file_runs_even_outside_its_byte_range() {
    // ag-32m-1g.xml is meant for 32 MB to 1 GB; `braid run` runs what it is given.
    let file = "tests/msccl/corpus/azure-msccl-scheduler/ndv4/ag-32m-1g.xml";
    let out = braid(&["run", file, "--topo", "nvswitch:8", "--size", "64K"], &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("correct on every rank"),
        "{}",
        out.stdout
    );
}

#[test]
fn braid_trace_on_the_host_backend_writes_every_steps_measured_times() {
    let dir = std::env::temp_dir().join(format!("braid-host-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("measured.json");
    let plan = dir.join("plan.json");
    let compiled = braid(
        &[
            "compile",
            "algorithms/ring_allreduce.braid",
            "--topo",
            "nvswitch:4",
            "-o",
            plan.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(compiled.code, 0, "{}", compiled.stderr);
    let out = braid(
        &[
            "run",
            plan.to_str().unwrap(),
            "--topo",
            "nvswitch:4",
            "--backend",
            "host",
            "--size",
            "1M",
        ],
        &[("BRAID_TRACE", trace.to_str().unwrap())],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("BRAID_TRACE:"), "{}", out.stderr);
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    let (t, slices) = common::trace_slices(&trace);
    assert_eq!(t["otherData"]["plan"], "ring_allreduce");
    // One slice per step of the plan on every rank (its one replica).
    let steps: usize = p["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["blocks"].as_array().unwrap())
        .map(|b| b["steps"].as_array().unwrap().len())
        .sum();
    assert_eq!(slices.len(), steps, "{t}");
    // On each block's thread the steps follow one another, each a span of time.
    // (rank, block) -> (step, start, end)
    type Spans = Vec<(u64, f64, f64)>;
    let mut by_block: std::collections::BTreeMap<(u64, u64), Spans> = Default::default();
    for e in &slices {
        let key = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
        let step = e["args"]["step"].as_u64().unwrap();
        let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
        assert!(ts >= 0.0 && dur >= 0.0, "{e}");
        by_block.entry(key).or_default().push((step, ts, ts + dur));
    }
    assert_eq!(by_block.keys().map(|k| k.0).max(), Some(3));
    for (key, mut v) in by_block {
        v.sort_by_key(|x| x.0);
        for w in v.windows(2) {
            assert!(w[1].1 >= w[0].2 - 1e-3, "block {key:?}: {w:?}");
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}
