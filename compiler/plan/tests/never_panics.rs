//! The verifier, `explain` and `to_dot` take plans from anywhere: on arbitrary (mostly
//! almost-valid) plans they must answer, never panic. Plans here are small and dense in
//! mistakes: peers and slices near the edges, random deps, every step kind.

mod common;

use braid_ir::{Buf, Collective, ModeSet};
use braid_plan::{explain, to_dot, verify, Block, Dep, Plan, RankPlan, Slice, Step, StepKind};
use proptest::prelude::*;

fn arb_slice(c: u32) -> impl Strategy<Value = Option<Slice>> {
    prop::option::weighted(
        0.8,
        (
            prop::sample::select(Buf::ALL.to_vec()),
            0..c + 2,
            prop_oneof![3 => 1u32..3, 1 => 0u32..1, 1 => Just(c)],
        )
            .prop_map(|(buf, offset, count)| Slice { buf, offset, count }),
    )
}

fn arb_step(c: u32, blocks: u32) -> impl Strategy<Value = Step> {
    (
        prop::sample::select(StepKind::ALL.to_vec()),
        arb_slice(c),
        arb_slice(c),
        prop::collection::vec((0..blocks + 1, 0u32..4), 0..2),
    )
        .prop_map(|(kind, src, dst, deps)| Step {
            // Usually give the kind the fields it needs, so later phases get exercised.
            src: if kind.has_src() {
                src.or(Some(Slice {
                    buf: Buf::Out,
                    offset: 0,
                    count: 1,
                }))
            } else {
                None
            },
            dst: if kind.has_dst() {
                dst.or(Some(Slice {
                    buf: Buf::Out,
                    offset: 0,
                    count: 1,
                }))
            } else {
                None
            },
            kind,
            deps: deps
                .into_iter()
                .map(|(block, step)| Dep { block, step })
                .collect(),
            origin: None,
        })
}

/// Fix most structural mistakes, so that most plans reach the later phases.
fn repair(p: &mut Plan) {
    let n = p.n_ranks;
    for r in &mut p.ranks {
        let me = r.rank;
        let nb = r.blocks.len() as u32;
        let lens: Vec<u32> = r.blocks.iter().map(|b| b.steps.len() as u32).collect();
        let mut ends = std::collections::HashSet::new();
        for (bi, b) in r.blocks.iter_mut().enumerate() {
            for (peer, dir) in [(&mut b.send_peer, true), (&mut b.recv_peer, false)] {
                if peer.is_some_and(|q| q == me || q >= n || !ends.insert((q, b.channel, dir))) {
                    *peer = None;
                }
            }
            for (si, s) in b.steps.iter_mut().enumerate() {
                if (s.kind.sends() && b.send_peer.is_none())
                    || (s.kind.receives() && b.recv_peer.is_none())
                {
                    s.kind = StepKind::Copy;
                    s.src = s.src.or(Some(Slice {
                        buf: Buf::In,
                        offset: 0,
                        count: 1,
                    }));
                    s.dst = s.dst.or(Some(Slice {
                        buf: Buf::Out,
                        offset: 0,
                        count: 1,
                    }));
                }
                s.deps.retain(|d| {
                    d.block < nb
                        && d.step < lens[d.block as usize]
                        && !(d.block as usize == bi && d.step as usize >= si)
                });
            }
        }
    }
}

fn arb_plan() -> impl Strategy<Value = Plan> {
    (arb_raw_plan(), prop::bool::weighted(0.9)).prop_map(|(mut p, fix)| {
        if fix {
            repair(&mut p);
        }
        p
    })
}

fn arb_raw_plan() -> impl Strategy<Value = Plan> {
    (
        prop::sample::select(Collective::ALL.to_vec()),
        1u32..5,
        1u32..3,
        0u32..2,
        prop::sample::select(vec![
            ModeSet::BOTH,
            ModeSet::OUT_OF_PLACE,
            ModeSet::IN_PLACE,
        ]),
        1u32..3,
    )
        .prop_flat_map(|(coll, n, k, scratch, modes, slots)| {
            let c = if coll.has_k() { n * k } else { k };
            let block = (
                prop::option::of(0..n + 1),
                prop::option::of(0..n + 1),
                0u32..2,
                prop::collection::vec(arb_step(c, 3), 0..5),
            );
            let rank = prop::collection::vec(block, 0..4);
            (
                Just((coll, n, c, scratch, modes, slots)),
                prop::collection::vec(rank, n as usize),
            )
        })
        .prop_map(|((coll, n, c, scratch, modes, slots), ranks)| {
            let root = coll.is_rooted().then_some(n - 1);
            let mut p = common::header(coll, n, c, root);
            p.scratch_chunks = scratch;
            p.modes = modes;
            p.slots = slots;
            p.ranks = ranks
                .into_iter()
                .enumerate()
                .map(|(r, blocks)| RankPlan {
                    rank: r as u32,
                    blocks: blocks
                        .into_iter()
                        .enumerate()
                        .map(|(i, (send_peer, recv_peer, channel, steps))| Block {
                            id: i as u32,
                            channel,
                            send_peer,
                            recv_peer,
                            steps,
                        })
                        .collect(),
                })
                .collect();
            p
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn verify_explain_and_dot_never_panic(plan in arb_plan()) {
        let _ = explain(&plan);
        let _ = to_dot(&plan);
        if let Err(diags) = verify(&plan) {
            prop_assert!(!diags.is_empty());
            for d in &diags {
                prop_assert!(!d.message.is_empty());
            }
        }
    }
}

#[test]
fn some_random_plans_get_past_the_structure_phase() {
    // Guard against the generator degenerating into plans every run rejects up front.
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let mut later = 0;
    for _ in 0..2000 {
        let plan = arb_plan().new_tree(&mut runner).unwrap().current();
        if let Err(d) = verify(&plan) {
            if d.iter().all(|d| d.check != braid_plan::Check::Structure) {
                later += 1;
            }
        } else {
            later += 1;
        }
    }
    assert!(later > 50, "only {later} plans passed the structure phase");
}
