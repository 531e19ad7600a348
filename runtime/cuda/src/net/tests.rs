//! The proxy against kernels played by threads on ordinary host memory: the same
//! counters, sizes, slots and LL lines the GPU would write and read, so connection
//! setup, flow control, framing, teardown and failures are tested without a GPU.

use super::fifo::{fifo_len, Fifo, FifoMemory};
use super::loopback_pair;
use super::proxy::{wait_acknowledged, OnFail, Proxy};
use super::wire::{Credit, Data, HEADER};
use crate::kernel::{LL_SLOT_BYTES, SIMPLE_SLOT_BYTES};
use std::alloc::Layout;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct TestMem {
    ptr: *mut u8,
    layout: Layout,
}

// SAFETY: the pointer is owned by the value; the tests only reach it through the Fifo.
unsafe impl Send for TestMem {}
unsafe impl Sync for TestMem {}

impl TestMem {
    fn new(len: usize) -> Arc<TestMem> {
        let layout = Layout::from_size_align(len, 4096).unwrap();
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        Arc::new(TestMem { ptr, layout })
    }
}

impl Drop for TestMem {
    fn drop(&mut self) {
        // SAFETY: allocated by `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

// SAFETY: owned, zeroed, 4096-aligned, `layout.size()` bytes, freed only on drop.
unsafe impl FifoMemory for TestMem {
    fn host(&self) -> *mut u8 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.layout.size()
    }
}

const SLOTS: u32 = 4;

fn fifo() -> Fifo {
    Fifo::new(TestMem::new(fifo_len(SLOTS)), SLOTS).unwrap()
}

fn failures() -> (OnFail, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    (Arc::new(move |why| s.lock().unwrap().push(why)), seen)
}

const TIMEOUT: Duration = Duration::from_secs(20);

fn spin_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

/// The bytes of slice `k` on the Simple lane, and their count.
fn simple_bytes(k: u64) -> Vec<u8> {
    let len = match k % 5 {
        0 => 0,
        1 => 8,
        2 => SIMPLE_SLOT_BYTES,
        _ => ((k * 7919) % SIMPLE_SLOT_BYTES as u64) as usize,
    };
    (0..len).map(|i| (k as usize * 31 + i * 7) as u8).collect()
}

/// The 8-byte data words of slice `k` on the LL lane.
fn ll_words(k: u64) -> Vec<u64> {
    let lines = 1 + (k * 104_729) as usize % (LL_SLOT_BYTES / 16);
    (0..lines)
        .map(|i| (k << 32) ^ (i as u64 * 0x9e37_79b9))
        .collect()
}

fn word(at: *mut u8, i: usize) -> &'static AtomicU64 {
    // SAFETY: the tests pass addresses inside a slot of a live FIFO, 8-aligned.
    unsafe { &*(at.add(8 * i) as *const AtomicU64) }
}

/// The sending kernel: waits for a free slot, writes the slice, its size, then `head`.
fn kernel_send(f: &Fifo, lane: usize, count: u64) {
    kernel_send_from(f, lane, 0, count);
}

/// [`kernel_send`] of slices `first..last`.
fn kernel_send_from(f: &Fifo, lane: usize, first: u64, last: u64) {
    let n = u64::from(f.slots());
    for k in first..last {
        spin_until("a free slot", || {
            k - f.tail(lane).load(Ordering::Acquire) < n
        });
        let (at, _) = f.slot(lane, (k % n) as u32);
        let bytes = if lane == 0 {
            let b = simple_bytes(k);
            // SAFETY: inside the slot, which the proxy does not read until `head` moves.
            unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), at, b.len()) };
            b.len()
        } else {
            let flag = (k + 1) as u32 as u64;
            let w = ll_words(k);
            for (i, d) in w.iter().enumerate() {
                word(at, 2 * i).store((d & 0xffff_ffff) | (flag << 32), Ordering::Relaxed);
                word(at, 2 * i + 1).store((d >> 32) | (flag << 32), Ordering::Relaxed);
            }
            16 * w.len()
        };
        f.size(lane, (k % n) as u32)
            .store(bytes as u64, Ordering::Relaxed);
        f.head(lane).store(k + 1, Ordering::Release);
    }
}

