//! Fusion: receives whose data is forwarded at once become `rcs` / `rrs` / `rrcs`, only
//! where the plan stays verifiable.

mod common;

use braid_plan::{Plan, StepKind};
use braid_topo::Topology;
use common::*;

fn count(plan: &Plan, kind: StepKind) -> usize {
    plan.ranks
        .iter()
        .flat_map(|r| &r.blocks)
        .flat_map(|b| &b.steps)
        .filter(|s| s.kind == kind)
        .count()
}

fn compiled(alg: &str, topo: &str, fuse: bool) -> Plan {
    let (source, a) = algorithm(alg);
    let topo = Topology::from_arg(topo).unwrap();
    let root = a.collective.is_rooted().then_some(0);
    let prog = program(&a, &topo, root).unwrap();
    let plan = compile_with(&prog, &topo, &source, None, fuse);
    assert_verifies(&plan, alg);
    plan
}

#[test]
fn ring_allgather_forwards_with_rcs() {
    for t in ["nvswitch:4", "nvswitch:8", "cluster:2x8"] {
        let plan = compiled("ring_allgather", t, true);
        assert!(count(&plan, StepKind::RecvCopySend) >= 1, "{t}");
        // A fused step replaces one receive and one send.
        let unfused = compiled("ring_allgather", t, false);
        let fused = count(&plan, StepKind::RecvCopySend);
        assert_eq!(plan.step_count() + fused, unfused.step_count(), "{t}");
    }
}

#[test]
fn chain_broadcast_is_almost_all_rcs() {
    let plan = compiled("chain_broadcast", "nvswitch:8", true);
    // Every middle rank forwards every chunk it receives.
    let rcs = count(&plan, StepKind::RecvCopySend);
    assert_eq!(rcs, 6 * 8, "{}", braid_plan::explain(&plan));
}

#[test]
fn partial_sums_that_are_never_read_again_are_not_stored() {
    // Ring reduce-scatter keeps partial sums in scratch that only the next hop reads.
    let plan = compiled("ring_reduce_scatter", "nvswitch:8", true);
    assert!(count(&plan, StepKind::RecvReduceSend) >= 1);
    for s in plan
        .ranks
        .iter()
        .flat_map(|r| &r.blocks)
        .flat_map(|b| &b.steps)
    {
        if s.kind == StepKind::RecvReduceSend {
            assert!(s.dst.is_none() && s.src.is_some());
        }
    }
}

#[test]
fn reduced_values_still_needed_are_stored_and_forwarded() {
    // In the ring all-reduce, the last reduce-scatter hop of rank 0 produces the final sum
    // of its chunk, which stays in out: rrcs, not rrs.
    let plan = compiled("ring_allreduce", "nvswitch:8", true);
    assert!(count(&plan, StepKind::RecvReduceCopySend) >= 1);
    assert!(count(&plan, StepKind::RecvReduceSend) >= 1);
}

#[test]
fn fusion_never_breaks_a_plan_the_verifier_would_otherwise_accept() {
    // The counter-clockwise ring of the bidirectional all-reduce receives and then forwards
    // on every rank; fusing all of those would deadlock (every rank's first step would be a
    // send that no one receives yet). Only the safe ones are fused.
    let plan = compiled("bidirectional_ring_allreduce", "cluster:2x8", true);
    let unfused = compiled("bidirectional_ring_allreduce", "cluster:2x8", false);
    assert!(plan.step_count() < unfused.step_count());
}

/// A ring fused on every rank deadlocks streaming, and runs tile by tile: lowering builds
/// that plan too and takes it (fewer blocks, proved). On 8 ranks every rank then runs its
/// ring in one block, NCCL's order: its own chunk's send, then each forward fused.
#[test]
fn a_ring_fuses_on_every_rank_and_runs_tile_by_tile() {
    for (alg, t) in [
        ("ring_allreduce", "nvswitch:8"),
        ("ring_allgather", "nvswitch:8"),
        ("ring_reduce_scatter", "cluster:2x8"),
    ] {
        let plan = compiled(alg, t, true);
        assert_eq!(plan.execution, braid_plan::Execution::Tiled, "{alg} {t}");
        for r in &plan.ranks {
            let ring: Vec<_> = r.blocks.iter().filter(|b| b.send_peer.is_some()).collect();
            assert_eq!(ring.len(), 1, "{alg} {t} rank {}", r.rank);
            let kinds: Vec<StepKind> = ring[0].steps.iter().map(|s| s.kind).collect();
            assert_eq!(
                kinds[0],
                StepKind::Send,
                "{alg} {t} rank {}: {kinds:?}",
                r.rank
            );
            assert!(
                kinds[1..kinds.len() - 1]
                    .iter()
                    .all(|k| k.sends() && k.receives()),
                "{alg} {t} rank {}: {kinds:?}",
                r.rank
            );
        }
    }
    // Trees keep their schedule (fused for tiles, their blocks wait for each other in a
    // cycle), and a ring of two has nothing to forward.
    assert_eq!(
        compiled("tree_allreduce", "nvswitch:8", true)
            .ranks
            .iter()
            .map(|r| r.blocks.len())
            .sum::<usize>(),
        29
    );
    let two = compiled("ring_allreduce", "nvswitch:2", true);
    assert_eq!(two.execution, braid_plan::Execution::Streaming);
}
