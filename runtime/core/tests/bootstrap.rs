//! Bootstrap, TcpLink and launcher tests: real threads, real sockets, loopback only.

use braid_runtime::bootstrap::{Bootstrap, Secret, UniqueId};
use braid_runtime::launcher::{LaunchEnv, Launcher};
use braid_runtime::tcp_link::TcpLink;
use braid_runtime::transport::Link;
use braid_runtime::RuntimeError;
use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(5);

fn loopback() -> Option<SocketAddr> {
    Some("127.0.0.1:0".parse().unwrap())
}

/// Bootstraps `n` ranks on threads and hands back their `Bootstrap`s, indexed by rank.
fn group(n: u32) -> Vec<Bootstrap> {
    let (id, _root) = UniqueId::new(loopback()).unwrap();
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let id = id.clone();
            thread::spawn(move || Bootstrap::init(&id, r, n, T).unwrap())
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// A sender on rank 0 and a receiver on rank 1, plus the bootstraps that own them.
fn link_pair(slots: usize) -> (Vec<Bootstrap>, TcpLink, TcpLink) {
    let boots = group(2);
    let tx = TcpLink::connect_sender(&boots[0], 1, 7, slots).unwrap();
    let rx = TcpLink::accept_receiver(&boots[1], 0, 7).unwrap();
    (boots, tx, rx)
}

fn in_secs(s: u64) -> Instant {
    Instant::now() + Duration::from_secs(s)
}

#[test]
fn four_ranks_allgather_barrier_broadcast_and_links() {
    let (id, _root) = UniqueId::new(loopback()).unwrap();
    let n = 4;
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let id = id.clone();
            thread::spawn(move || {
                let b = Bootstrap::init(&id, r, n, T).unwrap();
                assert_eq!((b.rank(), b.n_ranks()), (r, n));
                let all = b
                    .allgather(format!("rank {r}").repeat(r as usize + 1).as_bytes())
                    .unwrap();
                let want: Vec<Vec<u8>> = (0..n)
                    .map(|q| format!("rank {q}").repeat(q as usize + 1).into_bytes())
                    .collect();
                assert_eq!(all, want);
                b.barrier().unwrap();
                let got = b
                    .broadcast_from(2, if r == 2 { b"from two" } else { b"ignored" })
                    .unwrap();
                assert_eq!(got, b"from two");
                // A ring of direct links: connect first (the acceptor thread files it), then accept.
                let tx = TcpLink::connect_sender(&b, (r + 1) % n, 1, 2).unwrap();
                let rx = TcpLink::accept_receiver(&b, (r + n - 1) % n, 1).unwrap();
                tx.send(&r.to_le_bytes(), in_secs(5)).unwrap();
                let mut buf = [0u8; 4];
                rx.recv(&mut buf, in_secs(5)).unwrap();
                assert_eq!(u32::from_le_bytes(buf), (r + n - 1) % n);
                b.barrier().unwrap();
            })
        })
        .collect();
    handles.into_iter().for_each(|h| h.join().unwrap());
}

#[test]
fn wrong_secret_is_refused_and_the_group_still_forms() {
    let (id, _root) = UniqueId::new(loopback()).unwrap();
    let (other, _other_root) = UniqueId::new(loopback()).unwrap();
    let forged = UniqueId::from_parts(id.addr(), other.secret());
    let n = 3;
    // Everyone waits here before dropping, so the forged joiner meets a live root.
    let done = Arc::new(Barrier::new(n as usize + 1));
    let intruder = {
        let done = done.clone();
        thread::spawn(move || {
            let r = Bootstrap::init(&forged, 1, n, T);
            done.wait();
            r
        })
    };
    thread::sleep(Duration::from_millis(50)); // let the intruder queue up first
    let members: Vec<_> = (0..n)
        .map(|r| {
            let (id, done) = (id.clone(), done.clone());
            thread::spawn(move || {
                let b = Bootstrap::init(&id, r, n, T).unwrap();
                assert_eq!(
                    b.allgather(&[r as u8]).unwrap(),
                    vec![vec![0], vec![1], vec![2]]
                );
                done.wait();
            })
        })
        .collect();
    members.into_iter().for_each(|h| h.join().unwrap());
    match intruder.join().unwrap() {
        Err(RuntimeError::Bootstrap(m)) => {
            assert!(m.contains("does not know this group's secret"), "{m}")
        }
        other => panic!("intruder was not refused: {other:?}"),
    }
}

