//! Selection by the cost model (`Policy::with_model`): the cheapest predicted choice
//! within the backend's limits (near ties to the fewest blocks), never predicted slower
//! than the rules' choice beyond that margin; the
//! variables still restrict it; the published shape of the ranking (latency plans for
//! small all-reduces, rings for large ones inside a node); one choice per size bucket.

use braid_cost::{Candidate, Profile};
use braid_ir::{Collective, Mode, Protocol};
use braid_library::Library;
use braid_plan::Verified;
use braid_runtime::policy::{blocks_per_replica, AlgoFilter, Policy, Request, Target};
use braid_runtime::registry::{PlanProvider, Registry};
use braid_topo::Topology;
use std::sync::Arc;

struct Lib(Library);

impl PlanProvider for Lib {
    fn plans(&self, c: Collective, root: Option<u32>) -> Vec<Arc<Verified>> {
        self.0.plans(c, root)
    }
}

fn setup(topo: &str) -> (Topology, Registry) {
    let t = Topology::from_arg(topo).unwrap();
    let reg = Registry::new().with_provider(Box::new(Lib(Library::new(t.clone()))));
    (t, reg)
}

const GPU: Target = Target {
    block_budget: 66,
    size_replicas: true,
    ll: true,
    ll128: false,
    direct: false,
    flat: false,
};

fn req(c: Collective, n: u32, bytes: usize) -> Request {
    Request {
        collective: c,
        n_ranks: n,
        root: c.is_rooted().then_some(0),
        mode: Mode::OutOfPlace,
        bytes,
        elem: 4,
    }
}

fn predict(t: &Topology, plan: &Verified, r: &Request, replicas: u32, p: Protocol) -> f64 {
    let cand = [Candidate {
        plan,
        origin: "test".into(),
    }];
    let creq = braid_cost::Request {
        collective: r.collective,
        root: r.root,
        mode: r.mode,
        bytes: r.bytes as u64,
        elem: r.elem as u64,
        direct: false,
        ll128: false,
        excluded: None,
    };
    braid_cost::rank_with(
        &cand,
        t,
        &Profile::default(),
        &creq,
        Some(replicas),
        Some(p),
    )[0]
    .result
    .clone()
    .unwrap()
}

const SIZES: [usize; 6] = [8, 4 << 10, 256 << 10, 4 << 20, 64 << 20, 1 << 30];

#[test]
fn the_model_never_predicts_its_choice_slower_than_the_rules_and_keeps_to_the_budget() {
    for topo in ["nvswitch:8", "pcie:4", "cluster:2x4"] {
        let (t, reg) = setup(topo);
        let n = t.n_ranks();
        let model = Policy::default().with_model(t.clone(), Profile::default());
        let rules = Policy::default();
        for c in Collective::ALL {
            for bytes in SIZES {
                let r = req(c, n, bytes * if c.has_k() { n as usize } else { 1 });
                let m = model.choose(&reg, &r, &GPU).unwrap();
                let by_rules = rules.choose(&reg, &r, &GPU).unwrap();
                let tm = predict(&t, &m.plan, &r, m.replicas, m.protocol);
                let tr = predict(&t, &by_rules.plan, &r, by_rules.replicas, by_rules.protocol);
                // Within the tie margin the model takes fewer blocks on purpose.
                assert!(
                    tm <= tr * (1.0 + braid_runtime::selection::TIE + 1e-9),
                    "{topo} {c} {bytes} B: the model chose {} x{} {:?} ({tm:.2} us) over the \
                     rules' {} x{} {:?} ({tr:.2} us)",
                    m.plan.name,
                    m.replicas,
                    m.protocol,
                    by_rules.plan.name,
                    by_rules.replicas,
                    by_rules.protocol
                );
                assert!(
                    blocks_per_replica(&m.plan) * m.replicas
                        <= GPU.block_budget.max(blocks_per_replica(&m.plan)),
                    "{topo} {c} {bytes} B: {} x{} exceeds the block budget",
                    m.plan.name,
                    m.replicas
                );
            }
        }
    }
}