/// The receiving kernel: Simple waits for `head`, LL polls each line's flags; checks
/// every byte, then bumps `tail`.
fn kernel_recv(f: &Fifo, lane: usize, count: u64) {
    let n = u64::from(f.slots());
    for k in 0..count {
        let (at, _) = f.slot(lane, (k % n) as u32);
        if lane == 0 {
            spin_until("a slice", || f.head(lane).load(Ordering::Acquire) > k);
            let want = simple_bytes(k);
            let mut got = vec![0u8; want.len()];
            // SAFETY: inside the slot, which the proxy does not write until `tail` moves.
            unsafe { std::ptr::copy_nonoverlapping(at, got.as_mut_ptr(), got.len()) };
            assert!(got == want, "Simple slice {k} differs");
        } else {
            let flag = (k + 1) as u32 as u64;
            for (i, d) in ll_words(k).iter().enumerate() {
                let (mut lo, mut hi) = (0, 0);
                spin_until("an LL line", || {
                    lo = word(at, 2 * i).load(Ordering::Relaxed);
                    hi = word(at, 2 * i + 1).load(Ordering::Relaxed);
                    lo >> 32 == flag && hi >> 32 == flag
                });
                assert_eq!((lo & 0xffff_ffff) | (hi << 32), *d, "LL slice {k} line {i}");
            }
        }
        f.tail(lane).store(k + 1, Ordering::Release);
    }
}

/// `n` connected loopback streams: this end's and the other's.
fn streams(n: usize) -> (Vec<TcpStream>, Vec<TcpStream>) {
    (0..n).map(|_| loopback_pair().unwrap()).unzip()
}

fn pair(
    timeout: Duration,
    n_streams: usize,
) -> (Fifo, Proxy, Fifo, Proxy, Arc<Mutex<Vec<String>>>) {
    let (a, b) = streams(n_streams);
    let (on_fail, seen) = failures();
    let (sf, rf) = (fifo(), fifo());
    let sp = Proxy::start(sf.clone(), a, true, "0->1".into(), timeout, on_fail.clone()).unwrap();
    let rp = Proxy::start(rf.clone(), b, false, "0->1".into(), timeout, on_fail).unwrap();
    (sf, sp, rf, rp, seen)
}

#[test]
fn slices_of_both_lanes_arrive_whole_and_in_order_within_the_credits() {
    both_lanes_whole_and_in_order(1);
}

#[test]
fn over_several_streams_slices_still_reach_the_kernel_whole_and_in_order() {
    // Slice k goes on stream (k - 1) % 3; the kernel must still see 1, 2, 3, ...
    both_lanes_whole_and_in_order(3);
}

fn both_lanes_whole_and_in_order(n_streams: usize) {
    let (sf, sp, rf, rp, seen) = pair(TIMEOUT, n_streams);
    let counts = [300u64, 2000];
    std::thread::scope(|s| {
        for (lane, &count) in counts.iter().enumerate() {
            let (sf, rf) = (&sf, &rf);
            s.spawn(move || kernel_send(sf, lane, count));
            s.spawn(move || kernel_recv(rf, lane, count));
        }
    });
    // Every credit came back to the sending kernel.
    for (lane, &c) in counts.iter().enumerate() {
        spin_until("the last credit", || {
            sf.tail(lane).load(Ordering::Acquire) == c
        });
        assert_eq!(rf.head(0).load(Ordering::Acquire), counts[0]);
    }
    drop((sp, rp));
    assert!(
        seen.lock().unwrap().is_empty(),
        "{:?}",
        seen.lock().unwrap()
    );
}

/// Shrinks a stream's kernel buffers (send and receive) to about `bytes`.
fn small_buffers(s: &TcpStream, bytes: libc::c_int) {
    use std::os::fd::AsRawFd;
    for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
        // SAFETY: a live socket; an int option.
        let r = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&bytes as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(r, 0, "setsockopt: {}", std::io::Error::last_os_error());
    }
}