#[test]
fn duplicate_rank_and_wrong_group_size_are_refused() {
    let (id, _root) = UniqueId::new(loopback()).unwrap();
    let n = 3;
    // Ranks 0, 1, 1 (duplicate) and a rank 2 that thinks the group has 5 ranks; the real
    // rank 2 only once both refusals are in, so that they happen while the group forms
    // (a joiner that comes after the group formed is not answered, whatever the load).
    let (tx, rx) = std::sync::mpsc::channel();
    let start = |r: u32, size: u32, tx: std::sync::mpsc::Sender<(usize, bool)>, k: usize| {
        let id = id.clone();
        thread::spawn(move || {
            let b = Bootstrap::init(&id, r, size, T);
            let _ = tx.send((k, b.is_err()));
            if let Ok(b) = &b {
                b.barrier().unwrap();
            }
            b.map(|_| ())
        })
    };
    let mut handles = vec![
        start(0, n, tx.clone(), 0),
        start(1, n, tx.clone(), 1),
        start(1, n, tx.clone(), 2),
        start(2, 5, tx.clone(), 4),
    ];
    let mut refused = 0;
    while refused < 2 {
        let (_, failed) = rx
            .recv_timeout(2 * T)
            .expect("the duplicate and the wrong size are refused in time");
        refused += usize::from(failed);
    }
    handles.insert(3, start(2, n, tx, 3));
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(results[0].is_ok() && results[3].is_ok(), "{results:?}");
    let dup: Vec<_> = results[1..3]
        .iter()
        .filter_map(|r| r.as_ref().err())
        .collect();
    assert_eq!(dup.len(), 1, "exactly one rank 1 joins: {results:?}");
    assert!(
        dup[0].to_string().contains("duplicate rank 1"),
        "{}",
        dup[0]
    );
    let size = results[4].as_ref().unwrap_err().to_string();
    assert!(
        size.contains("n_ranks = 5") && size.contains("has 3 ranks"),
        "{size}"
    );
}

#[test]
fn a_rank_that_never_joins_times_out_everyone_within_the_deadline() {
    let (id, _root) = UniqueId::new(loopback()).unwrap();
    let timeout = Duration::from_millis(600);
    let start = Instant::now();
    let handles: Vec<_> = (0..3) // rank 3 of 4 never shows up
        .map(|r| {
            let id = id.clone();
            thread::spawn(move || {
                (
                    Bootstrap::init(&id, r, 4, timeout).unwrap_err(),
                    start.elapsed(),
                )
            })
        })
        .collect();
    for (rank, h) in handles.into_iter().enumerate() {
        let (err, elapsed) = h.join().unwrap();
        // Rank 0 names the missing rank; the others report it too unless their own
        // deadline fires first.
        assert!(
            matches!(&err, RuntimeError::Timeout { what, .. } if rank > 0 || what.contains("[3]")),
            "{err}"
        );
        assert!(
            elapsed >= timeout - Duration::from_millis(50)
                && elapsed < timeout + Duration::from_millis(500),
            "{elapsed:?}"
        );
    }
}

