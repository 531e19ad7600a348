//! Targeted mistakes in generated plans, each checked for the check that catches it, the
//! site it names and the key words of its message.

mod common;

use braid_ir::{Buf, Collective, ModeSet};
use braid_plan::{verify, Check, Dep, Plan, PlanDiagnostic, Site, StepId, StepKind};
use common::*;

fn errors(plan: &Plan) -> Vec<PlanDiagnostic> {
    match verify(plan) {
        Ok(r) => panic!("expected a rejection, got {}", r.summary()),
        Err(d) => d,
    }
}

fn at(rank: u32, block: u32, step: u32) -> Site {
    Site::Step(StepId { rank, block, step })
}

/// Exactly one diagnostic, of `check`, at `site`, whose message contains every `word`.
fn expect_one(plan: &Plan, check: Check, site: Site, words: &[&str]) -> PlanDiagnostic {
    let d = errors(plan);
    assert_eq!(d.len(), 1, "{d:#?}");
    let d = d.into_iter().next().unwrap();
    assert_eq!((d.check, d.site), (check, site), "{d}");
    for w in words {
        assert!(d.to_string().contains(w), "missing {w:?} in:\n{d}");
    }
    d
}

fn has(diags: &[PlanDiagnostic], check: Check, site: Site, word: &str) -> bool {
    diags
        .iter()
        .any(|d| d.check == check && d.site == site && d.message.contains(word))
}

#[test]
fn header_problems_are_all_reported() {
    let mut p = ring_allreduce(3, 1);
    p.root = Some(1);
    p.in_chunks = 5;
    p.channels = 0;
    p.slots = 0;
    p.format_version = 3;
    let d = errors(&p);
    for word in [
        "format_version is 3",
        "allreduce has no root",
        "in_chunks is 5, but allreduce with C = 3 on 3 ranks has 3 chunks of in",
        "channels is 0",
        "slots is 0",
    ] {
        assert!(
            has(&d, Check::Structure, Site::Plan, word),
            "{word}: {d:#?}"
        );
    }
    assert_eq!(d.len(), 5, "{d:#?}");
}

#[test]
fn rooted_collectives_need_a_valid_root_and_k_needs_divisible_chunks() {
    let mut p = chain_broadcast(3, 2);
    p.root = None;
    assert!(has(
        &errors(&p),
        Check::Structure,
        Site::Plan,
        "broadcast needs a root"
    ));
    p.root = Some(3);
    assert!(has(
        &errors(&p),
        Check::Structure,
        Site::Plan,
        "root 3 is not a rank"
    ));
    let mut p = ring_allgather(3);
    p.chunks = 4;
    assert!(has(
        &errors(&p),
        Check::Structure,
        Site::Plan,
        "multiple of n_ranks"
    ));
}

#[test]
fn huge_sizes_are_refused_without_overflow() {
    let mut p = ring_allreduce(2, 1);
    p.chunks = u32::MAX;
    p.in_chunks = u32::MAX;
    p.out_chunks = u32::MAX;
    p.scratch_chunks = u32::MAX;
    assert!(has(
        &errors(&p),
        Check::Structure,
        Site::Plan,
        "chunk locations"
    ));
    let mut p = ring_allreduce(2, 1);
    p.ranks[0].blocks[1].steps[0].src = Some(slice(Buf::Out, u32::MAX, u32::MAX));
    let d = errors(&p);
    assert!(
        has(
            &d,
            Check::Bounds,
            at(0, 1, 0),
            "src out[4294967295..8589934590] lies outside out, which has 2 chunks"
        ),
        "{d:#?}"
    );
}

#[test]
fn ranks_must_be_listed_in_order() {
    let mut p = ring_allreduce(3, 1);
    p.ranks.swap(0, 1);
    let d = errors(&p);
    assert!(has(
        &d,
        Check::Structure,
        Site::Rank(1),
        "listed at ranks[0]"
    ));
    let mut p = ring_allreduce(3, 1);
    p.ranks.pop();
    assert!(has(
        &errors(&p),
        Check::Structure,
        Site::Plan,
        "lists 2 ranks but n_ranks is 3"
    ));
}

#[test]
fn block_problems_name_the_block() {
    let mut p = ring_allreduce(3, 1);
    p.ranks[1].blocks[1].id = 7;
    p.ranks[1].blocks[2].channel = 40;
    p.ranks[2].blocks[0].send_peer = Some(9);
    p.ranks[2].blocks[2].send_peer = Some(0); // block 1 already sends to rank 0
    let d = errors(&p);
    let b = |rank, block| Site::Block { rank, block };
    assert!(has(&d, Check::Structure, b(1, 1), "block id is 7"));
    assert!(has(
        &d,
        Check::Structure,
        b(1, 2),
        "needs 41 connection channels"
    ));
    assert!(has(
        &d,
        Check::Structure,
        b(2, 0),
        "send_peer 9 is not a rank"
    ));
    assert!(has(
        &d,
        Check::Structure,
        b(2, 2),
        "but block 1 already does"
    ));
}