#[test]
fn over_several_streams_a_stalled_stream_does_not_hold_up_the_others() {
    // Each stream has its own sender: while stream 1's peer reads nothing (and its
    // buffers hold a few KiB, far less than a slice), the slices dealt to stream 0 still
    // go. One thread sending for every stream would stay stuck in slice 2.
    let (a, mut b) = streams(2);
    small_buffers(&a[1], 4096);
    small_buffers(&b[1], 4096);
    let (on_fail, seen) = failures();
    let sf = fifo();
    let t = Duration::from_secs(3);
    let sp = Proxy::start(sf.clone(), a, true, "0->1".into(), t, on_fail).unwrap();
    // Four full slices (the FIFO's slots): 1 and 3 on stream 0, 2 and 4 on stream 1.
    for k in 0..u64::from(SLOTS) {
        let (at, cap) = sf.slot(0, k as u32);
        assert_eq!(cap, SIMPLE_SLOT_BYTES);
        // SAFETY: inside the slot, which the proxy does not read until `head` moves.
        unsafe { std::ptr::write_bytes(at, k as u8 + 1, SIMPLE_SLOT_BYTES) };
        sf.size(0, k as u32)
            .store(SIMPLE_SLOT_BYTES as u64, Ordering::Relaxed);
    }
    let start = Instant::now();
    sf.head(0).store(u64::from(SLOTS), Ordering::Release);
    b[0].set_read_timeout(Some(t)).unwrap();
    for seq in [1u64, 3] {
        let mut h = [0u8; HEADER];
        b[0].read_exact(&mut h).unwrap();
        let d = Data::decode(&h).unwrap();
        assert_eq!(
            (d.lane, d.seq, d.bytes as usize),
            (0, seq, SIMPLE_SLOT_BYTES)
        );
        let mut body = vec![0u8; SIMPLE_SLOT_BYTES];
        b[0].read_exact(&mut body).unwrap();
        assert!(body.iter().all(|&x| x == seq as u8));
    }
    assert!(
        start.elapsed() < t / 2,
        "stream 0's slices took {:?}",
        start.elapsed()
    );
    // Stream 1 never drained: the end reports it stalled (named), not a hang.
    spin_until("the stalled stream's failure", || {
        !seen.lock().unwrap().is_empty()
    });
    assert!(
        seen.lock().unwrap()[0].contains("BRAID_TIMEOUT"),
        "{:?}",
        seen.lock().unwrap()
    );
    drop(sp);
}

