//! Flat launches (`braid_cuda::flat`) without a GPU: every shipped plan that qualifies,
//! on 2, 4 and 8 ranks, resolved for one launch of all ranks and run by the host's model
//! of the kernel (`emulate`, the same passes, parts and padding rules), gives NCCL's
//! result exactly, out of place and, where the launch's hazard check lets it run, in
//! place; plans that need a FIFO and launches missing a peer do not qualify.

use braid_cuda::flat::{self, FlatLaunch, RankCall};
use braid_ir::Collective;
use braid_plan::flat::{FlatProgram, Operand};
use braid_plan::Plan;
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::geometry::{buffer_elems, Geometry};
use braid_runtime::reference::{fill_input, reference};
use braid_topo::Topology;

fn programs(plan: &Plan) -> Option<Vec<FlatProgram>> {
    (0..plan.n_ranks)
        .map(|r| {
            let layout = braid_cuda::program::Layout::new(plan, r);
            flat::program(plan, r, layout.direct())
        })
        .collect()
}

/// How [`run_flat`] lays the calls out.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    OutOfPlace,
    /// NCCL's in-place layouts (an allgather's `in` is its slot of `out`, a
    /// reduce-scatter's `out` its block of `in`, the others one buffer).
    InPlace,
}

/// Every rank's call of `plan` with `count`, laid out in one host memory of f32 (the
/// "addresses" are byte offsets into it, none 0), run flat (passes several ranks share
/// merged where `merge`); each rank's output (None where it has none) and the launch.
fn run_flat(
    plan: &Plan,
    progs: &[FlatProgram],
    count: usize,
    max_grid: u32,
    mode: Mode,
    merge: bool,
) -> Option<(Vec<Option<Vec<f32>>>, FlatLaunch)> {
    let n = plan.n_ranks;
    let (in_e, out_e) = buffer_elems(plan.collective, n, count);
    let geo = Geometry::new(plan.collective, n, plan.chunks, 0, count, 4, 1, 0);
    let mut mem = vec![0f32; 16];
    let mut bufs = Vec::new();
    for r in 0..n {
        let (has_in, has_out) = braid_cuda::program::has_buffers(plan, r);
        let mut bytes = vec![0u8; in_e * 4];
        fill_input(DType::F32, RedOp::Sum, r, n, 7, &mut bytes);
        let input: Vec<f32> = bytes
            .chunks(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let at = mem.len() as u64 * 4;
        // Poison: a pass that skips an element leaves a value no reduction makes.
        let poison = |mem: &mut Vec<f32>, k: usize| mem.extend(std::iter::repeat_n(-12345.0f32, k));
        let (i, o) = match (mode, has_in, has_out) {
            (Mode::InPlace, true, true) => match plan.collective {
                Collective::Allgather => {
                    poison(&mut mem, out_e);
                    let slot = r as usize * count;
                    mem[at as usize / 4 + slot..at as usize / 4 + slot + count]
                        .copy_from_slice(&input);
                    (at + slot as u64 * 4, at)
                }
                Collective::ReduceScatter => {
                    mem.extend(&input);
                    (at, at + (r as usize * count) as u64 * 4)
                }
                _ => {
                    mem.extend(&input);
                    (at, at)
                }
            },
            _ => {
                let i = if has_in {
                    mem.extend(&input);
                    at
                } else {
                    0
                };
                let o = if has_out {
                    let o = mem.len() as u64 * 4;
                    poison(&mut mem, out_e);
                    o
                } else {
                    0
                };
                (i, o)
            }
        };
        bufs.push((i, o));
    }
    let calls: Vec<RankCall<'_>> = (0..n)
        .map(|r| RankCall {
            rank: r,
            program: &progs[r as usize],
            input: bufs[r as usize].0,
            output: bufs[r as usize].1,
            geometry: &geo,
            plan: 1,
            in_untouched: mode == Mode::OutOfPlace,
            avg: false,
        })
        .collect();
    let prog = flat::launch_program(
        plan,
        &calls,
        if merge { braid_plan::flat::MAX_DSTS } else { 1 },
    )?;
    // The plan's verdict on running in place is what the addresses say.
    let checked = flat::resolve_program(&calls, &prog.clone().checked_on_addresses(), max_grid);
    let l = flat::resolve_program(&calls, &prog, max_grid);
    assert_eq!(
        checked.is_some(),
        l.is_some(),
        "{} {mode:?}: the plan's verdict (in place {}) against the addresses'",
        plan.name,
        prog.runs_in_place()
    );
    let l = l?;
    // The launch as the kernel reads it, from the argument it is launched with (packed
    // in the smallest that holds it, and in the full one).
    let packed = l.pack(false);
    assert_eq!(packed.unpack(), l, "{}: packing lost something", plan.name);
    assert_eq!(l.pack(true).unpack(), l, "{}: full argument", plan.name);
    flat::emulate(&packed.unpack(), &mut mem, 4, |a: f32, b: f32| a + b);
    let outs = bufs
        .iter()
        .map(|&(_, o)| (o != 0).then(|| mem[o as usize / 4..o as usize / 4 + out_e].to_vec()))
        .collect();
    Some((outs, l))
}

fn expected(plan: &Plan, count: usize) -> Vec<Option<Vec<f32>>> {
    let n = plan.n_ranks;
    let (in_e, _) = buffer_elems(plan.collective, n, count);
    let inputs: Vec<Vec<u8>> = (0..n)
        .map(|r| {
            let mut b = vec![0u8; in_e * 4];
            fill_input(DType::F32, RedOp::Sum, r, n, 7, &mut b);
            b
        })
        .collect();
    reference(plan.collective, DType::F32, RedOp::Sum, plan.root, &inputs)
        .into_iter()
        .map(|o| {
            o.map(|b| {
                b.chunks(4)
                    .map(|x| f32::from_le_bytes(x.try_into().unwrap()))
                    .collect()
            })
        })
        .collect()
}

const COLLECTIVES: [(Collective, Option<u32>); 6] = [
    (Collective::Allreduce, None),
    (Collective::Allgather, None),
    (Collective::ReduceScatter, None),
    (Collective::Alltoall, None),
    (Collective::Broadcast, Some(1)),
    (Collective::Reduce, Some(1)),
];

#[test]
fn every_qualifying_shipped_plan_gives_nccls_result() {
    let mut flat_plans = std::collections::BTreeSet::new();
    // (plan@ranks, merged): plans whose launch runs flat in place.
    let mut in_place = std::collections::BTreeSet::new();
    // plan@ranks: the bytes of its kernel argument where every chunk holds data.
    let mut args = std::collections::BTreeMap::new();
    for n in [2u32, 4, 8] {
        let lib =
            braid_library::Library::new(Topology::from_arg(&format!("nvswitch:{n}")).unwrap());
        for (c, root) in COLLECTIVES {
            for v in lib.plans(c, root) {
                let plan: &Plan = &v;
                let Some(progs) = programs(plan) else {
                    continue;
                };
                let name = format!("{}@{n}", plan.name);
                flat_plans.insert(name.clone());
                // Short chunks with padding, one element, and a count whose chunks are
                // cut into parts.
                for (count, grid) in [
                    (1usize, 132u32),
                    (37, 132),
                    (1000, 132),
                    (100_000, 132),
                    (100_000, 1),
                ] {
                    for (mode, merge) in [
                        (Mode::OutOfPlace, true),
                        (Mode::OutOfPlace, false),
                        (Mode::InPlace, true),
                        (Mode::InPlace, false),
                    ] {
                        if !merge && count > 1000 {
                            continue; // (what merging changes shows at every count)
                        }
                        let what = format!("{name}, count {count}, {mode:?}, merged {merge}");
                        let ran = run_flat(plan, &progs, count, grid, mode, merge);
                        let Some((got, l)) = ran else {
                            // Out of place every qualifying plan runs flat (where a pass
                            // may write several destinations, if it forwards); in place
                            // only where no pass writes what another reads first.
                            let forwards = progs.iter().any(|p| !p.reads_out.is_empty());
                            assert!(
                                mode == Mode::InPlace || (forwards && !merge),
                                "{what}: qualifies but does not resolve"
                            );
                            continue;
                        };
                        if mode == Mode::InPlace {
                            in_place.insert((name.clone(), merge));
                        }
                        assert!(
                            l.grid() <= grid.max(l.nseq),
                            "{what}: grid {} over {grid}",
                            l.grid()
                        );
                        if l.chunk_elems * 4 > braid_plan::flat::PART_ACCESS_BYTES && grid > 1 {
                            assert!(l.parts > 1, "{what}: a large call is cut into parts");
                        }
                        let want = expected(plan, count);
                        for r in 0..n as usize {
                            assert_eq!(got[r], want[r], "{what}, rank {r}");
                        }
                        // Every chunk holds data: the kernel argument is the one the
                        // cost model prices the launch with.
                        if count == 100_000 && mode == Mode::OutOfPlace && merge {
                            let pairs: Vec<(u32, &FlatProgram)> =
                                (0..n).zip(progs.iter()).collect();
                            let model =
                                braid_plan::flat::launch(&pairs, braid_plan::flat::MAX_DSTS)
                                    .and_then(|p| p.arg_bytes());
                            assert_eq!(model, Some(l.pack(false).bytes()), "{what}: argument");
                            args.insert(name.clone(), l.pack(false).bytes());
                        }
                    }
                }
            }
        }
    }
    // The plans the flat launch is for: every one-pass plan of the library.
    for name in [
        "one_shot_oop_allreduce@2",
        "one_shot_oop_allreduce@8",
        "direct_allgather@2",
        "direct_allgather@8",
        "direct_alltoall@4",
        "direct_reduce_scatter@8",
        "direct_broadcast@8",
        "direct_reduce@8",
        "two_shot_allreduce@4",
        "two_shot_allreduce@8",
    ] {
        assert!(
            flat_plans.contains(name),
            "{name} runs flat ({flat_plans:?})"
        );
    }
    // An 8-rank two-shot all-reduce takes the middle argument, the one-shot the smallest.
    assert_eq!(
        args["two_shot_allreduce@8"],
        24 + 8 * flat::WORDS_M,
        "{args:?}"
    );
    assert_eq!(
        args["one_shot_oop_allreduce@8"],
        24 + 8 * flat::WORDS_S,
        "{args:?}"
    );
    // Plans that reduce what they receive need their FIFOs.
    for name in ["ring_allreduce@8", "tree_allreduce@8"] {
        assert!(!flat_plans.contains(name), "{name} cannot run flat");
    }
    // In place: an allgather's ranks read slots no one writes; a reduce-scatter's or a
    // reduce's one pass reads and writes its block element by element; an all-reduce's
    // ranks write what the others read, unless their one pass is merged into one that
    // reads every input and writes every output element by element. An alltoall's ranks
    // overwrite blocks their peers read: never.
    for (name, merged, runs) in [
        ("direct_allgather@8", false, true),
        ("direct_allgather@8", true, true),
        ("direct_reduce_scatter@8", false, true),
        ("direct_reduce@8", false, true),
        ("direct_broadcast@8", true, true),
        ("one_shot_oop_allreduce@2", false, false),
        ("one_shot_oop_allreduce@8", false, false),
        ("one_shot_oop_allreduce@2", true, true),
        ("one_shot_oop_allreduce@8", true, true),
        // A two-shot all-reduce's second shot is done by its first (forwards).
        ("two_shot_allreduce@4", true, true),
        ("two_shot_allreduce@8", true, true),
        ("two_shot_allreduce@8", false, false),
        ("direct_alltoall@4", true, false),
        ("direct_alltoall@8", true, false),
    ] {
        assert_eq!(
            in_place.contains(&(name.to_string(), merged)),
            runs,
            "{name} in place, merged {merged}"
        );
    }
}

/// A launch's tasks, each with its destinations (the task's and its extra ones).
fn tasks(l: &FlatLaunch) -> Vec<(Vec<u64>, Vec<u64>)> {
    l.task[..l.first[l.nseq as usize] as usize]
        .iter()
        .map(|t| {
            let at = t.op0 as usize;
            let ops = &l.op[at..at + t.nops as usize];
            let extra = &l.op[at + t.nops as usize..at + t.nops as usize + t.ndst as usize - 1];
            (
                std::iter::once(t.dst)
                    .chain(extra.iter().map(|o| o.ptr))
                    .collect(),
                ops.iter().map(|o| o.ptr).collect(),
            )
        })
        .collect()
}

/// Ranks that compute the same chunk compute it once and write it to each of them.
#[test]
fn passes_that_ranks_share_are_done_once() {
    let lib = braid_library::Library::new(Topology::from_arg("nvswitch:8").unwrap());
    for (c, root, name, want) in [
        // One pass reading the eight inputs, writing the eight outputs.
        (
            Collective::Allreduce,
            None,
            "one_shot_oop_allreduce",
            vec![(8, 8)],
        ),
        // Each rank's input read once, written to the eight outputs.
        (
            Collective::Allgather,
            None,
            "direct_allgather",
            vec![(8, 1); 8],
        ),
        // The root's input read once, written to every output.
        (
            Collective::Broadcast,
            Some(2),
            "direct_broadcast",
            vec![(8, 1)],
        ),
        // Nothing to share: one pass per rank, its block of every input.
        (
            Collective::ReduceScatter,
            None,
            "direct_reduce_scatter",
            vec![(1, 8); 8],
        ),
    ] {
        let v = lib
            .plans(c, root)
            .into_iter()
            .find(|p| p.name == name)
            .unwrap();
        let progs = programs(&v).unwrap();
        let (_, l) = run_flat(&v, &progs, 1000, 132, Mode::OutOfPlace, true).unwrap();
        let got: Vec<(usize, usize)> = tasks(&l).iter().map(|(d, o)| (d.len(), o.len())).collect();
        assert_eq!(got, want, "{name}: (destinations, operands) per task");
        // Every destination written once.
        let mut dsts: Vec<u64> = tasks(&l).into_iter().flat_map(|(d, _)| d).collect();
        let all = dsts.len();
        dsts.sort_unstable();
        dsts.dedup();
        assert_eq!(dsts.len(), all, "{name}: a destination written twice");
    }
}

/// In place, a launch where a rank writes what a peer reads, in another sequence, is
/// not flat, whatever order its blocks would run in; the same launch out of place is.
#[test]
fn a_launch_that_writes_what_a_peer_reads_is_not_flat_in_place() {
    let plan = one_shot(2);
    let progs = programs(&plan).unwrap();
    let geo = Geometry::new(plan.collective, 2, plan.chunks, 0, 64, 4, 1, 0);
    let calls = |in_place: bool| -> Vec<RankCall<'_>> {
        (0..2u32)
            .map(|r| {
                let at = 4096 * (u64::from(r) + 1);
                RankCall {
                    rank: r,
                    program: &progs[r as usize],
                    input: at,
                    output: if in_place { at } else { at + 65536 },
                    geometry: &geo,
                    plan: 1,
                    in_untouched: !in_place,
                    avg: false,
                }
            })
            .collect()
    };
    let unmerged = |c: &[RankCall<'_>]| flat::launch_program(&plan, c, 1).unwrap();
    let oop = calls(false);
    assert!(flat::resolve_program(&oop, &unmerged(&oop), 132).is_some());
    let ip = calls(true);
    assert!(flat::resolve_program(&ip, &unmerged(&ip), 132).is_none());
    // Merged, each element of both buffers is read and written by one thread.
    let l = flat::resolve(&plan, &ip, 132).unwrap();
    assert_eq!(tasks(&l), vec![(vec![4096, 8192], vec![4096, 8192])]);
    // Buffers that do not lie as the plan's verdict assumes (rank 1's overlaps rank 0's)
    // are checked on their addresses: rank 1's pass writes what rank 0's reads.
    let mut overlap = calls(true);
    overlap[1].input = 4096 + 64;
    overlap[1].output = 4096 + 64;
    assert!(flat::resolve(&plan, &overlap, 132).is_none());
}

fn one_shot(n: u32) -> Plan {
    let lib = braid_library::Library::new(Topology::from_arg(&format!("nvswitch:{n}")).unwrap());
    let v = lib
        .plans(Collective::Allreduce, None)
        .into_iter()
        .find(|p| p.name == "one_shot_oop_allreduce")
        .unwrap();
    Plan::clone(&v)
}

#[test]
fn a_launch_without_every_peer_is_not_flat() {
    let plan = one_shot(4);
    let progs = programs(&plan).unwrap();
    // A launch of two of the four ranks (the others in other processes): no.
    let geo = Geometry::new(plan.collective, 4, plan.chunks, 0, 64, 4, 1, 0);
    let ranks = |n: u32| -> Vec<RankCall<'_>> {
        (0..n)
            .map(|r| RankCall {
                rank: r,
                program: &progs[r as usize],
                input: 4096 * (u64::from(r) + 1),
                output: 65536 * (u64::from(r) + 1),
                geometry: &geo,
                plan: 1,
                in_untouched: true,
                avg: false,
            })
            .collect()
    };
    assert!(flat::resolve(&plan, &ranks(2), 132).is_none());
    // Every rank, but one runs another plan (digest), or avg: no.
    let all = ranks(4);
    assert!(flat::resolve(&plan, &all, 132).is_some());
    let mut other = all.clone();
    other[3].plan = 2;
    assert!(flat::resolve(&plan, &other, 132).is_none());
    let mut avg = all.clone();
    avg[0].avg = true;
    assert!(flat::resolve(&plan, &avg, 132).is_none());
}

