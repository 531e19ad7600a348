//! Which steps of the shipped plans go without the FIFO between ranks of one launch
//! (`braid_plan::direct`).

mod common;
use common::shipped;

use braid_ir::{Buf, Collective, Mode};
use braid_plan::direct::direct;
use braid_plan::StepKind;

/// The out-of-place one-shot all-reduce: every send is of `in` and every receive an
/// `rrc`, so every rank reads its peers' inputs and sends nothing.
#[test]
fn one_shot_out_of_place_goes_without_the_fifo_entirely() {
    for n in [2, 4] {
        let plan = shipped("one_shot_oop_allreduce", Collective::Allreduce, n);
        let d = direct(&plan);
        let sends: usize = plan
            .ranks
            .iter()
            .flat_map(|r| &r.blocks)
            .flat_map(|b| &b.steps)
            .filter(|s| s.kind.sends())
            .count();
        assert_eq!(d.sends.len(), sends, "n={n}: {d:?}");
        assert_eq!(d.recvs.len(), sends, "n={n}: {d:?}");
        // Each receive reads the chunks its sender's step sends.
        for (&(r, b, s), &poff) in &d.recvs {
            let blk = &plan.ranks[r as usize].blocks[b as usize];
            let from = blk.recv_peer.unwrap();
            let send = plan.ranks[from as usize]
                .blocks
                .iter()
                .find(|x| x.send_peer == Some(r) && x.channel == blk.channel)
                .unwrap();
            assert!(send
                .steps
                .iter()
                .any(|st| st.src.is_some_and(|x| x.offset == poff)));
            assert!(matches!(
                blk.steps[s as usize].kind,
                StepKind::Recv | StepKind::RecvReduceCopy
            ));
        }
    }
}

/// A ring all-reduce forwards what it reduced (from `out` or scratch, through
/// `rrs`/`rcs`): nothing of it qualifies but a first send of `in` met by a plain
/// receive, and a ring's first receive reduces and sends on.
#[test]
fn a_ring_all_reduce_keeps_its_fifo() {
    let plan = shipped("ring_allreduce", Collective::Allreduce, 4);
    let d = direct(&plan);
    assert!(d.sends.is_empty() && d.recvs.is_empty(), "{d:?}");
}

/// A rank that writes its `in` lends it to no one.
#[test]
fn a_rank_that_writes_its_input_is_never_read_directly() {
    let mut plan = shipped("one_shot_oop_allreduce", Collective::Allreduce, 2);
    assert!(!direct(&plan).sends.is_empty());
    let step = plan.ranks[0]
        .blocks
        .iter_mut()
        .flat_map(|b| &mut b.steps)
        .find(|s| s.dst.is_some())
        .unwrap();
    step.dst.as_mut().unwrap().buf = Buf::In;
    let d = direct(&plan);
    assert!(d.sends.iter().all(|&(r, _, _)| r != 0), "{d:?}");
    assert!(d.sends.iter().any(|&(r, _, _)| r == 1), "{d:?}");
}

/// Sequences that do not pair up step by step (one step of two chunks met by two of
/// one) are left alone.
#[test]
fn unequal_step_counts_leave_the_connection_alone() {
    let mut plan = shipped("one_shot_oop_allreduce", Collective::Allreduce, 2);
    let before = direct(&plan);
    let blk = plan.ranks[0]
        .blocks
        .iter_mut()
        .find(|b| b.steps.iter().any(|s| s.kind == StepKind::Send))
        .unwrap();
    let send = blk
        .steps
        .iter_mut()
        .find(|s| s.kind == StepKind::Send)
        .unwrap();
    send.src.as_mut().unwrap().count += 1;
    let d = direct(&plan);
    assert_eq!(d.sends.len() + 1, before.sends.len(), "{d:?}");
    assert!(d.sends.iter().all(|&(r, _, _)| r != 0));
}

