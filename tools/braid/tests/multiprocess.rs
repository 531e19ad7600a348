//! Ranks in separate processes over loopback, started the way torchrun starts them
//! (RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT, plus BRAID_SECRET): correct results,
//! a killed rank turns into errors on the others, and a process without the secret is
//! refused.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::free_port;

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
    spawn_rank_on(&Net::loopback(), rank, world, port, secret, args, env)
}

/// Where the ranks of a job run: the address rank 0 listens on, and the network
/// namespace of each rank (`None`: this process's).
struct Net {
    master: String,
    namespaces: Vec<Option<String>>,
}

impl Net {
    fn loopback() -> Net {
        Net {
            master: "127.0.0.1".into(),
            namespaces: Vec::new(),
        }
    }
}

fn spawn_rank_on(
    net: &Net,
    rank: u32,
    world: u32,
    port: u16,
    secret: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Child {
    // BRAID_EXE: the binary to run where this test runs away from its build tree (the GPU
    // machine).
    let exe = std::env::var("BRAID_EXE").unwrap_or_else(|_| env!("CARGO_BIN_EXE_braid").into());
    let exe = exe.as_str();
    let mut cmd = match net.namespaces.get(rank as usize).cloned().flatten() {
        // `ip netns exec` replaces itself with the command: the child's pid is the rank's.
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &ns, exe]);
            c
        }
        None => Command::new(exe),
    };
    // GPU ranks share the GPUs there are, in turn (all on GPU 0 where there is one).
    let local = if args.windows(2).any(|w| w == ["--backend", "cuda"]) {
        rank as usize % braid_cuda::device_count().max(1)
    } else {
        rank as usize
    };
    // The caller's variables last: they override the defaults (BRAID_TIMEOUT, LOCAL_RANK).
    cmd.arg("rank")
        .args(args)
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("LOCAL_RANK", local.to_string())
        .env("MASTER_ADDR", &net.master)
        .env("MASTER_PORT", port.to_string())
        .env("BRAID_SECRET", secret)
        .env("BRAID_TIMEOUT", "10")
        .env_remove("BRAID_DEBUG")
        .envs(env.iter().copied())
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
fn survivors_name_the_victim(
    lines: usize,
    victim: usize,
    signal: &str,
    bound: Duration,
    env: &[(&str, &str)],
) {
    survivors_name_the_victim_on(&Net::loopback(), lines, victim, signal, bound, env)
}

fn survivors_name_the_victim_on(
    net: &Net,
    lines: usize,
    victim: usize,
    signal: &str,
    bound: Duration,
    env: &[(&str, &str)],
) {
    survivors_of(net, &[], lines, victim, signal, bound, env)
}

/// [`survivors_name_the_victim_on`] with `extra` arguments to `braid rank` (a backend).
fn survivors_of(
    net: &Net,
    extra: &[&str],
    lines: usize,
    victim: usize,
    signal: &str,
    bound: Duration,
    env: &[(&str, &str)],
) {
    let port = free_port();
    let s = secret(5 + lines as u8);
    let mut args = vec![
        "allreduce",
        "--topo",
        "nvswitch:4",
        "--size",
        "1M",
        "--iters",
        "1000000",
    ];
    args.extend_from_slice(extra);
    let mut env = env.to_vec();
    env.push(("BRAID_TIMEOUT", "")); // the default
    let mut children: Vec<Child> = (0..4)
        .map(|r| spawn_rank_on(net, r, 4, port, &s, &args, &env))
        .collect();
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
        assert_eq!(
            d.code, 3,
            "rank {r} after {signal} of rank {victim}:\n{}{}",
            d.stdout, d.stderr
        );
        assert!(
            d.stderr.contains(&format!("rank {victim}")),
            "rank {r} does not name rank {victim}:\n{}",
            d.stderr
        );
        assert!(
            took < bound,
            "rank {r} took {took:?} after {signal} of rank {victim}"
        );
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
    survivors_name_the_victim(
        2,
        2,
        "-STOP",
        Duration::from_secs(3 + 5),
        &[("BRAID_HEARTBEAT_TIMEOUT", "3")],
    );
}