/// A program's last resolved launch is reused only for the very same calls: other
/// buffers, another geometry, another grid cap or a call that can no longer run flat are
/// resolved afresh.
#[test]
fn a_resolved_launch_is_reused_only_for_the_same_calls() {
    let plan = one_shot(4);
    let progs = programs(&plan).unwrap();
    let geo = Geometry::new(plan.collective, 4, plan.chunks, 0, 64, 4, 1, 0);
    let geo2 = Geometry::new(plan.collective, 4, plan.chunks, 0, 128, 4, 1, 0);
    fn calls<'a>(
        progs: &'a [FlatProgram],
        shift: u64,
        geometry: &'a Geometry,
    ) -> Vec<RankCall<'a>> {
        (0..4)
            .map(|r| RankCall {
                rank: r,
                program: &progs[r as usize],
                input: 4096 * (u64::from(r) + 1) + shift,
                output: 65536 * (u64::from(r) + 1) + shift,
                geometry,
                plan: 1,
                in_untouched: true,
                avg: false,
            })
            .collect()
    }
    let a = calls(&progs, 0, &geo);
    let prog = flat::launch_program(&plan, &a, braid_plan::flat::MAX_DSTS).unwrap();
    let fresh = |c: &[RankCall<'_>], grid: u32| flat::resolve_program(c, &prog, grid);
    let la = fresh(&a, 132).unwrap();
    assert_eq!(prog.resolve_cached(&a, 132), Some(la));
    assert_eq!(prog.resolve_cached(&a, 132), Some(la));
    let b = calls(&progs, 256, &geo);
    let lb = fresh(&b, 132).unwrap();
    assert_ne!(la, lb);
    assert_eq!(prog.resolve_cached(&b, 132), Some(lb));
    assert_eq!(prog.resolve_cached(&a, 132), Some(la));
    let c = calls(&progs, 0, &geo2);
    assert_eq!(prog.resolve_cached(&c, 132), fresh(&c, 132));
    assert_ne!(prog.resolve_cached(&c, 132), Some(la));
    assert_eq!(prog.resolve_cached(&a, 1), fresh(&a, 1));
    let mut avg = calls(&progs, 0, &geo);
    avg[2].avg = true;
    assert_eq!(prog.resolve_cached(&a, 132), Some(la));
    assert_eq!(prog.resolve_cached(&avg, 132), None);
    assert_eq!(prog.resolve_cached(&a, 132), Some(la));
}

