//! Which steps of the shipped plans go without the FIFO between ranks of one launch
//! (`braid_plan::direct`).

use braid_ir::{Buf, Collective};
use braid_plan::direct::direct;
use braid_plan::{Plan, StepKind};

fn shipped(name: &str, collective: Collective, n: u32) -> Plan {
    let topo = braid_topo::Topology::from_arg(&format!("nvswitch:{n}")).unwrap();
    let library = braid_library::Library::new(topo);
    library
        .plans(collective, None)
        .into_iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("{name} applies to {n} ranks"))
        .plan()
        .clone()
}

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