/// The one-shot reductions on N ranks: every rank's N-1 receive-reduces into `out` form
/// one chain, in the plan's order (head first), and nothing else does.
#[test]
fn one_shot_reductions_are_one_chain_per_reducing_rank() {
    use braid_plan::direct::chains;
    for (name, c, n, reducing) in [
        ("one_shot_oop_allreduce", Collective::Allreduce, 8, 8),
        ("one_shot_oop_allreduce", Collective::Allreduce, 3, 3),
        ("direct_reduce_scatter", Collective::ReduceScatter, 4, 4),
        ("direct_reduce", Collective::Reduce, 4, 1),
    ] {
        let plan = shipped(name, c, n);
        let d = direct(&plan);
        let ch = chains(&plan, &d);
        assert_eq!(ch.len(), reducing, "{name} on {n}: {ch:?}");
        for chain in &ch {
            let rp = &plan.ranks[chain.rank as usize];
            // Every peer's input once, and the rank's own at most once more.
            let peers = chain
                .steps
                .iter()
                .filter(|&&(b, s)| d.recvs.contains_key(&(chain.rank, b, s)))
                .count();
            assert_eq!(peers, n as usize - 1, "{name} on {n}");
            // Every rank's input, its own included.
            assert_eq!(chain.operands(&plan), n as usize, "{name} on {n}");
            assert!(chain.steps.len() <= n as usize, "{name} on {n}");
            for (k, &(b, s)) in chain.steps.iter().enumerate() {
                let st = &rp.blocks[b as usize].steps[s as usize];
                // A receive (starting the chain), a receive-reduce, or (where the rank
                // adds its own input between its peers', in rank order) a local reduce.
                match st.kind {
                    StepKind::Recv => assert_eq!(k, 0),
                    StepKind::RecvReduceCopy => {}
                    StepKind::Reduce => assert!(k > 0),
                    other => panic!("{other:?} in a chain"),
                }
                assert_eq!(
                    d.recvs.contains_key(&(chain.rank, b, s)),
                    st.kind != StepKind::Reduce
                );
                assert_eq!(
                    st.dst,
                    rp.blocks[chain.steps[0].0 as usize].steps[chain.steps[0].1 as usize].dst
                );
                if k > 0 {
                    let (pb, ps) = chain.steps[k - 1];
                    assert_eq!(st.deps.len(), 1);
                    assert_eq!((st.deps[0].block, st.deps[0].step), (pb, ps));
                    if st.kind == StepKind::RecvReduceCopy {
                        assert_eq!(st.src, st.dst);
                    }
                }
            }
        }
    }
    // Two ranks: one receive each, no chain.
    let plan = shipped("one_shot_oop_allreduce", Collective::Allreduce, 2);
    assert!(chains(&plan, &direct(&plan)).is_empty());
}

/// A chain is left alone when another step waits for one of its links (it would see a
/// partial result), or when its receives are not direct.
#[test]
fn chains_that_others_wait_on_or_that_are_not_direct_are_left_alone() {
    use braid_plan::direct::{chains, Direct};
    let plan = shipped("one_shot_oop_allreduce", Collective::Allreduce, 4);
    let d = direct(&plan);
    assert_eq!(chains(&plan, &d).len(), 4);
    // No direct pairs: no chains.
    assert!(chains(&plan, &Direct::default()).is_empty());
    // Rank 0: a step of another block that waits for the chain's second link.
    let mut p = plan.clone();
    let chain0 = chains(&plan, &d).into_iter().find(|c| c.rank == 0).unwrap();
    let (b1, s1) = chain0.steps[1];
    let send_block = p.ranks[0]
        .blocks
        .iter()
        .position(|b| b.steps.iter().all(|s| s.kind == StepKind::Send))
        .unwrap();
    p.ranks[0].blocks[send_block].steps[0]
        .deps
        .push(braid_plan::Dep {
            block: b1,
            step: s1,
        });
    let ch = chains(&p, &direct(&p));
    assert_eq!(ch.len(), 3, "{ch:?}");
    assert!(ch.iter().all(|c| c.rank != 0));
}

