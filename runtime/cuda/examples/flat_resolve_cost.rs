//! What resolving a flat launch costs the host per call (`braid_cuda::flat::resolve_program`:
//! the launch program's passes turned into the kernel's argument for the calls' buffers),
//! for every shipped all-reduce plan that runs flat on 2, 4 and 8 ranks, at one element
//! per rank; and again where the calls repeat the last one's buffers
//! (`Program::resolve_cached`); and the bytes of the kernel argument the launch takes
//! (the smallest of the flat kernel's three entries that holds it). No GPU needed: `cargo run --release -p braid-cuda --example flat_resolve_cost`.

use braid_cuda::flat::{self, RankCall};
use braid_ir::Collective;
use braid_plan::Plan;
use braid_runtime::geometry::Geometry;
use braid_topo::Topology;
use std::time::Instant;

fn main() {
    println!(
        "{:<28} {:>5} {:>12} {:>14} {:>9}",
        "plan", "ranks", "us per call", "same buffers", "arg bytes"
    );
    for n in [2u32, 4, 8] {
        let topo = Topology::from_arg(&format!("nvswitch:{n}")).expect("a preset");
        let lib = braid_library::Library::new(topo);
        for v in lib.plans(Collective::Allreduce, None) {
            let plan: &Plan = &v;
            let Some(progs) = (0..n)
                .map(|r| {
                    let layout = braid_cuda::program::Layout::new(plan, r);
                    flat::program(plan, r, layout.direct())
                })
                .collect::<Option<Vec<_>>>()
            else {
                continue;
            };
            let geo = Geometry::new(plan.collective, n, plan.chunks, 0, n as usize, 4, 1, 0);
            let calls: Vec<RankCall<'_>> = (0..n)
                .map(|r| RankCall {
                    rank: r,
                    program: &progs[r as usize],
                    input: 0x1000 + u64::from(r) * 0x10000,
                    output: 0x100_0000 + u64::from(r) * 0x10000,
                    geometry: &geo,
                    plan: 1,
                    in_untouched: true,
                    avg: false,
                })
                .collect();
            let Some(prog) = flat::launch_program(plan, &calls, braid_plan::flat::MAX_DSTS) else {
                continue;
            };
            let k = 100_000;
            let t = Instant::now();
            for _ in 0..k {
                std::hint::black_box(flat::resolve_program(&calls, &prog, 132));
            }
            let us = t.elapsed().as_secs_f64() * 1e6 / f64::from(k);
            let t = Instant::now();
            for _ in 0..k {
                std::hint::black_box(prog.resolve_cached(&calls, 132));
            }
            let again = t.elapsed().as_secs_f64() * 1e6 / f64::from(k);
            let arg = prog
                .resolve_cached(&calls, 132)
                .map_or(0, |l| l.pack(false).bytes());
            println!("{:<28} {n:>5} {us:>12.3} {again:>14.3} {arg:>9}", plan.name);
        }
    }
}
