//! `tools/braid/src/cmd_verify.rs` is self-contained (braid_plan + std), so it is compiled
//! and tested here as well, against the fixture plans.

#[path = "../../../tools/braid/src/cmd_verify.rs"]
mod cmd_verify;
mod common;

use common::{bad, good};
use std::path::Path;

#[test]
fn a_good_plan_prints_one_ok_line() {
    let out = cmd_verify::run(&good("ring_allreduce_4")).unwrap();
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.ends_with('\n'));
    for word in [
        "ring_allreduce_4.json: ok: plan `ring_allreduce`",
        "4 ranks",
        "52 steps",
        "4 connections",
        "no deadlock",
        "no races",
        "allreduce postcondition",
        "(outofplace, inplace)",
    ] {
        assert!(out.contains(word), "missing {word:?} in {out}");
    }
}

#[test]
fn a_bad_plan_exits_1_with_file_and_step_in_every_diagnostic() {
    let path = bad("offset_past_buffer");
    let e = cmd_verify::run(&path).unwrap_err();
    assert_eq!(e.exit_code, 1);
    let first = e.message.lines().next().unwrap();
    assert!(first.ends_with("offset_past_buffer.json: error[bounds]: rank 3, block 1, step 2: src out[5] lies outside out, which has 4 chunks on rank 3"), "{first}");
    assert!(
        e.message
            .trim_end()
            .ends_with("error: plan rejected: 1 problem found"),
        "{}",
        e.message
    );
}

#[test]
fn malformed_json_names_file_line_and_column() {
    let e = cmd_verify::run(&bad("malformed_json")).unwrap_err();
    assert_eq!(e.exit_code, 1);
    assert!(
        e.message
            .contains("malformed_json.json:6:3: error: malformed plan: expected `,` or `}`"),
        "{}",
        e.message
    );
}

#[test]
fn xml_and_missing_files_are_clear_errors() {
    let e = cmd_verify::run(Path::new("algo.XML")).unwrap_err();
    assert!(
        e.message.contains("MSCCL XML import is not available yet"),
        "{e}"
    );
    assert_eq!(e.exit_code, 1);
    let e = cmd_verify::run(Path::new("no/such/plan.json")).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("no/such/plan.json: error: cannot read the plan"),
        "{e}"
    );
}

#[test]
fn unknown_versions_are_reported_with_the_file() {
    let e = cmd_verify::run(&bad("unknown_version")).unwrap_err();
    assert!(
        e.message
            .contains("unknown_version.json: error: unsupported plan format_version 2"),
        "{e}"
    );
}
