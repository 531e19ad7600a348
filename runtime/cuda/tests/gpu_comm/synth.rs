//! Synthesized schedules on the GPU (`braid synth`, docs/synthesis.md): every program
//! synthesis writes or weighs for every collective it covers, on 2- and 4-rank topologies
//! (a switch, a PCIe tree, two nodes of two), compiled and proved like any program, then
//! run through the device communicator with that plan as its only one, so a call that
//! succeeds ran it. Every root, in place and out of place, several dtypes and reductions,
//! odd counts; results against the host reference, bit for bit.

use super::support::KINDS;
use super::{dtype_ops, modes, open_with, opts, roots, run_selected, Cases};
use braid_ir::Collective;
use braid_runtime::call::CallSpec;
use braid_runtime::registry::{Origin, Registry};
use braid_synth::{candidates, synthesize, Objective, Program, SUPPORTED};
use braid_topo::Topology;
use std::sync::Arc;

/// The rank counts and topologies whose programs run.
const TOPOLOGIES: [&str; 4] = ["nvswitch:2", "nvswitch:4", "pcie:4", "cluster:2x2"];

/// Every distinct program for `c` on `topo`: the bandwidth candidates and the latency one.
fn programs(c: Collective, topo: &Topology) -> Result<Vec<Program>, String> {
    let mut v = candidates(c, topo, Objective::Bandwidth)?;
    v.push(synthesize(c, topo, Objective::Latency)?);
    let mut seen = std::collections::HashSet::new();
    v.retain(|p| seen.insert(p.text.clone()));
    Ok(v)
}

pub fn section(gpus: usize, quick: bool) -> Result<Cases, String> {
    let mut cases = Vec::new();
    let mut k = 0usize;
    for name in TOPOLOGIES {
        let topo = Topology::from_arg(name).map_err(|e| e.to_string())?;
        let n = topo.n_ranks();
        for c in SUPPORTED {
            for prog in programs(c, &topo)? {
                let plans = braid_library::compile_file(&prog.name, &prog.text, &topo)
                    .map_err(|e| format!("{name}: {} does not compile: {e}", prog.name))?;
                let registry = Registry::new();
                for p in plans {
                    registry.add_verified(Arc::new(p), Origin::User(prog.name.clone()));
                }
                let prefix = format!("synth {name} {}", prog.name);
                let r = open_with(n, gpus, &opts(10), Arc::new(registry))?;
                for root in roots(c, n) {
                    let mut ops = dtype_ops(c, true);
                    if quick {
                        ops.truncate(3);
                    }
                    for (d, o) in ops {
                        for mode in modes(c) {
                            let counts: &[usize] = if quick {
                                &[7, (1 << 20) + 3]
                            } else {
                                &[1, 7, 4099, (1 << 20) + 3]
                            };
                            for &count in counts {
                                let spec = CallSpec {
                                    collective: c,
                                    count,
                                    dtype: d,
                                    op: o,
                                    root,
                                };
                                let kind = KINDS[k % KINDS.len()];
                                k += 1;
                                let what = format!(
                                    "{prefix}: {c} root {root:?} {} {} {mode} count {count}",
                                    d.name(),
                                    o.name()
                                );
                                run_selected(&mut cases, &r, &spec, (mode, kind, k as u64), what);
                            }
                        }
                    }
                }
                if cases.iter().filter(|(_, x)| x.is_err()).count() >= 5 {
                    return Ok(cases);
                }
            }
        }
    }
    Ok(cases)
}