#[test]
fn small_all_reduces_take_a_latency_plan_and_large_ones_a_ring_inside_a_node() {
    let (t, reg) = setup("nvswitch:8");
    let model = Policy::default().with_model(t, Profile::default());
    let small = model
        .choose(&reg, &req(Collective::Allreduce, 8, 8), &GPU)
        .unwrap();
    assert!(
        !small.plan.name.contains("ring"),
        "an 8-byte all-reduce on 8 GPUs chose {}",
        small.plan.name
    );
    assert_eq!(small.protocol, Protocol::Ll, "8 bytes go over LL");
    let large = model
        .choose(&reg, &req(Collective::Allreduce, 8, 1 << 30), &GPU)
        .unwrap();
    // A full-bandwidth plan: a ring, two-shot, or the double binary tree, which runs tile
    // by tile (docs/costmodel.md); never the single tree nor a latency plan.
    assert!(
        large.plan.name.contains("ring")
            || large.plan.name.contains("two_shot")
            || large.plan.name == "double_binary_tree_allreduce",
        "a 1 GiB all-reduce on 8 GPUs chose {}",
        large.plan.name
    );
    assert_eq!(large.protocol, Protocol::Simple, "1 GiB goes over Simple");
    assert!(large.replicas > 1, "1 GiB runs on one replica");
}

#[test]
fn the_variables_and_the_backend_restrict_the_model() {
    let (t, reg) = setup("nvswitch:8");
    let r = req(Collective::Allreduce, 8, 1 << 30);
    let no_ring = Policy {
        algo: Some(AlgoFilter::parse("NCCL_ALGO", "^ring").unwrap()),
        ..Policy::default()
    }
    .with_model(t.clone(), Profile::default());
    let c = no_ring.choose(&reg, &r, &GPU).unwrap();
    assert!(!c.plan.name.contains("ring"), "^ring chose {}", c.plan.name);
    let forced = Policy {
        replicas: Some(2),
        protocol: Some(Protocol::Ll),
        ..Policy::default()
    }
    .with_model(t.clone(), Profile::default());
    let c = forced.choose(&reg, &r, &GPU).unwrap();
    assert_eq!((c.replicas, c.protocol), (2, Protocol::Ll));
    // A backend without LL never gets it; one running plans as written keeps them.
    let model = Policy::default().with_model(t.clone(), Profile::default());
    let small = req(Collective::Allreduce, 8, 8);
    assert_eq!(
        model.choose(&reg, &small, &Target::HOST).unwrap().protocol,
        Protocol::Simple
    );
    assert_eq!(
        model.choose(&reg, &small, &Target::HOST).unwrap().replicas,
        1
    );
    // BRAID_SELECT=rules: no model is attached.
    let rules = Policy {
        rules_only: true,
        ..Policy::default()
    }
    .with_model(t, Profile::default());
    assert!(rules.model.is_none());
}

#[test]
fn one_choice_per_size_bucket() {
    let (t, reg) = setup("nvswitch:8");
    let model = Policy::default().with_model(t, Profile::default());
    for bytes in [3000usize, 5 << 20] {
        let a = model
            .choose(&reg, &req(Collective::Allreduce, 8, bytes), &GPU)
            .unwrap();
        let b = model
            .choose(&reg, &req(Collective::Allreduce, 8, bytes + 1), &GPU)
            .unwrap();
        assert_eq!(
            (a.plan.digest(), a.replicas, a.protocol),
            (b.plan.digest(), b.replicas, b.protocol),
            "{bytes} and {} bytes share a bucket",
            bytes + 1
        );
    }
}

#[test]
fn an_eight_byte_call_takes_few_blocks() {
    // Every replica count prices an 8-byte all-reduce alike: the fewest blocks win.
    let (t, reg) = setup("nvswitch:2");
    let model = Policy::default().with_model(t, Profile::default());
    let c = model
        .choose(&reg, &req(Collective::Allreduce, 2, 8), &GPU)
        .unwrap();
    assert_eq!(c.replicas, 1, "{} x{}", c.plan.name, c.replicas);
}

