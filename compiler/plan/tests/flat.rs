//! Launch programs (`braid_plan::flat`): forwards done by the pass that writes what they
//! receive, passes several ranks share merged, and the rule that says whether a launch
//! may run in place.

mod common;
use common::shipped;

use braid_ir::Collective;
use braid_plan::direct::{chains, direct, flat_chains};
use braid_plan::flat::{
    launch, program, reads_before_writes, runs_in_place, Access, LaunchPass, LaunchProgram, Loc,
};
use braid_plan::Plan;

fn launch_of(plan: &Plan, max_dsts: usize) -> Option<braid_plan::flat::LaunchProgram> {
    let d = direct(plan);
    let progs: Vec<_> = (0..plan.n_ranks)
        .map(|r| program(plan, r, &d, 8).expect("a flat program"))
        .collect();
    let pairs: Vec<_> = (0..plan.n_ranks).zip(progs.iter()).collect();
    launch(&pairs, max_dsts)
}

fn access(start: u64, end: u64, task: usize, seq: usize) -> Access {
    Access {
        start,
        end,
        task,
        seq,
    }
}

#[test]
fn a_read_comes_before_every_write_of_its_place_or_the_launch_is_not_in_place() {
    let r = [access(0, 10, 0, 0)];
    // The same task at the same place (one thread reads, then writes), or a later task
    // of the same sequence at the same place: fine.
    assert!(reads_before_writes(&r, &[access(0, 10, 0, 0)]));
    assert!(reads_before_writes(&r, &[access(0, 10, 3, 0)]));
    // Elsewhere, or empty: fine.
    assert!(reads_before_writes(&r, &[access(10, 20, 1, 1)]));
    assert!(reads_before_writes(&r, &[access(5, 5, 1, 1)]));
    assert!(reads_before_writes(
        &[access(5, 5, 0, 0)],
        &[access(0, 10, 1, 1)]
    ));
    // The same task shifted (another thread writes what this one reads), another
    // sequence (no order), or an earlier task of the same sequence: not.
    assert!(!reads_before_writes(&r, &[access(4, 14, 0, 0)]));
    assert!(!reads_before_writes(&r, &[access(0, 10, 1, 1)]));
    assert!(!reads_before_writes(
        &[access(0, 10, 2, 0)],
        &[access(0, 10, 1, 0)]
    ));
}

/// A two-shot all-reduce's second shot (each rank receiving the block its owner
/// reduced) is done by the first: one pass per block, reading every input once and
/// writing every rank's output; in place each pass reads and writes its block of every
/// buffer, so the launch may run in place.
#[test]
fn a_two_shot_all_reduce_is_one_pass_per_block_and_runs_in_place() {
    for n in [2u32, 4, 8] {
        let plan = shipped("two_shot_allreduce", Collective::Allreduce, n);
        // Its first shot is a chain only where the chain's blocks go on to other steps.
        let d = direct(&plan);
        assert_eq!(
            flat_chains(&plan, &d).len(),
            if n > 2 { n as usize } else { 0 }
        );
        if n > 2 {
            assert!(
                chains(&plan, &d).is_empty(),
                "{n}: the interpreter's chains"
            );
        }
        let l = launch_of(&plan, 8).expect("a launch");
        let passes: Vec<_> = l.seqs.iter().flatten().collect();
        assert_eq!(passes.len(), n as usize, "{n} ranks");
        for p in &passes {
            let block = p.dsts[0].chunk;
            assert_eq!(p.ops.len(), n as usize);
            assert!(p.ops.iter().all(|o| o.buf == 0 && o.chunk == block));
            let mut ranks: Vec<u32> = p.dsts.iter().map(|d| d.rank).collect();
            ranks.sort_unstable();
            assert_eq!(ranks, (0..n).collect::<Vec<_>>());
            assert!(p.dsts.iter().all(|d| d.buf == 1 && d.chunk == block));
        }
        assert!(runs_in_place(&plan, &l), "{n} ranks");
        // A pass that may not write every rank's output cannot do the second shot.
        assert!(launch_of(&plan, n as usize - 1).is_none());
    }
}

/// Out of place, a one-shot all-reduce's ranks all sum the same inputs: merged, once. Not
/// merged, each rank writes what the others read, so it may not run in place.
#[test]
fn a_one_shot_all_reduce_is_summed_once_and_merged_runs_in_place() {
    let plan = shipped("one_shot_oop_allreduce", Collective::Allreduce, 4);
    let merged = launch_of(&plan, 8).unwrap();
    assert_eq!(merged.seqs.len(), 1);
    assert_eq!(merged.seqs[0].len(), 1);
    let p = &merged.seqs[0][0];
    assert_eq!(p.dsts.len(), 4);
    assert!(runs_in_place(&plan, &merged));
    let alone = launch_of(&plan, 1).unwrap();
    assert_eq!(alone.tasks(), 4);
    assert!(!runs_in_place(&plan, &alone));
}

