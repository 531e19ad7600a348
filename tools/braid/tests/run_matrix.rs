//! The host backend runs every shipped algorithm correctly: 2 to 8 ranks, every dtype
//! and op (each dtype meets every op across the rank counts), both call modes, odd and
//! zero counts, compared element by element with the reference.

use braid_ir::{Collective, Mode, Shape};
use braid_plan::Plan;
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::selfcheck::run_checked;
use braid_topo::Topology;
use std::time::Duration;

fn topologies() -> Vec<String> {
    let mut t: Vec<String> = (1..=8).map(|n| format!("nvswitch:{n}")).collect();
    t.extend(["cluster:2x2", "cluster:2x3", "cluster:2x4", "cluster:4x2"].map(String::from));
    t
}

/// Runs one call on every rank and compares every rank's output with the reference.
fn run(
    plan: &Plan,
    dtype: DType,
    op: RedOp,
    count: usize,
    mode: Mode,
    seed: u64,
) -> Result<(), String> {
    let checked = run_checked(plan, dtype, op, count, mode, seed, Duration::from_secs(20))
        .map_err(|e| e.to_string())?;
    match checked.wrong.first() {
        None => Ok(()),
        Some((r, _, i, want, got)) => {
            Err(format!("rank {r} element {i}: expected {want}, got {got}"))
        }
    }
}

#[test]
fn every_shipped_algorithm_runs_correctly_on_the_host_backend() {
    let mut failures = Vec::new();
    let mut runs = 0;
    let mut covered = std::collections::HashSet::new();
    for t in topologies() {
        let topo = Topology::from_arg(&t).unwrap();
        let shape = Shape {
            n: topo.n_ranks(),
            nodes: topo.n_nodes(),
            g: topo.uniform_g(),
        };
        let n = shape.n;
        for (file, text) in braid_library::SOURCES {
            let source = braid_lang::SourceFile::new(*file, *text);
            let (parsed, _) = braid_lang::parse_and_check(text);
            for alg in &parsed.algorithms {
                let roots: Vec<Option<u32>> = if alg.collective.is_rooted() {
                    vec![Some(0), Some(n - 1)]
                } else {
                    vec![None]
                };
                for root in roots {
                    let plan = match braid_library::compile(&source, alg, &shape, root, &topo) {
                        Ok(Some(p)) => p,
                        Ok(None) => continue,
                        Err(e) => {
                            failures.push(format!("{} on {t}: compile: {e}", alg.name.name));
                            continue;
                        }
                    };
                    // Odd counts exercise chunking that does not divide evenly.
                    let odd = 2 * plan.chunks as usize + 3;
                    for (d, dtype) in DType::ALL.iter().enumerate() {
                        // One rank is cheap: every op there (some algorithms only apply
                        // to one rank count).
                        let ops = if n == 1 {
                            RedOp::ALL.to_vec()
                        } else {
                            vec![RedOp::ALL[(n as usize + d) % RedOp::ALL.len()]]
                        };
                        for op in ops {
                            covered.insert((alg.name.name.clone(), dtype.name(), op.name()));
                            for mode in plan.modes.iter() {
                                runs += 1;
                                if let Err(e) = run(&plan, *dtype, op, odd, mode, runs) {
                                    failures.push(format!(
                                        "{} on {t} root {root:?} {} {} {mode} count {odd}: {e}",
                                        alg.name.name,
                                        dtype.name(),
                                        op.name()
                                    ));
                                }
                            }
                        }
                    }
                    for mode in plan.modes.iter() {
                        if let Err(e) = run(&plan, DType::F32, RedOp::Sum, 0, mode, 0) {
                            failures
                                .push(format!("{} on {t} zero count {mode}: {e}", alg.name.name));
                        }
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {runs} runs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Every algorithm met every dtype with every op somewhere (hierarchical ones only
    // run on clusters, which cover fewer rank counts).
    for (file, _) in braid_library::SOURCES {
        let name = file.trim_end_matches(".braid");
        let combos = covered.iter().filter(|(a, _, _)| a == name).count();
        assert!(
            combos >= 20,
            "{name}: only {combos} dtype/op combinations ran"
        );
    }
}

#[test]
fn tiled_plans_replay_over_tiles_and_stay_correct() {
    // MSCCL's execution model: the whole plan runs once per tile of every chunk. Counts
    // large enough for several tiles per chunk, and odd, on compiled plans marked tiled.
    let topo = Topology::from_arg("nvswitch:4").unwrap();
    let lib = braid_library::Library::new(topo);
    for (c, name) in [
        (Collective::Allreduce, "ring_allreduce"),
        (Collective::Allgather, "ring_allgather"),
    ] {
        let mut plan = lib
            .plans(c, None)
            .into_iter()
            .find(|p| p.name == name)
            .unwrap()
            .plan()
            .clone();
        plan.execution = braid_plan::Execution::Tiled;
        braid_plan::verify(&plan).expect("a streaming-safe plan is tiled-safe");
        for mode in plan.modes.iter() {
            run(&plan, DType::F32, RedOp::Sum, 4 * 150_001 + 3, mode, 7)
                .unwrap_or_else(|e| panic!("{name} {mode}: {e}"));
        }
    }
}

#[test]
fn long_messages_that_would_deadlock_streaming_run_tiled() {
    // A tree's root sends its sum back while the child's receive waits (write after
    // read) for the child's own send to end: streaming, a message longer than the FIFOs
    // along that path deadlocks. The verifier must say so, and the compiler must then
    // pick the tiled model, which runs at any length.
    let topo = Topology::from_arg("nvswitch:2").unwrap();
    let lib = braid_library::Library::new(topo);
    let plan = lib
        .plans(Collective::Allreduce, None)
        .into_iter()
        .find(|p| p.name == "tree_allreduce")
        .unwrap()
        .plan()
        .clone();
    assert_eq!(plan.execution, braid_plan::Execution::Tiled);
    let mut streaming = plan.clone();
    streaming.execution = braid_plan::Execution::Streaming;
    let diags = braid_plan::verify(&streaming).unwrap_err();
    assert!(
        diags.iter().any(|d| d.check == braid_plan::Check::Deadlock),
        "{diags:?}"
    );
    // 16 MiB in one message: well past the 8 x 256 KiB slots of each FIFO.
    run(&plan, DType::F32, RedOp::Sum, 4 << 20, Mode::OutOfPlace, 3).unwrap();
}