/// The same over TCP links (shared memory turned off) on loopback: the survivors learn of
/// a SIGKILL from the bootstrap and of a SIGSTOP from the heartbeats, as on shared memory.
#[test]
fn over_tcp_a_killed_or_stopped_rank_is_named_in_time() {
    let tcp = [("BRAID_SHM_DISABLE", "1")];
    survivors_name_the_victim(3, 2, "-KILL", Duration::from_secs(15), &tcp);
    let stopped = [("BRAID_SHM_DISABLE", "1"), ("BRAID_HEARTBEAT_TIMEOUT", "3")];
    survivors_name_the_victim(2, 1, "-STOP", Duration::from_secs(3 + 5), &stopped);
}

/// Two network namespaces joined by a veth pair, ranks 0-1 in one and 2-3 in the other,
/// talking TCP across it (as two hosts would): killed and stopped ranks on either side are
/// named by every survivor in time. Needs the right to create network namespaces (root
/// and `ip`); without it the test says so and checks nothing more than the loopback test.
#[test]
fn across_two_network_namespaces_a_killed_or_stopped_rank_is_named_in_time() {
    let Some((_veth, net)) = two_hosts() else {
        return;
    };
    let tcp = [("BRAID_SHM_DISABLE", "1")];
    survivors_name_the_victim_on(&net, 2, 3, "-KILL", Duration::from_secs(15), &tcp);
    survivors_name_the_victim_on(&net, 6, 1, "-KILL", Duration::from_secs(15), &tcp);
    let stopped = [("BRAID_SHM_DISABLE", "1"), ("BRAID_HEARTBEAT_TIMEOUT", "3")];
    survivors_name_the_victim_on(&net, 2, 2, "-STOP", Duration::from_secs(3 + 5), &stopped);
}

/// `NCCL_SOCKET_IFNAME` that selects no interface: every rank exits with an error that
/// names the setting and the interfaces that are up; one that selects loopback works.
#[test]
fn a_socket_ifname_that_selects_nothing_is_a_clear_error() {
    let args = ["allreduce", "--topo", "nvswitch:2", "--size", "64K"];
    let port = free_port();
    let s = secret(11);
    let bad = [("NCCL_SOCKET_IFNAME", "=nosuch0")];
    let start = Instant::now();
    let ranks: Vec<Done> = (0..2)
        .map(|r| spawn_rank_env(r, 2, port, &s, &args, &bad))
        .collect::<Vec<_>>()
        .into_iter()
        .map(wait)
        .collect();
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
    assert!(ranks.iter().all(|d| d.code != 0));
    assert!(
        ranks[1]
            .stderr
            .contains("NCCL_SOCKET_IFNAME==nosuch0 selects no interface")
            && ranks[1].stderr.contains("lo"),
        "{}",
        ranks[1].stderr
    );
    let port = free_port();
    let good = [("NCCL_SOCKET_IFNAME", "lo")];
    for (r, d) in (0..2)
        .map(|r| spawn_rank_env(r, 2, port, &s, &args, &good))
        .collect::<Vec<_>>()
        .into_iter()
        .map(wait)
        .enumerate()
    {
        assert_eq!(d.code, 0, "rank {r}: {}{}", d.stdout, d.stderr);
    }
}