#[test]
fn a_chain_is_one_pass_with_the_operands_in_rank_order() {
    let plan = one_shot(8);
    let progs = programs(&plan).unwrap();
    for (r, p) in progs.iter().enumerate() {
        // One pass per rank: out = in[0] (+) in[1] (+) ... (+) in[7], its own `in` in
        // its place (rank 1 starts with its own: in[1] (+) in[0] is the same sum),
        // every other sequence empty (sends its peers read, links).
        assert_eq!(p.seqs.len(), 1, "rank {r}");
        let pass = &p.seqs[0][0];
        assert_eq!(pass.ops.len(), 8, "rank {r}");
        for (k, op) in pass.ops.iter().enumerate() {
            let own_at = if r == 1 { 0 } else { r };
            let peer = if r == 1 && k == 1 { 0 } else { k };
            let expect = if k == own_at {
                Operand::Own { buf: 0, chunk: 0 }
            } else {
                Operand::Peer {
                    rank: peer as u32,
                    chunk: 0,
                }
            };
            assert_eq!(*op, expect, "rank {r} operand {k}");
        }
        assert_eq!(p.read_by.len(), 7);
    }
}

/// A broadcast root called in place lends its buffer (its steps only copy it onto
/// itself): the flat launch reads it and writes nothing there.
#[test]
fn an_in_place_broadcast_root_is_read_and_never_written() {
    let lib = braid_library::Library::new(Topology::from_arg("nvswitch:4").unwrap());
    let v = lib
        .plans(Collective::Broadcast, Some(0))
        .into_iter()
        .find(|p| p.name == "direct_broadcast")
        .unwrap();
    let progs = programs(&v).unwrap();
    let geo = Geometry::new(Collective::Broadcast, 4, v.chunks, 0, 1000, 4, 1, 0);
    let calls: Vec<RankCall<'_>> = (0..4u32)
        .map(|r| RankCall {
            rank: r,
            program: &progs[r as usize],
            // The root in place: one buffer.
            input: if r == 0 { 4096 } else { 0 },
            output: if r == 0 { 4096 } else { 65536 * u64::from(r) },
            geometry: &geo,
            plan: 1,
            in_untouched: r == 0,
            avg: false,
        })
        .collect();
    let l = flat::resolve(&v, &calls, 132).unwrap();
    // One copy of the root's buffer, written to each receiving rank, none to the root.
    assert_eq!(tasks(&l), vec![(vec![65536, 131072, 196608], vec![4096])]);
}
