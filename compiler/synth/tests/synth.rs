//! Synthesized programs compile, verify, and are measured against the cut bound by the
//! checker that reads the verified plan (rooted programs for every root).

use braid_cost::bound::{bottleneck_us, cut_bound_rooted_us};
use braid_synth::{candidates, Objective, SUPPORTED};
use braid_topo::Topology;

#[test]
fn every_program_verifies_and_reports_its_bottleneck() {
    for topo in ["nvswitch:8", "pcie:8", "cluster:2x8", "nvswitch:3"] {
        let t = Topology::from_arg(topo).unwrap();
        for c in SUPPORTED {
            // Rooted programs compile once per root: keep their topologies small here
            // (tools/braid/tests/synth_cli.rs checks them across nodes).
            if c.is_rooted() && t.n_ranks() > 8 {
                continue;
            }
            for obj in [Objective::Bandwidth, Objective::Latency] {
                for p in candidates(c, &t, obj).unwrap() {
                    let plans = braid_library::compile_file("synth.braid", &p.text, &t)
                        .unwrap_or_else(|e| panic!("{topo} {c} {obj:?}:\n{e}\n{}", p.text));
                    // Rooted programs compile once per root.
                    let roots = if c.is_rooted() {
                        t.n_ranks() as usize
                    } else {
                        1
                    };
                    assert_eq!(plans.len(), roots, "{topo} {c}");
                    let bytes = 1u64 << 30;
                    for plan in &plans {
                        let (bound, _) = cut_bound_rooted_us(&t, c, bytes, plan.root);
                        let (neck, link) = bottleneck_us(plan, &t, bytes, 4);
                        assert!(
                            neck >= bound * 0.999,
                            "{topo} {c} root {:?}: {neck} below the bound {bound}",
                            plan.root
                        );
                        if plan.root.unwrap_or(0) == 0 {
                            eprintln!(
                                "{topo} {c} {obj:?} {}: bottleneck {neck:.0} us on {link}, bound {bound:.0} us ({:.2}x)",
                                p.name,
                                neck / bound
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn all_to_all_meets_the_cut_bound_inside_a_node_and_across_nodes() {
    use braid_ir::Collective;
    for (topo, name) in [
        ("nvswitch:8", "synth_direct_alltoall"),
        ("cluster:2x8", "synth_hier_alltoall"),
        ("cluster:4x4", "synth_hier_alltoall"),
    ] {
        let t = Topology::from_arg(topo).unwrap();
        let progs = candidates(Collective::Alltoall, &t, Objective::Bandwidth).unwrap();
        let p = progs
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("{topo}: no {name}"));
        let plan = braid_library::compile_file("a2a.braid", &p.text, &t)
            .unwrap()
            .remove(0);
        let bytes = 1u64 << 30;
        let (bound, _) = cut_bound_rooted_us(&t, Collective::Alltoall, bytes, None);
        let (neck, link) = bottleneck_us(&plan, &t, bytes, 4);
        assert!(
            neck <= bound * 1.001,
            "{topo} {name}: bottleneck {neck} us on {link}, bound {bound} us"
        );
    }
}
