//! Tests of the shared-memory link: ordering and integrity, back-pressure, a real second
//! process, length mismatches, abort, deadlines, and that the ring's file name is gone
//! once both ends are open.

use braid_runtime::shm_link::{shm_dir, shm_name, ShmLink};
use braid_runtime::transport::Link;
use braid_runtime::RuntimeError;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Set (to the ring's name) in the child process of `cross_process_500_slices`.
const CHILD_ENV: &str = "BRAID_SHM_LINK_TEST_CHILD";
const MAX: usize = 70_000;

/// A ring name no other test (or concurrent run of this binary) uses.
fn unique_name(channel: u32) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let job = format!("{}-{nanos}", std::process::id());
    shm_name(&job, 0, 1, channel)
}

fn flag() -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(false))
}

fn soon(secs: u64) -> Instant {
    Instant::now() + Duration::from_secs(secs)
}

/// The length of slice `i`: varied, covering 0 and the slot size itself.
fn len_of(i: usize) -> usize {
    match i % 7 {
        0 => 0,
        1 => MAX,
        _ => (i * 7919) % (MAX + 1),
    }
}

/// The deterministic content of slice `i`: a window, starting at an offset that depends
/// on `i`, into one fixed pseudo-random pattern (cheap to produce and compare even in
/// debug builds).
fn fill(i: usize, buf: &mut [u8]) {
    static PATTERN: OnceLock<Vec<u8>> = OnceLock::new();
    let p = PATTERN.get_or_init(|| {
        let mut x: u32 = 0x9e37_79b9;
        (0..MAX + 4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    });
    let start = (i * 613) % 4096;
    buf.copy_from_slice(&p[start..start + buf.len()]);
}

fn pair(channel: u32, slots: usize) -> (ShmLink, ShmLink) {
    let name = unique_name(channel);
    let tx = ShmLink::create_sender(&name, slots, MAX, flag()).unwrap();
    let rx = ShmLink::open_receiver(&name, flag(), soon(5)).unwrap();
    (tx, rx)
}

fn send_all(tx: &ShmLink, n: usize) {
    let mut buf = vec![0u8; MAX];
    for i in 0..n {
        let s = &mut buf[..len_of(i)];
        fill(i, s);
        tx.send(s, soon(10)).unwrap();
    }
}

fn check_all(rx: &ShmLink, n: usize) {
    let mut got = vec![0u8; MAX];
    let mut want = vec![0u8; MAX];
    for i in 0..n {
        let len = len_of(i);
        rx.recv(&mut got[..len], soon(10)).unwrap();
        fill(i, &mut want[..len]);
        assert!(
            got[..len] == want[..len],
            "slice {i} ({len} bytes) corrupted"
        );
    }
}

#[test]
fn two_threads_2000_slices_in_order() {
    let (tx, rx) = pair(1, 4);
    let t = thread::spawn(move || send_all(&tx, 2000));
    check_all(&rx, 2000);
    t.join().unwrap();
}

#[test]
fn sender_never_more_than_slots_ahead() {
    const SLOTS: usize = 3;
    const N: usize = 40;
    let (tx, rx) = pair(2, SLOTS);
    let sent = Arc::new(AtomicUsize::new(0));
    // Counted before each recv starts, so it is never below the ring's tail: the bound
    // below can only fail if the ring really let the sender run ahead.
    let started = Arc::new(AtomicUsize::new(0));
    let max_ahead = Arc::new(AtomicUsize::new(0));
    let (s, st, m) = (sent.clone(), started.clone(), max_ahead.clone());
    let t = thread::spawn(move || {
        for i in 0..N {
            tx.send(&(i as u64).to_le_bytes(), soon(10)).unwrap();
            let k = s.fetch_add(1, Ordering::SeqCst) + 1;
            let ahead = k - st.load(Ordering::SeqCst);
            m.fetch_max(ahead, Ordering::SeqCst);
        }
    });
    let mut buf = [0u8; 8];
    for i in 0..N {
        thread::sleep(Duration::from_millis(2));
        started.fetch_add(1, Ordering::SeqCst);
        rx.recv(&mut buf, soon(10)).unwrap();
        assert_eq!(u64::from_le_bytes(buf), i as u64);
        assert!(sent.load(Ordering::SeqCst) <= i + 1 + SLOTS);
    }
    t.join().unwrap();
    let ahead = max_ahead.load(Ordering::SeqCst);
    assert!(
        ahead <= SLOTS,
        "sender got {ahead} slices ahead of {SLOTS} slots"
    );
    assert_eq!(ahead, SLOTS, "a sleeping receiver should let the ring fill");
}

/// Runs as the parent (sender) normally, and as the receiver when re-executed by itself
/// with `CHILD_ENV` set: the usual way to get a second process in a Rust test.
#[test]
fn cross_process_500_slices() {
    if let Ok(name) = std::env::var(CHILD_ENV) {
        let rx = ShmLink::open_receiver(&name, flag(), soon(10)).unwrap();
        check_all(&rx, 500);
        return;
    }
    let name = unique_name(3);
    let tx = ShmLink::create_sender(&name, 4, MAX, flag()).unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "cross_process_500_slices", "--nocapture"])
        .env(CHILD_ENV, &name)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut buf = vec![0u8; MAX];
    let mut failed = None;
    for i in 0..500 {
        let s = &mut buf[..len_of(i)];
        fill(i, s);
        if let Err(e) = tx.send(s, soon(10)) {
            failed = Some(e);
            let _ = child.kill();
            break;
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        failed.is_none() && out.status.success(),
        "send error {failed:?}; child {}:\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Set (to the two rings' names) in the child process of
/// `a_sleeping_process_is_woken_by_its_peers_send`.
const ECHO_ENV: &str = "BRAID_SHM_LINK_TEST_ECHO";

/// Across processes, a receiver asleep on its ring (it has waited 300 ms) is woken by the
/// sender's store: the child echoes each slice back at once, and the round trip, timed by
/// the parent, is a median under 2 ms of five (a sleeper left to its timeout, as with a
/// wake-up private to one process, takes up to 10 ms).
#[cfg(target_os = "linux")]
#[test]
fn a_sleeping_process_is_woken_by_its_peers_send() {
    if let Ok(names) = std::env::var(ECHO_ENV) {
        let (there, back) = names.split_once(',').unwrap();
        let rx = ShmLink::open_receiver(there, flag(), soon(10)).unwrap();
        let tx = ShmLink::create_sender(back, 2, 16, flag()).unwrap();
        for _ in 0..5 {
            let mut b = [0u8];
            rx.recv(&mut b, soon(30)).unwrap();
            tx.send(&b, soon(10)).unwrap();
        }
        tx.flush(soon(10)).unwrap();
        return;
    }
    let (there, back) = (unique_name(14), unique_name(15));
    let tx = ShmLink::create_sender(&there, 2, 16, flag()).unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_sleeping_process_is_woken_by_its_peers_send",
            "--nocapture",
        ])
        .env(ECHO_ENV, format!("{there},{back}"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let echoed = (|| -> Result<Vec<Duration>, RuntimeError> {
        let rx = ShmLink::open_receiver(&back, flag(), soon(10))?;
        let mut trips = Vec::new();
        for round in 0..5u8 {
            thread::sleep(Duration::from_millis(300));
            let t = Instant::now();
            tx.send(&[round], soon(10))?;
            let mut b = [0u8];
            rx.recv(&mut b, soon(10))?;
            trips.push(t.elapsed());
            assert_eq!(b[0], round);
        }
        Ok(trips)
    })();
    if echoed.is_err() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    let mut trips = match echoed {
        Ok(t) if out.status.success() => t,
        other => panic!(
            "{other:?}; child {}:\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    };
    trips.sort();
    assert!(
        trips[2] < Duration::from_millis(2),
        "a sleeping process took a median {:?} to see its peer's slice: {trips:?}",
        trips[2]
    );
}

#[test]
fn wrong_length_is_mismatch_and_link_goes_on() {
    let (tx, rx) = pair(4, 4);
    tx.send(&[7u8; 10], soon(1)).unwrap();
    tx.send(&[8u8; 3], soon(1)).unwrap();
    let mut buf = [0u8; 12];
    match rx.recv(&mut buf, soon(1)) {
        Err(RuntimeError::Mismatch(m)) => assert!(m.contains("10") && m.contains("12"), "{m}"),
        other => panic!("expected Mismatch, got {other:?}"),
    }
    let mut buf = [0u8; 3];
    rx.recv(&mut buf, soon(1)).unwrap();
    assert_eq!(buf, [8u8; 3]);
}

#[test]
fn oversized_slice_and_wrong_end_are_invalid() {
    let (tx, rx) = pair(5, 2);
    let big = vec![0u8; MAX + 1];
    assert!(matches!(
        tx.send(&big, soon(1)),
        Err(RuntimeError::Invalid(_))
    ));
    assert!(matches!(
        rx.send(&[1], soon(1)),
        Err(RuntimeError::Invalid(_))
    ));
    assert!(matches!(
        tx.recv(&mut [0], soon(1)),
        Err(RuntimeError::Invalid(_))
    ));
}

#[test]
fn abort_ends_blocked_recv() {
    let name = unique_name(6);
    let _tx = ShmLink::create_sender(&name, 2, MAX, flag()).unwrap();
    let abort = flag();
    let rx = ShmLink::open_receiver(&name, abort.clone(), soon(5)).unwrap();
    let setter = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        let at = Instant::now();
        abort.store(true, Ordering::SeqCst);
        at
    });
    let r = rx.recv(&mut [0u8; 4], soon(30));
    let ended = Instant::now();
    let set_at = setter.join().unwrap();
    assert!(matches!(r, Err(RuntimeError::Aborted(_))), "{r:?}");
    assert!(ended.duration_since(set_at) < Duration::from_millis(500));
}

/// A receiver that has waited long enough to sleep between looks (up to 10 ms each on
/// Linux) is woken by the send itself, in a fraction of that; and so is a sender asleep
/// on a full ring when the receiver frees a slot. Medians of five rounds each.
#[cfg(target_os = "linux")]
#[test]
fn a_sleeping_end_is_woken_by_the_other_ends_move() {
    fn median(mut v: Vec<Duration>) -> Duration {
        v.sort();
        v[v.len() / 2]
    }
    let (tx, rx) = pair(13, 1);
    let (tx, rx) = (Arc::new(tx), Arc::new(rx));
    let mut recv_late = Vec::new();
    let mut send_late = Vec::new();
    for round in 0..5u8 {
        // The receiver waits on an empty ring; the send comes 300 ms later.
        let sender = {
            let tx = tx.clone();
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(300));
                let at = Instant::now();
                tx.send(&[round], soon(5)).unwrap();
                at
            })
        };
        let mut b = [0u8];
        rx.recv(&mut b, soon(30)).unwrap();
        let got = Instant::now();
        recv_late.push(got.duration_since(sender.join().unwrap()));
        assert_eq!(b[0], round);
        // The sender waits on a full ring (one slot); the receive comes 300 ms later.
        tx.send(&[round], soon(5)).unwrap();
        let receiver = {
            let rx = rx.clone();
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(300));
                let at = Instant::now();
                rx.recv(&mut [0u8], soon(5)).unwrap();
                at
            })
        };
        tx.send(&[round], soon(30)).unwrap();
        let sent = Instant::now();
        send_late.push(sent.duration_since(receiver.join().unwrap()));
        rx.recv(&mut [0u8], soon(5)).unwrap();
    }
    let (r, s) = (median(recv_late.clone()), median(send_late.clone()));
    assert!(
        r < Duration::from_millis(2) && s < Duration::from_millis(2),
        "a sleeping end took a median {r:?} (receiver) and {s:?} (sender) to see the \
         other end's move: {recv_late:?} {send_late:?}"
    );
}

