//! The cost model on the shipped plans and the presets: sane in itself (monotone in size,
//! above the bandwidth floor, a consistent timeline) and ranking plans as published
//! behaviour says (docs/costmodel.md): rings win large messages inside a node, trees,
//! one-shot and hierarchical plans win small ones, and across nodes.

use braid_cost::profile::{BlockWork, CopyScale, PerProtocol};
use braid_cost::sim::{collective_floor_us, StepTime};
use braid_cost::{predict, rank, Call, Candidate, Profile, Request};
use braid_ir::{Collective, Mode, Protocol};
use braid_library::Library;
use braid_plan::Verified;
use braid_topo::Topology;
use std::sync::Arc;

fn plans(topo: &str, c: Collective) -> (Topology, Vec<Arc<Verified>>) {
    let t = Topology::from_arg(topo).unwrap();
    let lib = Library::new(t.clone());
    let root = c.is_rooted().then_some(0);
    (t, lib.plans(c, root))
}

fn plan<'a>(ps: &'a [Arc<Verified>], name: &str) -> &'a Verified {
    ps.iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no {name}"))
}

fn time(p: &braid_plan::Plan, t: &Topology, bytes: u64, protocol: Protocol, replicas: u32) -> f64 {
    predict(
        p,
        t,
        &Profile::default(),
        &Call {
            bytes,
            elem: 4,
            protocol,
            replicas,
            direct: false,
            together: false,
            in_place: false,
        },
    )
    .unwrap()
    .total_us
}

/// A call of `bytes` of f32 in the simple protocol on `replicas`, its ranks each in its
/// own launch.
fn simple(bytes: u64, replicas: u32, in_place: bool) -> Call {
    Call {
        bytes,
        elem: 4,
        protocol: Protocol::Simple,
        replicas,
        direct: false,
        together: false,
        in_place,
    }
}

/// An out-of-place call of one replica whose ranks launch together with direct reads
/// (ranks sharing a GPU in one process: where a flat launch may run).
fn together(bytes: u64, protocol: Protocol) -> Call {
    Call {
        protocol,
        replicas: 1,
        direct: true,
        together: true,
        ..simple(bytes, 1, false)
    }
}

/// Step `s` of block `b` of rank `r` in a predicted timeline.
fn step_at(timeline: &[StepTime], r: usize, b: usize, s: usize) -> &StepTime {
    timeline
        .iter()
        .find(|x| (x.rank, x.block, x.step) == (r as u32, b as u32, s as u32))
        .unwrap()
}

/// The shipped plans `ps` as candidates.
fn shipped(ps: &[Arc<Verified>]) -> Vec<Candidate<'_>> {
    ps.iter()
        .map(|p| Candidate {
            plan: p,
            origin: "shipped".into(),
        })
        .collect()
}

fn winner(topo: &str, c: Collective, bytes: u64) -> String {
    let (t, ps) = plans(topo, c);
    let cands = shipped(&ps);
    let req = Request {
        collective: c,
        root: c.is_rooted().then_some(0),
        mode: Mode::OutOfPlace,
        bytes,
        elem: 4,
        direct: false,
        ll128: false,
        excluded: None,
    };
    let r = rank(&cands, &t, &Profile::default(), &req);
    assert!(r[0].result.is_ok(), "{r:?}");
    r[0].name.clone()
}

#[test]
fn time_grows_with_size_and_stays_above_the_bandwidth_floor() {
    let (t, ps) = plans("nvswitch:8", Collective::Allreduce);
    let ring = plan(&ps, "ring_allreduce");
    let mut last = 0.0;
    for k in (3..=30).step_by(3) {
        let bytes = 1u64 << k;
        let us = time(ring, &t, bytes, Protocol::Simple, 8);
        assert!(us >= last, "{bytes} B: {us} after {last}");
        let floor =
            collective_floor_us(Collective::Allreduce, 8, bytes, t.path(0, 1).bandwidth_gbps);
        assert!(us >= floor, "{bytes} B: {us} µs below the floor {floor}");
        last = us;
    }
    assert!(
        last > 10.0 * time(ring, &t, 8, Protocol::Simple, 8),
        "1 GiB costs more than 8 B"
    );
    // At 1 GiB with enough replicas the ring is bandwidth bound: within 30 % of the floor.
    let big = 1u64 << 30;
    let floor = collective_floor_us(Collective::Allreduce, 8, big, t.path(0, 1).bandwidth_gbps);
    let us = time(ring, &t, big, Protocol::Simple, 32);
    assert!(us < floor * 1.3, "{us} µs against a floor of {floor}");
    // One replica is capped by what one block moves.
    assert!(time(ring, &t, big, Protocol::Simple, 1) > 2.0 * us);
}

#[test]
fn ll_wins_small_messages_and_simple_large_ones() {
    let (t, ps) = plans("nvswitch:8", Collective::Allreduce);
    let ring = plan(&ps, "ring_allreduce");
    assert!(time(ring, &t, 64, Protocol::Ll, 1) < time(ring, &t, 64, Protocol::Simple, 1));
    assert!(
        time(ring, &t, 256 << 20, Protocol::Simple, 16)
            < time(ring, &t, 256 << 20, Protocol::Ll, 16)
    );
}

/// Inside a node latency plans win small messages and full-bandwidth plans large ones:
/// rings over PCIe (NCCL's choice); over NVSwitch, where every pair has the full link,
/// a ring, two-shot or the double binary tree (NCCL 2.4's full-bandwidth tree), never
/// the single tree (its inner ranks send twice what they receive) nor a latency plan.
/// The trees run tile by tile, and are priced so; over NVSwitch at 1 GiB the double
/// binary tree then comes out a few percent ahead of the ring with the default constants
/// (docs/costmodel.md).
#[test]
fn inside_a_node_rings_win_large_messages_and_latency_plans_small_ones() {
    for topo in ["nvswitch:8", "pcie:8"] {
        let small = winner(topo, Collective::Allreduce, 8);
        assert_ne!(small, "ring_allreduce", "{topo}: 8 B");
        let large = winner(topo, Collective::Allreduce, 1 << 30);
        let full_bandwidth = large.contains("ring")
            || large.contains("two_shot")
            || (topo == "nvswitch:8" && large == "double_binary_tree_allreduce");
        assert!(full_bandwidth, "{topo}: 1 GiB won by {large}");
    }
    assert!(winner("pcie:8", Collective::Allreduce, 1 << 30).contains("ring"));
}

/// A tiled plan's steps run tile by tile (each its share of the chunk one FIFO slot at a
/// time), so a tree pipelines down its levels: simulated as one pass over the whole
/// message it would take a level's time per level.
#[test]
fn a_tiled_tree_pipelines_its_levels_tile_by_tile() {
    let (t, ps) = plans("nvswitch:8", Collective::Allreduce);
    let tree = plan(&ps, "tree_allreduce");
    assert_eq!(tree.execution, braid_plan::Execution::Tiled);
    let big = 64u64 << 20;
    let tiled = time(tree, &t, big, Protocol::Simple, 1);
    let mut streaming = (**tree).clone();
    streaming.execution = braid_plan::Execution::Streaming;
    let one_pass = time(&streaming, &t, big, Protocol::Simple, 1);
    assert!(
        tiled < 0.6 * one_pass,
        "tiled {tiled} µs, one pass {one_pass} µs"
    );
    // One tile (a small call) is priced as one pass.
    let small = 4096;
    let a = time(tree, &t, small, Protocol::Simple, 1);
    let b = time(&streaming, &t, small, Protocol::Simple, 1);
    assert!((a - b).abs() < 1e-9, "{a} against {b}");
}

#[test]
fn across_nodes_trees_or_hierarchical_plans_win_small_messages() {
    let small = winner("cluster:4x8", Collective::Allreduce, 1 << 10);
    assert!(
        small.contains("tree") || small.contains("hierarchical") || small.contains("halving"),
        "{small}"
    );
    let (t, ps) = plans("cluster:4x8", Collective::Allreduce);
    let ring = time(plan(&ps, "ring_allreduce"), &t, 1 << 10, Protocol::Ll, 1);
    let winner_plan = plan(&ps, &small);
    assert!(time(winner_plan, &t, 1 << 10, Protocol::Ll, 1) < ring);
}

#[test]
fn the_timeline_has_every_step_once_and_receives_after_their_sends() {
    let (t, ps) = plans("nvswitch:4", Collective::Allreduce);
    let ring = plan(&ps, "ring_allreduce");
    let pred = predict(ring, &t, &Profile::default(), &simple(1 << 20, 1, false)).unwrap();
    let steps: usize = ring
        .ranks
        .iter()
        .flat_map(|r| r.blocks.iter().map(|b| b.steps.len()))
        .sum();
    assert_eq!(pred.timeline.len(), steps);
    for s in &pred.timeline {
        assert!(s.start_us <= s.end_us && s.end_us <= pred.total_us, "{s:?}");
    }
    // Every rank's last step ends after the first hop's latency: nothing is free.
    let hop = t.path(0, 1).latency_us;
    assert!(pred
        .timeline
        .iter()
        .filter(|s| s.kind.starts_with("recv"))
        .all(|s| s.end_us > hop));
    let trace = braid_cost::trace::chrome_trace(&ring.name, &pred);
    let v: serde_json::Value = serde_json::from_str(&trace).unwrap();
    let xs = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .count();
    assert_eq!(xs, steps);
    assert_eq!(v["otherData"]["predicted_us"], pred.total_us);
    // A measured timeline (BRAID_TRACE) in the same form: the same events, its own total.
    let measured = braid_cost::trace::chrome_trace_measured(&ring.name, &pred.timeline);
    let m: serde_json::Value = serde_json::from_str(&measured).unwrap();
    assert_eq!(m["traceEvents"], v["traceEvents"]);
    let last = pred.timeline.iter().map(|s| s.end_us).fold(0f64, f64::max);
    let total = m["otherData"]["measured_us"].as_f64().unwrap();
    assert!((total - last).abs() < 1e-6, "{total} {last}");
    assert!(m["otherData"].get("predicted_us").is_none());
}

