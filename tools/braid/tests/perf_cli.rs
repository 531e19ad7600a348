//! `braid perf` on the host backend: the nccl-tests columns, busbw factors, #wrong, modes,
//! the roofline, the JSON report and the plot.

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
            "--runs",
            "1",
            "-w",
            "0",
            "--mode",
            "outofplace",
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
        assert_eq!(r[5], "out", "mode: {r:?}");
        assert_eq!(r[9], "0", "#wrong: {r:?}");
        let (algbw, busbw): (f64, f64) = (r[7].parse().unwrap(), r[8].parse().unwrap());
        // allreduce on 4 ranks: busbw = algbw * 2 * 3 / 4 (to the printed precision).
        assert!((busbw - algbw * 1.5).abs() <= 0.002, "{r:?}");
    }
}

#[test]
fn the_json_report_names_the_plan_and_a_forced_algorithm_is_used() {
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
            "2",
            "--runs",
            "3",
            "-w",
            "1",
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v: serde_json::Value =
        serde_json::from_str(&out.stdout).expect("one JSON document on stdout");
    assert_eq!(v["timing"], "back-to-back");
    assert_eq!(
        (
            v["iters"].as_u64(),
            v["runs"].as_u64(),
            v["warmup"].as_u64()
        ),
        (Some(2), Some(3), Some(1))
    );
    let rows = v["rows"].as_array().unwrap();
    // Two sizes, both modes.
    assert_eq!(rows.len(), 4, "{}", out.stdout);
    let modes: Vec<&str> = rows.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["outofplace", "inplace", "outofplace", "inplace"]);
    for r in rows {
        assert_eq!(r["plan"], "ring_allgather", "{r}");
        assert_eq!(r["wrong"], 0, "{r}");
        assert_eq!(r["runs_us"].as_array().unwrap().len(), 3, "{r}");
        let runs: Vec<f64> = r["runs_us"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        let mut sorted = runs.clone();
        sorted.sort_by(f64::total_cmp);
        assert_eq!(
            r["time_us"].as_f64().unwrap(),
            sorted[1],
            "the median run: {r}"
        );
        let (roof, eff) = (
            r["roofline_us"].as_f64().unwrap(),
            r["efficiency"].as_f64().unwrap(),
        );
        assert!(roof > 0.0 && eff > 0.0, "{r}");
    }
}