#[test]
fn deadline_ends_blocked_send() {
    let (tx, _rx) = pair(7, 2);
    tx.send(&[1], soon(1)).unwrap();
    tx.send(&[2], soon(1)).unwrap();
    let t0 = Instant::now();
    let r = tx.send(&[3], t0 + Duration::from_millis(100));
    let took = t0.elapsed();
    assert!(matches!(r, Err(RuntimeError::Timeout { .. })), "{r:?}");
    assert!(took >= Duration::from_millis(100) && took < Duration::from_secs(2));
}

#[test]
fn file_is_gone_once_both_ends_are_open() {
    let name = unique_name(8);
    let path = shm_dir().join(&name);
    let tx = ShmLink::create_sender(&name, 2, 16, flag()).unwrap();
    assert!(
        path.exists(),
        "the sender publishes the ring under its name"
    );
    let rx = ShmLink::open_receiver(&name, flag(), soon(5)).unwrap();
    assert!(!path.exists(), "the receiver unlinks the name");
    // The mappings still work without the name.
    tx.send(b"hi", soon(1)).unwrap();
    let mut buf = [0u8; 2];
    rx.recv(&mut buf, soon(1)).unwrap();
    assert_eq!(&buf, b"hi");
}

#[test]
fn dropped_sender_without_receiver_removes_file() {
    let name = unique_name(9);
    let path = shm_dir().join(&name);
    let tx = ShmLink::create_sender(&name, 2, 16, flag()).unwrap();
    assert!(path.exists());
    drop(tx);
    assert!(!path.exists());
}

