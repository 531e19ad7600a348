//! Direct reads between ranks of one launch (docs/cuda.md): two ranks on one GPU, each
//! plan the only one of its communicator, checked against the reference, and the slices
//! that went through the FIFOs counted (`CudaComm::fifo_slices`): none for a call whose
//! pairs all go direct; some where a pair may not (in place, ranks in separate launches,
//! `BRAID_DIRECT=0`), with the same results.

use super::support::Kind;
use super::{
    bufs, check_outputs, group_call, open_with, opts, run_between_app_kernels, Cases, RankCall,
    Ranks,
};
use braid_cuda::{group, Bufs, GroupItem, Options};
use braid_ir::{Collective, Mode};
use braid_runtime::call::CallSpec;
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::reference::{inputs, reference};
use braid_runtime::registry::{Origin, Registry};
use braid_topo::Topology;
use std::sync::Arc;

/// Two ranks on GPU 0 with `plan` (shipped, for two ranks) as their only plan.
fn ranks(plan: &str, c: Collective, root: Option<u32>, opts: &Options) -> Result<Ranks, String> {
    ranks_of(2, plan, c, root, opts)
}

/// `n` ranks on GPU 0 with `plan` (shipped, for `n` ranks) as their only plan.
fn ranks_of(
    n: u32,
    plan: &str,
    c: Collective,
    root: Option<u32>,
    opts: &Options,
) -> Result<Ranks, String> {
    let lib = braid_library::Library::new(Topology::from_arg(&format!("nvswitch:{n}")).unwrap());
    let p = lib
        .plans(c, root)
        .into_iter()
        .find(|p| p.name == plan)
        .ok_or_else(|| format!("no shipped {plan} for {n} ranks"))?;
    let registry = Registry::new();
    registry.add_verified(p, Origin::User(plan.into()));
    open_with(n, 1, opts, Arc::new(registry))
}

/// How the ranks' calls are enqueued.
#[derive(Clone, Copy, PartialEq)]
enum Launch {
    /// One group: one launch holds both ranks.
    Together,
    /// Each rank on its own: one launch each.
    Apart,
}