/// What a send end's drop waits for before it closes: the peer's TCP acknowledging
/// every byte written. A peer that reads nothing leaves bytes unacknowledged once its
/// receive buffer is full; when it has read them all, they are; a give-up returns at once.
#[cfg(target_os = "linux")]
#[test]
fn a_send_end_knows_when_its_peer_has_acknowledged_every_byte() {
    let (a, mut b) = loopback_pair().unwrap();
    small_buffers(&a, 4096);
    small_buffers(&b, 4096);
    a.set_nonblocking(true).unwrap();
    let chunk = vec![7u8; 1 << 16];
    let mut written = 0;
    loop {
        match (&a).write(&chunk) {
            Ok(n) => written += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(written > 0);
    let soon = Instant::now() + Duration::from_millis(200);
    assert!(!wait_acknowledged(&a, soon, || false));
    let t = Instant::now();
    assert!(!wait_acknowledged(&a, t + Duration::from_secs(30), || true));
    assert!(t.elapsed() < Duration::from_secs(1));
    let mut got = vec![0u8; written];
    b.read_exact(&mut got).unwrap();
    assert!(got.iter().all(|&x| x == 7));
    assert!(wait_acknowledged(&a, Instant::now() + TIMEOUT, || false));
}

/// A peer that resets the connection (a killed process with unread bytes) leaves bytes
/// that will never be acknowledged, and a reset socket keeps counting them: the wait
/// ends at the reset, not at its deadline.
#[cfg(target_os = "linux")]
#[test]
fn a_send_end_stops_waiting_for_acknowledgements_when_its_peer_resets() {
    let (a, b) = loopback_pair().unwrap();
    small_buffers(&a, 4096);
    small_buffers(&b, 4096);
    a.set_nonblocking(true).unwrap();
    let chunk = vec![7u8; 1 << 16];
    loop {
        match (&a).write(&chunk) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("{e}"),
        }
    }
    // Unread bytes in its receive buffer: closing sends a reset.
    drop(b);
    let t = Instant::now();
    assert!(!wait_acknowledged(&a, t + Duration::from_secs(30), || {
        false
    }));
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

#[test]
fn dropping_a_send_end_first_forwards_what_its_kernel_published() {
    let (a, mut b) = loopback_pair().unwrap();
    let (on_fail, seen) = failures();
    let sf = fifo();
    let sp = Proxy::start(sf.clone(), vec![a], true, "t".into(), TIMEOUT, on_fail).unwrap();
    kernel_send(&sf, 0, 3);
    drop(sp);
    b.set_read_timeout(Some(TIMEOUT)).unwrap();
    for k in 0..3u64 {
        let mut h = [0u8; HEADER];
        b.read_exact(&mut h).unwrap();
        let d = Data::decode(&h).unwrap();
        assert_eq!((d.lane, d.seq), (0, k + 1));
        let mut body = vec![0u8; d.bytes as usize];
        b.read_exact(&mut body).unwrap();
        assert_eq!(body, simple_bytes(k));
    }
    let mut rest = Vec::new();
    b.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    assert!(seen.lock().unwrap().is_empty());
}

/// A receive end fed by hand: what it does with `frames`, and the reasons it failed.
fn feed_receiver(frames: &[(Data, Vec<u8>)], close: bool) -> (Fifo, Vec<String>) {
    let frames: Vec<_> = frames.iter().map(|(h, b)| (0, *h, b.clone())).collect();
    feed_streams(1, &frames, close, TIMEOUT)
}

/// [`feed_receiver`] over `n` streams, each frame on the stream given with it.
fn feed_streams(
    n: usize,
    frames: &[(usize, Data, Vec<u8>)],
    close: bool,
    timeout: Duration,
) -> (Fifo, Vec<String>) {
    let (mut a, b) = streams(n);
    let (on_fail, seen) = failures();
    let rf = fifo();
    let rp = Proxy::start(rf.clone(), b, false, "0->1".into(), timeout, on_fail).unwrap();
    for (k, h, body) in frames {
        a[*k].write_all(&h.encode()).unwrap();
        a[*k].write_all(body).unwrap();
    }
    if close {
        for a in &a {
            a.shutdown(std::net::Shutdown::Write).unwrap();
        }
    }
    // Long enough for a failure that waits for `timeout`, when the test shortened it.
    let wait = if timeout < TIMEOUT {
        timeout
    } else {
        Duration::ZERO
    };
    let deadline = Instant::now() + Duration::from_secs(2) + wait;
    while seen.lock().unwrap().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(rp);
    let why = seen.lock().unwrap().clone();
    (rf, why)
}

fn data(lane: usize, seq: u64, bytes: usize) -> (Data, Vec<u8>) {
    (
        Data {
            lane,
            seq,
            bytes: bytes as u32,
        },
        vec![0xab; bytes],
    )
}

fn untouched(f: &Fifo) -> bool {
    (0..2).all(|lane| {
        (0..f.slots()).all(|s| {
            let (at, len) = f.slot(lane, s);
            (0..len / 8).all(|i| word(at, i).load(Ordering::Relaxed) == 0)
        }) && f.head(lane).load(Ordering::Relaxed) == 0
    })
}

#[test]
fn a_peer_that_breaks_the_protocol_fails_the_connection_and_writes_nothing() {
    // Out of order.
    let (f, why) = feed_receiver(&[data(0, 2, 64)], false);
    assert_eq!(why.len(), 1, "{why:?}");
    assert!(
        why[0].contains("slice 2 arrived on lane 0 of stream 0 where slice 1 was due"),
        "{why:?}"
    );
    assert!(why[0].contains("0->1"), "{why:?}");
    assert!(untouched(&f));
    // Larger than a slot: nothing is written past it, or at all.
    let (h, _) = data(0, 1, 0);
    let big = Data {
        bytes: SIMPLE_SLOT_BYTES as u32 + 1,
        ..h
    };
    let (f, why) = feed_receiver(&[(big, Vec::new())], false);
    assert!(why[0].contains("slots hold"), "{why:?}");
    assert!(untouched(&f));
    // LL slices are whole lines.
    let (f, why) = feed_receiver(&[data(1, 1, 24)], false);
    assert!(why[0].contains("24 bytes on lane 1"), "{why:?}");
    assert!(untouched(&f));
    // More slices than slots without a credit.
    let frames: Vec<_> = (1..=SLOTS as u64 + 1).map(|k| data(0, k, 16)).collect();
    let (f, why) = feed_receiver(&frames, false);
    assert!(why[0].contains("ignored the credits"), "{why:?}");
    assert_eq!(f.head(0).load(Ordering::Acquire), u64::from(SLOTS));
}

#[test]
fn over_several_streams_each_stream_keeps_its_order_and_the_kernel_sees_slices_in_order() {
    let d = |lane, seq| {
        let (h, b) = data(lane, seq, 32);
        (h, b)
    };
    // Stream 1 carries Simple slices 2, 4, ...: slice 1 does not belong there, nor does
    // slice 4 before slice 2; LL slices all go on stream 0.
    for (lane, seq, refused) in [
        (
            0,
            1,
            "slice 1 of lane 0 arrived on stream 1, which does not carry it",
        ),
        (
            0,
            4,
            "slice 4 arrived on lane 0 of stream 1 where slice 2 was due",
        ),
        (
            1,
            2,
            "slice 2 of lane 1 arrived on stream 1, which does not carry it",
        ),
    ] {
        let (h, b) = d(lane, seq);
        let (f, why) = feed_streams(2, &[(1, h, b)], false, TIMEOUT);
        assert!(why[0].contains(refused), "{why:?}");
        assert!(untouched(&f));
    }
    // Slice 2 without slice 1: in its slot, but never announced; the wait for slice 1
    // ends in a failure within the timeout, not a hang.
    let (h, b) = d(0, 2);
    let (f, why) = feed_streams(2, &[(1, h, b)], false, Duration::from_millis(300));
    assert!(
        why[0].contains("slice 2 of lane 0 arrived, slice 1 did not"),
        "{why:?}"
    );
    assert_eq!(f.head(0).load(Ordering::Acquire), 0);
    // Slice 2 first, then slice 1 on the other stream: both announced, in order.
    let (h2, b2) = d(0, 2);
    let (h1, b1) = d(0, 1);
    let (f, why) = feed_streams(2, &[(1, h2, b2), (0, h1, b1)], true, TIMEOUT);
    assert!(why.is_empty(), "{why:?}");
    assert_eq!(f.head(0).load(Ordering::Acquire), 2);
}

#[test]
fn a_peer_closing_mid_frame_fails_and_between_frames_does_not() {
    let (h, body) = data(0, 1, 1000);
    let (f, why) = feed_receiver(&[(h, body[..10].to_vec())], true);
    assert!(why[0].contains("closed the stream"), "{why:?}");
    assert_eq!(f.head(0).load(Ordering::Acquire), 0);
    let (f, why) = feed_receiver(&[data(0, 1, 1000), data(1, 1, 32)], true);
    assert!(why.is_empty(), "{why:?}");
    assert_eq!(f.head(0).load(Ordering::Acquire), 1);
    let (at, _) = f.slot(1, 0);
    assert_eq!(
        word(at, 3).load(Ordering::Relaxed),
        u64::from_le_bytes([0xab; 8])
    );
}

/// Makes closing `s` reset the connection (`SO_LINGER` of 0), as a killed process's
/// socket with unread bytes does.
fn reset_on_close(s: &TcpStream) {
    use std::os::fd::AsRawFd;
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a live socket; the option's value is a `linger`.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0);
}

/// A sender that sent its last slice and closed (its process gone) leaves the receiving
/// kernel's last credits with nowhere to go: the receive end closes quietly, it does not
/// fail the connection (which would abort a communicator whose peers all finished).
#[test]
fn credits_after_the_sender_closed_do_not_fail_the_receiver() {
    let (mut a, b) = loopback_pair().unwrap();
    let (on_fail, seen) = failures();
    let rf = fifo();
    let rp = Proxy::start(rf.clone(), vec![b], false, "0->1".into(), TIMEOUT, on_fail).unwrap();
    let (h, body) = data(0, 1, 1000);
    a.write_all(&h.encode()).unwrap();
    a.write_all(&body).unwrap();
    spin_until("the slice", || rf.head(0).load(Ordering::Acquire) >= 1);
    // The sender is gone before the kernel consumes the slice.
    reset_on_close(&a);
    drop(a);
    std::thread::sleep(Duration::from_millis(50));
    rf.tail(0).store(1, Ordering::Release);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        seen.lock().unwrap().is_empty(),
        "{:?}",
        seen.lock().unwrap()
    );
    assert!(!rp.failed());
    drop(rp);
}

#[test]
fn a_credit_for_slices_never_sent_fails_the_sender() {
    let (a, mut b) = loopback_pair().unwrap();
    let (on_fail, seen) = failures();
    let sf = fifo();
    let sp = Proxy::start(sf.clone(), vec![a], true, "0->1".into(), TIMEOUT, on_fail).unwrap();
    b.write_all(&Credit { lane: 1, tail: 3 }.encode()).unwrap();
    spin_until("the failure", || !seen.lock().unwrap().is_empty());
    assert!(seen.lock().unwrap()[0].contains("credit of 3 slices on lane 1"));
    assert_eq!(sf.tail(1).load(Ordering::Acquire), 0);
    drop(sp);
}

#[test]
fn a_receiver_that_stalls_mid_frame_fails_within_the_timeout() {
    let (mut a, b) = loopback_pair().unwrap();
    let (on_fail, seen) = failures();
    let rf = fifo();
    let t = Duration::from_millis(300);
    let start = Instant::now();
    let rp = Proxy::start(rf, vec![b], false, "0->1".into(), t, on_fail).unwrap();
    let (h, body) = data(0, 1, 4096);
    a.write_all(&h.encode()).unwrap();
    a.write_all(&body[..100]).unwrap();
    spin_until("the failure", || !seen.lock().unwrap().is_empty());
    assert!(start.elapsed() >= t);
    assert!(seen.lock().unwrap()[0].contains("BRAID_TIMEOUT"));
    drop(rp);
    let _: TcpStream = a;
}

// ---- The same over queue pairs of the software RDMA device ----

use super::rdma::RdmaEnd;
use braid_ib::soft::SoftDevice;

/// Both ends over `dev` with `qps` queue pairs, set up through a loopback stream as
/// across processes.
fn rdma_pair_over(
    dev: &SoftDevice,
    qps: u32,
) -> (Fifo, RdmaEnd, Fifo, RdmaEnd, Arc<Mutex<Vec<String>>>) {
    let (a, b) = loopback_pair().unwrap();
    let (on_fail, seen) = failures();
    let (sf, rf) = (fifo(), fifo());
    let (sf2, dev2, f2) = (sf.clone(), dev.clone(), on_fail.clone());
    let sender = std::thread::spawn(move || {
        RdmaEnd::start(&dev2, sf2, a, true, "0->1".into(), TIMEOUT, f2, qps).unwrap()
    });
    let re = RdmaEnd::start(
        dev,
        rf.clone(),
        b,
        false,
        "0->1".into(),
        TIMEOUT,
        on_fail,
        qps,
    )
    .unwrap();
    (sf, sender.join().unwrap(), rf, re, seen)
}

fn rdma_pair(dev: &SoftDevice) -> (Fifo, RdmaEnd, Fifo, RdmaEnd, Arc<Mutex<Vec<String>>>) {
    rdma_pair_over(dev, 1)
}

#[test]
fn over_rdma_slices_of_both_lanes_arrive_whole_and_in_order_within_the_credits() {
    rdma_both_lanes(1);
}

#[test]
fn over_several_queue_pairs_slices_still_reach_the_kernel_whole_and_in_order() {
    // Slice k goes on queue pair (k - 1) % 3; immediates of one queue pair may be
    // polled before an earlier slice's on another, and the kernel must still see 1, 2, 3.
    rdma_both_lanes(3);
}

fn rdma_both_lanes(qps: u32) {
    let dev = SoftDevice::new();
    let (sf, se, rf, re, seen) = rdma_pair_over(&dev, qps);
    let counts = [300u64, 2000];
    std::thread::scope(|s| {
        for (lane, &count) in counts.iter().enumerate() {
            let (sf, rf) = (&sf, &rf);
            s.spawn(move || kernel_send(sf, lane, count));
            s.spawn(move || kernel_recv(rf, lane, count));
        }
    });
    for (lane, &c) in counts.iter().enumerate() {
        spin_until("the last credit", || {
            sf.tail(lane).load(Ordering::Acquire) == c
        });
    }
    drop((se, re));
    assert!(
        seen.lock().unwrap().is_empty(),
        "{:?}",
        seen.lock().unwrap()
    );
}

#[test]
fn over_rdma_a_link_that_goes_down_fails_the_connection_by_name() {
    let dev = SoftDevice::new();
    let (sf, se, rf, re, seen) = rdma_pair(&dev);
    std::thread::scope(|s| {
        s.spawn(|| kernel_send(&sf, 0, 10));
        s.spawn(|| kernel_recv(&rf, 0, 10));
    });
    assert!(seen.lock().unwrap().is_empty());
    dev.break_all();
    // The next slice cannot be written.
    kernel_send_from(&sf, 0, 10, 11);
    spin_until("the failure", || !seen.lock().unwrap().is_empty());
    let why = seen.lock().unwrap()[0].clone();
    assert!(why.contains("0->1") && why.contains("retry"), "{why}");
    assert_eq!(rf.head(0).load(Ordering::Acquire), 10);
    drop((se, re));
}

#[test]
fn over_rdma_ends_with_different_fifos_refuse_to_connect() {
    let dev = SoftDevice::new();
    let (a, b) = loopback_pair().unwrap();
    let (on_fail, _) = failures();
    let small = Fifo::new(TestMem::new(fifo_len(2)), 2).unwrap();
    let d2 = dev.clone();
    let f2 = on_fail.clone();
    let t = std::thread::spawn(move || {
        RdmaEnd::start(&d2, small, a, true, "x".into(), TIMEOUT, f2, 1).map(|_| ())
    });
    let r = RdmaEnd::start(&dev, fifo(), b, false, "x".into(), TIMEOUT, on_fail, 1).map(|_| ());
    let e = r.unwrap_err();
    assert!(e.contains("2 slots per lane"), "{e}");
    assert!(t.join().unwrap().is_err());
}

#[test]
fn over_rdma_ends_with_different_queue_pair_counts_refuse_to_connect() {
    let dev = SoftDevice::new();
    let (a, b) = loopback_pair().unwrap();
    let (on_fail, _) = failures();
    let (d2, f2) = (dev.clone(), on_fail.clone());
    let t = std::thread::spawn(move || {
        RdmaEnd::start(&d2, fifo(), a, true, "x".into(), TIMEOUT, f2, 2).map(|_| ())
    });
    let r = RdmaEnd::start(&dev, fifo(), b, false, "x".into(), TIMEOUT, on_fail, 3).map(|_| ());
    let e = r.unwrap_err();
    assert!(e.contains("over 2 queue pairs, this end over 3"), "{e}");
    assert!(t.join().unwrap().is_err());
}