/// A chain's one pass may be shared among its blocks only when nothing precedes its
/// head and every operand is an input: true for the shipped one-shot reductions; false
/// once the head waits for another step, or an operand the rank adds is its `out`.
#[test]
fn a_chain_splits_only_when_its_operands_are_inputs_and_nothing_precedes_it() {
    use braid_plan::direct::chains;
    for (name, c, n) in [
        ("one_shot_oop_allreduce", Collective::Allreduce, 8),
        ("direct_reduce_scatter", Collective::ReduceScatter, 4),
        ("direct_reduce", Collective::Reduce, 4),
    ] {
        let plan = shipped(name, c, n);
        let ch = chains(&plan, &direct(&plan));
        assert!(
            !ch.is_empty() && ch.iter().all(|c| c.splits),
            "{name}: {ch:?}"
        );
    }
    let plan = shipped("one_shot_oop_allreduce", Collective::Allreduce, 4);
    let chain0 = chains(&plan, &direct(&plan))
        .into_iter()
        .find(|c| c.rank == 0)
        .unwrap();
    // The head waits for a step of another block.
    let (hb, hs) = chain0.steps[0];
    let other = (0..plan.ranks[0].blocks.len() as u32)
        .find(|&b| chain0.steps.iter().all(|&(cb, _)| cb != b))
        .unwrap();
    let mut p = plan.clone();
    p.ranks[0].blocks[hb as usize].steps[hs as usize]
        .deps
        .push(braid_plan::Dep {
            block: other,
            step: 0,
        });
    let c0 = chains(&p, &direct(&p)).into_iter().find(|c| c.rank == 0);
    assert!(c0.is_some_and(|c| !c.splits));
    // The rank's own operand (its local reduce, or the head's own source) taken from
    // `out` instead of `in`.
    let own = chain0
        .steps
        .iter()
        .copied()
        .find(|&(b, s)| {
            let st = &plan.ranks[0].blocks[b as usize].steps[s as usize];
            st.kind == StepKind::Reduce || (st.kind == StepKind::RecvReduceCopy && st.src != st.dst)
        })
        .expect("rank 0 adds its own input");
    let mut p = plan.clone();
    let st = &mut p.ranks[0].blocks[own.0 as usize].steps[own.1 as usize];
    st.src = st.src.map(|s| braid_plan::Slice {
        buf: braid_ir::Buf::Out,
        ..s
    });
    let c0 = chains(&p, &direct(&p)).into_iter().find(|c| c.rank == 0);
    assert!(c0.is_some_and(|c| !c.splits));
}

/// A broadcast root's steps only copy `in` onto the same chunks of `out` (nothing in
/// place): it lends its `in` in place too; ranks that receive into `out`, or reduce,
/// change their buffer.
#[test]
fn only_a_broadcast_roots_copies_are_the_identity_in_place() {
    use braid_plan::direct::identity_in_place;
    let bc = shipped("direct_broadcast", Collective::Broadcast, 4);
    assert!(identity_in_place(&bc, 0), "the root");
    for r in 1..4 {
        assert!(!identity_in_place(&bc, r), "rank {r} receives into out");
    }
    let ar = shipped("one_shot_oop_allreduce", Collective::Allreduce, 4);
    assert!((0..4).all(|r| !identity_in_place(&ar, r)));
    let ag = shipped("direct_allgather", Collective::Allgather, 4);
    assert!(
        (0..4).all(|r| !identity_in_place(&ag, r)),
        "in and out differ in size"
    );
}

/// The copies an in-place call skips: a broadcast root's own copy, an all-gather rank's
/// copy of its `in` to its own place in `out` (where NCCL puts an in-place `in`); not a
/// copy to another rank's place, nor anything a reduce-scatter or an all-reduce copies
/// between chunks of different places.
#[test]
fn in_place_the_copies_onto_themselves_are_a_roots_own_and_an_all_gathers_own_chunk() {
    use braid_plan::direct::copies_onto_itself_in_place as onto_itself;
    let copies = |plan: &braid_plan::Plan| -> Vec<(usize, bool)> {
        plan.ranks
            .iter()
            .enumerate()
            .flat_map(|(r, rp)| {
                rp.blocks
                    .iter()
                    .flat_map(move |b| b.steps.iter().map(move |s| (r, s)))
            })
            .filter(|(_, s)| s.kind == StepKind::Copy)
            .map(|(r, s)| (r, onto_itself(plan, &plan.layout(Mode::InPlace), r, s)))
            .collect()
    };
    let bc = shipped("direct_broadcast", Collective::Broadcast, 4);
    assert_eq!(copies(&bc), vec![(0, true)], "the root's copy of in to out");
    for n in [2, 4] {
        let ag = shipped("ring_allgather", Collective::Allgather, n);
        let c = copies(&ag);
        assert_eq!(c.len(), n as usize, "each rank copies its own chunk: {c:?}");
        assert!(c.iter().all(|&(_, itself)| itself), "{c:?}");
    }
    // Rank 1's copy of its `in` to rank 0's place in `out` lands elsewhere.
    let mut ag = shipped("ring_allgather", Collective::Allgather, 4);
    let step = ag.ranks[1]
        .blocks
        .iter_mut()
        .flat_map(|b| &mut b.steps)
        .find(|s| s.kind == StepKind::Copy)
        .unwrap();
    assert_eq!(step.dst.unwrap().buf, Buf::Out);
    step.dst.as_mut().unwrap().offset = 0;
    let step = step.clone();
    assert!(!onto_itself(&ag, &ag.layout(Mode::InPlace), 1, &step));
    // Without a copy, nothing is skipped.
    let ar = shipped("one_shot_oop_allreduce", Collective::Allreduce, 4);
    assert!(copies(&ar).is_empty());
}
