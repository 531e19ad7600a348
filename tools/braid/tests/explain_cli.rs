//! `braid explain`: the selected plan on the first line, then every candidate with its
//! predicted time or why it was excluded; user plans compete with shipped ones; the
//! trace is a Chrome trace of the selected plan.

mod common;

use common::{braid, Output};

#[test]
fn the_first_line_names_the_selection_and_every_candidate_follows() {
    let out = braid(
        &[
            "explain",
            "allreduce",
            "--size",
            "64M",
            "--topo",
            "nvswitch:8",
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    let first: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(first[0], "selected:", "{}", out.stdout);
    assert_eq!(first.len(), 4, "selected: NAME xR PROTOCOL: {}", lines[0]);
    assert!(
        first[2].starts_with('x') && ["simple", "ll"].contains(&first[3]),
        "{}",
        lines[0]
    );
    // The selection is the first candidate.
    assert!(
        lines[1].contains(first[1]) && lines[1].contains("selected"),
        "{}",
        out.stdout
    );
    let times: Vec<f64> = lines[1..]
        .iter()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let i = w.iter().position(|x| *x == "us")?;
            w[i - 1].parse().ok()
        })
        .collect();
    assert!(times.len() >= 5, "{}", out.stdout);
    // The others fastest first; the selection the fastest, or within the runtime's tie
    // margin of it (it then has the fewest blocks).
    assert!(times[1..].windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    let fastest = times.iter().copied().fold(f64::INFINITY, f64::min);
    assert!(times[0] <= fastest * 1.02 + 1e-9, "{times:?}");
    // 64 MiB inside an NVSwitch node: a full-bandwidth plan (a ring, two-shot, the
    // double binary tree), not a latency one nor the single tree.
    assert!(
        !first[1].contains("one_shot")
            && !first[1].contains("halving")
            && first[1] != "tree_allreduce",
        "{}",
        out.stdout
    );
}

#[test]
fn a_user_plan_competes_and_exclusions_say_why() {
    let out = braid(
        &[
            "explain",
            "allreduce",
            "--size",
            "4K",
            "--topo",
            "nvswitch:4",
            "--mode",
            "inplace",
        ],
        &[("BRAID_PLANS", "tests/plans/good/ring_allreduce_4.json")],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let user: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.contains("user tests/plans/good/ring_allreduce_4.json"))
        .collect();
    assert_eq!(user.len(), 1, "{}", out.stdout);
    assert!(user[0].contains(" us "), "{}", user[0]);
    // A plan for other sizes or modes is listed as excluded with its reason.
    let out = braid(
        &[
            "explain",
            "alltoall",
            "--size",
            "4K",
            "--topo",
            "nvswitch:4",
            "--mode",
            "inplace",
        ],
        &[],
    );
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("no in-place mode"), "{}", out.stderr);
}