/// Two hosts (network namespaces) with two interfaces each: NCCL_SOCKET_IFNAME naming
/// the connected one runs the job; naming the one that leads nowhere fails every rank
/// within the timeout, with an error that names the address it could not reach.
#[test]
fn socket_ifname_picks_the_interface_between_two_namespaces() {
    let Some((_veth, net)) = two_hosts() else {
        return;
    };
    let args = ["allreduce", "--topo", "nvswitch:4", "--size", "256K"];
    let run = |ifname: &str, seed: u8| -> Vec<Done> {
        let port = free_port();
        let s = secret(seed);
        let env = [("BRAID_SHM_DISABLE", "1"), ("NCCL_SOCKET_IFNAME", ifname)];
        (0..4)
            .map(|r| spawn_rank_on(&net, r, 4, port, &s, &args, &env))
            .collect::<Vec<_>>()
            .into_iter()
            .map(wait)
            .collect()
    };
    for (r, d) in run("bv", 12).iter().enumerate() {
        assert_eq!(
            d.code, 0,
            "rank {r} over the veth: {}{}",
            d.stdout, d.stderr
        );
        assert!(d.stdout.contains("correct"), "{}", d.stdout);
    }
    let start = Instant::now();
    let wrong = run("bd", 13);
    let took = start.elapsed();
    assert!(took < Duration::from_secs(10 + 15), "{took:?}");
    assert!(
        wrong.iter().all(|d| d.code != 0),
        "a rank succeeded on a dead interface"
    );
    assert!(
        wrong
            .iter()
            .any(|d| d.stderr.contains("10.213.9.1") || d.stderr.contains("10.213.10.2")),
        "no error names the unreachable address:\n{}",
        wrong
            .iter()
            .map(|d| d.stderr.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The hierarchical programs on `cluster:2x2`, two ranks on each of two "hosts" (network
/// namespaces) whose link is limited to 50 Mbit/s each way: every rank's result is right,
/// and each all-reduce call takes at least the time its data needs on that link (each
/// host must receive the other's 4 MiB sum at least once: 0.67 s), so the shaped link is
/// the one used (unshaped, the same call took about 0.24 s here, connections included).
#[test]
fn hierarchical_programs_across_two_hosts_over_a_shaped_link() {
    let Some((veth, net)) = two_hosts() else {
        return;
    };
    if let Err(why) = veth.shape("50mbit") {
        eprintln!("skipped: cannot shape the link between the namespaces here: {why}");
        return;
    }
    let env = [("BRAID_SHM_DISABLE", "1"), ("BRAID_TIMEOUT", "60")];
    for (k, (collective, algorithm, size)) in [
        ("allreduce", "hierarchical_allreduce", "4M"),
        ("alltoall", "hierarchical_alltoall", "1M"),
    ]
    .into_iter()
    .enumerate()
    {
        let args = [
            collective,
            "--topo",
            "cluster:2x2",
            "--algorithm",
            algorithm,
            "--size",
            size,
        ];
        let port = free_port();
        let s = secret(20 + k as u8);
        let start = Instant::now();
        let ranks: Vec<Done> = (0..4)
            .map(|r| spawn_rank_on(&net, r, 4, port, &s, &args, &env))
            .collect::<Vec<_>>()
            .into_iter()
            .map(wait)
            .collect();
        assert!(start.elapsed() < Duration::from_secs(60));
        for (r, d) in ranks.iter().enumerate() {
            assert_eq!(d.code, 0, "{algorithm} rank {r}: {}{}", d.stdout, d.stderr);
            assert!(
                d.stdout.contains("correct"),
                "{algorithm} rank {r}: {}",
                d.stdout
            );
        }
        if collective == "allreduce" {
            // Each call's time as the rank reports it (`...: correct; 812.345 ms`).
            let calls: Vec<f64> = ranks[0]
                .stdout
                .lines()
                .filter_map(|l| l.split("correct; ").nth(1))
                .filter_map(|t| t.trim_end_matches(" ms").parse().ok())
                .collect();
            assert!(!calls.is_empty(), "{}", ranks[0].stdout);
            let fastest = calls.iter().copied().fold(f64::INFINITY, f64::min);
            assert!(fastest >= 600.0, "{algorithm}: calls of {calls:?} ms");
        }
    }
}

/// The hierarchical all-reduce and all-to-all on `cluster:2x2` across two "hosts" whose
/// link drops 3 % of the packets arriving on either side: every rank's three calls are
/// right (TCP retransmits what was lost), and packets were dropped (so the check fails if
/// the loss is not in effect).
#[test]
fn collectives_stay_right_across_a_link_that_loses_packets() {
    let Some((veth, net)) = two_hosts() else {
        return;
    };
    if let Err(why) = veth.lose(0.03) {
        eprintln!("skipped: cannot drop packets between the namespaces here: {why}");
        return;
    }
    let env = [("BRAID_SHM_DISABLE", "1"), ("BRAID_TIMEOUT", "60")];
    job_across(
        &net,
        30,
        ("allreduce", Some("hierarchical_allreduce"), "4M"),
        &[],
        &env,
    );
    job_across(
        &net,
        31,
        ("alltoall", Some("hierarchical_alltoall"), "1M"),
        &[],
        &env,
    );
    let dropped = veth.dropped().unwrap();
    assert!(
        dropped > 0,
        "no packet was dropped: the loss rule was not in effect"
    );
    eprintln!("{dropped} packets dropped between the namespaces");
}

/// Whether this machine has a GPU for the GPU backend's tests (saying why not).
fn have_gpu() -> bool {
    if !braid_cuda::driver_present() || braid_cuda::device_count() == 0 {
        eprintln!("skipped: no CUDA driver or GPU on this machine");
        return false;
    }
    true
}

/// Runs `collective` with `algorithm` (`None`: the runtime's choice) on `cluster:2x2`,
/// ranks 0-1 and 2-3 in the two namespaces of `net`, with `extra` arguments and `env`;
/// checks that every rank's three calls were right and returns what each printed.
fn job_across(
    net: &Net,
    k: u8,
    (collective, algorithm, size): (&str, Option<&str>, &str),
    extra: &[&str],
    env: &[(&str, &str)],
) -> Vec<Done> {
    let mut args = vec![
        collective,
        "--topo",
        "cluster:2x2",
        "--size",
        size,
        "--iters",
        "3",
    ];
    args.extend_from_slice(extra);
    if let Some(a) = algorithm {
        args.extend(["--algorithm", a]);
    }
    let port = free_port();
    let s = secret(40 + k);
    let ranks: Vec<Done> = (0..4u32)
        .map(|r| spawn_rank_on(net, r, 4, port, &s, &args, env))
        .collect::<Vec<_>>()
        .into_iter()
        .map(wait)
        .collect();
    let what = algorithm.unwrap_or(collective);
    for (r, d) in ranks.iter().enumerate() {
        assert_eq!(d.code, 0, "{what} rank {r}: {}{}", d.stdout, d.stderr);
        assert_eq!(
            d.stdout.matches("correct").count(),
            3,
            "{what} rank {r}: {}",
            d.stdout
        );
    }
    ranks
}

/// [`job_across`] with the GPU backend, every connection on the network transport
/// (`BRAID_NET_FORCE=1`) over `streams` TCP streams each; checks that the ranks say
/// their links are network links.
fn gpu_job_across(net: &Net, k: u8, job: (&str, Option<&str>, &str), streams: &str) {
    let env = [
        ("BRAID_NET_FORCE", "1"),
        ("BRAID_TIMEOUT", "30"),
        ("BRAID_NET_STREAMS", streams),
    ];
    let carrier = if streams == "1" {
        "network over 1 TCP stream".to_string()
    } else {
        format!("network over {streams} TCP streams")
    };
    for (r, d) in job_across(net, k, job, &["--backend", "cuda"], &env)
        .iter()
        .enumerate()
    {
        assert!(d.stdout.contains(&carrier), "rank {r}: {}", d.stdout);
    }
}

/// The GPU backend across two "hosts": every collective on `cluster:2x2` (the
/// hierarchical all-reduce and all-to-all by name, the others as the runtime picks) with
/// two ranks in each of two network namespaces on this machine's GPUs (all on GPU 0
/// where there is one), every connection on the network transport, so that all their
/// data crosses the veth between the namespaces through the proxies; the all-to-all
/// again over three streams per connection (`BRAID_NET_STREAMS`). Skips, saying why,
/// without a GPU or namespaces.
#[test]
fn gpu_ranks_across_two_hosts_over_the_network_transport() {
    if !have_gpu() {
        return;
    }
    let Some((_veth, net)) = two_hosts() else {
        return;
    };
    let jobs = [
        ("allreduce", Some("hierarchical_allreduce"), "4M"),
        ("alltoall", Some("hierarchical_alltoall"), "4M"),
        ("allgather", None, "1M"),
        ("reduce_scatter", None, "1M"),
        ("broadcast", None, "1M"),
        ("reduce", None, "1M"),
    ];
    for (k, job) in jobs.into_iter().enumerate() {
        gpu_job_across(&net, k as u8, job, "1");
    }
    gpu_job_across(&net, 9, jobs[1], "3");
}

/// The GPU backend's network transport across a link that drops 3 % of the packets
/// arriving on either side: the hierarchical all-reduce stays right (TCP retransmits
/// under the proxies), and packets were dropped.
#[test]
fn gpu_ranks_stay_right_across_a_link_that_loses_packets() {
    if !have_gpu() {
        return;
    }
    let Some((veth, net)) = two_hosts() else {
        return;
    };
    if let Err(why) = veth.lose(0.03) {
        eprintln!("skipped: cannot drop packets between the namespaces here: {why}");
        return;
    }
    gpu_job_across(
        &net,
        10,
        ("allreduce", Some("hierarchical_allreduce"), "4M"),
        "1",
    );
    gpu_job_across(
        &net,
        11,
        ("alltoall", Some("hierarchical_alltoall"), "1M"),
        "2",
    );
    let dropped = veth.dropped().unwrap();
    assert!(
        dropped > 0,
        "no packet was dropped: the loss rule was not in effect"
    );
    eprintln!("{dropped} packets dropped between the namespaces");
}

/// A GPU rank killed on either "host" while the calls run over the network transport:
/// every survivor names it within 15 s (the bootstrap sees the process go; the proxies
/// and kernels stop with an error, not at their timeout).
#[test]
fn gpu_ranks_across_two_hosts_name_a_killed_rank_in_time() {
    if !have_gpu() {
        return;
    }
    let Some((_veth, net)) = two_hosts() else {
        return;
    };
    let cuda = ["--backend", "cuda"];
    let env = [("BRAID_NET_FORCE", "1")];
    survivors_of(&net, &cuda, 2, 3, "-KILL", Duration::from_secs(15), &env);
    survivors_of(&net, &cuda, 5, 0, "-KILL", Duration::from_secs(15), &env);
}

/// Four ranks on two "hosts": ranks 0 and 1 in one network namespace (rank 0's address
/// the master), 2 and 3 in the other; `None` (saying why) where namespaces cannot be
/// made. Keep the `Veth` alive while the ranks run.
fn two_hosts() -> Option<(Veth, Net)> {
    let veth = match Veth::new() {
        Ok(v) => v,
        Err(why) => {
            eprintln!("skipped: cannot make two network namespaces joined by veth here: {why}");
            return None;
        }
    };
    let net = Net {
        master: veth.addr_a.clone(),
        namespaces: vec![
            Some(veth.ns_a.clone()),
            Some(veth.ns_a.clone()),
            Some(veth.ns_b.clone()),
            Some(veth.ns_b.clone()),
        ],
    };
    Some((veth, net))
}

/// Two network namespaces with a veth pair between them (`bv*`: 10.213.7.1 and .2) and
/// a second pair whose ends are in different subnets, so that it carries nothing between
/// them (`bd*`: 10.213.9.1 and 10.213.10.2), removed on drop.
struct Veth {
    ns_a: String,
    ns_b: String,
    addr_a: String,
    /// The connected pair's ends (`bv*a` in `ns_a`, `bv*b` in `ns_b`).
    dev_a: String,
    dev_b: String,
}

impl Veth {
    fn new() -> Result<Veth, String> {
        // Unique per pair: tests of this binary make theirs at the same time.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("{}x{k}", std::process::id());
        let (ea, eb) = (format!("bv{id}a"), format!("bv{id}b"));
        let v = Veth {
            ns_a: format!("braid{id}a"),
            ns_b: format!("braid{id}b"),
            addr_a: "10.213.7.1".into(),
            dev_a: ea.clone(),
            dev_b: eb.clone(),
        };
        let (da, db) = (format!("bd{id}a"), format!("bd{id}b"));
        let steps: Vec<Vec<&str>> = vec![
            vec!["netns", "add", &v.ns_a],
            vec!["netns", "add", &v.ns_b],
            vec![
                "link", "add", &ea, "netns", &v.ns_a, "type", "veth", "peer", "name", &eb, "netns",
                &v.ns_b,
            ],
            vec!["-n", &v.ns_a, "addr", "add", "10.213.7.1/24", "dev", &ea],
            vec!["-n", &v.ns_b, "addr", "add", "10.213.7.2/24", "dev", &eb],
            vec!["-n", &v.ns_a, "link", "set", &ea, "up"],
            vec!["-n", &v.ns_b, "link", "set", &eb, "up"],
            vec!["-n", &v.ns_a, "link", "set", "lo", "up"],
            vec!["-n", &v.ns_b, "link", "set", "lo", "up"],
            // A second link between the hosts whose two ends sit in different subnets:
            // an interface each host has, through which neither reaches the other (a
            // "wrong" NIC).
            vec![
                "link", "add", &da, "netns", &v.ns_a, "type", "veth", "peer", "name", &db, "netns",
                &v.ns_b,
            ],
            vec!["-n", &v.ns_a, "addr", "add", "10.213.9.1/24", "dev", &da],
            vec!["-n", &v.ns_b, "addr", "add", "10.213.10.2/24", "dev", &db],
            vec!["-n", &v.ns_a, "link", "set", &da, "up"],
            vec!["-n", &v.ns_b, "link", "set", &db, "up"],
        ];
        for step in steps {
            ip(&step)?;
        }
        Ok(v)
    }
}

/// Runs `ip ARGS`; its complaint, with the command, when it fails.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Veth {
    /// Limits both directions of the connected pair to `rate` (`tc`'s token bucket, e.g.
    /// `50mbit`), as a slower network between the hosts would.
    fn shape(&self, rate: &str) -> Result<(), String> {
        for (ns, dev) in [(&self.ns_a, &self.dev_a), (&self.ns_b, &self.dev_b)] {
            ip(&[
                "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate,
                "burst", "32kb", "latency", "400ms",
            ])?;
        }
        Ok(())
    }

    /// Drops each packet arriving in either namespace with probability `p` (iptables'
    /// random `statistic` match: the kernels here have no netem for loss).
    fn lose(&self, p: f64) -> Result<(), String> {
        let ipt = iptables()?;
        for ns in [&self.ns_a, &self.ns_b] {
            ip(&[
                "netns",
                "exec",
                ns,
                ipt,
                "-A",
                "INPUT",
                "-m",
                "statistic",
                "--mode",
                "random",
                "--probability",
                &p.to_string(),
                "-j",
                "DROP",
            ])?;
        }
        Ok(())
    }

    /// Packets the rules of [`Veth::lose`] dropped so far, both namespaces together.
    fn dropped(&self) -> Result<u64, String> {
        let ipt = iptables()?;
        let mut total = 0;
        for ns in [&self.ns_a, &self.ns_b] {
            let out = Command::new("ip")
                .args(["netns", "exec", ns, ipt, "-L", "INPUT", "-v", "-x", "-n"])
                .output()
                .map_err(|e| format!("{ipt}: {e}"))?;
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                if line.contains("DROP") {
                    let pkts = line.split_whitespace().next().unwrap_or("0");
                    total += pkts.parse::<u64>().unwrap_or(0);
                }
            }
        }
        Ok(total)
    }
}

/// The iptables command of this machine (the legacy one where both exist: it needs no
/// nftables support in the kernel).
fn iptables() -> Result<&'static str, String> {
    ["iptables-legacy", "iptables"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .ok_or_else(|| "no iptables command".to_string())
}

impl Drop for Veth {
    fn drop(&mut self) {
        for ns in [&self.ns_a, &self.ns_b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}