/// An alltoall's ranks overwrite, in place, blocks their peers read: never in place. An
/// allgather's write slots no one reads: in place.
#[test]
fn an_alltoall_never_runs_in_place_and_an_allgather_does() {
    let a2a = shipped("direct_alltoall", Collective::Alltoall, 4);
    assert!(!runs_in_place(&a2a, &launch_of(&a2a, 8).unwrap()));
    let ag = shipped("direct_allgather", Collective::Allgather, 4);
    let l = launch_of(&ag, 8).unwrap();
    assert!(runs_in_place(&ag, &l));
    // Each rank's input read once, written to every output's slot.
    for p in l.seqs.iter().flatten() {
        assert_eq!(p.ops.len(), 1);
        let src: Loc = p.ops[0];
        assert_eq!(p.dsts.len(), 4);
        assert!(p.dsts.iter().all(|d| d.chunk == src.rank));
    }
}

#[test]
fn parts_are_a_block_per_part_access_bytes_up_to_the_launch_and_whole_mib_when_large() {
    use braid_plan::flat::{parts, PART_ACCESS_BYTES};
    const MIB: u64 = 1 << 20;
    let copy = PART_ACCESS_BYTES / 2;
    // Small chunks: one part; a copy (2 accesses a byte) gets a part per half of
    // PART_ACCESS_BYTES, up to the blocks a sequence gets.
    assert_eq!(parts(0, 2, 4, 132), 1);
    assert_eq!(parts(1000, 2, 4, 132), 1);
    assert_eq!(parts(3 * copy, 2, 4, 132), 3);
    assert_eq!(parts(64 * MIB, 2, 1, 132), 128);
    // A sequence that moves more per byte of a chunk (a one-shot all-reduce's merged pass
    // reads 8 inputs and writes 8 outputs) is cut finer: the same block's share.
    assert_eq!(parts(copy, 16, 1, 132), 8);
    assert_eq!(parts(copy / 8, 16, 1, 132), 1);
    assert_eq!(parts(3 * copy, 16, 2, 132), 24);
    // Parts of a power of two bytes: an 8 MiB chunk read 8 times and written 8 times is
    // 128 parts of 64 KiB, not 132 of 63,550 bytes; a 2 MiB one 128 of 16 KiB.
    assert_eq!(parts(8 * MIB, 16, 1, 132), 128);
    assert_eq!(parts(8 * MIB, 4, 1, 132), 128);
    assert_eq!(parts(2 * MIB, 16, 1, 132), 128);
    // 9 accesses a byte (8 reads, a write): 72 parts of 14,564 bytes become 64 of 16 KiB.
    assert_eq!(parts(MIB, 9, 1, 132), 64);
    // At least a line: 3 KiB read 16 times is 1 part; 40 KiB, 5 parts of 8 KiB.
    assert_eq!(parts(3 << 10, 16, 1, 132), 1);
    assert_eq!(parts(40 << 10, 16, 1, 132), 5);
    // Fewer than 2 accesses counts as a copy.
    assert_eq!(parts(3 * copy, 0, 4, 132), 3);
    // A MiB or more per part: whole MiB.
    assert_eq!(parts(256 * MIB, 2, 1, 132), 128);
    assert_eq!(parts(256 * MIB, 2, 8, 132), 16);
    assert_eq!(parts(256 * MIB, 2, 3, 132), 43);
    assert_eq!(parts(256 * MIB, 16, 1, 132), 128);
    // More sequences than blocks: one part each.
    assert_eq!(parts(256 * MIB, 2, 200, 132), 1);
}

#[test]
fn a_launch_counts_the_accesses_of_its_busiest_sequence() {
    let one = |rank: u32, chunk: u32| Loc {
        rank,
        buf: 0,
        chunk,
    };
    let pass = |count: u32, ops: usize, dsts: usize| LaunchPass {
        dsts: (0..dsts as u32).map(|r| one(r, 0)).collect(),
        count,
        ops: (0..ops as u32).map(|r| one(r, 1)).collect(),
    };
    let l = LaunchProgram {
        seqs: vec![vec![pass(1, 8, 8)], vec![pass(2, 1, 1), pass(1, 2, 1)]],
    };
    assert_eq!(l.accesses(), 16);
    let l = LaunchProgram {
        seqs: vec![vec![pass(4, 2, 3)], vec![pass(1, 8, 8)]],
    };
    assert_eq!(l.accesses(), 20);
    assert_eq!(LaunchProgram::default().accesses(), 0);
}