#[test]
fn a_rank_that_dies_after_joining_is_reported_as_peer_failed_by_all() {
    let mut boots = group(3);
    drop(boots.pop()); // rank 2 dies
    let start = Instant::now();
    let handles: Vec<_> = boots
        .into_iter()
        .map(|b| thread::spawn(move || b.barrier().unwrap_err()))
        .collect();
    for h in handles {
        let err = h.join().unwrap();
        assert!(
            matches!(err, RuntimeError::PeerFailed { peer: 2, .. }),
            "{err}"
        );
    }
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn mismatched_control_calls_are_reported() {
    let boots = group(2);
    let mut it = boots.into_iter();
    let (b0, b1) = (it.next().unwrap(), it.next().unwrap());
    let h = thread::spawn(move || b1.broadcast_from(1, b"x").unwrap_err());
    let e0 = b0.broadcast_from(0, b"y").unwrap_err();
    let e1 = h.join().unwrap();
    for e in [e0, e1] {
        assert!(
            matches!(&e, RuntimeError::Mismatch(m) if m.contains("Broadcast from rank 1")),
            "{e}"
        );
    }
}

#[test]
fn abort_ends_a_blocked_join() {
    let (id, _root) = UniqueId::new(loopback()).unwrap(); // rank 0 never runs
    let abort = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = abort.clone();
    let start = Instant::now();
    let h = thread::spawn(move || {
        Bootstrap::init_with_abort(&id, 1, 2, Duration::from_secs(10), flag).unwrap_err()
    });
    thread::sleep(Duration::from_millis(100));
    abort.store(true, Ordering::Relaxed);
    assert!(matches!(h.join().unwrap(), RuntimeError::Aborted(_)));
    assert!(start.elapsed() < Duration::from_secs(1));
}

/// Deterministic sizes from 0 to ~70 KB and contents that identify the slice.
fn slice(i: usize) -> Vec<u8> {
    let len = if i.is_multiple_of(10) {
        0
    } else {
        (i * 7919) % 70_000
    };
    (0..len).map(|j| (i * 31 + j) as u8).collect()
}

#[test]
fn tcp_link_moves_1000_slices_intact_with_back_pressure() {
    let slots = 2;
    let (_boots, tx, rx) = link_pair(slots);
    let sent = Arc::new(AtomicUsize::new(0));
    let sender = {
        let sent = sent.clone();
        thread::spawn(move || {
            for i in 0..1000 {
                tx.send(&slice(i), in_secs(5)).unwrap();
                sent.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    // The receiver sleeps first: the sender must stop after `slots` slices.
    thread::sleep(Duration::from_millis(200));
    assert_eq!(
        sent.load(Ordering::SeqCst),
        slots,
        "sender ran ahead of the receive slots"
    );
    for i in 0..1000 {
        let want = slice(i);
        let mut buf = vec![0u8; want.len()];
        rx.recv(&mut buf, in_secs(5)).unwrap();
        assert!(buf == want, "slice {i} corrupted");
        if i.is_multiple_of(250) {
            thread::sleep(Duration::from_millis(20));
        }
        // i + 1 slices acknowledged so far: at most `slots` more can have been sent.
        let ahead = sent.load(Ordering::SeqCst);
        assert!(
            ahead <= i + 1 + slots,
            "{ahead} sent after {} received",
            i + 1
        );
    }
    sender.join().unwrap();
}

#[test]
fn dropping_the_receiver_fails_the_sender_promptly() {
    let (_boots, tx, rx) = link_pair(2);
    let mut buf = [0u8; 16];
    for _ in 0..3 {
        tx.send(&[1u8; 16], in_secs(5)).unwrap();
        rx.recv(&mut buf, in_secs(5)).unwrap();
    }
    drop(rx);
    let start = Instant::now();
    let mut sends = 0;
    let err = loop {
        match tx.send(&[2u8; 16], in_secs(10)) {
            Ok(()) => sends += 1,
            Err(e) => break e,
        }
    };
    assert!(
        matches!(err, RuntimeError::PeerFailed { peer: 1, .. }),
        "{err}"
    );
    assert!(
        sends <= 3,
        "{sends} sends succeeded after the receiver died"
    );
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    // The link stays failed.
    assert!(matches!(
        tx.send(&[0], in_secs(1)),
        Err(RuntimeError::PeerFailed { .. })
    ));
}

#[test]
fn abort_flag_ends_a_blocked_recv() {
    let (boots, _tx, rx) = link_pair(2);
    let start = Instant::now();
    let h = thread::spawn(move || {
        let mut buf = [0u8; 8];
        rx.recv(&mut buf, in_secs(10)).unwrap_err()
    });
    thread::sleep(Duration::from_millis(100));
    boots[1].abort();
    assert!(matches!(h.join().unwrap(), RuntimeError::Aborted(_)));
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn recv_deadline_is_a_timeout() {
    let (_boots, _tx, rx) = link_pair(2);
    let start = Instant::now();
    let err = rx
        .recv(&mut [0u8; 8], Instant::now() + Duration::from_millis(150))
        .unwrap_err();
    assert!(matches!(err, RuntimeError::Timeout { .. }), "{err}");
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn slice_length_mismatch_fails_both_ends() {
    let (_boots, tx, rx) = link_pair(1);
    tx.send(&[0u8; 10], in_secs(5)).unwrap();
    let err = rx.recv(&mut [0u8; 20], in_secs(5)).unwrap_err();
    assert!(
        matches!(&err, RuntimeError::Mismatch(m) if m.contains("10 bytes where 20")),
        "{err}"
    );
    // With one slot, the next send waits for the acknowledgement and gets the NAK.
    let err = tx.send(&[0u8; 10], in_secs(5)).unwrap_err();
    assert!(
        matches!(&err, RuntimeError::Mismatch(m) if m.contains("expected a slice of 20 bytes")),
        "{err}"
    );
}

#[test]
fn unique_id_round_trips_and_rejects_garbage() {
    let (id, root) = UniqueId::new(loopback()).unwrap();
    assert_eq!(root.id(), &id);
    assert!(id.addr().ip().is_loopback() && id.addr().port() != 0);
    let bytes = id.to_bytes();
    assert_eq!(bytes.len(), UniqueId::LEN);
    assert_eq!(UniqueId::from_bytes(&bytes).unwrap(), id);
    let hex = id.to_string();
    assert_eq!(hex.len(), 256);
    assert_eq!(format!(" {hex}\n").parse::<UniqueId>().unwrap(), id);
    assert!(
        !format!("{id:?}").contains(&hex[64..128]),
        "Debug leaks the secret"
    );

    let mut bad = bytes;
    bad[0] = b'X';
    let e = UniqueId::from_bytes(&bad).unwrap_err().to_string();
    assert!(e.contains("bad magic"), "{e}");
    let mut flipped = bytes;
    flipped[40] ^= 1;
    assert!(UniqueId::from_bytes(&flipped)
        .unwrap_err()
        .to_string()
        .contains("checksum"));
    assert!(UniqueId::from_bytes(&bytes[..100]).is_err());
    assert!("zz".repeat(128).parse::<UniqueId>().is_err());
    assert!(hex[..255].parse::<UniqueId>().is_err());

    let v6: SocketAddr = "[::1]:4242".parse().unwrap();
    let secret = Secret::from_hex(&"ab".repeat(16)).unwrap();
    let id6 = UniqueId::from_parts(v6, secret);
    let back: UniqueId = id6.to_string().parse().unwrap();
    assert_eq!((back.addr(), back.secret()), (v6, secret));
    assert!(
        Secret::from_hex("abcd").is_err(),
        "short secrets are refused"
    );
}

fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned()
}

#[test]
fn launch_env_reads_torchrun() {
    let get = vars(&[
        ("RANK", "3"),
        ("WORLD_SIZE", "8"),
        ("LOCAL_RANK", "1"),
        ("LOCAL_WORLD_SIZE", "2"),
        ("MASTER_ADDR", "node0"),
        ("MASTER_PORT", "29500"),
        ("TORCHELASTIC_RUN_ID", "job7"),
        ("SLURM_PROCID", "0"), // an outer srun: torchrun's values win
    ]);
    let env = LaunchEnv::from_vars(&get).unwrap();
    assert_eq!(env.launcher, Launcher::Torchrun);
    assert_eq!(
        (
            env.rank,
            env.world_size,
            env.local_rank,
            env.local_world_size
        ),
        (3, 8, Some(1), Some(2))
    );
    assert_eq!(env.job_id.as_deref(), Some("job7"));
    assert_eq!(env.root_endpoint().unwrap(), ("node0".to_string(), 29501));
    assert_eq!(env.secret, None);
}

#[test]
fn launch_env_reads_open_mpi() {
    let secret = "0123456789abcdef".repeat(4);
    let get = vars(&[
        ("OMPI_COMM_WORLD_RANK", "5"),
        ("OMPI_COMM_WORLD_SIZE", "6"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "3"),
        ("MASTER_ADDR", "10.0.0.1"),
        ("BRAID_BOOTSTRAP_PORT", "4000"),
        ("BRAID_SECRET", &secret),
    ]);
    let env = LaunchEnv::from_vars(&get).unwrap();
    assert_eq!(env.launcher, Launcher::OpenMpi);
    assert_eq!(
        (
            env.rank,
            env.world_size,
            env.local_rank,
            env.local_world_size
        ),
        (5, 6, Some(1), Some(3))
    );
    assert_eq!(env.root_endpoint().unwrap(), ("10.0.0.1".to_string(), 4000));
    assert_eq!(env.secret, Some(Secret::from_hex(&secret).unwrap()));
    assert!(
        !format!("{env:?}").contains("0123456789"),
        "Debug leaks the secret"
    );
}

#[test]
fn launch_env_reads_slurm() {
    let get = vars(&[
        ("SLURM_PROCID", "4"),
        ("SLURM_NTASKS", "7"),
        ("SLURM_LOCALID", "0"),
        ("SLURM_NODEID", "3"),
        ("SLURM_TASKS_PER_NODE", "2(x3),1"),
        ("SLURM_STEP_NODELIST", "gpu[07-09,12]"),
        ("SLURM_JOB_ID", "991"),
        ("MASTER_PORT", "12000"),
    ]);
    let env = LaunchEnv::from_vars(&get).unwrap();
    assert_eq!(env.launcher, Launcher::Slurm);
    assert_eq!(
        (
            env.rank,
            env.world_size,
            env.local_rank,
            env.local_world_size
        ),
        (4, 7, Some(0), Some(1))
    );
    assert_eq!(env.master_addr.as_deref(), Some("gpu07"));
    assert_eq!(env.job_id.as_deref(), Some("991"));
    let plain = vars(&[
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "2"),
        ("SLURM_NTASKS_PER_NODE", "2"),
    ]);
    let env = LaunchEnv::from_vars(&plain).unwrap();
    assert_eq!(env.local_world_size, Some(2));
    assert!(env
        .root_endpoint()
        .unwrap_err()
        .to_string()
        .contains("MASTER_ADDR"));
}

#[test]
fn launch_env_errors_name_the_variable() {
    let err = |pairs: &[(&str, &str)]| LaunchEnv::from_vars(&vars(pairs)).unwrap_err().to_string();
    assert!(err(&[]).contains("no launcher environment"));
    assert!(err(&[("RANK", "0")]).contains("WORLD_SIZE is not"));
    assert!(err(&[("RANK", "x"), ("WORLD_SIZE", "2")]).contains("RANK=\"x\""));
    assert!(err(&[("RANK", "2"), ("WORLD_SIZE", "2")]).contains("rank 2 of a group of 2"));
    assert!(err(&[("OMPI_COMM_WORLD_SIZE", "2")]).contains("OMPI_COMM_WORLD_RANK is not"));
    assert!(
        err(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_PORT", "99999")])
            .contains("MASTER_PORT=\"99999\"")
    );
    assert!(
        err(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("BRAID_SECRET", "xyz")])
            .contains("BRAID_SECRET")
    );
    assert!(err(&[
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "2"),
        ("SLURM_TASKS_PER_NODE", "2(y3)"),
        ("SLURM_NODEID", "0")
    ])
    .contains("SLURM_TASKS_PER_NODE"));
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn ranks_bootstrap_from_launcher_variables() {
    let port = free_port().to_string();
    let n = 3;
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let port = port.clone();
            thread::spawn(move || {
                let rank = r.to_string();
                let get = vars(&[
                    ("RANK", &rank),
                    ("WORLD_SIZE", "3"),
                    ("MASTER_ADDR", "127.0.0.1"),
                    ("MASTER_PORT", "1"),
                    ("BRAID_BOOTSTRAP_PORT", &port),
                ]);
                let b =
                    Bootstrap::from_launch_env(&LaunchEnv::from_vars(&get).unwrap(), T).unwrap();
                let all = b.allgather(&[r as u8]).unwrap();
                if r == 0 {
                    // MASTER_ADDR is loopback: the port is not open on other interfaces.
                    if let Some(ip) = non_loopback_ip() {
                        let p: u16 = port.parse().unwrap();
                        let reached = std::net::TcpStream::connect_timeout(
                            &SocketAddr::new(ip, p),
                            Duration::from_millis(500),
                        );
                        assert!(reached.is_err(), "rank 0 listens on {ip} too");
                    }
                }
                b.barrier().unwrap();
                all
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), vec![vec![0], vec![1], vec![2]]);
    }
}

/// An address of this host's other than loopback, if it has one.
fn non_loopback_ip() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?; // TEST-NET-1: never sent anything, only routed
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// Set in the environment of the processes `ranks_in_separate_processes` starts.
const CHILD: &str = "BRAID_BOOTSTRAP_TEST_CHILD";

#[test]
fn ranks_in_separate_processes() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let port = free_port().to_string();
    let exe = std::env::current_exe().unwrap();
    let n = 3;
    let children: Vec<_> = (0..n)
        .map(|r| {
            std::process::Command::new(&exe)
                .args([
                    "--exact",
                    "process_rank_entry",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD, "1")
                .env("RANK", r.to_string())
                .env("WORLD_SIZE", n.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("BRAID_BOOTSTRAP_PORT", &port)
                .env("BRAID_SECRET", "5e".repeat(32))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("rank ok"),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// One rank of `ranks_in_separate_processes`; does nothing in a normal test run.
#[test]
fn process_rank_entry() {
    if std::env::var(CHILD).is_err() {
        return;
    }
    let env = LaunchEnv::from_env().unwrap();
    let b = Bootstrap::from_launch_env(&env, T).unwrap();
    let pids = b.allgather(&std::process::id().to_le_bytes()).unwrap();
    assert_eq!(pids[env.rank as usize], std::process::id().to_le_bytes());
    let mut distinct = pids.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        env.world_size as usize,
        "ranks share a process"
    );
    let n = env.world_size;
    let tx = TcpLink::connect_sender(&b, (env.rank + 1) % n, 0, 2).unwrap();
    let rx = TcpLink::accept_receiver(&b, (env.rank + n - 1) % n, 0).unwrap();
    tx.send(&[env.rank as u8; 1000], in_secs(5)).unwrap();
    let mut buf = [0u8; 1000];
    rx.recv(&mut buf, in_secs(5)).unwrap();
    assert_eq!(buf, [((env.rank + n - 1) % n) as u8; 1000]);
    b.barrier().unwrap();
    println!("rank ok");
}

/// 200 connections to the rendezvous port that never say anything, opened while rank 0
/// waits for the others: every handshake has its own thread and deadline, so a 4-rank
/// group still forms at once, and its links work although 200 more idle connections sit
/// on rank 0's listener.
#[test]
fn silent_connections_do_not_hold_up_the_join() {
    let (id, _root) = UniqueId::new(loopback()).unwrap();
    let n = 4;
    let root = {
        let id = id.clone();
        thread::spawn(move || Bootstrap::init(&id, 0, n, T).unwrap())
    };
    let silent: Vec<std::net::TcpStream> = (0..200)
        .map(|_| std::net::TcpStream::connect(id.addr()).unwrap())
        .collect();
    let start = Instant::now();
    let mut handles = vec![root];
    handles.extend((1..n).map(|r| {
        let id = id.clone();
        thread::spawn(move || Bootstrap::init(&id, r, n, T).unwrap())
    }));
    let boots: Vec<Bootstrap> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let formed = start.elapsed();
    // More silent connections, now on the link listener rank 0 keeps; links still work.
    let more: Vec<std::net::TcpStream> = (0..200)
        .map(|_| std::net::TcpStream::connect(boots[0].peer_addr(0).unwrap()).unwrap())
        .collect();
    let tx = TcpLink::connect_sender(&boots[1], 0, 3, 2).unwrap();
    let rx = TcpLink::accept_receiver(&boots[0], 1, 3).unwrap();
    tx.send(b"through", Instant::now() + T).unwrap();
    let mut got = [0u8; 7];
    rx.recv(&mut got, Instant::now() + T).unwrap();
    assert_eq!(&got, b"through");
    assert!(
        formed < Duration::from_secs(5),
        "the group took {formed:?} to form"
    );
    drop((silent, more));
}

/// Every rank learns the same random job nonce from rank 0; another group gets another.
#[test]
fn the_job_nonce_is_shared_and_fresh() {
    let a = group(3);
    let b = group(2);
    let na = a[0].job_nonce();
    assert_eq!(na.len(), 32);
    assert!(a.iter().all(|x| x.job_nonce() == na));
    assert_ne!(b[0].job_nonce(), na);
    assert_eq!(b[1].job_nonce(), b[0].job_nonce());
}