#[test]
fn step_fields_and_peers_follow_the_kind() {
    let mut p = ring_allreduce(3, 1);
    let s = &mut p.ranks[0].blocks[2].steps;
    s[2].src = Some(slice(Buf::Out, 0, 1)); // r has no src
    s[3].kind = StepKind::RecvCopySend; // sends, but block 2 has no send_peer
    p.ranks[0].blocks[1].steps[1].deps = vec![Dep { block: 1, step: 3 }];
    let d = errors(&p);
    assert!(has(
        &d,
        Check::Structure,
        at(0, 2, 2),
        "r has a src, but r does not use one"
    ));
    assert!(has(
        &d,
        Check::Structure,
        at(0, 2, 3),
        "rcs sends, but block 2 has no send_peer"
    ));
    assert!(has(
        &d,
        Check::Structure,
        at(0, 1, 1),
        "depends on step 3 of its own block"
    ));
}

#[test]
fn writing_the_input_is_allowed_only_where_it_aliases_out() {
    // Reduce into `in` instead of `out`: fine in place (in is out), not out of place.
    let mut p = ring_allreduce(3, 1);
    let st = &mut p.ranks[1].blocks[2].steps[0];
    st.dst = Some(slice(Buf::In, 0, 1));
    st.src = Some(slice(Buf::In, 0, 1));
    let d = errors(&p);
    assert!(
        has(
            &d,
            Check::Bounds,
            at(1, 2, 0),
            "dst in[0] writes the caller's input buffer, which is read-only in mode outofplace"
        ),
        "{d:#?}"
    );
}

#[test]
fn overlapping_src_and_dst_are_rejected() {
    let mut p = ring_allreduce(3, 1);
    p.modes = ModeSet::OUT_OF_PLACE;
    p.ranks[0].blocks[0].steps[0] = step(
        StepKind::Copy,
        Some(slice(Buf::Out, 0, 2)),
        Some(slice(Buf::Out, 1, 2)),
        &[],
    );
    expect_one(&p, Check::Bounds, at(0, 0, 0), &["partially overlap"]);
    // In place, `re out <- in` of the same chunk would add a chunk to itself.
    let mut p = ring_allreduce(3, 1);
    p.ranks[0].blocks[0].steps.push(step(
        StepKind::Reduce,
        Some(slice(Buf::In, 0, 1)),
        Some(slice(Buf::Out, 0, 1)),
        &[],
    ));
    expect_one(
        &p,
        Check::Bounds,
        at(0, 0, 1),
        &["dst (+) dst", "in mode inplace"],
    );
}

#[test]
fn empty_slices_are_rejected() {
    let mut p = ring_allreduce(3, 1);
    p.ranks[2].blocks[1].steps[0].src = Some(slice(Buf::Out, 2, 0));
    let d = errors(&p);
    assert!(has(&d, Check::Bounds, at(2, 1, 0), "is empty"), "{d:#?}");
}

#[test]
fn a_send_without_a_receiver_is_a_connection_error() {
    let mut p = ring_allreduce(3, 1);
    p.ranks[1].blocks[2].channel = 1;
    let d = errors(&p);
    assert_eq!(d.len(), 2, "{d:#?}");
    assert!(
        has(
            &d,
            Check::Connection,
            at(0, 1, 0),
            "sends to rank 1 on channel 0, but no block of rank 1 has recv_peer = 0 on channel 0"
        ),
        "{d:#?}"
    );
    assert!(has(&d, Check::Connection, at(1, 2, 0), "receives from rank 0 on channel 1, but no block of rank 0 has send_peer = 1 on channel 1"), "{d:#?}");
}

#[test]
fn independent_deadlocks_are_reported_separately() {
    // Two disjoint exchanges on four ranks, both sending first.
    let mut p = header(Collective::Alltoall, 4, 4, None);
    for r in 0..4u32 {
        let q = r ^ 1;
        p.ranks.push(braid_plan::RankPlan {
            rank: r,
            blocks: vec![block(
                0,
                Some(q),
                Some(q),
                vec![
                    step(StepKind::Send, Some(slice(Buf::In, q, 1)), None, &[]),
                    step(StepKind::Recv, None, Some(slice(Buf::Out, q, 1)), &[]),
                ],
            )],
        });
    }
    let d = errors(&p);
    assert_eq!(d.len(), 2, "{d:#?}");
    assert_eq!(d[0].site, at(0, 0, 0));
    assert_eq!(d[1].site, at(2, 0, 0));
    assert!(d
        .iter()
        .all(|d| d.check == Check::Deadlock && d.notes.len() == 3));
}