#[test]
fn receiver_waits_for_late_sender_or_times_out() {
    let name = unique_name(10);
    let late = name.clone();
    let t = thread::spawn(move || {
        thread::sleep(Duration::from_millis(50));
        ShmLink::create_sender(&late, 2, 16, flag()).unwrap()
    });
    let rx = ShmLink::open_receiver(&name, flag(), soon(5)).unwrap();
    let tx = t.join().unwrap();
    tx.send(b"x", soon(1)).unwrap();
    rx.recv(&mut [0u8; 1], soon(1)).unwrap();

    let none = unique_name(11);
    let r = ShmLink::open_receiver(&none, flag(), Instant::now() + Duration::from_millis(50));
    assert!(matches!(r, Err(RuntimeError::Timeout { .. })));
}

#[test]
fn names_are_stable_and_distinct() {
    let a = shm_name("0123abcd", 1, 2, 3);
    assert_eq!(a, shm_name("0123abcd", 1, 2, 3));
    assert_eq!(a, "braid-0123abcd-1-2-3");
    assert_ne!(a, shm_name("0123abce", 1, 2, 3));
    assert_ne!(a, shm_name("0123abcd", 2, 1, 3));
}

/// A ring file is this user's alone (mode 0600); a file someone put under a ring's
/// name first is neither replaced nor read, and one with the wrong mode is refused.
#[cfg(unix)]
#[test]
fn ring_files_are_private_and_never_taken_over() {
    use std::os::unix::fs::PermissionsExt;
    let name = unique_name(21);
    let path = braid_runtime::shm_link::shm_dir().join(&name);
    let tx = ShmLink::create_sender(&name, 2, 64, flag()).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "ring file mode {mode:o}");
    drop(tx);
    assert!(!path.exists(), "a dropped sender leaves its file");

    // Someone created the name first: the sender refuses to publish over it.
    let squat = unique_name(22);
    let squat_path = braid_runtime::shm_link::shm_dir().join(&squat);
    std::fs::write(&squat_path, b"forged").unwrap();
    let e = ShmLink::create_sender(&squat, 2, 64, flag())
        .err()
        .expect("published over a squatter");
    assert!(e.to_string().contains("cannot publish"), "{e}");
    // And a receiver refuses the squatter's file (mode 0644 here, not a private ring).
    std::fs::set_permissions(&squat_path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = ShmLink::open_receiver(&squat, flag(), soon(1))
        .err()
        .expect("opened a squatter's file");
    assert!(
        e.to_string().contains("not this user's private ring"),
        "{e}"
    );
    std::fs::remove_file(&squat_path).unwrap();

    // A symbolic link under a ring's name is not followed.
    let target = braid_runtime::shm_link::shm_dir().join(unique_name(23));
    std::fs::write(&target, vec![0u8; 4096]).unwrap();
    let link_name = unique_name(24);
    let link_path = braid_runtime::shm_link::shm_dir().join(&link_name);
    std::os::unix::fs::symlink(&target, &link_path).unwrap();
    let r = ShmLink::open_receiver(
        &link_name,
        flag(),
        Instant::now() + Duration::from_millis(200),
    );
    assert!(r.is_err(), "followed a symbolic link");
    std::fs::remove_file(&link_path).unwrap();
    std::fs::remove_file(&target).unwrap();
}

