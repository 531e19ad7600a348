//! The CUDA backend with one process per GPU, as PyTorch runs: this test starts itself
//! twice (rank 0 on GPU 0, rank 1 on GPU 1), the ranks bootstrap over loopback like a
//! torchrun job, exchange their FIFOs through CUDA IPC and run every shipped algorithm;
//! each rank compares its result with the reference element for element. Then the same
//! with host-staged connections (shared host memory, as `BRAID_P2P_DISABLE=1` forces),
//! and finally a rank that dies before its peer launches: the peer must get an error, not
//! hang.
//!
//! Without a CUDA driver, or with fewer than two GPUs, it prints why it skips and passes.
//! `BRAID_CUDA_QUICK=1` runs a reduced matrix.

mod common;

use braid_cuda::process::RankGpu;
use braid_cuda::{driver_present, CudaError};
use braid_ir::{Collective, Mode};
use braid_plan::{Execution, Plan};
use braid_runtime::bootstrap::Bootstrap;
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::launcher::LaunchEnv;
use braid_runtime::reference::{self, first_mismatch, reference};
use braid_runtime::selfcheck::buffer_elems;
use common::{modes, plans, roots, Tally};
use std::io::Read;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CHILD: &str = "BRAID_GPU_PROCS_RANK";
const RANKS: u32 = 2;

fn main() -> ExitCode {
    match std::env::var(CHILD) {
        Ok(_) => child(),
        Err(_) => parent(),
    }
}

