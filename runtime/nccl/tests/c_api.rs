//! C programs of the project's own, compiled and linked against the library in
//! `cargo test`, run without a GPU: every function with bad arguments (an error code and
//! a message each time), and NCCL's semantics on the host backend (`tests/c/nccl_api.c`
//! says what each section checks).

mod support;

use std::time::Duration;
use support::{run, setup, succeeded};

const HOST: (&str, &str) = ("BRAID_BACKEND", "host");

#[test]
fn every_function_with_bad_arguments_fails_with_a_message() {
    let lib = setup("bad-args");
    let program = lib.program("bad_args.c");
    let out = succeeded(
        "bad_args",
        run(&program, &[], &[], Duration::from_secs(120)),
    );
    let last = out.lines().last().unwrap_or_default();
    let calls: usize = last
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(last.ends_with(" 0 failures") && calls >= 100, "{out}");
    assert!(!out.contains("FAIL"), "{out}");
}

fn host_section(section: &str, extra: &[(&str, &str)], expect_ok_lines: usize) -> String {
    host_section_in(&setup(section), section, extra, expect_ok_lines)
}

fn host_section_in(
    lib: &support::CLib,
    section: &str,
    extra: &[(&str, &str)],
    expect_ok_lines: usize,
) -> String {
    let program = lib.program("nccl_api.c");
    let mut env = vec![HOST];
    env.extend_from_slice(extra);
    let out = succeeded(
        section,
        run(&program, &[section], &env, Duration::from_secs(300)),
    );
    assert!(out.ends_with("done\n"), "{out}");
    let oks = out.lines().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(oks, expect_ok_lines, "{out}");
    out
}

#[test]
fn every_collective_type_op_and_mode_over_2_3_and_4_ranks() {
    let out = host_section("matrix", &[], 3);
    assert!(
        out.contains("matrix over 4 ranks: 1080 collectives"),
        "{out}"
    );
}

#[test]
fn send_recv_rings_premulsum_and_simulated_groups() {
    host_section("groups", &[], 2);
}

#[test]
fn ranks_as_threads_nonblocking_init_split_and_inits_inside_a_group() {
    host_section("threads", &[], 3);
}

#[test]
fn ranks_as_processes() {
    host_section("processes", &[], 2);
}

#[test]
fn a_peer_that_aborts_is_a_remote_error() {
    let out = host_section("abort", &[("BRAID_TIMEOUT", "30")], 1);
    assert!(out.contains("rank 0 saw: ncclAllReduce: "), "{out}");
}

#[test]
fn without_a_real_nccl_forwarded_calls_fail_with_a_message() {
    host_section("no-forward", &[], 1);
    host_section("forward-self", &[("BRAID_NCCL_LIB", "libnccl.so.2")], 1);
}

#[test]
fn unserved_calls_are_forwarded_to_the_real_nccl() {
    let lib = setup("forward");
    let fake = lib.shared("fake_nccl.c", "libfakenccl.so");
    let log = lib.work.join("fake.log");
    let out = host_section_in(
        &lib,
        "forward",
        &[
            ("BRAID_NCCL_LIB", fake.to_str().unwrap()),
            ("FAKE_NCCL_LOG", log.to_str().unwrap()),
            ("BRAID_TIMEOUT", "3"),
        ],
        2,
    );
    assert!(out.contains("did not finish within BRAID_TIMEOUT"), "{out}");
    // The calls reached the real library: its own log says so.
    let log = std::fs::read_to_string(&log).expect("the fake NCCL's log");
    for line in [
        "init all 3 ranks",
        "gather rank 2 root 1",
        "scatter rank 0 root 0",
        "init rank 1 of 2",
        "gather rank 1 root 0",
        "abort rank 0 of 2",
    ] {
        assert!(
            log.contains(line),
            "the fake NCCL never saw {line:?}:\n{log}"
        );
    }
}

/// `NCCL_DEBUG=INFO` (to `NCCL_DEBUG_FILE`) shows which plan served each call, a plan of
/// the user's from `BRAID_PLANS` among them, and names a set `NCCL_*` variable Braid does
/// not honour; `NCCL_DEBUG_SUBSYS` narrows what is logged.
#[test]
fn the_log_shows_user_plans_serving_calls() {
    let lib = setup("log");
    let plan = lib.work.join("my_ring.braid");
    let source =
        std::fs::read_to_string(support::crate_dir().join("../../algorithms/ring_allreduce.braid"))
            .unwrap();
    std::fs::write(
        &plan,
        source.replace("algorithm ring_allreduce", "algorithm my_ring_allreduce"),
    )
    .unwrap();
    let program = lib.program("nccl_api.c");
    let log_pattern = lib.work.join("nccl.%p.log");
    let logs = |subsys: &str| -> String {
        for e in std::fs::read_dir(&lib.work).unwrap().flatten() {
            if e.file_name().to_string_lossy().starts_with("nccl.") {
                std::fs::remove_file(e.path()).unwrap();
            }
        }
        let env = [
            HOST,
            ("BRAID_PLANS", plan.to_str().unwrap()),
            ("NCCL_DEBUG", "INFO"),
            ("NCCL_DEBUG_SUBSYS", subsys),
            ("NCCL_DEBUG_FILE", log_pattern.to_str().unwrap()),
            // Honoured (the ring plan is allowed), and a variable Braid does not read.
            ("NCCL_ALGO", "Ring"),
            ("NCCL_NET_GDR_LEVEL", "PHB"),
        ];
        succeeded(
            "groups",
            run(&program, &["groups"], &env, Duration::from_secs(120)),
        );
        let mut text = String::new();
        for e in std::fs::read_dir(&lib.work).unwrap().flatten() {
            if e.file_name().to_string_lossy().starts_with("nccl.") {
                text += &std::fs::read_to_string(e.path()).unwrap();
            }
        }
        text
    };
    let all = logs("ALL");
    assert!(
        all.contains("NCCL_NET_GDR_LEVEL is set; Braid does not honour it")
            && !all.contains("NCCL_ALGO is set"),
        "{all}"
    );
    assert!(
        all.contains("user plan from BRAID_PLANS plan=my_ring_allreduce"),
        "{all}"
    );
    assert!(
        all.lines().any(
            |l| l.contains("allreduce of 1332 bytes (outofplace, f32 sum)")
                && l.contains("plan=my_ring_allreduce")
        ),
        "{all}"
    );
    assert!(!all.contains('\x1b'), "colour codes in a log file");
    let quiet = logs("^COLL");
    assert!(quiet.contains("NCCL_NET_GDR_LEVEL is set"), "{quiet}");
    assert!(!quiet.contains("allreduce of 1332 bytes"), "{quiet}");
}