#[test]
fn json_and_plot_files_are_written_beside_the_table() {
    let dir = std::env::temp_dir().join(format!("braid-perf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, svg) = (dir.join("r.json"), dir.join("r.svg"));
    let out = braid(
        &[
            "perf",
            "reduce_scatter",
            "-b",
            "3K",
            "-e",
            "12K",
            "--topo",
            "nvswitch:3",
            "-n",
            "2",
            "--runs",
            "1",
            "-w",
            "0",
            "--sync",
            "--json",
            json.to_str().unwrap(),
            "--plot",
            svg.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("sync(us)") && out.stdout.contains("roof(us)"),
        "{}",
        out.stdout
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2 * 3, "three sizes, two modes");
    assert!(rows
        .iter()
        .all(|r| r["sync_time_us"].as_f64().is_some_and(|t| t > 0.0)));
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(
        plot.starts_with("<svg") && plot.contains("braid, in place") && plot.contains("roofline"),
        "{plot}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn modes_graph_and_procs_say_what_they_cannot_do() {
    let inplace_alltoall = braid(&["perf", "alltoall", "--mode", "inplace", "-e", "1K"], &[]);
    assert_eq!(inplace_alltoall.code, 2, "{}", inplace_alltoall.stderr);
    assert!(
        inplace_alltoall.stderr.contains("no in-place mode"),
        "{}",
        inplace_alltoall.stderr
    );
    let graph = braid(&["perf", "allreduce", "--graph", "-e", "1K"], &[]);
    assert_eq!(graph.code, 2, "{}", graph.stderr);
    assert!(
        graph.stderr.contains("--graph") && graph.stderr.contains("needs --backend cuda"),
        "{}",
        graph.stderr
    );
    assert!(graph.stdout.is_empty());
    let procs = braid(
        &[
            "perf",
            "allreduce",
            "--procs",
            "--backend",
            "cuda",
            "-e",
            "1K",
        ],
        &[],
    );
    assert_eq!(procs.code, 2, "{}", procs.stderr);
    assert!(
        procs.stderr.contains("host backend only so far"),
        "{}",
        procs.stderr
    );
    // Both modes for alltoall time out of place only.
    let out = braid(
        &[
            "perf",
            "alltoall",
            "--topo",
            "nvswitch:2",
            "-b",
            "1K",
            "-e",
            "1K",
            "-n",
            "1",
            "--runs",
            "1",
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout.lines().filter(|l| !l.starts_with('#')).count(),
        1,
        "{}",
        out.stdout
    );
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
    assert_eq!(row[9], "0", "#wrong: {row:?}");
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

/// BRAID_ALGO / NCCL_ALGO limit the plans the policy may take, with NCCL's syntax.
#[test]
fn algorithm_filters_choose_and_exclude_plans() {
    let plan_of = |env: &[(&str, &str)]| {
        let out = braid(
            &[
                "perf",
                "allreduce",
                "--topo",
                "nvswitch:4",
                "-b",
                "1K",
                "-e",
                "1K",
                "-n",
                "1",
                "--runs",
                "1",
                "-w",
                "0",
                "--json",
            ],
            env,
        );
        assert_eq!(out.code, 0, "{env:?}: {}", out.stderr);
        let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        v["rows"][0]["plan"].as_str().unwrap().to_string()
    };
    let default = plan_of(&[]);
    assert_eq!(default, "one_shot_allreduce");
    assert_eq!(plan_of(&[("BRAID_ALGO", "ring")]), "ring_allreduce");
    assert_eq!(plan_of(&[("NCCL_ALGO", "Tree")]), "tree_allreduce");
    // `^one_shot` excludes every plan whose name has the word.
    assert!(!plan_of(&[("NCCL_ALGO", "^one_shot")]).starts_with("one_shot"));
    // BRAID_ALGO wins over NCCL_ALGO.
    assert_eq!(
        plan_of(&[("NCCL_ALGO", "tree"), ("BRAID_ALGO", "ring")]),
        "ring_allreduce"
    );
    let none = braid(
        &[
            "perf",
            "allreduce",
            "--topo",
            "nvswitch:4",
            "-b",
            "1K",
            "-e",
            "1K",
            "-n",
            "1",
        ],
        &[("BRAID_ALGO", "nvls")],
    );
    assert_eq!(none.code, 3, "{}", none.stderr);
    assert!(
        none.stderr.contains("BRAID_ALGO=nvls excludes"),
        "{}",
        none.stderr
    );
    let bad = braid(&["perf", "allreduce", "-e", "1K"], &[("BRAID_ALGO", "^")]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("BRAID_ALGO=^"), "{}", bad.stderr);
}

/// --procs: one process per rank joins through the bootstrap and measures; the parent
/// reports the same rows as threads would, with the same plans, and a rank's failure
/// with its message.
#[test]
fn one_process_per_rank_measures_the_same_calls() {
    let args = |procs: bool| {
        let mut a = vec![
            "perf",
            "reduce_scatter",
            "--topo",
            "nvswitch:3",
            "-b",
            "3K",
            "-e",
            "12K",
            "-f",
            "4",
            "-n",
            "2",
            "--runs",
            "2",
            "-w",
            "1",
            "--json",
        ];
        if procs {
            a.push("--procs");
        }
        a
    };
    let run = |procs: bool| {
        let out = braid(&args(procs), &[]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        serde_json::from_str::<serde_json::Value>(&out.stdout).unwrap()
    };
    let (threads, procs) = (run(false), run(true));
    assert_eq!(procs["timing"], "back-to-back, one process per rank");
    let (a, b) = (
        threads["rows"].as_array().unwrap(),
        procs["rows"].as_array().unwrap(),
    );
    assert_eq!(b.len(), 4, "two sizes, both modes");
    for (x, y) in a.iter().zip(b) {
        for k in ["size", "count", "mode", "plan", "wrong"] {
            assert_eq!(x[k], y[k], "{k}: {x} / {y}");
        }
        assert_eq!(y["runs_us"].as_array().unwrap().len(), 2);
        assert!(y["time_us"].as_f64().unwrap() > 0.0);
    }
    let failed = braid(&args(true), &[("BRAID_ALGO", "nvls")]);
    assert_eq!(failed.code, 3, "{}", failed.stderr);
    assert!(
        failed.stderr.contains("--procs: rank")
            && failed.stderr.contains("BRAID_ALGO=nvls excludes"),
        "{}",
        failed.stderr
    );
}

/// With `BRAID_PROFILE` (a profile `braid tune` measured on the host backend), the host
/// backend's calls choose by the cost model: the plan `braid perf` runs, in threads and in
/// processes, is the one `braid explain` selects with that profile, not the rules' choice.
#[test]
fn with_a_host_profile_calls_choose_what_explain_selects() {
    let dir = std::env::temp_dir().join(format!("braid-perf-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = common::host_profile(&dir);
    let path = file.to_str().unwrap();
    let ex = braid(
        &[
            "explain",
            "allreduce",
            "--size",
            "8",
            "--topo",
            "nvswitch:4",
            "--profile",
            path,
        ],
        &[],
    );
    assert_eq!(ex.code, 0, "{}", ex.stderr);
    let selected = ex.stdout.lines().next().unwrap();
    let want: Vec<&str> = selected
        .strip_prefix("selected: ")
        .unwrap()
        .split_whitespace()
        .collect();
    // explain's price for its choice: `  PLAN xR PROTO   123.45 us  selected: ...`.
    let price: f64 = ex
        .stdout
        .lines()
        .find(|l| l.contains("selected: the fastest"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{}", ex.stdout));
    let ran = |procs: bool, env: &[(&str, &str)]| {
        let mut a = vec![
            "perf",
            "allreduce",
            "-b",
            "8",
            "-e",
            "8",
            "--topo",
            "nvswitch:4",
            "-n",
            "1",
            "--runs",
            "1",
            "-w",
            "0",
            "--mode",
            "outofplace",
            "--json",
            "--predict",
        ];
        if procs {
            a.push("--procs");
        }
        let out = braid(&a, env);
        assert_eq!(out.code, 0, "{}", out.stderr);
        let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        let r = &v["rows"][0];
        assert_eq!(r["wrong"], 0, "{r}");
        // The model's price for what ran, with --procs too: explain's, with the profile.
        assert!(r["predicted_us"].as_f64().is_some(), "{r}");
        if !env.is_empty() {
            let p = r["predicted_us"].as_f64().unwrap();
            assert!((p - price).abs() < 0.01, "{r} against {price}");
        }
        (
            r["plan"].as_str().unwrap().to_string(),
            format!("x{}", r["replicas"]),
            r["protocol"].as_str().unwrap().to_string(),
        )
    };
    let model = [("BRAID_PROFILE", path)];
    for procs in [false, true] {
        let (plan, replicas, protocol) = ran(procs, &model);
        assert_eq!(
            [plan.as_str(), replicas.as_str(), protocol.as_str()],
            want[..],
            "procs {procs}: {selected}"
        );
    }
    // Without the profile the rules choose, and here they choose otherwise: the check
    // above could not pass by the rules alone.
    let (rules, _, _) = ran(false, &[]);
    assert_ne!(rules, want[0], "the rules chose {rules} too");
    std::fs::remove_dir_all(&dir).ok();
}

/// Ranks as threads and as processes (`--procs`: each rank sends its steps to the
/// command in its lines) alike.
#[test]
fn braid_trace_keeps_the_sweeps_last_call_on_every_rank() {
    let dir = std::env::temp_dir().join(format!("braid-perf-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut steps = None;
    for procs in [false, true] {
        let trace = dir.join(format!("last-{procs}.json"));
        let mut a = vec![
            "perf",
            "allgather",
            "--topo",
            "nvswitch:4",
            "--backend",
            "host",
            "-b",
            "4K",
            "-e",
            "64K",
            "-f",
            "16",
            "-n",
            "3",
            "-w",
            "1",
            "--mode",
            "outofplace",
            "--algo",
            "ring_allgather",
        ];
        if procs {
            a.push("--procs");
        }
        let out = braid(&a, &[("BRAID_TRACE", trace.to_str().unwrap())]);
        assert_eq!(out.code, 0, "procs {procs}: {}", out.stderr);
        let (t, slices) = common::trace_slices(&trace);
        assert_eq!(t["otherData"]["plan"], "ring_allgather");
        // Every rank's steps are there: 4 ranks, each with slices.
        let ranks: std::collections::BTreeSet<u64> =
            slices.iter().map(|e| e["pid"].as_u64().unwrap()).collect();
        assert_eq!(
            ranks.into_iter().collect::<Vec<_>>(),
            [0, 1, 2, 3],
            "procs {procs}"
        );
        // One call's steps (not the sweep's): each of a rank's steps once, and as many
        // from processes as from threads.
        match steps {
            None => steps = Some(slices.len()),
            Some(n) => assert_eq!(slices.len(), n, "procs {procs}"),
        }
        let mut seen = std::collections::BTreeSet::new();
        for e in &slices {
            let key = (
                e["pid"].as_u64().unwrap(),
                e["tid"].as_u64().unwrap(),
                e["args"]["step"].as_u64().unwrap(),
            );
            assert!(seen.insert(key), "procs {procs}: {key:?} twice");
        }
        let measured = t["otherData"]["measured_us"].as_f64().unwrap();
        assert!(measured > 0.0, "{measured}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}