#[test]
fn the_trace_is_the_selected_plans_timeline() {
    let dir = std::env::temp_dir().join(format!("braid-explain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("t.json");
    let out = braid(
        &[
            "explain",
            "reduce_scatter",
            "--size",
            "1M",
            "--topo",
            "pcie:4",
            "--trace",
            file.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let selected = out
        .stdout
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_string();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(v["otherData"]["plan"], selected.as_str());
    let steps = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .count();
    assert!(steps >= 4, "{v}");
    let pids: std::collections::BTreeSet<u64> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["pid"].as_u64())
        .collect();
    assert_eq!(pids.len(), 4, "one track group per rank");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_requests_are_usage_errors() {
    for args in [
        &["explain", "allreduce", "--size", "1K", "--root", "1"][..],
        &[
            "explain",
            "broadcast",
            "--size",
            "1K",
            "--topo",
            "nvswitch:2",
            "--root",
            "5",
        ][..],
        &["explain", "gather", "--size", "1K"][..],
        &["explain", "allreduce", "--size", "1K", "--mode", "both"][..],
    ] {
        let out = braid(args, &[]);
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

/// `braid tune` measures the host backend and writes a profile that `braid explain`
/// takes; the explain options that fix replicas and protocol price every plan that way.
#[test]
fn tune_writes_a_profile_that_explain_uses() {
    let dir = std::env::temp_dir().join(format!("braid-tune-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("host.profile");
    let out = braid(&["tune", "-n", "1", "-o", file.to_str().unwrap()], &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr.contains("host backend: a call costs"),
        "{}",
        out.stderr
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(v["version"], 2);
    // No topology named: the profile serves any (the runtime checks the fingerprint).
    assert!(v["fingerprint"].is_null(), "{v}");
    // A topology that does not parse is refused before anything is measured or written.
    let bad_file = dir.join("bad.profile");
    let bad = braid(
        &[
            "tune",
            "--topo",
            "nvswitch:0",
            "-o",
            bad_file.to_str().unwrap(),
        ],
        &[],
    );
    assert_ne!(bad.code, 0, "{}", bad.stderr);
    assert!(bad.stderr.contains("nvswitch:0"), "{}", bad.stderr);
    assert!(!bad_file.exists());
    assert!(v["source"]
        .as_str()
        .unwrap()
        .starts_with("braid tune, host backend"));
    // Costs are never negative, a block moves something, and the cores are counted.
    let costs = [
        &v["call_us"]["simple"],
        &v["hop_us"]["nvlink"]["simple"],
        &v["block_us"]["simple"],
    ];
    assert!(costs.iter().all(|c| c.as_f64().unwrap() >= 0.0), "{v}");
    assert!(v["block_gbps"]["simple"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["cores"].as_u64().unwrap() >= 1, "{v}");
    // What a block's start costs the cores, at the four block counts of the direct
    // broadcast on 8 ranks (15 blocks a replica) alone and replicated 2, 4 and 8 times.
    let work = v["block_work_us"].as_array().expect("a block-start table");
    let counts: Vec<u64> = work.iter().map(|w| w["blocks"].as_u64().unwrap()).collect();
    assert_eq!(counts, [15, 30, 60, 120], "{v}");
    assert!(work.iter().all(|w| w["us"].as_f64().unwrap() >= 0.0), "{v}");
    let ex = braid(
        &[
            "explain",
            "allreduce",
            "--size",
            "1M",
            "--topo",
            "nvswitch:4",
            "--profile",
            file.to_str().unwrap(),
            "--replicas",
            "1",
            "--proto",
            "simple",
        ],
        &[],
    );
    assert_eq!(ex.code, 0, "{}", ex.stderr);
    assert!(
        ex.stderr.contains("constants: braid tune, host backend"),
        "{}",
        ex.stderr
    );
    let priced: Vec<&str> = ex
        .stdout
        .lines()
        .skip(1)
        .filter(|l| l.contains(" us "))
        .collect();
    assert!(
        priced.len() >= 5 && priced.iter().all(|l| l.contains(" x1 simple ")),
        "{}",
        ex.stdout
    );
    // On GPUs: a profile keyed by the topology asked for; without a CUDA driver, a
    // runtime error (exit 3) that names the cause and writes nothing.
    let gpu_file = dir.join("gpu.profile");
    let cuda = braid(
        &[
            "tune",
            "--backend",
            "cuda",
            "--topo",
            "nvswitch:4",
            "-n",
            "2",
            "-o",
            gpu_file.to_str().unwrap(),
        ],
        &[],
    );
    if cuda.code == 3 {
        assert!(cuda.stderr.contains("no CUDA driver"), "{}", cuda.stderr);
        assert!(!gpu_file.exists());
    } else {
        assert_eq!(cuda.code, 0, "{}", cuda.stderr);
        let p =
            braid_cost::Profile::from_json(&std::fs::read_to_string(&gpu_file).unwrap()).unwrap();
        assert!(
            p.source.starts_with("braid tune, cuda backend"),
            "{}",
            p.source
        );
        let topo = braid_topo::Topology::from_arg("nvswitch:4").unwrap();
        assert_eq!(p.fingerprint, Some(topo.fingerprint()));
    }
    let bad = braid(
        &["explain", "allreduce", "--size", "1M", "--proto", "ll128x"],
        &[],
    );
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn explain_selects_what_the_runtime_selects_within_its_block_budget() {
    // An 8-byte all-reduce: every replica count prices alike, and the runtime's rule takes
    // the fewest blocks; a 1 GiB one: replicas only up to what --blocks allows.
    let out = braid(
        &[
            "explain",
            "allreduce",
            "--size",
            "8",
            "--topo",
            "nvswitch:2",
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout
            .starts_with("selected: one_shot_oop_allreduce x1 ll"),
        "{}",
        out.stdout
    );
    // In place the out-of-place-only plan is not a candidate.
    let inplace = braid(
        &[
            "explain",
            "allreduce",
            "--size",
            "8",
            "--topo",
            "nvswitch:2",
            "--mode",
            "inplace",
        ],
        &[],
    );
    assert_eq!(inplace.code, 0, "{}", inplace.stderr);
    assert!(
        inplace
            .stdout
            .starts_with("selected: one_shot_allreduce x1 ll")
            && !inplace.stdout.contains("one_shot_oop_allreduce x1"),
        "{}",
        inplace.stdout
    );
    let few = braid(
        &[
            "explain",
            "allreduce",
            "--size",
            "1G",
            "--topo",
            "nvswitch:8",
            "--blocks",
            "4",
        ],
        &[],
    );
    assert_eq!(few.code, 0, "{}", few.stderr);
    let first: Vec<&str> = few
        .stdout
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    let r: u32 = first[2].trim_start_matches('x').parse().unwrap();
    assert!(r <= 4, "{}", few.stdout);
}

/// `braid tune --procs` times the micro-benchmarks with one process per rank (through
/// `braid perf --procs`), over TCP here, and says so in the profile; the GPU calibration
/// refuses it.
#[test]
fn tune_over_processes_says_how_its_ranks_ran() {
    let dir = std::env::temp_dir().join(format!("braid-tune-procs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tcp.profile");
    let out = braid(
        &["tune", "--procs", "-n", "1", "-o", file.to_str().unwrap()],
        &[("BRAID_SHM_DISABLE", "1")],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert!(
        v["source"]
            .as_str()
            .unwrap()
            .starts_with("braid tune, host backend (a process per rank, TCP)"),
        "{v}"
    );
    // Messages between processes cost something, and a block moves something.
    assert!(
        v["hop_us"]["nvlink"]["simple"].as_f64().unwrap() > 0.0,
        "{v}"
    );
    assert!(v["block_gbps"]["simple"].as_f64().unwrap() > 0.0, "{v}");
    // Unasked, the ranks' threads were not bound, and the profile does not say they were.
    assert!(!v["source"].as_str().unwrap().contains("bound"), "{v}");
    let cuda = braid(&["tune", "--backend", "cuda", "--procs"], &[]);
    assert_eq!(cuda.code, 2, "{}", cuda.stderr);
    assert!(cuda.stderr.contains("--procs"), "{}", cuda.stderr);
    std::fs::remove_dir_all(&dir).ok();
}

/// With `BRAID_CPU_AFFINITY=1` the tune's ranks keep their threads on their CPUs, and the
/// profile says so (a profile measured bound describes small calls faster and large ones
/// slower), where this machine lets a process bind (two CPUs or more, all of them free
/// to it).
#[test]
fn tune_with_bound_threads_says_so() {
    let cpus = |s: &str| -> usize {
        s.trim()
            .split(',')
            .filter(|p| !p.is_empty())
            .map(|p| match p.split_once('-') {
                Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
                None => 1,
            })
            .sum()
    };
    let allowed = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(cpus)
        });
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .map(|s| cpus(&s));
    let binds = matches!((allowed, online), (Some(a), Some(o)) if a >= 2 && a >= o);
    let dir = std::env::temp_dir().join(format!("braid-tune-bound-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bound.profile");
    let out = braid(
        &["tune", "-n", "1", "-o", file.to_str().unwrap()],
        &[("BRAID_CPU_AFFINITY", "1")],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let source = v["source"].as_str().unwrap();
    assert_eq!(
        source.ends_with(", threads bound to CPUs (BRAID_CPU_AFFINITY=1)"),
        binds,
        "{source} (allowed {allowed:?} of {online:?} online CPUs)"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `braid explain COLLECTIVE --size 64M --topo TOPO --mode MODE` with a profile measured
/// with several ranks on one GPU (its memory rate set), which must succeed.
struct OneGpu {
    dir: std::path::PathBuf,
    file: std::path::PathBuf,
}

impl OneGpu {
    fn new(tag: &str) -> OneGpu {
        let dir = std::env::temp_dir().join(format!("braid-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("one_gpu.profile");
        let mut p = braid_cost::Profile::default();
        p.shared_gbps.simple = 3400.0;
        p.shared_gbps.ll = 850.0;
        assert!(p.one_gpu());
        std::fs::write(&file, p.to_json()).unwrap();
        OneGpu { dir, file }
    }

    fn explain(&self, collective: &str, topo: &str, mode: &str) -> Output {
        let out = braid(
            &[
                "explain",
                collective,
                "--size",
                "64M",
                "--topo",
                topo,
                "--profile",
                self.file.to_str().unwrap(),
                "--mode",
                mode,
            ],
            &[],
        );
        assert_eq!(out.code, 0, "{}", out.stderr);
        out
    }
}

impl Drop for OneGpu {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

/// With a profile measured with several ranks on one GPU, an out-of-place call prices
/// receivers that read their senders' input directly (docs/cuda.md), and says so: a large
/// all-reduce on 2 ranks then goes to the out-of-place one-shot, which reads each input
/// once; in place nothing is read directly and two-shot wins.
#[test]
fn a_one_gpu_profile_prices_direct_reads_out_of_place_only() {
    let g = OneGpu::new("direct");
    let oop = g.explain("allreduce", "nvswitch:2", "outofplace");
    assert!(
        oop.stdout.starts_with("selected: one_shot_oop_allreduce"),
        "{}",
        oop.stdout
    );
    assert!(
        oop.stderr.contains("read their senders' input directly"),
        "{}",
        oop.stderr
    );
    let inplace = g.explain("allreduce", "nvswitch:2", "inplace");
    assert!(
        inplace.stdout.starts_with("selected: two_shot_allreduce"),
        "{}",
        inplace.stdout
    );
    assert!(!inplace.stderr.contains("directly"), "{}", inplace.stderr);
}

/// Of a rooted collective only the root can call in place, so every rank prices it with
/// direct reads when the ranks share a GPU, whatever the mode (the non-roots' one buffer is
/// untouched either way): an 8-rank reduce then goes to the direct plan, whose chain at the
/// root reads every input once, in both modes alike.
#[test]
fn a_one_gpu_profile_prices_a_rooted_call_alike_in_both_modes() {
    let g = OneGpu::new("rooted");
    let oop = g.explain("reduce", "nvswitch:8", "outofplace");
    let inplace = g.explain("reduce", "nvswitch:8", "inplace");
    assert!(
        oop.stdout.starts_with("selected: direct_reduce"),
        "{}",
        oop.stdout
    );
    assert_eq!(oop.stdout, inplace.stdout);
    assert!(
        inplace
            .stderr
            .contains("read their senders' input directly"),
        "{}",
        inplace.stderr
    );
}

/// `braid explain` prices a call as the runtime would in this environment: among the
/// plans `BRAID_ALGO` / `NCCL_ALGO` allow (the others listed as excluded, naming the
/// variable), with the protocol `BRAID_PROTO` forces, with the profile `BRAID_PROFILE`
/// names (one measured on another topology refused, as the runtime refuses it).
#[test]
fn explain_prices_the_call_in_the_environment_the_runtime_reads() {
    // An all-reduce of `size` on `topo`.
    let explain = |size: &str, topo: &str, env: &[(&str, &str)]| {
        braid(
            &["explain", "allreduce", "--size", size, "--topo", topo],
            env,
        )
    };
    let out = explain("64M", "nvswitch:8", &[("BRAID_ALGO", "^ring")]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let first = out.stdout.lines().next().unwrap();
    assert!(!first.contains("ring"), "{}", out.stdout);
    for ring in ["ring_allreduce", "bidirectional_ring_allreduce"] {
        let line = out
            .stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(ring))
            .unwrap_or_else(|| panic!("{ring} is listed: {}", out.stdout));
        assert!(
            line.contains("excluded: BRAID_ALGO=^ring excludes it"),
            "{line}"
        );
    }
    // Without the variable a ring is priced like the rest.
    let free = explain("64M", "nvswitch:8", &[]);
    assert!(
        free.stdout
            .lines()
            .any(|l| l.starts_with("  ring_allreduce x") && l.contains(" us ")),
        "{}",
        free.stdout
    );
    // NCCL's name for it, allowing only the trees.
    let trees = explain("8", "nvswitch:4", &[("NCCL_ALGO", "tree")]);
    assert_eq!(trees.code, 0, "{}", trees.stderr);
    assert!(
        trees.stdout.starts_with("selected: tree_allreduce")
            || trees
                .stdout
                .starts_with("selected: double_binary_tree_allreduce"),
        "{}",
        trees.stdout
    );
    // Nothing allowed: an error that names the variable for every plan.
    let none = explain("64M", "nvswitch:8", &[("BRAID_ALGO", "no_such_plan")]);
    assert_ne!(none.code, 0, "{}", none.stdout);
    assert!(
        none.stderr
            .contains("ring_allreduce: BRAID_ALGO=no_such_plan excludes it"),
        "{}",
        none.stderr
    );
    // The protocol: an 8-byte call on 2 ranks runs LL unless BRAID_PROTO says Simple.
    let ll = explain("8", "nvswitch:2", &[]);
    assert!(
        ll.stdout.lines().next().unwrap().ends_with(" ll"),
        "{}",
        ll.stdout
    );
    let simple = explain("8", "nvswitch:2", &[("BRAID_PROTO", "simple")]);
    assert_eq!(simple.code, 0, "{}", simple.stderr);
    assert!(
        simple.stdout.lines().next().unwrap().ends_with(" simple"),
        "{}",
        simple.stdout
    );
    // Where the runtime does not choose by the model, explain says so.
    let rules = explain("8", "nvswitch:2", &[("BRAID_SELECT", "rules")]);
    assert_eq!(rules.code, 0, "{}", rules.stderr);
    assert!(
        rules.stderr.contains("BRAID_SELECT=rules"),
        "{}",
        rules.stderr
    );
    assert!(!ll.stderr.contains("BRAID_SELECT"), "{}", ll.stderr);
    // The profile: measured for nvswitch:4, used there, refused on nvswitch:8.
    let dir = std::env::temp_dir().join(format!("braid-explain-env-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("host4.profile");
    let path = file.to_str().unwrap();
    let tune = braid(
        &["tune", "--topo", "nvswitch:4", "-n", "1", "-o", path],
        &[],
    );
    assert_eq!(tune.code, 0, "{}", tune.stderr);
    let used = explain("1M", "nvswitch:4", &[("BRAID_PROFILE", path)]);
    assert_eq!(used.code, 0, "{}", used.stderr);
    assert!(
        used.stderr.contains("constants: braid tune, host backend"),
        "{}",
        used.stderr
    );
    let refused = explain("64M", "nvswitch:8", &[("BRAID_PROFILE", path)]);
    assert_ne!(refused.code, 0, "{}", refused.stdout);
    assert!(
        refused.stderr.contains("BRAID_PROFILE=")
            && refused.stderr.contains("measured on topology"),
        "{}",
        refused.stderr
    );
    // An explicit --profile wins over the variable.
    let explicit = braid(
        &[
            "explain",
            "allreduce",
            "--size",
            "1M",
            "--topo",
            "nvswitch:4",
            "--profile",
            path,
        ],
        &[("BRAID_PROFILE", "/nonexistent/braid.profile")],
    );
    assert_eq!(explicit.code, 0, "{}", explicit.stderr);
    std::fs::remove_dir_all(&dir).ok();
}

/// `braid explain COLLECTIVE --size 1M --topo nvswitch:8` with `env`.
fn explain_1m_on_8(collective: &str, env: &[(&str, &str)]) -> Output {
    braid(
        &[
            "explain",
            collective,
            "--size",
            "1M",
            "--topo",
            "nvswitch:8",
        ],
        env,
    )
}

#[test]
fn a_near_tie_that_lost_on_blocks_is_called_faster_not_slower() {
    // Among trees in LL on nvswitch:8 at 1 MiB, the double binary tree is priced a
    // fraction faster than the single tree but takes more blocks: the single tree is
    // selected, and the line of the faster one must say so.
    let out = explain_1m_on_8("allreduce", &[("BRAID_ALGO", "tree"), ("NCCL_PROTO", "LL")]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0], "selected: tree_allreduce x8 ll", "{}", out.stdout);
    let dbt = lines
        .iter()
        .find(|l| l.trim_start().starts_with("double_binary_tree_allreduce"))
        .unwrap_or_else(|| panic!("{}", out.stdout));
    assert!(
        dbt.contains("0.4% faster than tree_allreduce, within 2% of the fastest, but with more blocks (64 against 40)"),
        "{dbt}"
    );
    // No line calls a plan a negative amount slower.
    assert!(!out.stdout.contains("-0."), "{}", out.stdout);
    assert!(
        !out.stdout
            .lines()
            .any(|l| l.contains("% slower") && l.contains(" -")),
        "{}",
        out.stdout
    );
}

#[test]
fn equal_choices_say_so_and_nccl_algo_takes_lists_per_collective() {
    // The two rings at 1 MiB on nvswitch:8 are priced alike on as many blocks.
    let out = explain_1m_on_8("allreduce", &[("NCCL_ALGO", "ring")]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(!out.stdout.contains("+0.0%"), "{}", out.stdout);
    assert!(
        out.stdout.contains("the first of equal choices is taken"),
        "{}",
        out.stdout
    );
    // NCCL 2.24's syntax: rings for every collective, trees for the all-reduce.
    let env = [("NCCL_ALGO", "ring;allreduce:tree")];
    let ar = explain_1m_on_8("allreduce", &env);
    let ag = explain_1m_on_8("allgather", &env);
    assert_eq!(ar.code + ag.code, 0, "{}{}", ar.stderr, ag.stderr);
    assert!(
        ar.stdout.starts_with("selected: tree_allreduce")
            || ar
                .stdout
                .starts_with("selected: double_binary_tree_allreduce"),
        "{}",
        ar.stdout
    );
    assert!(
        ag.stdout.starts_with("selected: ring_allgather"),
        "{}",
        ag.stdout
    );
    assert!(ag.stdout.contains("direct_allgather") && ag.stdout.contains("excludes it"));
    // `=`: the plan of exactly that name, not those whose names contain it.
    let one = explain_1m_on_8("allreduce", &[("BRAID_ALGO", "=ring_allreduce")]);
    assert!(
        one.stdout.starts_with("selected: ring_allreduce "),
        "{}",
        one.stdout
    );
    assert!(
        one.stdout
            .lines()
            .any(|l| l.contains("bidirectional_ring_allreduce") && l.contains("excludes it")),
        "{}",
        one.stdout
    );
    // A later list must name its collective.
    let bad = explain_1m_on_8("allgather", &[("NCCL_ALGO", "ring;tree")]);
    assert_ne!(bad.code, 0);
    assert!(
        bad.stderr
            .contains("every list after the first names its collective"),
        "{}",
        bad.stderr
    );
}

#[test]
fn a_trace_says_when_the_cores_not_the_steps_set_the_price() {
    let dir = std::env::temp_dir().join(format!("braid-explain-bound-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let profile = common::host_profile(&dir);
    let trace = dir.join("t.json");
    let base = [
        "explain",
        "allreduce",
        "--size",
        "2M",
        "--topo",
        "nvswitch:8",
        "--trace",
        trace.to_str().unwrap(),
    ];
    let with_profile = [&base[..], &["--profile", profile.to_str().unwrap()]].concat();
    let out = braid(&with_profile, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("bound by the blocks' whole work over the cores"),
        "{}",
        out.stderr
    );
    let (t, slices) = common::trace_slices(&trace);
    let other = &t["otherData"];
    assert_eq!(other["bound_by"], "cores", "{other}");
    let steps_end = other["steps_end_us"].as_f64().unwrap();
    let last = slices
        .iter()
        .map(|e| e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap())
        .fold(0f64, f64::max);
    assert!((steps_end - last).abs() < 1e-6, "{steps_end} {last}");
    assert!(
        steps_end < other["predicted_us"].as_f64().unwrap(),
        "{other}"
    );
    // On a GPU's constants the steps set it: nothing to say.
    let out = braid(&base, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(!out.stderr.contains("bound by"), "{}", out.stderr);
    let (t, _) = common::trace_slices(&trace);
    assert!(
        t["otherData"].get("bound_by").is_none(),
        "{}",
        t["otherData"]
    );
    std::fs::remove_dir_all(dir).unwrap();
}
