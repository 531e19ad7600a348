//! Export then import is exact up to what MSCCL cannot express (`msccl_form`), and
//! export is a fixed point, for every plan the shipped library compiles.

use braid_ir::Collective;
use braid_msccl::{export, import, msccl_form};
use braid_plan::Plan;
use proptest::prelude::*;

fn library_plans(topo: &str) -> Vec<Plan> {
    let topo = braid_topo::Topology::from_arg(topo).unwrap();
    let n = topo.n_ranks();
    let lib = braid_library::Library::new(topo);
    let mut plans = Vec::new();
    for c in Collective::ALL {
        let roots: Vec<Option<u32>> = if c.is_rooted() {
            vec![Some(0), Some(n - 1)]
        } else {
            vec![None]
        };
        for root in roots {
            plans.extend(lib.plans(c, root).iter().map(|p| p.plan().clone()));
        }
    }
    plans
}

fn check(plan: &Plan) {
    let xml = export(plan).unwrap();
    let back = import(&xml, "x").unwrap_or_else(|e| panic!("{}: {e:?}\n{xml}", plan.name));
    assert_eq!(back, msccl_form(plan), "{}", plan.name);
    braid_plan::verify(&back)
        .unwrap_or_else(|d| panic!("{}: {}", plan.name, braid_plan::render_diagnostics(&d)));
    assert_eq!(
        export(&back).unwrap(),
        xml,
        "{}: export is not a fixed point",
        plan.name
    );
}

#[test]
fn every_library_plan_round_trips() {
    let mut count = 0;
    for topo in [
        "nvswitch:2",
        "nvswitch:4",
        "nvswitch:8",
        "pcie:3",
        "cluster:2x4",
    ] {
        for plan in library_plans(topo) {
            check(&plan);
            count += 1;
        }
    }
    assert!(count > 40, "only {count} plans");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// Random topologies, with random byte ranges and modes the XML must carry.
    #[test]
    fn random_topologies_round_trip(n in 2u32..=8, pick in 0usize..64, min in 0u64..4096, span in proptest::option::of(2u64..1 << 30)) {
        let plans = library_plans(&format!("nvswitch:{n}"));
        let mut plan = plans[pick % plans.len()].clone();
        plan.bytes = Some(braid_plan::ByteRange { min, max: span.map(|s| min + s) });
        check(&plan);
    }
}

#[test]
fn multi_dependency_steps_become_nops_and_hasdep_is_set() {
    let plan = library_plans("nvswitch:4")
        .into_iter()
        .find(|p| {
            p.ranks
                .iter()
                .flat_map(|r| &r.blocks)
                .flat_map(|b| &b.steps)
                .any(|s| s.deps.len() > 1)
        })
        .expect("a library plan with a multi-dependency step");
    let xml = export(&plan).unwrap();
    assert!(xml.contains("type=\"nop\""));
    assert!(xml.contains("hasdep=\"1\""));
    assert!(xml.contains("outofplace="));
    for line in xml.lines().filter(|l| l.contains("<step")) {
        assert!(line.trim_start().starts_with("<step") && line.ends_with("/>"));
    }
}