/// Ranks that share one GPU and launch together, with no measured profile: the calls are
/// priced with the built-in constants for a shared GPU (`Profile::shared_gpu`), not with
/// those for a rank per GPU over NVLink. On 8 ranks a small out-of-place all-reduce then
/// takes the one-shot plan whose receives read the peers' inputs (measured on the H200:
/// 12-16 µs at 4-32 KiB where two-shot took 24-25), and a measured profile is used as it
/// is.
#[test]
fn ranks_sharing_a_gpu_are_priced_with_the_shared_gpu_constants_without_a_profile() {
    let (t, reg) = setup("nvswitch:8");
    let together = Target {
        direct: true,
        ..GPU
    };
    let model = Policy::default().with_model(t.clone(), Profile::default());
    for bytes in [4usize << 10, 32 << 10] {
        let c = model
            .choose(&reg, &req(Collective::Allreduce, 8, bytes), &together)
            .unwrap();
        assert_eq!(
            c.plan.name, "one_shot_oop_allreduce",
            "{bytes} B: {} x{}",
            c.plan.name, c.replicas
        );
    }
    // The built-in constants for a rank per GPU pick another plan for 4 KiB on 8 ranks:
    // the choice above comes from the shared-GPU constants.
    let alone = Policy::default()
        .with_model(t.clone(), Profile::default())
        .choose(&reg, &req(Collective::Allreduce, 8, 4 << 10), &GPU)
        .unwrap();
    let priced_alone = Policy::default()
        .with_model(t.clone(), Profile::default())
        .choose(
            &reg,
            &req(Collective::Allreduce, 8, 4 << 10),
            &Target {
                direct: true,
                ..GPU
            },
        )
        .unwrap();
    assert_ne!(
        (alone.plan.digest(), alone.replicas),
        (priced_alone.plan.digest(), priced_alone.replicas)
    );
    // A measured profile (here the defaults under another name) is used as it is.
    let measured = Profile {
        source: "braid tune, somewhere".into(),
        ..Profile::default()
    };
    let m = Policy::default().with_model(t, measured);
    assert!(!m.model.as_ref().unwrap().0.profile.is_builtin());
    assert!(Profile::shared_gpu().is_builtin() && Profile::shared_gpu().one_gpu());
}

/// Ranks sharing a GPU whose backend runs flat launches: a large 8-rank broadcast takes
/// the direct broadcast, whose every rank reads the root's input in one flat launch
/// (measured on the H200 at 4 MiB: 19 µs where the step-by-step launch took 100), with
/// one replica (replicas change nothing in a flat launch, and near ties go to the fewest
/// blocks); a backend without flat launches prices the plan step by step, where more
/// replicas (or another plan) pay.
#[test]
fn ranks_that_run_flat_launches_are_priced_as_such() {
    let (t, reg) = setup("nvswitch:8");
    let model = Policy::default().with_model(t.clone(), Profile::default());
    let bc = req(Collective::Broadcast, 8, 256 << 20);
    let flat = Target {
        direct: true,
        flat: true,
        ..GPU
    };
    let c = model.choose(&reg, &bc, &flat).unwrap();
    assert_eq!((c.plan.name.as_str(), c.replicas), ("direct_broadcast", 1));
    let stepwise = Target {
        direct: true,
        flat: false,
        ..GPU
    };
    // The same plan priced step by step costs more than as one flat launch.
    let plan = model.choose(&reg, &bc, &flat).unwrap().plan;
    let creq = braid_cost::Request {
        collective: bc.collective,
        root: bc.root,
        mode: bc.mode,
        bytes: bc.bytes as u64,
        elem: 4,
        direct: true,
        ll128: false,
        excluded: None,
    };
    let at = |target: &Target| {
        let profile = Profile::default();
        braid_runtime::selection::price(
            &t,
            &profile.for_launch(true),
            &[&plan],
            &creq,
            Some(1),
            Some(Protocol::Simple),
            target,
            None,
        )[0]
        .0
    };
    assert!(
        at(&flat) * 2.0 < at(&stepwise),
        "{} {}",
        at(&flat),
        at(&stepwise)
    );
}