#[test]
fn excluded_candidates_say_why() {
    let (t, ps) = plans("nvswitch:4", Collective::Allreduce);
    let (_, gathers) = plans("nvswitch:4", Collective::Allgather);
    let mut cands = shipped(&ps);
    cands.push(Candidate {
        plan: &gathers[0],
        origin: "user x.json".into(),
    });
    let req = Request {
        collective: Collective::Allreduce,
        root: None,
        mode: Mode::OutOfPlace,
        bytes: 4096,
        elem: 4,
        direct: false,
        ll128: false,
        excluded: None,
    };
    let r = rank(&cands, &t, &Profile::default(), &req);
    let last = r.last().unwrap();
    assert_eq!(last.result.as_ref().unwrap_err(), "it is a allgather plan");
    assert!(r.iter().filter(|x| x.result.is_ok()).count() >= 3);
}

#[test]
fn rings_meet_the_cut_bound_inside_an_nvswitch_node_and_the_checker_sees_a_bad_order() {
    use braid_cost::bound::{bottleneck_us, cut_bound_us};
    for (c, name) in [
        (Collective::Allgather, "ring_allgather"),
        (Collective::Allreduce, "ring_allreduce"),
    ] {
        let (t, ps) = plans("nvswitch:8", c);
        let ring = plan(&ps, name);
        let bytes = 1u64 << 30;
        let (bound, _) = cut_bound_us(&t, c, bytes);
        let (neck, link) = bottleneck_us(ring, &t, bytes, 4);
        assert!(
            bound > 0.0 && neck >= bound * 0.999,
            "{name}: {neck} below the bound {bound}"
        );
        assert!(
            neck <= bound * 1.01,
            "{name}: {neck} µs on {link}, bound {bound}"
        );
    }
    // Across nodes a flat ring crosses the network more than it must: above the bound.
    let (t, ps) = plans("cluster:2x8", Collective::Allgather);
    let ring = plan(&ps, "ring_allgather");
    let (bound, cut) = cut_bound_us(&t, Collective::Allgather, 1 << 30);
    let (neck, _) = bottleneck_us(ring, &t, 1 << 30, 4);
    assert!(neck >= bound, "{neck} < {bound} (cut {cut:?})");
}

/// Ranks sharing one memory: a shared rate bounds the call by the bytes its steps move,
/// replicas included, and without one (ranks on their own GPUs) nothing changes.
#[test]
fn a_shared_memory_rate_bounds_the_call_by_the_bytes_its_steps_move() {
    let (t, ps) = plans("nvswitch:4", Collective::Allreduce);
    let ring = plan(&ps, "ring_allreduce");
    let bytes = 256u64 << 20;
    let price = |profile: &Profile, replicas: u32| {
        predict(ring, &t, profile, &simple(bytes, replicas, false))
            .unwrap()
            .total_us
    };
    let free = Profile::default();
    let mut shared = Profile::default();
    shared.shared_gbps.simple = 100.0;
    // A ring all-reduce's steps on 4 ranks move 2 (n - 1) slices of 1/n of the data per
    // rank, each step once: 4 * 6 * bytes / 4 = 6 * bytes in all.
    let floor = 6.0 * bytes as f64 / (100.0 * 1e3) + shared.call_us.simple;
    for r in [1, 4] {
        let t_free = price(&free, r);
        let t_shared = price(&shared, r);
        assert!(
            t_shared >= floor * 0.999,
            "{r} replicas: {t_shared} < {floor}"
        );
        assert!(t_shared >= t_free, "{r} replicas");
    }
    // More replicas no longer help once the shared memory is the limit.
    assert!((price(&shared, 4) - price(&shared, 1)).abs() / price(&shared, 1) < 0.05);
    assert!(price(&free, 4) < price(&free, 1) * 0.5);
    // A rate so high it never binds does not enter the price, and leaves what ranks
    // sharing a GPU are priced as: no link's bandwidth, and no link's nominal latency
    // on top of the measured hop (they cross none), so no dearer than ranks apart.
    shared.shared_gbps.simple = 1e8;
    let never = price(&shared, 2);
    shared.shared_gbps.simple = 1e9;
    assert_eq!(never, price(&shared, 2));
    assert!(never <= price(&free, 2), "{never}");
}