/// Runs `spec` in `mode` once, checks it, and returns the slices every rank moved
/// through its FIFOs in that call.
fn slices(r: &Ranks, spec: &CallSpec, mode: Mode, how: Launch) -> Result<Vec<u64>, String> {
    let before: Vec<u64> = r
        .comms
        .iter()
        .map(|c| c.fifo_slices().map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let ins = inputs(spec.collective, spec.dtype, spec.op, 2, spec.count, 9);
    let calls = run_between_app_kernels(r, spec, mode, Kind::Plain, &ins, |calls| {
        let views: Vec<_> = calls.iter().map(RankCall::views).collect();
        match how {
            Launch::Together => group_call(&r.comms, &r.streams, &views, spec),
            Launch::Apart => {
                for ((comm, stream), (send, recv)) in r.comms.iter().zip(&r.streams).zip(&views) {
                    let bufs = match recv {
                        Some(recv) => Bufs::OutOfPlace { send, recv },
                        None => Bufs::InPlace(send),
                    };
                    comm.call(
                        spec.collective,
                        bufs,
                        spec.count,
                        spec.dtype,
                        spec.op,
                        spec.root,
                        stream,
                    )
                    .map_err(|e| e.to_string())?;
                }
                Ok(())
            }
        }
    })?;
    let expected = reference(spec.collective, spec.dtype, spec.op, spec.root, &ins);
    check_outputs(spec, &calls, &expected)?;
    r.comms
        .iter()
        .zip(&before)
        .map(|(c, b)| Ok(c.fifo_slices().map_err(|e| e.to_string())? - b))
        .collect()
}

/// A flat-launch case: plan, collective, root, ranks, count, dtype, mode, and whether
/// it runs flat.
type FlatRow = (
    &'static str,
    Collective,
    Option<u32>,
    u32,
    usize,
    DType,
    Mode,
    bool,
);

/// One case: a plan run on two ranks (plan, collective, root, count, mode, how the ranks
/// launch, direct reads on), and whether its slices must go through the FIFOs.
type Row = (
    &'static str,
    Collective,
    Option<u32>,
    usize,
    Mode,
    Launch,
    bool,
    bool,
);

pub fn section() -> Result<Cases, String> {
    use Collective::*;
    use Launch::*;
    use Mode::*;
    let on = opts(10);
    let off = Options {
        direct: false,
        ..opts(10)
    };
    let (oop, big) = ("one_shot_oop_allreduce", 1 << 20);
    #[rustfmt::skip]
    let runs: [Row; 10] = [
        (oop, Allreduce, None, big, OutOfPlace, Together, true, false),
        (oop, Allreduce, None, big, OutOfPlace, Together, false, true),
        (oop, Allreduce, None, 1001, OutOfPlace, Apart, true, true),
        ("one_shot_allreduce", Allreduce, None, 1001, InPlace, Together, true, true),
        ("one_shot_allreduce", Allreduce, None, 1001, OutOfPlace, Together, true, false),
        ("direct_allgather", Allgather, None, 333, OutOfPlace, Together, true, false),
        // In place an allgather's ranks read slots no one writes: a flat launch.
        ("direct_allgather", Allgather, None, 333, InPlace, Together, true, false),
        ("direct_reduce_scatter", ReduceScatter, None, 4097, OutOfPlace, Together, true, false),
        ("direct_broadcast", Broadcast, Some(1), 77, OutOfPlace, Together, true, false),
        ("direct_alltoall", Alltoall, None, 50, OutOfPlace, Together, true, false),
    ];
    let mut cases = Vec::new();
    for (plan, collective, root, count, mode, how, direct, fifo) in runs {
        let what = format!(
            "{plan} {count} {mode}{}{}",
            if how == Apart { ", ranks apart" } else { "" },
            if direct { "" } else { ", BRAID_DIRECT=0" }
        );
        let res = (|| {
            let r = ranks(plan, collective, root, if direct { &on } else { &off })?;
            let spec = CallSpec {
                collective,
                count,
                dtype: if collective == Allreduce {
                    DType::F32
                } else {
                    DType::I32
                },
                op: RedOp::Sum,
                root,
            };
            // Twice: the first call also sets up; the second is the usual one.
            slices(&r, &spec, mode, how)?;
            let moved = slices(&r, &spec, mode, how)?;
            match (fifo, moved.iter().all(|&m| m == 0)) {
                (false, false) => Err(format!("slices went through the FIFOs: {moved:?}")),
                (true, true) => Err("no slice went through the FIFOs".into()),
                _ => Ok(()),
            }
        })();
        cases.push((what, res));
    }
    // (plan, collective, root, ranks, count, dtype, whether the chains' blocks share the
    // pass: one replica, and each part at least 4 KiB; a reduce-scatter's count is each
    // rank's part, and 4097 f32 on 4 ranks would split).
    for (plan, collective, root, n, count, dtype, split) in [
        (
            "one_shot_oop_allreduce",
            Allreduce,
            None,
            4,
            1 << 16,
            DType::F32,
            true,
        ),
        (
            "one_shot_oop_allreduce",
            Allreduce,
            None,
            8,
            1001,
            DType::F32,
            false,
        ),
        (
            "one_shot_oop_allreduce",
            Allreduce,
            None,
            8,
            999,
            DType::F16,
            false,
        ),
        (
            "one_shot_oop_allreduce",
            Allreduce,
            None,
            8,
            300_001,
            DType::F32,
            true,
        ),
        (
            "direct_reduce_scatter",
            ReduceScatter,
            None,
            4,
            1001,
            DType::F32,
            false,
        ),
        (
            "direct_reduce_scatter",
            ReduceScatter,
            None,
            8,
            8 * 20_003,
            DType::F32,
            true,
        ),
        (
            "direct_reduce",
            Reduce,
            Some(2),
            4,
            3000,
            DType::Bf16,
            false,
        ),
        (
            "direct_reduce",
            Reduce,
            Some(5),
            8,
            1 << 18,
            DType::Bf16,
            true,
        ),
    ] {
        let what = format!(
            "{plan} on {n} ranks, {count} {dtype}: each chain as one pass{}",
            if split { ", shared by its blocks" } else { "" }
        );
        cases.push((what, chains(plan, collective, root, n, count, dtype, split)));
    }
    // (plan, collective, root, ranks, count, dtype, mode, whether it runs flat)
    #[rustfmt::skip]
    let flats: [FlatRow; 15] = [
        ("one_shot_oop_allreduce", Allreduce, None, 2, 2, DType::F32, OutOfPlace, true),
        ("one_shot_oop_allreduce", Allreduce, None, 8, 1001, DType::Bf16, OutOfPlace, true),
        ("one_shot_oop_allreduce", Allreduce, None, 8, 300_001, DType::F32, OutOfPlace, true),
        ("direct_allgather", Allgather, None, 8, 333, DType::I32, OutOfPlace, true),
        ("direct_reduce_scatter", ReduceScatter, None, 4, 4097, DType::F16, OutOfPlace, true),
        ("direct_alltoall", Alltoall, None, 8, 50, DType::I32, OutOfPlace, true),
        ("direct_broadcast", Broadcast, Some(3), 4, 77, DType::I32, OutOfPlace, true),
        ("direct_reduce", Reduce, Some(5), 8, 3000, DType::F32, OutOfPlace, true),
        ("direct_allgather", Allgather, None, 4, 333, DType::I32, InPlace, true),
        ("two_shot_allreduce", Allreduce, None, 2, 3, DType::F32, InPlace, true),
        ("two_shot_allreduce", Allreduce, None, 4, 1001, DType::Bf16, OutOfPlace, true),
        ("two_shot_allreduce", Allreduce, None, 8, 300_001, DType::F32, InPlace, true),
        ("direct_reduce_scatter", ReduceScatter, None, 8, 4097, DType::F32, InPlace, true),
        ("direct_broadcast", Broadcast, Some(2), 8, 5000, DType::F32, InPlace, true),
        ("ring_allreduce", Allreduce, None, 4, 4097, DType::F32, OutOfPlace, false),
    ];
    for (plan, collective, root, n, count, dtype, mode, runs_flat) in flats {
        let what = format!(
            "{plan} on {n} ranks, {count} {dtype} {mode}: {}",
            if runs_flat {
                "a flat launch, the interpreter's bits"
            } else {
                "not flat"
            }
        );
        cases.push((
            what,
            flat(plan, collective, root, n, count, dtype, mode, runs_flat),
        ));
    }
    for rank_major in [false, true] {
        let what = format!(
            "two all-reduces of one size per rank in one group, issued {}",
            if rank_major {
                "rank by rank"
            } else {
                "collective by collective"
            }
        );
        cases.push((what, two_per_rank(rank_major)));
    }
    Ok(cases)
}

/// A group holding two all-reduces of the same size per rank (their own buffers), issued
/// collective by collective or rank by rank: each rank's calls run in order, each meets
/// its peers' matching call, and each result is its own (two calls of one rank in one
/// launch would share its connections, and a direct read could take the other call's
/// input).
fn two_per_rank(rank_major: bool) -> Result<(), String> {
    let r = ranks(
        "one_shot_oop_allreduce",
        Collective::Allreduce,
        None,
        &opts(10),
    )?;
    let spec = CallSpec {
        collective: Collective::Allreduce,
        count: 4097,
        dtype: DType::F32,
        op: RedOp::Sum,
        root: None,
    };
    let mut sets = Vec::new();
    for seed in [3, 4] {
        let ins = inputs(spec.collective, spec.dtype, spec.op, 2, spec.count, seed);
        let calls = r
            .comms
            .iter()
            .zip(&r.streams)
            .zip(&ins)
            .map(|((c, s), i)| RankCall::new(c, s, &spec, Mode::OutOfPlace, Kind::Plain, i))
            .collect::<Result<Vec<_>, _>>()?;
        for ((c, app), s) in calls.iter().zip(&r.apps).zip(&r.streams) {
            c.before(app, s)?;
        }
        sets.push((ins, calls));
    }
    let views: Vec<Vec<_>> = sets
        .iter()
        .map(|(_, calls)| calls.iter().map(RankCall::views).collect())
        .collect();
    let item = |set: usize, rank: usize| GroupItem {
        comm: &r.comms[rank],
        collective: spec.collective,
        bufs: bufs(&views[set][rank]),
        count: spec.count,
        dtype: spec.dtype,
        op: spec.op,
        root: None,
        stream: &r.streams[rank],
    };
    let order: [(usize, usize); 4] = if rank_major {
        [(0, 0), (1, 0), (0, 1), (1, 1)]
    } else {
        [(0, 0), (0, 1), (1, 0), (1, 1)]
    };
    let items: Vec<GroupItem> = order.iter().map(|&(set, rank)| item(set, rank)).collect();
    group(&items).map_err(|e| e.to_string())?;
    for (_, calls) in &sets {
        for ((c, app), s) in calls.iter().zip(&r.apps).zip(&r.streams) {
            c.after(app, s)?;
        }
    }
    for s in &r.streams {
        s.synchronize().map_err(|e| e.to_string())?;
    }
    for c in &r.comms {
        if let Some(e) = c.async_error() {
            return Err(e);
        }
    }
    for (ins, calls) in &sets {
        let expected = reference(spec.collective, spec.dtype, spec.op, None, ins);
        check_outputs(&spec, calls, &expected)?;
    }
    Ok(())
}

/// Runs `spec` in `mode` twice as one group (the first call also sets up; the second is
/// the usual one), each checked against `expected`; the second call's outputs.
#[allow(clippy::type_complexity)]
fn twice(
    r: &Ranks,
    spec: &CallSpec,
    mode: Mode,
    ins: &[Vec<u8>],
    expected: &[Option<Vec<u8>>],
) -> Result<Vec<Option<Vec<u8>>>, String> {
    let mut got = Vec::new();
    for _ in 0..2 {
        let calls = run_between_app_kernels(r, spec, mode, Kind::Plain, ins, |calls| {
            let views: Vec<_> = calls.iter().map(RankCall::views).collect();
            group_call(&r.comms, &r.streams, &views, spec)
        })?;
        check_outputs(spec, &calls, expected)?;
        got = calls
            .iter()
            .map(RankCall::output)
            .collect::<Result<Vec<_>, _>>()?;
    }
    Ok(got)
}

/// A rank's chains of reductions (docs/cuda.md) run as one pass when every peer reads
/// directly: with `BRAID_TRACE` on, every later link of such a chain records the same
/// start and end (it did nothing; its head did it all), and the results are those of the
/// chain run step by step through the FIFOs (`BRAID_DIRECT=0`, where no link is idle)
/// to the bit, and the reference's.
fn chains(
    plan: &str,
    collective: Collective,
    root: Option<u32>,
    n: u32,
    count: usize,
    dtype: DType,
    split: bool,
) -> Result<(), String> {
    let spec = CallSpec {
        collective,
        count,
        dtype,
        op: RedOp::Sum,
        root,
    };
    let ins = inputs(collective, dtype, spec.op, n, count, 11);
    let expected = reference(collective, dtype, spec.op, root, &ins);
    let mut outputs = Vec::new();
    for direct in [true, false] {
        let mut o = Options {
            direct,
            trace: true,
            ..opts(10)
        };
        o.policy.replicas = Some(1);
        let r = ranks_of(n, plan, collective, root, &o)?;
        let got = twice(&r, &spec, Mode::OutOfPlace, &ins, &expected)?;
        let mut fused = 0;
        for (rank, comm) in r.comms.iter().enumerate() {
            let (p, times) = comm
                .step_times(&spec, Mode::OutOfPlace)
                .map_err(|e| e.to_string())?
                .ok_or(format!("rank {rank}: no step times"))?;
            for braid_cuda::program::Chain { steps: links, .. } in
                braid_cuda::program::chains(&p, rank as u32)
            {
                for &(b, st) in &links[1..] {
                    let (a, e) = times[b as usize][st as usize];
                    // Idle (its head ran the pass) only with direct reads and no split.
                    match (direct && !split, a == e) {
                        (true, false) => {
                            return Err(format!("rank {rank}: link {b}.{st} ran ({a} to {e})"))
                        }
                        (false, true) => {
                            return Err(format!(
                                "rank {rank}: link {b}.{st} idle (direct reads {direct}, \
                                 split {split})"
                            ))
                        }
                        _ => {}
                    }
                }
                fused += 1;
            }
        }
        let reducing = if collective == Collective::Reduce {
            1
        } else {
            n as usize
        };
        if fused != reducing {
            return Err(format!("{fused} chains on {n} ranks, expected {reducing}"));
        }
        outputs.push(got);
    }
    if outputs[0] != outputs[1] {
        return Err("one pass and step by step differ in their bits".into());
    }
    Ok(())
}

/// A call run as a flat launch (`braid_cuda::flat`, the default) and through the plan
/// interpreter (`BRAID_FLAT=0`): both the reference's result, the same bits, and the
/// flat launches counted where the call qualifies (none where it does not, and none with
/// flat launches off).
#[allow(clippy::too_many_arguments)]
fn flat(
    plan: &str,
    collective: Collective,
    root: Option<u32>,
    n: u32,
    count: usize,
    dtype: DType,
    mode: Mode,
    runs_flat: bool,
) -> Result<(), String> {
    let spec = CallSpec {
        collective,
        count,
        dtype,
        op: RedOp::Sum,
        root,
    };
    let ins = inputs(collective, dtype, spec.op, n, count, 13);
    let expected = reference(collective, dtype, spec.op, root, &ins);
    let mut outputs = Vec::new();
    for on in [true, false] {
        let o = Options {
            flat: on,
            ..opts(10)
        };
        let r = ranks_of(n, plan, collective, root, &o)?;
        let before: Vec<u64> = r.comms.iter().map(|c| c.stats().flat_launches).collect();
        let got = twice(&r, &spec, mode, &ins, &expected)?;
        for (rank, (c, b)) in r.comms.iter().zip(&before).enumerate() {
            let flat = c.stats().flat_launches - b;
            let want = if on && runs_flat { 2 } else { 0 };
            if flat != want {
                return Err(format!(
                    "rank {rank}: {flat} flat launches in 2 calls (flat {on}), expected {want}"
                ));
            }
        }
        outputs.push(got);
    }
    if outputs[0] != outputs[1] {
        return Err("the flat launch and the interpreter differ in their bits".into());
    }
    Ok(())
}