/// Where calls run as flat launches, a near tie goes to the choice whose launch holds
/// the fewest blocks of the GPU, counted as the launch's grid, not the plan's blocks: an
/// 8-rank all-reduce of a few KiB on ranks sharing a GPU costs the host's issue either
/// way (the one-shot's and the two-shot's prices differ by their arguments, about 1 %),
/// and the one-shot's launch is one block where the two-shot's is eight (on an H100 the
/// one-shot ran 4.9-5.1 µs back to back there, the two-shot 5.1-5.7).
#[test]
fn a_near_tie_between_flat_launches_goes_to_the_smaller_grid() {
    let (t, reg) = setup("nvswitch:8");
    let model = Policy::default().with_model(t.clone(), Profile::default());
    let flat = Target {
        direct: true,
        flat: true,
        ..GPU
    };
    for bytes in [8usize, 512, 4096] {
        let c = model
            .choose(&reg, &req(Collective::Allreduce, 8, bytes), &flat)
            .unwrap();
        assert_eq!(c.plan.name, "one_shot_oop_allreduce", "{bytes} B");
    }
    // The grids: the one-shot's merged pass is one sequence, the two-shot's eight.
    let plans = Library::new(t.clone()).plans(Collective::Allreduce, None);
    let call = braid_cost::Call {
        bytes: 4096,
        elem: 4,
        protocol: Protocol::Simple,
        replicas: 1,
        direct: true,
        together: true,
        in_place: false,
    };
    let grid = |name: &str| {
        let p = plans.iter().find(|p| p.name == name).unwrap();
        braid_cost::flat::blocks(p, &Profile::shared_gpu(), &call)
    };
    assert_eq!(grid("one_shot_oop_allreduce"), Some(1));
    assert_eq!(grid("two_shot_allreduce"), Some(8));
    // A ring forwards what it receives: it does not run flat.
    assert_eq!(grid("ring_allreduce"), None);
}

/// Whatever the model chooses, with or without flat launches (which price every replica
/// count alike), its replica count is one the plan verifier accepts: on one rank every
/// plan is a local copy, and a bidirectional ring (two channels) may not take 32.
#[test]
fn every_choice_verifies_with_its_replicas() {
    for n in [1u32, 2, 8] {
        let (t, reg) = setup(&format!("nvswitch:{n}"));
        let model = Policy::default().with_model(t.clone(), Profile::default());
        for flat in [false, true] {
            let target = Target {
                direct: true,
                flat,
                ..GPU
            };
            for c in [
                Collective::Allreduce,
                Collective::Broadcast,
                Collective::Allgather,
            ] {
                for bytes in [8usize, 1 << 20, 256 << 20] {
                    let mut r = req(c, n, bytes);
                    r.bytes = bytes.max(4 * n as usize);
                    let Ok(choice) = model.choose(&reg, &r, &target) else {
                        continue;
                    };
                    assert!(
                        choice.plan.with_channels(choice.replicas).is_ok(),
                        "{c} on {n} ranks, {bytes} B, flat {flat}: {} x{} does not verify",
                        choice.plan.name,
                        choice.replicas
                    );
                }
            }
        }
    }
}

/// One model (one policy) serving communicators that the backend offers different
/// things: a choice cached for one is never handed to the other. Here LL128 is cheaper
/// than Simple and LL at 1 MiB, and allowed on the first communicator's links only.
#[test]
fn a_shared_model_keeps_the_choices_of_different_targets_apart() {
    let (t, reg) = setup("nvswitch:8");
    let model = Policy::default().with_model(t, ll128_cheap());
    let r = req(Collective::Allreduce, 8, 1 << 20);
    let with = Target { ll128: true, ..GPU };
    assert_eq!(
        model.choose(&reg, &r, &with).unwrap().protocol,
        Protocol::Ll128
    );
    let without = model.choose(&reg, &r, &GPU).unwrap();
    assert_ne!(
        without.protocol,
        Protocol::Ll128,
        "a communicator without LL128 got the choice cached for one with it"
    );
    // And the first one's cached choice is still its own.
    assert_eq!(
        model.choose(&reg, &r, &with).unwrap().protocol,
        Protocol::Ll128
    );
}