/// Ranks sharing one memory whose rate binds with a knee (`shared_knee`): a call whose
/// blocks together ask about the memory's rate costs more than both bounds say (up to
/// `2^(1/k)` times), one far below the rate or far above it hardly more, and a flat
/// launch alike; a knee of 0 prices as before it existed.
#[test]
fn a_memory_with_a_knee_slows_calls_near_its_rate_most() {
    let (t, ps) = plans("nvswitch:2", Collective::ReduceScatter);
    let ring = plan(&ps, "ring_reduce_scatter");
    let direct = plan(&ps, "direct_reduce_scatter");
    let bytes = 128u64 << 20;
    let mut sharp = Profile::shared_gpu();
    sharp.shared_knee = braid_cost::profile::PerProtocol::both(0.0);
    let mut knee = sharp.clone();
    knee.shared_knee.simple = 2.0;
    let price = |p: &Profile, plan: &Verified, replicas: u32, together: bool| {
        let call = Call {
            direct: together,
            together,
            ..simple(bytes, replicas, false)
        };
        predict(plan, &t, p, &call).unwrap().total_us
    };
    // The ring on 2 ranks: the replica count whose blocks together ask about the
    // memory's rate pays the knee most, close to sqrt(2), and no count pays more.
    let ratio = |r: u32| price(&knee, ring, r, false) / price(&sharp, ring, r, false);
    let (at_rate, most) = (1..=32)
        .map(|r| (r, ratio(r)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap();
    assert!(
        most > 1.3 && most <= 2f64.sqrt() + 1e-9,
        "{at_rate} replicas: x{most}"
    );
    assert!(at_rate > 1 && at_rate < 32, "{at_rate}");
    let s = price(&sharp, ring, at_rate, false);
    // One replica: its blocks ask a tenth of the rate or less, and hardly pay.
    let (s1, k1) = (price(&sharp, ring, 1, false), price(&knee, ring, 1, false));
    assert!(k1 >= s1 && k1 < s1 * 1.01, "{s1} sharp, {k1} with the knee");
    // A flat launch of many blocks (the direct reduce-scatter, launched together): its
    // memory binds, its blocks far from it; a little more, never less.
    let (sf, kf) = (
        price(&sharp, direct, 1, true),
        price(&knee, direct, 1, true),
    );
    assert!(kf >= sf && kf < sf * 1.15, "{sf} sharp, {kf} with the knee");
    // A knee of 0 is the sharp model: the profile written before the knee prices alike.
    let mut none = knee.clone();
    none.shared_knee.simple = 0.0;
    assert_eq!(price(&none, ring, at_rate, false), s);
}

/// Ranks sharing one memory: a call in phases pays each phase's demand on it, not the
/// average. The staged one-shot all-reduce on 2 ranks (direct reads) first receives and
/// copies (4 accesses per byte a rank, two blocks at once), then reduces alone (3
/// accesses, one block): with the memory's rate between the two phases' demands, the
/// first phase is stretched and the second not, and the call costs more than both its
/// unshared time and its whole traffic over the rate (the larger of which it cost before).
#[test]
fn a_call_in_phases_pays_each_phases_demand_on_a_shared_memory() {
    let (t, ps) = plans("nvswitch:2", Collective::Allreduce);
    let staged = plan(&ps, "one_shot_allreduce");
    let bytes = 64u64 << 20;
    let call = Call {
        direct: true,
        together: true,
        ..simple(bytes, 1, false)
    };
    let free = Profile::default();
    let block = free.block_gbps.simple;
    let mut shared = Profile::default();
    // Phase 1 asks 2 ranks x 2 blocks x 2 accesses x the block rate; phase 2, 2 ranks x
    // 1 block x 2 (3 accesses at 1.5 times a copy's time).
    shared.shared_gbps.simple = 5.0 * block;
    let t_free = predict(staged, &t, &free, &call).unwrap().total_us;
    let p = predict(staged, &t, &shared, &call).unwrap();
    // 7 accesses per byte a rank: receive 2, copy 2, reduce 3.
    let floor = 14.0 * bytes as f64 / (shared.shared_gbps.simple * 1e3) + shared.call_us.simple;
    let before = t_free.max(floor);
    assert!(
        p.total_us > before * 1.05,
        "{} against {t_free} and {floor}",
        p.total_us
    );
    // Phase 1 at 8/5 of its unshared time, phase 2 unchanged: 1.6 + 1.5 copies' times
    // against 1 + 1.5.
    let copy = bytes as f64 / (block * 1e3);
    let expected = 3.1 * copy + shared.call_us.simple;
    assert!(
        (p.total_us - expected).abs() / expected < 0.02,
        "{} against {expected}",
        p.total_us
    );
    // The timeline is on the same clock: the last step ends when the call does.
    let last = p.timeline.iter().map(|s| s.end_us).fold(0.0, f64::max);
    assert!((p.total_us - shared.call_us.simple - last).abs() / p.total_us < 0.01);
}

/// Each block a GPU runs adds the profile's `launch_block_us`: every rank's blocks where
/// the ranks share one GPU, the largest rank's where each has its own; replicas multiply
/// them. Without the constant (0) the price is what it was.
#[test]
fn each_launched_block_adds_its_cost() {
    use braid_cost::sim::launched_blocks;
    let (t, ps) = plans("nvswitch:8", Collective::Allreduce);
    let ring = plan(&ps, "ring_allreduce");
    let counts: Vec<u64> = ring.ranks.iter().map(|r| r.blocks.len() as u64).collect();
    let (per_rank, all) = (*counts.iter().max().unwrap(), counts.iter().sum::<u64>());
    assert!(all > per_rank);
    assert_eq!(launched_blocks(ring, 1, false), per_rank);
    assert_eq!(launched_blocks(ring, 4, false), 4 * per_rank);
    assert_eq!(launched_blocks(ring, 4, true), 4 * all);
    let price = |profile: &Profile, replicas: u32| {
        let call = Call {
            bytes: 8,
            elem: 4,
            protocol: Protocol::Ll,
            replicas,
            direct: false,
            together: false,
            in_place: false,
        };
        predict(ring, &t, profile, &call).unwrap().total_us
    };
    let base = Profile::default();
    let mut blocks = Profile::default();
    blocks.launch_block_us.ll = 0.05;
    for r in [1u32, 3] {
        let added = price(&blocks, r) - price(&base, r);
        let want = 0.05 * (per_rank * u64::from(r)) as f64;
        assert!(
            (added - want).abs() < 1e-9,
            "{r} replicas: {added} != {want}"
        );
    }
    // Sharing one GPU: all 8 ranks' blocks (the memory rate marks the sharing).
    let mut shared = blocks.clone();
    shared.shared_gbps.ll = 1e8;
    let mut shared_base = base.clone();
    shared_base.shared_gbps.ll = 1e8;
    let added = price(&shared, 2) - price(&shared_base, 2);
    let want = 0.05 * (all * 2) as f64;
    assert!((added - want).abs() < 1e-9, "{added} != {want}");
    // The other protocol's constant is not this call's.
    let mut simple_only = Profile::default();
    simple_only.launch_block_us.simple = 1.0;
    assert_eq!(price(&simple_only, 2), price(&base, 2));
}

/// On the host a rank's call wakes its blocks' threads one after another: its `b`-th
/// block starts `(b + 1) * block_us` into the call; a block whose first step waits for
/// another block's step is woken again when that step ends (`block_us` after it). In a
/// direct broadcast the root's local copy is its last block (woken last); its sends read
/// only the input, which the copy does not write in either mode, so each starts at its
/// own block's wake-up; the receivers, one block each, start side by side at the first.
#[test]
fn a_ranks_blocks_start_one_after_another() {
    let (t, ps) = plans("nvswitch:8", Collective::Broadcast);
    let direct = plan(&ps, "direct_broadcast");
    let root = &direct.ranks[0].blocks;
    assert!(root.len() >= 8, "a block per receiver and the copy");
    let copy_block = root.len() - 1;
    assert_eq!(root[copy_block].steps[0].kind, braid_plan::StepKind::Copy);
    let mut profile = Profile::default();
    profile.block_us.simple = 10.0;
    let call = simple(4, 1, false);
    let timeline = predict(direct, &t, &profile, &call).unwrap().timeline;
    let copy = timeline
        .iter()
        .find(|s| s.rank == 0 && s.block as usize == copy_block)
        .unwrap();
    assert!(
        (copy.start_us - 10.0 * root.len() as f64).abs() < 1e-9,
        "{copy:?}"
    );
    for s in &timeline {
        assert!(s.start_us >= 10.0 * (s.block + 1) as f64 - 1e-9, "{s:?}");
        if s.rank != 0 {
            assert!((s.start_us - 10.0).abs() < 1e-9, "{s:?}");
        } else if s.kind == "send" {
            assert!(
                (s.start_us - 10.0 * (s.block + 1) as f64).abs() < 1e-9,
                "{s:?}"
            );
            assert!(s.start_us < copy.start_us, "{s:?}");
        }
    }
}

/// A later step of a block that waits for another block's step sleeps on the host as a
/// first step does, and is woken `block_us` after that step ends: a two-shot all-reduce's
/// second sends wait for the reductions in other blocks. Without `block_us` (GPUs) the
/// step starts as soon as both are done.
#[test]
fn a_later_step_waiting_for_another_blocks_step_is_woken_after_it() {
    let (t, ps) = plans("nvswitch:4", Collective::Allreduce);
    let two = plan(&ps, "two_shot_allreduce");
    for wake in [10.0, 0.0] {
        let mut profile = Profile::default();
        profile.block_us.simple = wake;
        let timeline = predict(two, &t, &profile, &simple(4096, 1, false))
            .unwrap()
            .timeline;
        let at = |r, b, s| step_at(&timeline, r, b, s);
        let mut checked = 0;
        for (ri, rp) in two.ranks.iter().enumerate() {
            for (bi, b) in rp.blocks.iter().enumerate() {
                for (si, s) in b.steps.iter().enumerate().skip(1) {
                    let own = at(ri, bi, si - 1).end_us;
                    let other = s
                        .deps
                        .iter()
                        .map(|d| at(ri, d.block as usize, d.step as usize).end_us)
                        .fold(0.0, f64::max);
                    // (A receive waits for its message too: sends only.)
                    if other > own + 1e-9 && !s.kind.receives() {
                        let me = at(ri, bi, si);
                        assert!(
                            (me.start_us - (other + wake)).abs() < 1e-9,
                            "wake {wake}: rank {ri} block {bi} step {si} starts {} after its \
                             dependency ended {other}",
                            me.start_us
                        );
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 0, "wake {wake}: no send waited for another block");
    }
}

/// On a GPU (no thread to wake: `block_us` 0) a step that waits for another block's step
/// starts no sooner than `wait_us` after it, whether its own block was still busy then or
/// not, its block's first step included: the staged one-shot all-reduce's local block
/// waits for its rank's send, then for its receive.
#[test]
fn a_step_waiting_for_another_blocks_step_on_a_gpu_starts_wait_us_after_it() {
    let (t, ps) = plans("nvswitch:2", Collective::Allreduce);
    let staged = plan(&ps, "one_shot_allreduce");
    // Through the FIFO, and with direct reads (ranks of one launch): then the receive is
    // a local copy that ends as the block's own copy does, and the reduction still waits
    // to see it.
    for direct in [false, true] {
        let call = Call {
            direct,
            together: direct,
            ..simple(4096, 1, false)
        };
        let mut totals = Vec::new();
        let mut busy_own = 0;
        for wait in [0.0, 3.0] {
            let mut profile = Profile::default();
            profile.wait_us.simple = wait;
            let p = predict(staged, &t, &profile, &call).unwrap();
            let at = |r, b, s| step_at(&p.timeline, r, b, s);
            let mut checked = 0;
            for (ri, rp) in staged.ranks.iter().enumerate() {
                for (bi, b) in rp.blocks.iter().enumerate() {
                    for (si, s) in b.steps.iter().enumerate() {
                        let own = if si == 0 {
                            0.0
                        } else {
                            at(ri, bi, si - 1).end_us
                        };
                        let other = s
                            .deps
                            .iter()
                            .map(|d| at(ri, d.block as usize, d.step as usize).end_us)
                            .fold(0.0, f64::max);
                        if !s.deps.is_empty() && !s.kind.receives() {
                            let me = at(ri, bi, si);
                            assert!(
                                (me.start_us - own.max(other + wait)).abs() < 1e-9,
                                "direct {direct}, wait {wait}: rank {ri} block {bi} step {si} \
                                 starts {}, its own block's step ended {own}, its \
                                 dependency {other}",
                                me.start_us
                            );
                            checked += 1;
                            busy_own += usize::from(wait > 0.0 && own >= other);
                        }
                    }
                }
            }
            // Two waits a rank: the copy of its input for its send, the reduction for
            // its receive.
            assert_eq!(checked, 4, "direct {direct}, wait {wait}");
            totals.push(p.total_us);
        }
        // The reduction's wait for the receive lies on the call's longest path (the
        // copy's wait for the send ends before the receive does).
        assert!(
            (totals[1] - totals[0] - 3.0).abs() < 1e-6,
            "direct {direct}: {totals:?}"
        );
        if direct {
            // The reductions' blocks were busy with their copies until their receives
            // ended (or later), and still waited to see them.
            assert!(busy_own >= 2, "{busy_own}");
        }
    }
}

/// Ranks of one launch, out of place: a one-shot all-reduce's sends cost nothing, its
/// receives wait for no message and touch each byte 3 times (read the peer's input and
/// the own, write the output) instead of 2 + 3 through the FIFO; the shared-memory floor
/// says so, and selection sees it only for out-of-place calls of ranks that launch
/// together.
#[test]
fn direct_reads_skip_the_sends_and_their_memory_traffic() {
    let (t, ps) = plans("nvswitch:2", Collective::Allreduce);
    let oop = plan(&ps, "one_shot_oop_allreduce");
    let mut profile = Profile::default();
    profile.shared_gbps.simple = 100.0;
    let bytes = 256u64 << 20;
    let call = |direct: bool| Call {
        bytes,
        elem: 4,
        protocol: Protocol::Simple,
        replicas: 1,
        direct,
        together: direct,
        in_place: false,
    };
    let fifo = predict(oop, &t, &profile, &call(false)).unwrap();
    let direct = predict(oop, &t, &profile, &call(true)).unwrap();
    // Each rank: send (2 accesses per byte) and rrc (3) through the FIFO; rrc (3) alone.
    let floor = |accesses: f64| 2.0 * accesses * bytes as f64 / (100.0 * 1e3);
    assert!(fifo.total_us >= floor(5.0) * 0.999, "{}", fifo.total_us);
    assert!(direct.total_us >= floor(3.0) * 0.999, "{}", direct.total_us);
    assert!(direct.total_us < floor(5.0) * 0.8, "{}", direct.total_us);
    for s in direct.timeline.iter().filter(|s| s.kind == "send") {
        assert_eq!(s.start_us, s.end_us, "a skipped send takes no time: {s:?}");
    }
    // At 8 bytes, no message to wait for: faster than through the FIFO.
    let small = |direct: bool| Call {
        bytes: 8,
        protocol: Protocol::Ll,
        ..call(direct)
    };
    let a = predict(oop, &t, &profile, &small(false)).unwrap().total_us;
    let b = predict(oop, &t, &profile, &small(true)).unwrap().total_us;
    assert!(b < a, "{b} >= {a}");
    // Selection: out of place with ranks launched together gets the direct price; in
    // place (the staged one-shot serves both modes), or ranks that do not launch
    // together, the FIFO's.
    let priced = |name: &str, mode: Mode, direct: bool| {
        let cand = [Candidate {
            plan: plan(&ps, name),
            origin: "shipped".into(),
        }];
        let req = Request {
            collective: Collective::Allreduce,
            root: None,
            mode,
            bytes,
            elem: 4,
            direct,
            ll128: false,
            excluded: None,
        };
        braid_cost::rank_with(&cand, &t, &profile, &req, Some(1), Some(Protocol::Simple))[0]
            .result
            .clone()
            .unwrap()
    };
    let oop = "one_shot_oop_allreduce";
    assert_eq!(priced(oop, Mode::OutOfPlace, true), direct.total_us);
    assert_eq!(priced(oop, Mode::OutOfPlace, false), fifo.total_us);
    let staged = "one_shot_allreduce";
    assert!(priced(staged, Mode::OutOfPlace, true) < priced(staged, Mode::OutOfPlace, false));
    assert_eq!(
        priced(staged, Mode::InPlace, true),
        priced(staged, Mode::InPlace, false)
    );
}

/// Eight ranks of one launch, out of place: each rank's seven receive-reduces (and its
/// own input) form one chain that runs as one pass. Its later links take no time and
/// move nothing, the head reads every operand once and writes once (9 accesses per byte
/// where seven steps made 21), and a small call no longer waits step after step.
#[test]
fn direct_chains_run_as_one_pass() {
    let (t, ps) = plans("nvswitch:8", Collective::Allreduce);
    let oop = plan(&ps, "one_shot_oop_allreduce");
    let mut profile = Profile::default();
    profile.shared_gbps.simple = 100.0;
    let bytes = 64u64 << 20;
    let call = |direct: bool, bytes: u64, protocol| Call {
        bytes,
        elem: 4,
        protocol,
        replicas: 1,
        direct,
        together: direct,
        in_place: false,
    };
    let fused = predict(oop, &t, &profile, &call(true, bytes, Protocol::Simple)).unwrap();
    let chains = braid_plan::direct::chains(oop, &braid_plan::direct::direct(oop));
    assert_eq!(chains.len(), 8);
    for c in &chains {
        let time = |(b, s): (u32, u32)| {
            fused
                .timeline
                .iter()
                .find(|x| x.rank == c.rank && x.block == b && x.step == s)
                .unwrap()
                .clone()
        };
        let head = time(c.steps[0]);
        assert!(head.end_us > head.start_us, "{head:?}");
        for &l in &c.steps[1..] {
            let l = time(l);
            assert_eq!(
                l.start_us, l.end_us,
                "a link the head ran takes no time: {l:?}"
            );
        }
    }
    // The floor of the shared memory: 8 operands + 1 write per byte of each rank (rank 0
    // and 1 read their own input in the head; the others as a link: 8 operands too).
    let floor = |accesses: f64| 8.0 * accesses * bytes as f64 / (100.0 * 1e3);
    assert!(fused.total_us >= floor(9.0) * 0.999, "{}", fused.total_us);
    assert!(fused.total_us < floor(9.0) * 1.2, "{}", fused.total_us);
    // Small: the one-pass chain costs about what one step does, not seven.
    let small = |direct: bool| {
        predict(oop, &t, &profile, &call(direct, 8, Protocol::Ll))
            .unwrap()
            .total_us
    };
    let (t2, ps2) = plans("nvswitch:2", Collective::Allreduce);
    let two = predict(
        plan(&ps2, "one_shot_oop_allreduce"),
        &t2,
        &profile,
        &call(true, 8, Protocol::Ll),
    )
    .unwrap()
    .total_us;
    assert!(
        small(true) < two * 1.5,
        "{} against {two} on 2 ranks",
        small(true)
    );
    assert!(
        small(false) > small(true),
        "{} {}",
        small(false),
        small(true)
    );
    // A block is bound by its memory accesses per byte: the 8-operand head (9 per byte)
    // takes 9 / 3 = 3 times the 2-rank plan's one reduction reading its peer directly
    // (its own input, the peer's, the output: 3 per byte) over the same bytes, where
    // the head runs the pass alone (16 KiB: parts under SPLIT_MIN_BYTES); over 64 MiB
    // the blocks of the chain's steps share it, a part each, the slowest with 7 parts
    // (rank 0's head adds its own input: 7 steps for 8 operands): 9 / 7 / 3. (No per-slice cost;
    // a memory rate that never binds marks the ranks as sharing a GPU.)
    let mut open = Profile::default();
    open.shared_gbps.simple = 1e9;
    open.slice_us.simple = 0.0;
    let longest = |p: &Verified, t: &Topology, bytes: u64| {
        let pred = predict(p, t, &open, &call(true, bytes, Protocol::Simple)).unwrap();
        pred.timeline
            .iter()
            .map(|x| x.end_us - x.start_us)
            .fold(0f64, f64::max)
    };
    let two = plan(&ps2, "one_shot_oop_allreduce");
    for (bytes, want) in [(16u64 << 10, 3.0), (64 << 20, 9.0 / 7.0 / 3.0)] {
        let ratio = longest(oop, &t, bytes) / longest(two, &t2, bytes);
        assert!(
            (ratio - want).abs() < 0.02 * want,
            "{bytes} B: {ratio}, not {want}"
        );
    }
}

/// Of a broadcast or a reduce only the root knows whether its call is in place (the
/// others have one buffer), and every rank must choose the same plan: the price of a
/// rooted collective does not depend on the mode, direct reads or not.
#[test]
fn rooted_collectives_are_priced_alike_in_both_modes() {
    let mut profile = Profile::default();
    profile.shared_gbps.simple = 100.0;
    for c in [Collective::Broadcast, Collective::Reduce] {
        let (t, ps) = plans("nvswitch:2", c);
        let cands = shipped(&ps);
        let price = |mode: Mode| {
            let req = Request {
                collective: c,
                root: Some(0),
                mode,
                bytes: 64 << 20,
                elem: 4,
                direct: true,
                ll128: false,
                excluded: None,
            };
            rank(&cands, &t, &profile, &req)
                .into_iter()
                .map(|r| (r.name, r.result.ok()))
                .collect::<Vec<_>>()
        };
        assert_eq!(price(Mode::InPlace), price(Mode::OutOfPlace), "{c}");
    }
}

/// In place, an all-gather's copy of each rank's own chunk is a copy onto itself (NCCL
/// puts an in-place `in` at the rank's place in `out`), which the backends skip: priced
/// so, the call costs that copy less where the cores or the shared memory count it, and
/// the steps that wait for it start earlier. A rooted collective keeps its root's copy
/// (the other ranks cannot know the root's mode, and every rank must price alike).
#[test]
fn in_place_an_all_gathers_own_copy_costs_nothing() {
    let (t, ps) = plans("nvswitch:4", Collective::Allgather);
    let mut profile = Profile::default();
    profile.shared_gbps.simple = 100.0;
    let bytes = 64u64 << 20;
    let price = |name: &str, in_place: bool| {
        predict(plan(&ps, name), &t, &profile, &simple(bytes, 1, in_place))
            .unwrap()
            .total_us
    };
    for name in ["ring_allgather", "direct_allgather"] {
        let (out, inp) = (price(name, false), price(name, true));
        // Out of place each rank's copy of its chunk (a quarter of the buffer, read and
        // written) goes through the shared memory too: 4 * 2 * bytes / 4 in all.
        let copies_us = 2.0 * bytes as f64 / (100.0 * 1e3);
        assert!(inp < out, "{name}: in place {inp} us, out of place {out}");
        assert!(
            out - inp <= copies_us * 1.001,
            "{name}: in place saves {} us, more than the copies' {copies_us}",
            out - inp
        );
    }
    let req = |c: Collective, mode: Mode| Request {
        collective: c,
        root: c.is_rooted().then_some(0),
        mode,
        bytes,
        elem: 4,
        direct: false,
        ll128: false,
        excluded: None,
    };
    assert!(
        req(Collective::Allgather, Mode::InPlace)
            .call(1, Protocol::Simple)
            .in_place
    );
    assert!(
        !req(Collective::Allgather, Mode::OutOfPlace)
            .call(1, Protocol::Simple)
            .in_place
    );
    assert!(
        !req(Collective::Broadcast, Mode::InPlace)
            .call(1, Protocol::Simple)
            .in_place
    );
}

/// A call whose every rank's plan is a flat program ([`braid_plan::flat`]) and whose ranks
/// launch together on one GPU is priced as a flat launch where the profile has a price
/// for one: its launch plus its passes' bytes at the shared memory rate, whatever the
/// replicas; a plan that forwards (the ring), ranks that do not launch together, or a
/// profile without flat launches get the step-by-step price.
#[test]
fn flat_launches_cost_their_launch_and_traffic() {
    let (t, ps) = plans("nvswitch:8", Collective::Broadcast);
    let profile = Profile::shared_gpu();
    assert!(profile.flat_call_us > 0.0);
    let call = |bytes: u64, replicas: u32, direct: bool| Call {
        bytes,
        elem: 4,
        protocol: Protocol::Simple,
        replicas,
        direct,
        together: direct,
        in_place: false,
    };
    let direct_bc = plan(&ps, "direct_broadcast");
    let big = 256u64 << 20;
    let p = predict(direct_bc, &t, &profile, &call(big, 1, true)).unwrap();
    // Every rank writes its output (the root by its own copy), and the root's input is
    // read from memory once, however many read it: 9 x the bytes at the memory rate.
    // Back to back, so large a call is the GPU's: its share of the launch and the bytes.
    let floor = 9.0 * big as f64 / (profile.shared_gbps.simple * 1e3);
    assert!(profile.flat_gpu_us > 0.0);
    assert!(
        p.total_us >= profile.flat_gpu_us + floor * 0.999,
        "{}",
        p.total_us
    );
    assert!(
        p.total_us < profile.flat_gpu_us + floor * 1.2,
        "{}",
        p.total_us
    );
    // Replicas change nothing.
    let p8 = predict(direct_bc, &t, &profile, &call(big, 8, true)).unwrap();
    assert_eq!(p.total_us, p8.total_us);
    // A small call costs the launch (of its eight ranks).
    let small = predict(direct_bc, &t, &profile, &call(8, 1, true)).unwrap();
    let launch = profile.flat_call_us + profile.ranks_us(Protocol::Simple, 8);
    assert!((small.total_us - launch).abs() < 0.1, "{}", small.total_us);
    // Not flat: ranks apart, or a profile without flat launches: every step priced, the
    // root's input read by each of its readers.
    let apart = predict(direct_bc, &t, &profile, &call(big, 1, false)).unwrap();
    assert!(
        apart.total_us > p.total_us,
        "{} <= {}",
        apart.total_us,
        p.total_us
    );
    let mut no_flat = profile.clone();
    no_flat.flat_call_us = 0.0;
    let stepwise = predict(direct_bc, &t, &no_flat, &call(big, 1, true)).unwrap();
    assert!(
        stepwise.total_us > p.total_us,
        "{} <= {}",
        stepwise.total_us,
        p.total_us
    );
    // The chain forwards what it receives: never flat, slower at 256 MiB than the flat
    // direct broadcast, which the ranking therefore selects.
    let chain = plan(&ps, "chain_broadcast");
    assert!(braid_plan::flat::program(chain, 1, &braid_plan::direct::direct(chain), 8).is_none());
    let cands = shipped(&ps);
    let req = Request {
        collective: Collective::Broadcast,
        root: Some(0),
        mode: Mode::OutOfPlace,
        bytes: big,
        elem: 4,
        direct: true,
        ll128: false,
        excluded: None,
    };
    let ranked = braid_cost::rank(&cands, &t, &profile, &req);
    assert_eq!(ranked[0].name, "direct_broadcast", "{ranked:?}");
}

/// Back to back, a flat launch costs the larger of the host's share (its issue: the
/// launch, the argument, the ranks) and the GPU's (its share of the launch and the
/// passes' traffic), where the profile measured the GPU's; without it, their sum.
#[test]
fn a_flat_launch_costs_the_larger_of_the_hosts_and_the_gpus_shares() {
    let (t, ps) = plans("nvswitch:8", Collective::Broadcast);
    let direct_bc = plan(&ps, "direct_broadcast");
    let call = |bytes: u64| Call {
        bytes,
        elem: 4,
        protocol: Protocol::Simple,
        replicas: 1,
        direct: true,
        together: true,
        in_place: false,
    };
    let profile = Profile::shared_gpu();
    let host = profile.flat_call_us + profile.ranks_us(Protocol::Simple, 8);
    assert!(host > profile.flat_gpu_us);
    let mut summed = profile.clone();
    summed.flat_gpu_us = 0.0;
    let price = |bytes: u64, p: &Profile| predict(direct_bc, &t, p, &call(bytes)).unwrap().total_us;
    for bytes in [4u64, 64 << 10, 1 << 20, 16 << 20, 256 << 20] {
        let (max, sum) = (price(bytes, &profile), price(bytes, &summed));
        // The body is what the summed price adds to the host's share.
        let body = sum - host;
        assert!(body > 0.0, "{bytes}: {sum}");
        let want = host.max(profile.flat_gpu_us + body);
        assert!((max - want).abs() < 1e-6, "{bytes}: {max} against {want}");
        assert!(max < sum, "{bytes}: {max} >= {sum}");
    }
    // Small calls are the host's; large ones the GPU's.
    assert!((price(4, &profile) - host).abs() < 1e-9);
    assert!(price(256 << 20, &profile) > host * 10.0);
}

/// A flat launch's blocks take the rate the tune measured on a flat launch
/// (`flat_block_gbps`) where it has one: a broadcast of a few hundred KiB on 2 ranks,
/// whose parts are a block's full share, costs the GPU its share of the launch plus a
/// part at that rate (the memory far from binding); halving the rate doubles that part.
/// And the flat kernel runs no protocol: every protocol of the call prices alike.
#[test]
fn a_flat_launchs_blocks_take_their_own_measured_rate_and_no_protocol() {
    let (t, ps) = plans("nvswitch:2", Collective::Broadcast);
    let direct_bc = plan(&ps, "direct_broadcast");
    let call = together;
    let mut profile = Profile::shared_gpu();
    profile.flat_call_us = 1e-6;
    let bytes = 384u64 << 10;
    let price = |p: &Profile, proto| {
        predict(direct_bc, &t, p, &call(bytes, proto))
            .unwrap()
            .total_us
    };
    // The root's input read once and two outputs written: 3 accesses a byte, in parts
    // (a block each) as the kernel cuts them.
    let parts = braid_plan::flat::parts(bytes, 3, 1, braid_cost::flat::FLAT_BLOCKS);
    let part = 3.0 * bytes as f64 / parts as f64;
    let at = |gbps: f64| {
        let mut p = profile.clone();
        p.flat_block_gbps = gbps;
        p
    };
    for gbps in [25.0, 12.5] {
        let body = price(&at(gbps), Protocol::Simple) - profile.flat_gpu_us;
        let want = part / 2.0 / (gbps * 1e3);
        assert!(
            (body - want).abs() < want * 0.1,
            "{gbps} GB/s: {body} against {want}"
        );
    }
    // Unmeasured, the interpreter's block rate: faster than a flat block measured at 25.
    assert!(price(&profile, Protocol::Simple) < price(&at(25.0), Protocol::Simple));
    for p in [profile.clone(), at(25.0)] {
        let simple = price(&p, Protocol::Simple);
        for proto in [Protocol::Ll, Protocol::Ll128] {
            assert_eq!(price(&p, proto), simple, "{proto:?}");
        }
    }
}

/// Each pass over a chunk beyond a flat block's first costs `flat_pass_us` (a load
/// round and a synchronisation in a row): the 2-rank chain broadcast's flat launch, whose
/// blocks run its four chunks one after another, pays three; the direct broadcast's one
/// pass nothing; and so, where a GPU measured it, the chain no longer looks as cheap as
/// the direct broadcast (the selection's misses on 2 ranks).
#[test]
fn a_flat_blocks_passes_in_a_row_pay_their_latency() {
    let (t, ps) = plans("nvswitch:2", Collective::Broadcast);
    let call = together(1 << 10, Protocol::Simple);
    let mut profile = Profile::shared_gpu();
    profile.flat_call_us = 1e-6;
    let mut passes = profile.clone();
    passes.flat_pass_us = 0.5;
    let price = |name: &str, p: &Profile| predict(plan(&ps, name), &t, p, &call).unwrap().total_us;
    let chain = price("chain_broadcast", &passes) - price("chain_broadcast", &profile);
    assert!((chain - 1.5).abs() < 1e-6, "{chain}");
    assert_eq!(
        price("direct_broadcast", &passes),
        price("direct_broadcast", &profile)
    );
    assert!(price("chain_broadcast", &passes) > price("direct_broadcast", &passes) + 1.0);
}

/// A flat launch pays for its kernel argument beyond the smallest: on 8 ranks sharing a
/// GPU, the two-shot all-reduce's launch takes the middle argument and the one-shot's the
/// smallest, so at 8 B (where both cost their launch) the one-shot is selected; without
/// measured argument costs both cost the same launch.
#[test]
fn a_flat_launch_pays_for_its_kernel_argument() {
    let (t, ps) = plans("nvswitch:8", Collective::Allreduce);
    let call = Call {
        bytes: 8,
        elem: 4,
        protocol: Protocol::Simple,
        replicas: 1,
        direct: true,
        together: true,
        in_place: false,
    };
    let shared = Profile::shared_gpu();
    let mut free = shared.clone();
    free.flat_arg_us.clear();
    let price = |name: &str, p: &Profile| predict(plan(&ps, name), &t, p, &call).unwrap().total_us;
    let middle = shared.flat_arg_us(2200);
    assert!(middle > 0.0);
    assert_eq!(shared.flat_arg_us(536), 0.0);
    assert_eq!(shared.flat_arg_us(100), 0.0);
    assert!(
        (price("two_shot_allreduce", &shared) - price("two_shot_allreduce", &free) - middle).abs()
            < 1e-9
    );
    assert_eq!(
        price("one_shot_oop_allreduce", &shared),
        price("one_shot_oop_allreduce", &free)
    );
    let req = Request {
        collective: Collective::Allreduce,
        root: None,
        mode: Mode::OutOfPlace,
        bytes: 8,
        elem: 4,
        direct: true,
        ll128: false,
        excluded: None,
    };
    let ranked = braid_cost::rank(&shipped(&ps), &t, &shared, &req);
    assert_eq!(ranked[0].name, "one_shot_oop_allreduce", "{ranked:?}");
}

/// Where ranks share a GPU, each rank of the launch beyond two adds `rank_us` to a call
/// (the host's work per rank, back to back), flat or not; a rank per GPU adds nothing.
#[test]
fn each_rank_of_a_shared_launch_adds_its_cost() {
    let (t, ps) = plans("nvswitch:8", Collective::Allreduce);
    let call = |direct: bool| Call {
        bytes: 8,
        elem: 4,
        protocol: Protocol::Simple,
        replicas: 1,
        direct,
        together: direct,
        in_place: false,
    };
    for (name, direct) in [("one_shot_oop_allreduce", true), ("ring_allreduce", false)] {
        let p = plan(&ps, name);
        let mut shared = Profile::shared_gpu();
        shared.rank_us = 0.0;
        let base = predict(p, &t, &shared, &call(direct)).unwrap().total_us;
        shared.rank_us = 1.5;
        let more = predict(p, &t, &shared, &call(direct)).unwrap().total_us;
        assert!(
            (more - base - 6.0 * 1.5).abs() < 1e-6,
            "{name}: {base} -> {more}"
        );
        let mut alone = Profile::default();
        let a = predict(p, &t, &alone, &call(false)).unwrap().total_us;
        alone.rank_us = 1.5;
        assert_eq!(
            predict(p, &t, &alone, &call(false)).unwrap().total_us,
            a,
            "{name}"
        );
    }
}

/// The interpreter's ranks sharing a GPU are launched one after another, each rank
/// beyond the first two `rank_us` after the one before: a ring, whose every step waits for
/// the rank before, pays the whole stagger; a chain, whose later ranks wait for their
/// message anyway, hides it where the message comes later than the launch (on an H100, 8
/// ranks: the chain of 8 bytes measured 23.5 us, priced 31.9 with the stagger added to
/// the call), and part of it where LL's hops are as quick as measured.
#[test]
fn a_chain_hides_the_stagger_of_its_ranks_launches_and_a_ring_pays_it() {
    let call = Call {
        bytes: 8,
        elem: 4,
        protocol: Protocol::Ll,
        replicas: 1,
        direct: false,
        together: false,
        in_place: false,
    };
    let cost = |base: &Profile, c: Collective, name: &str, rank_us: f64| {
        let (t, ps) = plans("nvswitch:8", c);
        let mut p = base.clone();
        p.rank_us = rank_us;
        predict(plan(&ps, name), &t, &p, &call).unwrap().total_us
    };
    let stagger = |base: &Profile, c: Collective, name: &str| {
        cost(base, c, name, 1.5) - cost(base, c, name, 0.0)
    };
    // Each receive waiting for its whole slice (no receive period measured): the chain's
    // later ranks wait longer for their message than their launch is late.
    let mut whole = Profile::shared_gpu();
    whole.recv_slice_us = Default::default();
    let ring = stagger(&whole, Collective::Allreduce, "ring_allreduce");
    assert!((ring - 6.0 * 1.5).abs() < 1e-6, "{ring}");
    let chain = stagger(&whole, Collective::Broadcast, "chain_broadcast");
    assert!(chain < 1e-6, "{chain}");
    // LL's receives taking up lines as they land, a hop 0.29 us and a receiving step's
    // period 1.34 (the shared-GPU defaults, measured): the message now reaches each rank
    // about as late as its launch, so the chain hides only part of the stagger; the ring
    // still pays it whole.
    let measured = Profile::shared_gpu();
    let ring = stagger(&measured, Collective::Allreduce, "ring_allreduce");
    assert!((ring - 6.0 * 1.5).abs() < 1e-6, "{ring}");
    let chain = stagger(&measured, Collective::Broadcast, "chain_broadcast");
    assert!(chain > 1e-6 && chain < ring - 1.0, "{chain}");
}

/// LL128 is a candidate only where the request allows it, and with its own measured
/// constants (here: LL's latency at Simple's bandwidth, as on NVLink) it wins the middle
/// sizes, between LL's small messages and Simple's large ones.
#[test]
fn ll128_is_priced_only_where_allowed_and_wins_in_the_middle_when_cheaper() {
    let (t, ps) = plans("nvswitch:8", Collective::Allreduce);
    let cands = shipped(&ps);
    let req = |bytes: u64, ll128: bool| Request {
        collective: Collective::Allreduce,
        root: None,
        mode: Mode::OutOfPlace,
        bytes,
        elem: 4,
        direct: false,
        ll128,
        excluded: None,
    };
    let mut p = Profile::default();
    for v in [
        &mut p.call_us,
        &mut p.slice_us,
        &mut p.hop_us.nvlink,
        &mut p.net_post_us,
    ] {
        let ll = v.ll;
        v.set(Protocol::Ll128, ll);
    }
    p.block_gbps.set(Protocol::Ll128, p.block_gbps.simple);
    p.efficiency.set(Protocol::Ll128, 120.0 / 128.0);
    p.slice_bytes.set(Protocol::Ll128, 61440.0);
    let protos = |bytes: u64, ll128: bool| -> Vec<Protocol> {
        rank(&cands, &t, &p, &req(bytes, ll128))
            .into_iter()
            .filter(|r| r.result.is_ok())
            .map(|r| r.protocol)
            .collect()
    };
    for bytes in [8u64, 1 << 20, 1 << 28] {
        assert!(
            !protos(bytes, false).contains(&Protocol::Ll128),
            "{bytes} B: LL128 priced though not allowed"
        );
    }
    let mid = rank(&cands, &t, &p, &req(1 << 20, true));
    assert_eq!(mid[0].protocol, Protocol::Ll128, "{mid:?}");
    let without = rank(&cands, &t, &p, &req(1 << 20, false));
    assert!(
        mid[0].result.as_ref().unwrap() < without[0].result.as_ref().unwrap(),
        "allowing a cheaper protocol must not make the best choice dearer"
    );
    // A protocol list without LL (`NCCL_PROTO=^LL`): every size chooses between Simple
    // and LL128 only, and LL128 still wins the middle.
    let no_ll = |bytes: u64| Request {
        excluded: Some(Protocol::Ll),
        ..req(bytes, true)
    };
    for bytes in [8u64, 4096, 1 << 20, 1 << 28] {
        let ranked = rank(&cands, &t, &p, &no_ll(bytes));
        assert!(
            ranked
                .iter()
                .filter(|r| r.result.is_ok())
                .all(|r| r.protocol != Protocol::Ll),
            "{bytes} B: LL priced though the list excludes it: {ranked:?}"
        );
    }
    assert_eq!(
        rank(&cands, &t, &p, &no_ll(1 << 20))[0].protocol,
        Protocol::Ll128
    );
    // Without LL128 too, a small call that LL wins runs Simple.
    assert_eq!(
        rank(&cands, &t, &p, &req(8, false))[0].protocol,
        Protocol::Ll
    );
    let simple_only = Request {
        excluded: Some(Protocol::Ll),
        ..req(8, false)
    };
    assert_eq!(
        rank(&cands, &t, &p, &simple_only)[0].protocol,
        Protocol::Simple
    );
    // Without Simple (`NCCL_PROTO=^Simple`): LL and LL128 only, at every size; with
    // LL128 not allowed either, LL.
    for bytes in [8u64, 1 << 20, 1 << 28] {
        let no_simple = Request {
            excluded: Some(Protocol::Simple),
            ..req(bytes, true)
        };
        let ranked = rank(&cands, &t, &p, &no_simple);
        assert!(
            ranked
                .iter()
                .filter(|r| r.result.is_ok())
                .all(|r| r.protocol != Protocol::Simple),
            "{bytes} B: Simple priced though the list excludes it: {ranked:?}"
        );
        let ll_only = Request {
            excluded: Some(Protocol::Simple),
            ..req(bytes, false)
        };
        assert!(rank(&cands, &t, &p, &ll_only)
            .iter()
            .filter(|r| r.result.is_ok())
            .all(|r| r.protocol == Protocol::Ll));
    }
}

/// `rank` bounds each replica count and protocol first and simulates only those whose
/// bound is below the best time found: the bound never exceeds the price, and the
/// choice is the one that pricing every option gives. On GPU constants and on a
/// host-like profile (few cores, a copy rate, one shared memory), inside a node and
/// across nodes (network proxies), small to large.
#[test]
fn pruned_ranking_is_exhaustive_ranking_and_bounds_are_below_prices() {
    use braid_cost::sim::{predict_below, Priced};
    let mut host = Profile {
        cores: 2,
        ..Profile::default()
    };
    host.copy_gbps.simple = 5.0;
    host.copy_gbps.ll = 2.0;
    host.block_us.simple = 3.0;
    host.block_us.ll = 3.0;
    host.shared_gbps.simple = 8.0;
    host.shared_gbps.ll = 4.0;
    host.block_work_us = vec![
        BlockWork {
            blocks: 15,
            us: 4.0,
        },
        BlockWork {
            blocks: 120,
            us: 7.0,
        },
    ];
    let mut checked = 0;
    for (topo, c) in [
        ("nvswitch:8", Collective::Allreduce),
        ("nvswitch:4", Collective::Broadcast),
        ("cluster:2x4", Collective::Allreduce),
        ("cluster:2x4", Collective::Allgather),
    ] {
        let (t, ps) = plans(topo, c);
        for profile in [Profile::default(), host.clone()] {
            for bytes in [8u64, 64 << 10, 4 << 20, 256 << 20] {
                let req = Request {
                    collective: c,
                    root: c.is_rooted().then_some(0),
                    mode: Mode::OutOfPlace,
                    bytes,
                    elem: 4,
                    direct: false,
                    ll128: false,
                    excluded: None,
                };
                for p in &ps {
                    let cand = [Candidate {
                        plan: p,
                        origin: "shipped".into(),
                    }];
                    let mut all: Vec<(f64, u32, Protocol)> = Vec::new();
                    for r in braid_cost::replica_counts(p) {
                        for proto in [Protocol::Simple, Protocol::Ll] {
                            let call = Call {
                                bytes,
                                elem: 4,
                                protocol: proto,
                                replicas: r,
                                direct: false,
                                together: false,
                                in_place: false,
                            };
                            let price = predict(p, &t, &profile, &call).unwrap().total_us;
                            let Priced::Above(bound) =
                                predict_below(p, &t, &profile, &call, f64::NEG_INFINITY).unwrap()
                            else {
                                panic!("{}: priced without a bound", p.name)
                            };
                            assert!(
                                bound <= price * (1.0 + 1e-9),
                                "{topo} {} x{r} {proto:?} {bytes} B: bound {bound} > price {price}",
                                p.name
                            );
                            all.push((price, r, proto));
                            checked += 1;
                        }
                    }
                    let best = all
                        .iter()
                        .copied()
                        .reduce(|a, b| if b.0 < a.0 { b } else { a })
                        .unwrap();
                    let ranked = braid_cost::rank(&cand, &t, &profile, &req);
                    let got = &ranked[0];
                    assert_eq!(
                        (got.result.clone().unwrap(), got.replicas, got.protocol),
                        best,
                        "{topo} {} {bytes} B",
                        p.name
                    );
                }
            }
        }
    }
    assert!(checked > 500, "{checked} options checked");
}

/// A host profile on 2 cores (Simple): a call's, a block start's and a message's cost
/// (µs), a block's rate over a link (GB/s), and local copies at 7 GB/s.
fn host_profile(call: f64, block: f64, hop: f64, block_gbps: f64) -> Profile {
    let mut host = Profile {
        cores: 2,
        ..Profile::default()
    };
    host.call_us.simple = call;
    host.block_us.simple = block;
    host.hop_us.nvlink.simple = hop;
    host.copy_gbps.simple = 7.0;
    host.block_gbps.simple = block_gbps;
    host
}

/// On the host backend (few cores, many block threads), what starting a block costs the
/// cores grows with the blocks a call starts (`Profile::block_work_us`, interpolated
/// between the counts `braid tune` timed): a small call of a plan with many blocks costs
/// its blocks' starts over the cores, at the rate for its count. With the rates a 2-core
/// machine showed, the 8-rank tree all-reduce (29 blocks, one step each) costs more than
/// the ring (16 blocks) at 8 B, as it ran there (1.6 ms against 0.7); with every block
/// at the rate of a few, the tree looked as cheap.
#[test]
fn host_block_starts_cost_the_cores_by_the_blocks_a_call_starts() {
    let (t, ps) = plans("nvswitch:8", Collective::Allreduce);
    let mut host = host_profile(24.0, 60.0, 48.0, 4.0);
    let call = simple(8, 1, false);
    let price = |name: &str, p: &Profile| predict(plan(&ps, name), &t, p, &call).unwrap().total_us;
    let flat = host.clone();
    host.block_work_us = vec![
        BlockWork {
            blocks: 15,
            us: 57.0,
        },
        BlockWork {
            blocks: 30,
            us: 92.0,
        },
        BlockWork {
            blocks: 120,
            us: 97.0,
        },
    ];
    // The interpolation: the nearest entry outside, linear between.
    assert_eq!(flat.block_work_us(29), None);
    assert_eq!(host.block_work_us(4), Some(57.0));
    assert_eq!(host.block_work_us(500), Some(97.0));
    assert!((host.block_work_us(20).unwrap() - (57.0 + 35.0 / 3.0)).abs() < 1e-9);
    assert!((host.block_work_us(75).unwrap() - 94.5).abs() < 1e-9);
    // The tree's 29 blocks at their rate, over 2 cores, bound its call.
    let tree = price("tree_allreduce", &host);
    let starts = 29.0 * host.block_work_us(29).unwrap() / 2.0;
    assert!(tree >= starts, "{tree} < {starts}");
    assert!(tree > price("tree_allreduce", &flat));
    // And the ring wins where it did not.
    let ring = price("ring_allreduce", &host);
    assert!(ring < tree, "ring {ring} >= tree {tree}");
    assert!(price("ring_allreduce", &flat) >= price("tree_allreduce", &flat) * 0.95);
}

/// On the host backend, copies run up to twice as fast where a call's buffers fit the
/// processor's caches (`Profile::copy_scale`, by the MiB all the call's ranks' buffers
/// take): the cores' share of a 1 MiB ring all-reduce on 8 ranks (16 MiB of buffers) is
/// priced at the rate for 16 MiB, a 64 MiB one's (1 GiB) at the reference rate, as
/// without the table.
#[test]
fn host_copies_run_at_the_rate_for_the_memory_a_call_takes() {
    let (t, ps) = plans("nvswitch:8", Collective::Allreduce);
    let mut host = host_profile(50.0, 25.0, 27.0, 3.7);
    let ring = plan(&ps, "ring_allreduce");
    let price = |bytes: u64, p: &Profile| {
        let call = simple(bytes, 1, false);
        predict(ring, &t, p, &call).unwrap().total_us
    };
    let flat = host.clone();
    host.copy_scale = vec![
        CopyScale { mib: 4, scale: 2.0 },
        CopyScale {
            mib: 64,
            scale: 2.0,
        },
        CopyScale {
            mib: 256,
            scale: 1.0,
        },
    ];
    // The interpolation, on the logarithm of the size: 128 MiB halfway from 64 to 256.
    assert_eq!(flat.copy_scale(1 << 20), 1.0);
    assert_eq!(host.copy_scale(1 << 20), 2.0);
    assert!((host.copy_scale(128 << 20) - 1.5).abs() < 1e-9);
    assert_eq!(host.copy_scale(1 << 30), 1.0);
    // 8 ranks on 2 cores: the cores' work bounds a 1 MiB ring, and in the caches it is
    // cheaper.
    let (cached, streamed) = (price(1 << 20, &host), price(1 << 20, &flat));
    assert!(cached < streamed * 0.9, "{cached} against {streamed}");
    // A call through memory: the reference rate.
    assert_eq!(price(64 << 20, &host), price(64 << 20, &flat));
}

/// The host backend stages its steps (`Profile::staged_steps`): every message is copied
/// into its link and out again, and a receive that reduces or forwards goes through a
/// temporary, so a ring all-reduce's reduce-and-forward costs the cores several copies of
/// its bytes, not one. On 8 ranks sharing 2 cores, a 64 MiB ring (buffers past the
/// caches) costs at least every step's staged accesses at the copy rate over the cores,
/// and little more; priced as the GPU kernels touch memory it would cost about half.
#[test]
fn staged_steps_cost_the_cores_every_copy_the_host_makes() {
    let (t, ps) = plans("nvswitch:8", Collective::Allreduce);
    let ring = plan(&ps, "ring_allreduce");
    let bytes: u64 = 64 << 20;
    let call = simple(bytes, 1, false);
    let gpu_like = host_profile(50.0, 25.0, 27.0, 3.7);
    let staged = Profile {
        staged_steps: true,
        ..gpu_like.clone()
    };
    // Every step's accesses (to the call's buffers and to the staging alike, no cache
    // table), 2 per copy, at 7 GB/s over 2 cores.
    let chunk = bytes / u64::from(ring.in_chunks);
    let copies: f64 = ring
        .ranks
        .iter()
        .flat_map(|r| &r.blocks)
        .flat_map(|b| &b.steps)
        .map(|s| {
            let (buf, cached) = braid_cost::sim::staged_accesses(s.kind);
            let chunks = s.src.or(s.dst).map_or(0, |x| u64::from(x.count));
            (buf + cached) / 2.0 * (chunks * chunk) as f64
        })
        .sum();
    let bound = copies / (7.0 * 1e3) / 2.0;
    let p = predict(ring, &t, &staged, &call).unwrap().total_us;
    assert!(p >= bound && p <= bound * 1.05, "{p} against {bound}");
    let q = predict(ring, &t, &gpu_like, &call).unwrap().total_us;
    assert!(q < p * 0.6, "{q} against {p}");
}

/// Over TCP a byte sent costs the cores more than its copies into and out of the link's
/// slots (the kernel copies it through the socket): `Profile::link_work_gbps`. On 8 ranks
/// sharing 2 cores, a 64 MiB ring all-reduce, bound by the cores' work, costs every byte
/// its steps send at that rate over the cores on top of its price without it; a profile
/// without cores to share (a GPU's) ignores it.
#[test]
fn sends_over_tcp_cost_the_cores_their_link_work() {
    let (t, ps) = plans("nvswitch:8", Collective::Allreduce);
    let ring = plan(&ps, "ring_allreduce");
    let bytes: u64 = 64 << 20;
    let call = simple(bytes, 1, false);
    let shm = Profile {
        staged_steps: true,
        ..host_profile(50.0, 25.0, 27.0, 3.7)
    };
    let mut tcp = shm.clone();
    tcp.link_work_gbps.simple = 2.0;
    let chunk = bytes / u64::from(ring.in_chunks);
    let sent: f64 = ring
        .ranks
        .iter()
        .flat_map(|r| &r.blocks)
        .flat_map(|b| &b.steps)
        .filter(|s| s.kind.sends())
        .map(|s| (s.src.or(s.dst).map_or(0, |x| u64::from(x.count)) * chunk) as f64)
        .sum();
    assert!(sent > 0.0);
    let without = predict(ring, &t, &shm, &call).unwrap();
    let with = predict(ring, &t, &tcp, &call).unwrap();
    assert_eq!(with.bound, Some(braid_cost::sim::Bound::Cores));
    let extra = sent / (2.0 * 1e3) / 2.0;
    assert!(
        (with.total_us - without.total_us - extra).abs() < 1e-6 * with.total_us,
        "{} against {} + {extra}",
        with.total_us,
        without.total_us
    );
    // Where blocks do not share cores, nothing.
    let (mut gpu, mut gpu_tcp) = (shm.clone(), tcp.clone());
    gpu.cores = 0;
    gpu_tcp.cores = 0;
    assert_eq!(
        predict(ring, &t, &gpu, &call).unwrap().total_us,
        predict(ring, &t, &gpu_tcp, &call).unwrap().total_us
    );
}

/// Options priced together, as the runtime's selection prices them (each plan's wiring
/// made once for its calls with direct reads and once for those without), cost what each
/// costs priced alone; and direct reads change some plan's price, so a wiring shared
/// across the two kinds of call would show.
#[test]
fn options_priced_together_cost_what_each_costs_alone() {
    use braid_cost::near::{price_near, Offer};
    let (t, ps) = plans("nvswitch:8", Collective::Allreduce);
    let profile = Profile::default();
    for bytes in [8u64, 1 << 20, 64 << 20] {
        let mut offers = Vec::new();
        for p in &ps {
            for direct in [false, true] {
                for replicas in [1, 2] {
                    for protocol in [Protocol::Simple, Protocol::Ll] {
                        offers.push(Offer {
                            plan: p,
                            call: Call {
                                bytes,
                                elem: 4,
                                protocol,
                                replicas,
                                direct,
                                together: direct,
                                in_place: false,
                            },
                        });
                    }
                }
            }
        }
        let together = price_near(&offers, &t, &profile, f64::INFINITY);
        let mut direct_differs = false;
        for (o, got) in offers.iter().zip(&together) {
            let alone = predict(o.plan, &t, &profile, &o.call).unwrap().total_us;
            let got = got.clone().expect("every option priced").unwrap();
            assert_eq!(got, alone, "{} {bytes} B {:?}", o.plan.name, o.call);
            let other = Call {
                direct: !o.call.direct,
                together: !o.call.direct,
                in_place: false,
                ..o.call
            };
            direct_differs |= predict(o.plan, &t, &profile, &other).unwrap().total_us != alone;
        }
        assert!(
            direct_differs,
            "{bytes} B: no plan priced differently with direct reads"
        );
    }
}

/// Where the GPU measured a receiving step's cost apart (`recv_slice_us`), the hop it
/// was measured with is a message's whole latency on NVLink, and LL's receives take up
/// lines as they land: in a chain of 8 ranks each receiver then ends its step a hop
/// after the one before it (as the GPU records it: `bench/2026-12-07-h100-model-check-
/// knee/8r/traces/chain_broadcast.8.ll.txt`), at its own pace. Simple reads a slice once
/// it has landed whole (a hop and a receive later), and a profile that measured no
/// receiving step prices as before: the path's latency, the hop, then the slice (ranks
/// sharing a GPU: the hop, then the slice).
#[test]
fn a_measured_receive_prices_a_chains_hops_as_the_gpu_times_them() {
    let (t, ps) = plans("nvswitch:8", Collective::Broadcast);
    let chain = plan(&ps, "chain_broadcast");
    let (send, recv, hop) = (1.1, 1.35, 0.35);
    let mut measured = Profile {
        call_us: PerProtocol::both(0.0),
        ..Profile::default()
    };
    measured.slice_us = PerProtocol::both(send);
    measured.recv_slice_us = PerProtocol::both(recv);
    measured.hop_us.nvlink = PerProtocol::both(hop);
    let unmeasured = Profile {
        recv_slice_us: PerProtocol::default(),
        ..measured.clone()
    };
    let lat = t.path(1, 2).latency_us;
    assert!(lat > 0.0);
    // Ranks r and r + 1 (both receivers): step k's end on r + 1 less on r, for k >= 1.
    let gaps = |profile: &Profile, protocol: Protocol| -> Vec<f64> {
        let call = Call {
            protocol,
            ..simple(8 * 4, 1, false)
        };
        let p = predict(chain, &t, profile, &call).unwrap();
        let steps = chain.ranks[1].blocks[0].steps.len();
        assert!(steps >= 4, "{steps} steps");
        let mut g = Vec::new();
        for r in 1..7 {
            for k in 1..steps {
                g.push(
                    step_at(&p.timeline, r + 1, 0, k).end_us - step_at(&p.timeline, r, 0, k).end_us,
                );
            }
        }
        g
    };
    let all = |g: &[f64], want: f64, what: &str| {
        assert!(
            g.iter().all(|x| (x - want).abs() < 1e-3),
            "{what}: every gap {want} (and its element's bytes), got {g:?}"
        );
    };
    all(&gaps(&measured, Protocol::Ll), hop, "LL, measured");
    all(
        &gaps(&measured, Protocol::Simple),
        hop + recv,
        "Simple, measured",
    );
    all(
        &gaps(&unmeasured, Protocol::Ll),
        lat + hop + send,
        "LL, not measured",
    );
    // Ranks sharing one GPU cross no link: a receive the tune did not time apart (Simple
    // on such a GPU) pays the measured hop and its slice, without the link's nominal
    // latency (which priced an 8-rank ring in Simple 40 % dear, docs/costmodel.md).
    let mut one_gpu = unmeasured.clone();
    one_gpu.shared_gbps = PerProtocol::both(1e6);
    assert!(one_gpu.one_gpu());
    all(
        &gaps(&one_gpu, Protocol::Simple),
        hop + send,
        "Simple, ranks sharing a GPU",
    );
    // The receivers' own pace: the last rank's steps follow each other a receive apart.
    let call = Call {
        protocol: Protocol::Ll,
        ..simple(8 * 4, 1, false)
    };
    let p = predict(chain, &t, &measured, &call).unwrap();
    let ends: Vec<f64> = (0..chain.ranks[7].blocks[0].steps.len())
        .map(|k| step_at(&p.timeline, 7, 0, k).end_us)
        .collect();
    assert!(
        ends.windows(2).all(|w| (w[1] - w[0] - recv).abs() < 1e-3),
        "{ends:?}"
    );
}

/// Both backends cut a step's chunks into slices one chunk at a time (the CUDA kernel's
/// `step` loops over the chunks, then over each one's FIFO-slot pieces; the host
/// executor's `pieces` the same), so a step over 8 chunks of one element is 8 slices:
/// the out-of-place ring all-reduce's first copy of its whole input (8 chunks) costs 8
/// slices' fixed cost, the ring all-gather's copy of its own chunk one. Traced on an H100
/// (`bench/2026-12-07-h100-model-check-knee/8r/traces/`): 5.8-6.1 µs against 1.1.
#[test]
fn a_step_over_several_chunks_pays_a_slice_per_chunk() {
    let t = Topology::from_arg("nvswitch:8").unwrap();
    let lib = Library::new(t.clone());
    let ring = lib
        .plans(Collective::Allreduce, None)
        .into_iter()
        .find(|p| p.name == "ring_allreduce")
        .unwrap();
    let gather = lib
        .plans(Collective::Allgather, None)
        .into_iter()
        .find(|p| p.name == "ring_allgather")
        .unwrap();
    let profile = Profile {
        slice_us: PerProtocol::both(0.75),
        ..Profile::default()
    };
    // A copy of `chunks` chunks: the first step of a block that only copies, on rank 0.
    let copy = |plan: &Verified, bytes: u64| -> (u32, f64) {
        let p = predict(plan, &t, &profile, &simple(bytes, 1, false)).unwrap();
        let (bi, b) = plan.ranks[0]
            .blocks
            .iter()
            .enumerate()
            .find(|(_, b)| b.steps.len() == 1 && b.steps[0].kind == braid_plan::StepKind::Copy)
            .expect("a block that copies");
        let chunks = b.steps[0].src.map_or(0, |s| s.count);
        let st = step_at(&p.timeline, 0, bi, 0);
        (chunks, st.end_us - st.start_us)
    };
    let (n, us) = copy(&ring, 8 * 4);
    assert_eq!(n, 8);
    assert!((us - 8.0 * 0.75).abs() < 0.01, "{us}");
    let (n, us) = copy(&gather, 8 * 4);
    assert_eq!(n, 1);
    assert!((us - 0.75).abs() < 0.01, "{us}");
    // Large chunks: each chunk its own slices (8 chunks of 1 MiB at 256 KiB a slice: 32),
    // the bytes' time alike however they are cut.
    let big = predict(&ring, &t, &profile, &simple(8 << 20, 1, false)).unwrap();
    let bi = ring.ranks[0]
        .blocks
        .iter()
        .position(|b| b.steps.len() == 1 && b.steps[0].kind == braid_plan::StepKind::Copy)
        .unwrap();
    let st = step_at(&big.timeline, 0, bi, 0);
    let bytes_us = (8u64 << 20) as f64 / (profile.block_gbps.simple * 1e3);
    assert!(
        ((st.end_us - st.start_us) - (32.0 * 0.75 + bytes_us)).abs() < 0.01,
        "{} against {}",
        st.end_us - st.start_us,
        32.0 * 0.75 + bytes_us
    );
}
