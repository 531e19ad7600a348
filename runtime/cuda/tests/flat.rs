//! Flat launches (`braid_cuda::flat`) without a GPU: every shipped plan that qualifies,
//! on 2, 4 and 8 ranks, resolved for one launch of all ranks and run by the host's model
//! of the kernel (`emulate`, the same passes, parts and padding rules), gives NCCL's
//! result exactly; plans that need a FIFO, calls that do not lend their `in`, and
//! launches missing a peer do not qualify.

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

/// Every rank's call of `plan` with `count`, laid out in one host memory of f32 (the
/// "addresses" are byte offsets into it, none 0), run flat; each rank's output (None
/// where it has none) and the launch.
fn run_flat(
    plan: &Plan,
    progs: &[FlatProgram],
    count: usize,
    max_grid: u32,
    lends_in: bool,
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
        let input = if has_in {
            let at = mem.len();
            mem.extend(
                bytes
                    .chunks(4)
                    .map(|b| f32::from_le_bytes(b.try_into().unwrap())),
            );
            (at * 4) as u64
        } else {
            0
        };
        let output = if has_out {
            let at = mem.len();
            // Poison: a pass that skips an element leaves a value no reduction makes.
            mem.extend(std::iter::repeat_n(-12345.0f32, out_e));
            (at * 4) as u64
        } else {
            0
        };
        bufs.push((input, output));
    }
    let calls: Vec<RankCall<'_>> = (0..n)
        .map(|r| RankCall {
            rank: r,
            program: &progs[r as usize],
            input: bufs[r as usize].0,
            output: bufs[r as usize].1,
            geometry: &geo,
            plan: 1,
            lends_in,
            avg: false,
        })
        .collect();
    let l = flat::resolve(&calls, max_grid)?;
    flat::emulate(&l, &mut mem, 4, |a: f32, b: f32| a + b);
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
    for n in [2u32, 4, 8] {
        let lib =
            braid_library::Library::new(Topology::from_arg(&format!("nvswitch:{n}")).unwrap());
        for (c, root) in COLLECTIVES {
            for v in lib.plans(c, root) {
                let plan: &Plan = &v;
                let Some(progs) = programs(plan) else {
                    continue;
                };
                flat_plans.insert(format!("{}@{n}", plan.name));
                // Short chunks with padding, one element, and a count whose chunks are
                // cut into parts.
                for (count, grid) in [
                    (1usize, 132u32),
                    (37, 132),
                    (1000, 132),
                    (300_000, 132),
                    (300_000, 1),
                ] {
                    let (got, l) = run_flat(plan, &progs, count, grid, true).unwrap_or_else(|| {
                        panic!(
                            "{} on {n} ranks, count {count}: qualifies but does not resolve",
                            plan.name
                        )
                    });
                    assert!(
                        l.grid() <= grid.max(l.nseq),
                        "{}: grid {} over {grid}",
                        plan.name,
                        l.grid()
                    );
                    if count == 300_000 && grid > 1 {
                        assert!(l.parts > 1, "{}: a large call is cut into parts", plan.name);
                    }
                    let want = expected(plan, count);
                    for r in 0..n as usize {
                        assert_eq!(
                            got[r], want[r],
                            "{} on {n} ranks, count {count}, rank {r}",
                            plan.name
                        );
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
    ] {
        assert!(
            flat_plans.contains(name),
            "{name} runs flat ({flat_plans:?})"
        );
    }
    // Plans that forward what they receive need their FIFOs.
    for name in [
        "ring_allreduce@8",
        "tree_allreduce@8",
        "two_shot_allreduce@4",
    ] {
        assert!(!flat_plans.contains(name), "{name} cannot run flat");
    }
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
fn a_launch_without_every_peer_or_lending_no_input_is_not_flat() {
    let plan = one_shot(4);
    let progs = programs(&plan).unwrap();
    // In place (the calls do not lend their `in`): no direct reads, no flat launch.
    assert!(run_flat(&plan, &progs, 64, 132, false).is_none());
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
                lends_in: true,
                avg: false,
            })
            .collect()
    };
    assert!(flat::resolve(&ranks(2), 132).is_none());
    // Every rank, but one runs another plan (digest), or avg: no.
    let all = ranks(4);
    assert!(flat::resolve(&all, 132).is_some());
    let mut other = all.clone();
    other[3].plan = 2;
    assert!(flat::resolve(&other, 132).is_none());
    let mut avg = all.clone();
    avg[0].avg = true;
    assert!(flat::resolve(&avg, 132).is_none());
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
            lends_in: r == 0,
            avg: false,
        })
        .collect();
    let l = flat::resolve(&calls, 132).unwrap();
    let tasks = &l.task[..l.first[l.nseq as usize] as usize];
    assert_eq!(
        tasks.len(),
        3,
        "one copy per receiving rank, none on the root"
    );
    for t in tasks {
        assert_ne!(t.dst, 4096, "the root's buffer is written");
        let ops = &l.op[t.op0 as usize..(t.op0 + t.nops) as usize];
        assert_eq!(ops.len(), 1);
        assert_eq!(ops[0].ptr, 4096, "every rank reads the root's buffer");
    }
}