/// The runtime prices only the choices that can come within [`TIE`] of the fastest (the
/// others are bounded and left out); it picks what pricing them all picks, on GPU
/// constants inside a node and across nodes, for every collective and size.
#[test]
fn pricing_only_the_near_choices_picks_what_pricing_all_picks() {
    use braid_runtime::selection::{pick, price, TIE};
    for topo in ["nvswitch:8", "cluster:2x4"] {
        let (t, reg) = setup(topo);
        let n = t.n_ranks();
        let profile = Profile::default();
        for c in Collective::ALL {
            for bytes in SIZES {
                let r = req(c, n, bytes * if c.has_k() { n as usize } else { 1 });
                let fitting = reg
                    .candidates(r.collective, n, r.root, r.mode, r.bytes, None)
                    .unwrap();
                let plans: Vec<&braid_plan::Plan> = fitting.iter().map(|(p, _)| &***p).collect();
                let creq = braid_cost::Request {
                    collective: c,
                    root: r.root,
                    mode: r.mode,
                    bytes: r.bytes as u64,
                    elem: 4,
                    direct: false,
                    ll128: false,
                    excluded: None,
                };
                let all = price(&t, &profile, &plans, &creq, None, None, &GPU, None);
                let near = price(&t, &profile, &plans, &creq, None, None, &GPU, Some(TIE));
                let key = |o: Option<(f64, usize, u32, Protocol, u32)>| {
                    o.map(|(t, i, r, p, b)| (plans[i].name.clone(), r, p, b, t))
                };
                assert_eq!(
                    key(pick(&near)),
                    key(pick(&all)),
                    "{topo} {c} {bytes} B ({} of {} choices priced)",
                    near.len(),
                    all.len()
                );
            }
        }
    }
}

/// `BRAID_PROTO=ll128` on a communicator whose links have no passed LL128 stress test: the
/// model's choice runs Simple (the backend refuses to prepare LL128 there); where they
/// passed, LL128.
#[test]
fn a_forced_ll128_runs_simple_where_its_stress_test_did_not_pass() {
    let (t, reg) = setup("nvswitch:8");
    let forced = Policy {
        protocol: Some(Protocol::Ll128),
        ..Policy::default()
    }
    .with_model(t, Profile::default());
    for bytes in [8usize, 1 << 20, 64 << 20] {
        let r = req(Collective::Allreduce, 8, bytes);
        assert_eq!(
            forced.choose(&reg, &r, &GPU).unwrap().protocol,
            Protocol::Simple,
            "{bytes} B without a verdict"
        );
        let with = Target { ll128: true, ..GPU };
        assert_eq!(
            forced.choose(&reg, &r, &with).unwrap().protocol,
            Protocol::Ll128,
            "{bytes} B with one"
        );
    }
}

/// Constants under which LL128 beats Simple and LL at 1 MiB on nvswitch:8: LL's per-message
/// costs, Simple's block rate, 120 of 128 bytes.
fn ll128_cheap() -> Profile {
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
    p
}

/// `NCCL_PROTO=^LL128` (or a list without it) keeps LL128 off where the backend would
/// run it and the model prefers it; the lists NCCL users write parse as NCCL reads them.
#[test]
fn a_protocol_list_without_ll128_keeps_it_off() {
    use braid_runtime::policy::protocol_set;
    assert_eq!(
        protocol_set("NCCL_PROTO", "^LL128").unwrap(),
        [true, true, false]
    );
    assert_eq!(
        protocol_set("NCCL_PROTO", "Simple,LL").unwrap(),
        [true, true, false]
    );
    assert_eq!(protocol_set("NCCL_PROTO", "auto").unwrap(), [true; 3]);
    assert_eq!(
        protocol_set("NCCL_PROTO", "^ll").unwrap(),
        [true, false, true]
    );
    assert!(protocol_set("NCCL_PROTO", "LL256").is_err());
    let (t, reg) = setup("nvswitch:8");
    let r = req(Collective::Allreduce, 8, 1 << 20);
    let with = Target { ll128: true, ..GPU };
    let open = Policy::default().with_model(t.clone(), ll128_cheap());
    assert_eq!(
        open.choose(&reg, &r, &with).unwrap().protocol,
        Protocol::Ll128
    );
    let closed = Policy {
        no_ll128: true,
        ..Policy::default()
    }
    .with_model(t, ll128_cheap());
    let c = closed.choose(&reg, &r, &with).unwrap();
    assert_ne!(
        c.protocol,
        Protocol::Ll128,
        "{} x{}",
        c.plan.name,
        c.replicas
    );
}