#[test]
fn deadlock_reports_blocks_stuck_behind_the_cycle() {
    // Ranks 0 and 1 both send first; rank 1's second block waits for that exchange, and
    // rank 2 waits for rank 1's second block.
    let mut p = header(Collective::Alltoall, 3, 3, None);
    let send = |c| step(StepKind::Send, Some(slice(Buf::In, c, 1)), None, &[]);
    let recv = |c| step(StepKind::Recv, None, Some(slice(Buf::Out, c, 1)), &[]);
    p.ranks = vec![
        braid_plan::RankPlan {
            rank: 0,
            blocks: vec![block(0, Some(1), Some(1), vec![send(1), recv(1)])],
        },
        braid_plan::RankPlan {
            rank: 1,
            blocks: vec![
                block(0, Some(0), Some(0), vec![send(0), recv(0)]),
                block(
                    1,
                    Some(2),
                    None,
                    vec![step(
                        StepKind::Send,
                        Some(slice(Buf::In, 2, 1)),
                        None,
                        &[(0, 1)],
                    )],
                ),
            ],
        },
        braid_plan::RankPlan {
            rank: 2,
            blocks: vec![block(0, None, Some(1), vec![recv(1)])],
        },
    ];
    let d = expect_one(
        &p,
        Check::Deadlock,
        at(0, 0, 0),
        &["2 block(s) wait for each other in a cycle"],
    );
    assert!(
        d.notes
            .iter()
            .any(|n| n
                == "2 more block(s) are stuck behind this cycle: rank 1 block 1, rank 2 block 0"),
        "{d}"
    );
    assert!(
        d.notes[0].contains(
            "waits to send slice 9 of 33 to rank 1 on channel 0: the FIFO is full (8 slices)"
        ),
        "{d}"
    );
}

#[test]
fn races_that_exist_only_in_place_name_the_mode_and_the_alias() {
    // All-gather in place: in[0] of rank r is out[r]. Receiving into out[r] from a second
    // block races with the send of in[0], but only when the two alias.
    let mut p = ring_allgather(3);
    p.ranks[1].blocks[0].steps.clear(); // the copy would race in both modes
    let recvs = &mut p.ranks[1].blocks[2].steps;
    recvs[1].dst = Some(slice(Buf::Out, 1, 1)); // was out[2]; out[1] is in[0] in place
    let d = errors(&p);
    assert_eq!(d.len(), 1, "{d:#?}");
    let race = d
        .iter()
        .find(|d| d.check == Check::Race)
        .unwrap_or_else(|| panic!("{d:#?}"));
    let text = race.to_string();
    assert!(
        text.contains("race on in[0] of rank 1 in mode inplace"),
        "{text}"
    );
    assert!(
        text.contains("rank 1, block 2, step 1 writes it (which it calls out[1])"),
        "{text}"
    );
}

#[test]
fn a_never_written_output_is_blamed_on_its_rank() {
    let mut p = ring_allgather(3);
    p.modes = ModeSet::OUT_OF_PLACE;
    p.ranks[2].blocks[0].steps.clear(); // no copy of the own input
    let d = expect_one(
        &p,
        Check::Postcondition,
        Site::Rank(2),
        &["out[2] of rank 2 was never written", "should hold x(2, 0)"],
    );
    assert_eq!(d.notes, vec!["no step writes it".to_string()]);
}

#[test]
fn only_the_first_failing_mode_is_reported() {
    let mut p = ring_allgather(3);
    // Overwrite out[0] of rank 1 with its own input at the end: wrong in both modes.
    p.ranks[1].blocks[0].steps[0].deps = vec![Dep { block: 2, step: 1 }];
    p.ranks[1].blocks[0].steps[0].dst = Some(slice(Buf::Out, 0, 1));
    let d = errors(&p);
    assert!(
        d.iter().all(|d| d.message.contains("mode outofplace")),
        "{d:#?}"
    );
}

#[test]
fn long_lists_are_capped() {
    let mut p = ring_allreduce(8, 1);
    for r in &mut p.ranks {
        for s in &mut r.blocks[1].steps {
            s.src = Some(slice(Buf::Out, 99, 1));
        }
    }
    let d = errors(&p);
    assert_eq!(d.len(), 51);
    assert_eq!(d[50].site, Site::Plan);
    assert!(
        d[50]
            .message
            .contains("62 more bounds problem(s) not shown"),
        "{}",
        d[50]
    );
}