#[test]
fn flush_waits_until_the_receiver_opened_and_took_everything() {
    use braid_runtime::shm_link::ShmLink;
    use braid_runtime::transport::Link;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    let name = braid_runtime::shm_link::shm_name("flush-test", 1, 0, std::process::id());
    let abort = Arc::new(AtomicBool::new(false));
    let sender = ShmLink::create_sender(&name, 4, 64, abort.clone()).unwrap();
    sender
        .send(&[7u8; 10], Instant::now() + Duration::from_secs(1))
        .unwrap();
    // Nobody has opened the ring: flush must not pretend the data arrived.
    let early = sender.flush(Instant::now() + Duration::from_millis(100));
    assert!(early.is_err(), "{early:?}");
    let receiver = std::thread::spawn({
        let name = name.clone();
        let abort = abort.clone();
        move || {
            std::thread::sleep(Duration::from_millis(100));
            let r = ShmLink::open_receiver(&name, abort, Instant::now() + Duration::from_secs(2))
                .unwrap();
            let mut buf = [0u8; 10];
            r.recv(&mut buf, Instant::now() + Duration::from_secs(2))
                .unwrap();
            buf
        }
    });
    sender
        .flush(Instant::now() + Duration::from_secs(3))
        .unwrap();
    drop(sender); // after a flush, dropping loses nothing
    assert_eq!(receiver.join().unwrap(), [7u8; 10]);
}
