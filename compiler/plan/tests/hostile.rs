//! Plans shaped to make the verifier slow: refused at once when their numbers are out of
//! reach (see also `tests/plans/bad/too_many_chunk_accesses.json`), verified in time that
//! grows with their size otherwise. Bounds are generous for debug builds on a loaded
//! machine; the times in comments were measured in a debug build.

mod common;

use braid_ir::{Buf, Collective, ModeSet};
use braid_plan::{verify, Check, Plan, RankPlan, StepKind};
use common::{block, chain_broadcast, header, slice, step};
use std::time::{Duration, Instant};

fn timed(plan: &Plan, bound: Duration) -> Result<(), Vec<braid_plan::PlanDiagnostic>> {
    let start = Instant::now();
    let result = verify(plan).map(|_| ());
    let took = start.elapsed();
    assert!(took < bound, "verifying {} took {took:?}", plan.name);
    result
}

/// `n` ranks in a ring, each sending `k` messages to the next rank from a send-only block
/// and receiving `k` from the previous one in a receive-only block. Every phase runs; the
/// postcondition fails (only one chunk of `out` is written per rank).
fn ring_of_messages(n: u32, k: u32) -> Plan {
    let mut p = header(Collective::Allgather, n, n, None);
    p.modes = ModeSet::OUT_OF_PLACE;
    for r in 0..n {
        let prev = (r + n - 1) % n;
        let send = step(StepKind::Send, Some(slice(Buf::In, 0, 1)), None, &[]);
        let recv = step(StepKind::Recv, None, Some(slice(Buf::Out, prev, 1)), &[]);
        p.ranks.push(RankPlan {
            rank: r,
            blocks: vec![
                block(0, Some((r + 1) % n), None, vec![send; k as usize]),
                block(1, None, Some(prev), vec![recv; k as usize]),
            ],
        });
    }
    p
}

#[test]
fn many_connections_times_many_messages_verify_in_time() {
    // 2000 connections, 32 thousand messages. Cutting each message into more slices than
    // all FIFOs hold and moving one FIFO's worth per round trip cost a round trip per
    // connection per message.
    let d = timed(&ring_of_messages(2000, 16), Duration::from_secs(12)).unwrap_err();
    assert!(d.iter().all(|d| d.check == Check::Postcondition), "{d:?}");
}

#[test]
fn a_long_forwarding_chain_verifies_in_time() {
    // Each of 16 chunks passes 1599 receive-and-forward steps.
    assert_eq!(
        timed(&chain_broadcast(1600, 16), Duration::from_secs(8)),
        Ok(())
    );
}

#[test]
fn huge_counts_are_refused_before_any_work() {
    // Eight steps copying 2^21 chunks back and forth took about 4 s each.
    let mut p = header(Collective::Allgather, 1, 1, None);
    p.scratch_chunks = 1 << 22;
    let half = 1 << 21;
    let mut steps = vec![step(
        StepKind::Copy,
        Some(slice(Buf::In, 0, 1)),
        Some(slice(Buf::Out, 0, 1)),
        &[],
    )];
    for i in 0..1000 {
        let (a, b) = if i % 2 == 0 { (0, half) } else { (half, 0) };
        steps.push(step(
            StepKind::Copy,
            Some(slice(Buf::Scratch, a, half)),
            Some(slice(Buf::Scratch, b, half)),
            &[],
        ));
    }
    p.ranks.push(RankPlan {
        rank: 0,
        blocks: vec![block(0, None, None, steps)],
    });
    let d = timed(&p, Duration::from_millis(500)).unwrap_err();
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].check, Check::Structure);
    assert!(
        d[0].to_string().starts_with(
            "error[structure]: rank 0, block 0, step 1: the steps access 4194304002 chunks in all"
        ),
        "{}",
        d[0]
    );
}