fn parent() -> ExitCode {
    let test = "gpu_procs";
    if !driver_present() {
        println!("skipping {test}: no CUDA driver on this machine");
        return ExitCode::SUCCESS;
    }
    let have = braid_cuda::device_count();
    if have < RANKS as usize {
        println!("skipping {test}: {RANKS} processes need {RANKS} GPUs, this machine has {have}");
        return ExitCode::SUCCESS;
    }
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        l.local_addr().unwrap().port() - 1
    };
    let exe = std::env::current_exe().expect("own path");
    let start = Instant::now();
    let mut children: Vec<_> = (0..RANKS)
        .map(|r| {
            Command::new(&exe)
                .env(CHILD, r.to_string())
                .env("RANK", r.to_string())
                .env("LOCAL_RANK", r.to_string())
                .env("WORLD_SIZE", RANKS.to_string())
                .env("LOCAL_WORLD_SIZE", RANKS.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .env("BRAID_SECRET", "5eed".repeat(8))
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn a rank")
        })
        .collect();
    let limit = Duration::from_secs(
        std::env::var("BRAID_GPU_PROCS_LIMIT_S")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(560),
    );
    let mut ok = true;
    let mut statuses = vec![None; children.len()];
    while statuses.iter().any(Option::is_none) {
        for (r, c) in children.iter_mut().enumerate() {
            if statuses[r].is_none() {
                statuses[r] = c.try_wait().expect("wait for a rank");
            }
        }
        if start.elapsed() > limit {
            println!(
                "FAIL: ranks still running after {} s: killed",
                limit.as_secs()
            );
            for c in &mut children {
                let _ = c.kill();
            }
            ok = false;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for (r, c) in children.iter_mut().enumerate() {
        let mut out = String::new();
        if let Some(s) = c.stdout.as_mut() {
            let _ = s.read_to_string(&mut out);
        }
        print!("{out}");
        let status = statuses[r].or_else(|| c.wait().ok());
        if !status.is_some_and(|s| s.success()) {
            println!("FAIL: rank {r} ended with {status:?}");
            ok = false;
        }
    }
    println!(
        "gpu_procs: {} in {:.1} s",
        if ok { "passed" } else { "FAILED" },
        start.elapsed().as_secs_f64()
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Every rank's input (each process computes all of them to know the expected result).
fn inputs(plan: &Plan, d: DType, o: RedOp, count: usize) -> Vec<Vec<u8>> {
    reference::inputs(plan.collective, d, o, plan.n_ranks, count, 11)
}

/// One call on this rank, compared with the reference.
fn check(
    gpu: &RankGpu,
    plan: &Plan,
    d: DType,
    o: RedOp,
    count: usize,
    mode: Mode,
) -> Result<(), String> {
    let me = gpu.rank() as usize;
    let ins = inputs(plan, d, o, count);
    let got = gpu
        .run(plan, d, o, count, mode, &ins[me])
        .map_err(|e| format!("error: {e}"))?;
    if count == 0 {
        return match got {
            Some(v) if !v.is_empty() => Err(format!("{} bytes for a zero count", v.len())),
            _ => Ok(()),
        };
    }
    let want = &reference(plan.collective, d, o, plan.root, &ins)[me];
    match (want, got) {
        (Some(w), Some(g)) => match first_mismatch(d, w, &g) {
            Some((i, e, a)) => Err(format!("element {i}: expected {e}, got {a}")),
            None => Ok(()),
        },
        (None, None) => Ok(()),
        _ => Err("output presence differs from the reference".into()),
    }
}

/// The count whose larger buffer is `bytes` for f32.
fn count_for(c: Collective, bytes: usize) -> usize {
    let (i, o) = buffer_elems(c, RANKS, 1);
    bytes / 4 / i.max(o)
}

fn child() -> ExitCode {
    let env = LaunchEnv::from_env().expect("launcher variables");
    let boot =
        Arc::new(Bootstrap::from_launch_env(&env, Duration::from_secs(120)).expect("bootstrap"));
    let me = boot.rank();
    let quick = std::env::var("BRAID_CUDA_QUICK").is_ok();
    let start = Instant::now();
    let mut t = Tally::default();

    // 1. Peer to peer through CUDA IPC: every shipped algorithm, every root and mode.
    let mut gpu = RankGpu::open(me as usize, boot.clone(), false).expect("open the GPU");
    gpu.set_timeout(Duration::from_secs(10));
    let counts: &[usize] = if quick {
        &[999]
    } else {
        &[0, 1, 999, 65_537, 1 << 20]
    };
    let others = [
        (DType::F16, RedOp::Sum),
        (DType::Bf16, RedOp::Max),
        (DType::F64, RedOp::Prod),
        (DType::I8, RedOp::Min),
        (DType::I32, RedOp::Avg),
        (DType::U64, RedOp::Sum),
    ];
    for c in Collective::ALL {
        for root in roots(c) {
            for (k, plan) in plans(c, root).iter().enumerate() {
                if plan.execution != Execution::Streaming && quick {
                    continue;
                }
                for mode in modes(plan) {
                    let mut cases: Vec<(DType, RedOp, usize)> = counts
                        .iter()
                        .map(|&n| (DType::F32, RedOp::Sum, n))
                        .collect();
                    for &(d, o) in &others {
                        cases.push((d, o, 999));
                        if !quick {
                            cases.push((d, o, 100_003));
                        }
                    }
                    // 1 GiB once per collective and root, out of place.
                    if !quick && k == 0 && mode == Mode::OutOfPlace {
                        cases.push((DType::F32, RedOp::Sum, count_for(c, 1 << 30)));
                    }
                    for (d, o, n) in cases {
                        let what = format!(
                            "rank {me} p2p {} {c} root={root:?} {mode:?} {d} {o} count={n}",
                            plan.name
                        );
                        let t0 = Instant::now();
                        let r = check(&gpu, plan, d, o, n, mode);
                        let loud = n >= 1 << 20;
                        t.record(
                            if loud {
                                format!("{what} ({:.2} s)", t0.elapsed().as_secs_f64())
                            } else {
                                what
                            },
                            r,
                            loud,
                        );
                    }
                }
            }
        }
    }
    drop(gpu);

    // 2. Host-staged: FIFOs in host memory shared between the two processes.
    let mut staged = RankGpu::open(me as usize, boot.clone(), true).expect("open the GPU");
    staged.set_timeout(Duration::from_secs(10));
    assert!(!staged.p2p());
    for c in Collective::ALL {
        for root in roots(c) {
            let plan = &plans(c, root)[0];
            for n in [999usize, 1 << 20] {
                let what = format!(
                    "rank {me} host-staged {} {c} root={root:?} count={n}",
                    plan.name
                );
                t.record(
                    what,
                    check(&staged, plan, DType::F32, RedOp::Sum, n, Mode::OutOfPlace),
                    false,
                );
            }
        }
    }
    drop(staged);
    println!(
        "rank {me}: {} passed, {} failed, {:.1} s",
        t.pass,
        t.fail.len(),
        start.elapsed().as_secs_f64()
    );

    // 3. A peer that dies: rank 1 prepares, then exits without launching; rank 0's
    // launch must end in an error.
    let mut gpu = RankGpu::open(me as usize, boot.clone(), false).expect("open the GPU");
    gpu.set_timeout(Duration::from_secs(5));
    let plan = &plans(Collective::Allreduce, None)[0];
    let ins = inputs(plan, DType::F32, RedOp::Sum, 1 << 16);
    let resident = gpu
        .prepare(
            plan,
            DType::F32,
            RedOp::Sum,
            1 << 16,
            Mode::OutOfPlace,
            &ins[me as usize],
        )
        .expect("prepare");
    if me == 1 {
        println!("rank 1: exiting without launching");
        std::process::exit(if t.fail.is_empty() { 0 } else { 1 });
    }
    let t0 = Instant::now();
    let dead = match resident.launch() {
        Err(e @ (CudaError::Kernel { .. } | CudaError::Driver(_))) => {
            println!(
                "ok   rank 0: the dead peer became an error after {:.1} s: {e}",
                t0.elapsed().as_secs_f64()
            );
            true
        }
        other => {
            println!("FAIL rank 0: a dead peer gave {other:?}");
            false
        }
    };
    drop(resident); // the teardown barrier fails at once: the peer's socket is closed
    if t.fail.is_empty() && dead {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
