//! Plans built in code: larger and parametric shapes, the performance bound, and
//! targeted mistakes whose diagnostics are checked by content.

mod common;

use braid_ir::ModeSet;
use braid_plan::{render_diagnostics, verify, Plan};
use common::*;
use std::time::{Duration, Instant};

fn assert_ok(plan: &Plan) {
    if let Err(d) = verify(plan) {
        panic!("{}:\n{}", plan.name, render_diagnostics(&d));
    }
}

#[test]
fn ring_allreduce_verifies_for_many_sizes() {
    for n in [2, 3, 5, 8] {
        for rounds in [1, 2] {
            assert_ok(&ring_allreduce(n, rounds));
        }
    }
}

#[test]
fn chain_broadcast_with_rcs_verifies() {
    for (n, c) in [(1, 1), (2, 3), (6, 4)] {
        assert_ok(&chain_broadcast(n, c));
    }
}

#[test]
fn ring_allgather_verifies_in_both_modes() {
    for n in [2, 3, 7] {
        let p = ring_allgather(n);
        assert_eq!(p.modes, ModeSet::BOTH);
        assert_ok(&p);
    }
}

#[test]
fn allpairs_allreduce_verifies() {
    for n in [2, 4, 7] {
        assert_ok(&allpairs_allreduce(n));
    }
}

#[test]
fn direct_alltoall_verifies() {
    for n in [2, 5] {
        assert_ok(&direct_alltoall(n));
    }
}

#[test]
fn single_rank_plan_verifies() {
    let mut p = header(braid_ir::Collective::Allreduce, 1, 2, None);
    p.ranks.push(braid_plan::RankPlan {
        rank: 0,
        blocks: vec![block(
            0,
            None,
            None,
            vec![step(
                braid_plan::StepKind::Copy,
                Some(slice(braid_ir::Buf::In, 0, 2)),
                Some(slice(braid_ir::Buf::Out, 0, 2)),
                &[],
            )],
        )],
    });
    let report = verify(&p).expect("verifies");
    assert!(report.summary().starts_with(
        "ok: plan `allreduce_1` (allreduce, 1 ranks, 1 blocks, 1 steps, 0 connections, 0 messages)"
    ));
    assert!(report
        .summary()
        .contains("postcondition on every rank (outofplace, inplace)"));
}

#[test]
fn sixty_four_rank_ring_verifies_quickly() {
    let plan = ring_allreduce(64, 1);
    let start = Instant::now();
    let report = verify(&plan).expect("verifies");
    let took = start.elapsed();
    eprintln!(
        "64-rank ring: {} steps verified in {took:?}",
        plan.step_count()
    );
    assert_eq!(report.messages, 64 * 2 * 63);
    // Well under a second in release; debug builds of this crate are much slower.
    let limit = if cfg!(debug_assertions) { 10 } else { 1 };
    assert!(took < Duration::from_secs(limit), "took {took:?}");
}

#[test]
fn hundred_thousand_steps_verify_in_seconds() {
    let plan = ring_allreduce(128, 2);
    assert!(plan.step_count() > 100_000, "{}", plan.step_count());
    let start = Instant::now();
    verify(&plan).expect("verifies");
    eprintln!(
        "{} steps verified in {:?}",
        plan.step_count(),
        start.elapsed()
    );
    let limit = if cfg!(debug_assertions) { 60 } else { 5 };
    assert!(
        start.elapsed() < Duration::from_secs(limit),
        "took {:?}",
        start.elapsed()
    );
}
