//! Synthesized programs compile, verify, and are measured against the cut bound by the
//! checker that reads the verified plan.

use braid_cost::bound::{bottleneck_us, cut_bound_us};
use braid_synth::{candidates, Objective, SUPPORTED};
use braid_topo::Topology;

#[test]
fn every_program_verifies_and_reports_its_bottleneck() {
    for topo in ["nvswitch:8", "pcie:8", "cluster:2x8", "nvswitch:3"] {
        let t = Topology::from_arg(topo).unwrap();
        for c in SUPPORTED {
            for obj in [Objective::Bandwidth, Objective::Latency] {
                for p in candidates(c, &t, obj).unwrap() {
                    let plans = braid_library::compile_file("synth.braid", &p.text, &t)
                        .unwrap_or_else(|e| panic!("{topo} {c} {obj:?}:\n{e}\n{}", p.text));
                    assert_eq!(plans.len(), 1);
                    let bytes = 1u64 << 30;
                    let (bound, _) = cut_bound_us(&t, c, bytes);
                    let (neck, link) = bottleneck_us(&plans[0], &t, bytes, 4);
                    eprintln!(
                        "{topo} {c} {obj:?} {}: bottleneck {neck:.0} us on {link}, bound {bound:.0} us ({:.2}x)",
                        p.name,
                        neck / bound
                    );
                    assert!(
                        neck >= bound * 0.999,
                        "{topo} {c}: {neck} below the bound {bound}"
                    );
                }
            }
        }
    }
}
