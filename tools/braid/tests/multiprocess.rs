//! Ranks in separate processes over loopback, started the way torchrun starts them
//! (RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT, plus BRAID_SECRET): correct results,
//! a killed rank turns into errors on the others, and a process without the secret is
//! refused.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn secret(seed: u8) -> String {
    (0..32)
        .map(|i| format!("{:02x}", (i as u8).wrapping_mul(31).wrapping_add(seed)))
        .collect()
}

fn spawn_rank(rank: u32, world: u32, port: u16, secret: &str, args: &[&str]) -> Child {
    spawn_rank_env(rank, world, port, secret, args, &[])
}

fn spawn_rank_env(
    rank: u32,
    world: u32,
    port: u16,
    secret: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Child {
    Command::new(env!("CARGO_BIN_EXE_braid"))
        .envs(env.iter().copied())
        .arg("rank")
        .args(args)
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env("BRAID_SECRET", secret)
        .env("BRAID_TIMEOUT", "10")
        .env_remove("BRAID_DEBUG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

struct Done {
    code: i32,
    stdout: String,
    stderr: String,
}

fn wait(child: Child) -> Done {
    let out = child.wait_with_output().unwrap();
    Done {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn four_processes_run_every_collective_correctly() {
    for (collective, extra) in [
        ("allreduce", vec!["--dtype", "bf16", "--op", "max"]),
        ("allgather", vec!["--dtype", "i32"]),
        ("reduce_scatter", vec!["--op", "prod", "--dtype", "f64"]),
        ("broadcast", vec!["--root", "2"]),
        ("reduce", vec!["--root", "3", "--op", "avg"]),
        ("alltoall", vec!["--dtype", "u8"]),
    ] {
        let port = free_port();
        let s = secret(1);
        let mut args = vec![
            collective,
            "--topo",
            "nvswitch:4",
            "--size",
            "100003",
            "--iters",
            "2",
        ];
        args.extend(extra);
        let children: Vec<Child> = (0..4).map(|r| spawn_rank(r, 4, port, &s, &args)).collect();
        for (r, c) in children.into_iter().enumerate() {
            let d = wait(c);
            assert_eq!(d.code, 0, "{collective} rank {r}: {}{}", d.stdout, d.stderr);
            assert_eq!(
                d.stdout.matches(": correct;").count(),
                2,
                "{collective} rank {r}: {}",
                d.stdout
            );
        }
    }
}

#[test]
fn tcp_links_work_between_processes_too() {
    // Processes on one host normally share memory; this forces the TCP links hosts use.
    let port = free_port();
    let s = secret(4);
    let args = [
        "allreduce",
        "--topo",
        "nvswitch:3",
        "--size",
        "300001",
        "--iters",
        "2",
        "--dtype",
        "i64",
    ];
    let children: Vec<Child> = (0..3)
        .map(|r| spawn_rank_env(r, 3, port, &s, &args, &[("BRAID_SHM_DISABLE", "1")]))
        .collect();
    for (r, c) in children.into_iter().enumerate() {
        let d = wait(c);
        assert_eq!(d.code, 0, "rank {r}: {}{}", d.stdout, d.stderr);
        assert_eq!(
            d.stdout.matches(": correct;").count(),
            2,
            "rank {r}: {}",
            d.stdout
        );
    }
}

#[test]
fn killing_one_rank_mid_collective_fails_the_others_promptly() {
    let port = free_port();
    let s = secret(2);
    let args = [
        "allreduce",
        "--topo",
        "nvswitch:4",
        "--size",
        "256K",
        "--iters",
        "100000",
    ];
    let mut children: Vec<Child> = (0..4).map(|r| spawn_rank(r, 4, port, &s, &args)).collect();
    // Wait until rank 0 has completed a few collectives, so the kill lands mid-job.
    let mut stdout = std::io::BufReader::new(children[0].stdout.take().unwrap());
    let mut first_lines = String::new();
    for _ in 0..3 {
        std::io::BufRead::read_line(&mut stdout, &mut first_lines).unwrap();
    }
    assert!(first_lines.contains("correct"), "{first_lines}");
    children[2].kill().unwrap();
    let killed_at = Instant::now();
    for (r, c) in children.into_iter().enumerate() {
        let d = wait(c);
        if r == 2 {
            continue;
        }
        assert_eq!(
            d.code, 3,
            "rank {r} must fail with a run-time error:\n{}{}",
            d.stdout, d.stderr
        );
        assert!(d.stderr.contains("error: rank"), "rank {r}: {}", d.stderr);
    }
    let took = killed_at.elapsed();
    assert!(
        took < Duration::from_secs(10 + 5),
        "survivors took {took:?}: more than the timeout"
    );
}

#[test]
fn a_process_without_the_secret_is_refused() {
    let port = free_port();
    let good = secret(3);
    let args = ["allreduce", "--topo", "nvswitch:2", "--size", "64K"];
    let rank0 = spawn_rank(0, 2, port, &good, &args);
    std::thread::sleep(Duration::from_millis(300));
    let intruder = wait(spawn_rank(1, 2, port, &secret(99), &args));
    assert_eq!(intruder.code, 3, "{}{}", intruder.stdout, intruder.stderr);
    assert!(
        intruder.stderr.to_lowercase().contains("refused") || intruder.stderr.contains("secret"),
        "{}",
        intruder.stderr
    );
    // The real rank 1 still joins and the job completes.
    let rank1 = wait(spawn_rank(1, 2, port, &good, &args));
    let rank0 = wait(rank0);
    assert_eq!(rank0.code, 0, "{}{}", rank0.stdout, rank0.stderr);
    assert_eq!(rank1.code, 0, "{}{}", rank1.stdout, rank1.stderr);
}

/// `--backend cuda`: one GPU per process. Without a driver both ranks say so and exit 3
/// (runtime error) before joining; with two GPUs both compute the right result.
#[test]
fn cuda_ranks_run_on_their_gpus_or_say_why_not() {
    let port = free_port();
    let s = secret(5);
    let args = [
        "allreduce",
        "--topo",
        "nvswitch:2",
        "--size",
        "1M",
        "--backend",
        "cuda",
        "--iters",
        "2",
    ];
    let ranks: Vec<Done> = (0..2)
        .map(|r| spawn_rank(r, 2, port, &s, &args))
        .collect::<Vec<_>>()
        .into_iter()
        .map(wait)
        .collect();
    for (r, d) in ranks.iter().enumerate() {
        match d.code {
            0 => assert!(
                d.stdout.contains(&format!("ok rank {r}/2 (GPU {r}"))
                    && d.stdout.contains("iteration 1: correct"),
                "{}",
                d.stdout
            ),
            3 => assert!(d.stderr.contains("no CUDA driver"), "{}", d.stderr),
            c => panic!("rank {r} exited {c}: {}{}", d.stdout, d.stderr),
        }
    }
    assert_eq!(ranks[0].code, ranks[1].code, "ranks disagree");
}

/// Starts 4 ranks of a long all-reduce job with the default timeouts (BRAID_TIMEOUT's
/// 300 s), waits for `lines` results of rank 0's, then does `what` to rank `victim`.
/// Every survivor must exit with a run-time error naming the victim within `bound`.
fn survivors_name_the_victim(lines: usize, victim: usize, signal: &str, bound: Duration, env: &[(&str, &str)]) {
    let port = free_port();
    let s = secret(5 + lines as u8);
    let args = ["allreduce", "--topo", "nvswitch:4", "--size", "1M", "--iters", "1000000"];
    let mut env = env.to_vec();
    env.push(("BRAID_TIMEOUT", "")); // the default
    let mut children: Vec<Child> = (0..4).map(|r| spawn_rank_env(r, 4, port, &s, &args, &env)).collect();
    let mut stdout = std::io::BufReader::new(children[0].stdout.take().unwrap());
    let mut seen = String::new();
    for _ in 0..lines {
        std::io::BufRead::read_line(&mut stdout, &mut seen).unwrap();
    }
    assert!(seen.contains("correct"), "{seen}");
    let pid = children[victim].id().to_string();
    let sent = Command::new("kill").args([signal, &pid]).status().unwrap();
    assert!(sent.success());
    let at = Instant::now();
    // Keep draining rank 0's stdout so that it never blocks on a full pipe.
    let drain = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut rest);
    });
    let mut victim_child = None;
    for (r, c) in children.into_iter().enumerate() {
        if r == victim {
            victim_child = Some(c);
            continue;
        }
        let d = wait(c);
        let took = at.elapsed();
        assert_eq!(d.code, 3, "rank {r} after {signal} of rank {victim}:\n{}{}", d.stdout, d.stderr);
        assert!(
            d.stderr.contains(&format!("rank {victim}")),
            "rank {r} does not name rank {victim}:\n{}",
            d.stderr
        );
        assert!(took < bound, "rank {r} took {took:?} after {signal} of rank {victim}");
    }
    let mut v = victim_child.unwrap();
    let _ = v.kill();
    let _ = v.wait();
    drain.join().unwrap();
}

/// SIGKILL at spread-out points of a run, with every timeout at its default: the
/// survivors learn from the bootstrap that the process is gone, not from BRAID_TIMEOUT.
#[test]
fn a_killed_rank_is_named_by_every_survivor_within_15_s() {
    for (lines, victim) in [(1, 3), (4, 1), (12, 0)] {
        survivors_name_the_victim(lines, victim, "-KILL", Duration::from_secs(15), &[]);
    }
}

/// SIGSTOP: the process lives but sends nothing; its heartbeats stop, and every survivor
/// ends within BRAID_HEARTBEAT_TIMEOUT + 5 s, naming it.
#[test]
fn a_stopped_rank_is_named_within_the_heartbeat_timeout() {
    survivors_name_the_victim(2, 2, "-STOP", Duration::from_secs(3 + 5), &[("BRAID_HEARTBEAT_TIMEOUT", "3")]);
}
