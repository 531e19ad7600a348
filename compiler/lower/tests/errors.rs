//! Inconsistent inputs are refused with a reason rather than lowered wrongly.

mod common;

use braid_ir::{Mode, ModeSet};
use braid_lower::{lower, LowerError, LowerOptions};
use braid_passes::dataflow::Dataflow;
use braid_topo::Topology;
use common::*;

#[test]
fn the_program_and_the_topology_must_have_the_same_ranks() {
    let (_, alg) = algorithm("ring_allgather");
    let t4 = Topology::from_arg("nvswitch:4").unwrap();
    let prog = program(&alg, &t4, None).unwrap();
    let flow = Dataflow::build(&prog, Mode::InPlace);
    let t8 = Topology::from_arg("nvswitch:8").unwrap();
    let err = lower(&prog, &flow, &t8, &LowerOptions::default()).unwrap_err();
    assert_eq!(
        err,
        LowerError::RankCount {
            program: 4,
            topology: 8
        }
    );
}

#[test]
fn an_in_place_plan_needs_the_in_place_dataflow() {
    let (_, alg) = algorithm("ring_allreduce");
    let topo = Topology::from_arg("nvswitch:4").unwrap();
    let prog = program(&alg, &topo, None).unwrap();
    let flow = Dataflow::build(&prog, Mode::OutOfPlace);
    let err = lower(&prog, &flow, &topo, &LowerOptions::default()).unwrap_err();
    assert_eq!(
        err,
        LowerError::FlowMode {
            got: Mode::OutOfPlace
        }
    );
    // Out of place only, the out-of-place graph is the right one.
    let opts = LowerOptions {
        modes: Some(ModeSet::OUT_OF_PLACE),
        ..LowerOptions::default()
    };
    let plan = lower(&prog, &flow, &topo, &opts).unwrap();
    assert_verifies(&plan, "out of place");
}

#[test]
fn asking_for_an_undeclared_mode_leaves_nothing() {
    let (_, alg) = algorithm("direct_alltoall");
    let topo = Topology::from_arg("nvswitch:4").unwrap();
    let prog = program(&alg, &topo, None).unwrap();
    let flow = Dataflow::build(&prog, Mode::OutOfPlace);
    let opts = LowerOptions {
        modes: Some(ModeSet::IN_PLACE),
        ..LowerOptions::default()
    };
    let err = lower(&prog, &flow, &topo, &opts).unwrap_err();
    assert!(matches!(err, LowerError::NoMode { .. }), "{err}");
}

#[test]
fn a_foreign_dataflow_graph_is_refused() {
    let (_, alg) = algorithm("ring_allgather");
    let topo = Topology::from_arg("nvswitch:4").unwrap();
    let prog = program(&alg, &topo, None).unwrap();
    let (_, other) = algorithm("tree_allreduce");
    let other = program(&other, &topo, None).unwrap();
    let flow = Dataflow::build(&other, Mode::InPlace);
    let err = lower(&prog, &flow, &topo, &LowerOptions::default()).unwrap_err();
    assert!(matches!(err, LowerError::FlowSize { .. }), "{err}");
}

#[test]
fn channel_hints_beyond_the_runtime_limit_are_refused() {
    let (_, alg) = algorithm("double_binary_tree_allreduce");
    let topo = Topology::from_arg("nvswitch:4").unwrap();
    let mut prog = program(&alg, &topo, None).unwrap();
    prog.channels = 17; // two channels (@ch(0), @ch(1)) x 17 replicas > 32
    let flow = Dataflow::build(&prog, Mode::InPlace);
    let err = lower(&prog, &flow, &topo, &LowerOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            LowerError::TooManyChannels {
                channel: 1,
                needed: 34,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn without_a_locator_steps_carry_no_origin() {
    let (_, alg) = algorithm("tree_allreduce");
    let topo = Topology::from_arg("nvswitch:4").unwrap();
    let prog = program(&alg, &topo, None).unwrap();
    let flow = Dataflow::build(&prog, Mode::InPlace);
    let plan = lower(&prog, &flow, &topo, &LowerOptions::default()).unwrap();
    assert_verifies(&plan, "no origins");
    let steps = plan
        .ranks
        .iter()
        .flat_map(|r| &r.blocks)
        .flat_map(|b| &b.steps);
    assert!(steps.clone().count() > 0);
    for s in steps {
        assert!(s.origin.is_none());
    }
}
