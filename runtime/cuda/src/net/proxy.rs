//! The proxy of one connection end: what carries a lane's slices between a sending
//! kernel's FIFO and the receiving kernel's FIFO over a stream, as NCCL's proxy thread
//! does for its network transports.
//!
//! * **Send end.** The sending kernel writes slices into a FIFO in this host's memory and
//!   publishes `head` (and each slice's byte count) as for any connection. The process's
//!   poller thread sees `head` move and writes each new slice to the stream as a data
//!   frame; the end's reader thread takes credits off the stream and stores them in the
//!   FIFO's `tail`, which the kernel waits on for free slots.
//! * **Receive end.** The end's reader thread takes data frames off the stream into the
//!   receiving kernel's FIFO (Simple: the bytes, then `head`; LL: the lines, 8 bytes at a
//!   time, their flags telling the kernel they are there). The poller sees the kernel's
//!   `tail` move and sends it back as a credit.
//!
//! Flow control is end to end: the sending kernel's free slots are the receiving
//! kernel's, so a frame always finds its slot free (the receiver checks, since a peer is
//! untrusted). A frame that breaks the protocol, a peer that vanishes while a slice is
//! owed to it, or a stream that stalls mid-frame past the timeout abort the
//! communicator's calls through `on_fail` (its kernels then stop with an error instead
//! of waiting for their timeout). A stream that closes between frames is a peer going
//! away: nothing is owed, so nothing fails.
//!
//! **Several streams.** A connection may run over several streams (`BRAID_NET_STREAMS`, as
//! NCCL's `NCCL_NSOCKS_PERTHREAD` x `NCCL_SOCKET_NTHREADS`), so that one connection is
//! several flows (paths that balance per flow, per-flow rate limits) and the receiving
//! copies run on several threads: Simple slice `k` (1-based) goes on stream `(k - 1) % S`,
//! each stream has its own sender thread (the poller hands it the slices; the sending
//! copies then run in parallel too) and its own reader, and a slice is announced to the
//! kernel only after the one before it, so the kernel still sees its slices in order.
//! LL slices (small messages, where latency is what counts) all go on stream 0, sent by
//! the poller itself: handing them to a thread, or waiting at the receiver for a
//! predecessor on another stream, would cost more than the copy. Credits go on stream 0.
//! With one stream the poller sends everything itself.
//!
//! Dropping a proxy first forwards what its kernel already published (a send end's last
//! slices may still sit in the FIFO when the kernel has finished), then stops its threads.
//! The FIFO memory is shared with the poller, so it outlives every access.

use super::fifo::Fifo;
use super::wire::{Credit, Data, HEADER};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::health::Health;
pub use super::health::OnFail;

/// How long a blocking socket call waits before the loop around it checks for a stop.
const POLL: Duration = Duration::from_millis(50);

struct Inner {
    fifo: Fifo,
    /// The connection's streams (at least one); credits go on the first.
    streams: Vec<TcpStream>,
    send: bool,
    timeout: Duration,
    /// Closing (threads stop, failures are no longer reported), failed, and the name.
    health: Health,
    /// Send end: slices forwarded per lane (every slice up to it has gone). Receive end:
    /// slices credited per lane.
    out: [AtomicU64; 2],
    /// Send end: slices handed to their stream per lane (the poller's position).
    next: [AtomicU64; 2],
    /// Send end with several streams: Simple slices each stream's sender has sent (LL
    /// slices all go on the first stream, sent by the poller).
    sent: Vec<AtomicU64>,
    /// Send end with several streams: each stream's sender thread's queue (taken when
    /// the end closes, which ends those threads).
    queues: Mutex<Vec<mpsc::Sender<Job>>>,
    /// One writer at a time per stream (a sender thread and the poller share stream 0).
    writing: Vec<Mutex<()>>,
    /// Send end: credits received per lane. Receive end: slices received per lane.
    got: [AtomicU64; 2],
    /// Slices whose frame has started per lane (sent, or arriving): the bound a peer's
    /// count of consumed slices is checked against. Raised before the bytes move, since
    /// the consumer may finish with a slice, and say so, before the mover's own count is
    /// updated.
    started: [AtomicU64; 2],
}

/// One proxied connection end; dropping it flushes and stops it.
pub struct Proxy {
    inner: Arc<Inner>,
    /// Reader threads, and a send end's sender threads.
    threads: Vec<JoinHandle<()>>,
}

/// A Simple slice for a stream's sender thread: its frame's header and where its bytes
/// lie in the FIFO (an address: the slot stays the kernel's to rewrite only after the
/// credit for it, which follows this send).
struct Job {
    header: [u8; HEADER],
    at: usize,
    bytes: usize,
}

/// The stream that carries slice `seq` (1-based) of `lane` over `streams` streams: Simple
/// slices in turn, LL slices all on the first (see the module's comment).
pub fn stream_of(lane: usize, seq: u64, streams: usize) -> usize {
    if lane == 1 || streams <= 1 {
        0
    } else {
        ((seq - 1) % streams as u64) as usize
    }
}

enum Io {
    Done,
    /// The stream closed before the first byte.
    Closed,
    Stopped,
    Failed(String),
}

impl Inner {
    fn fail(&self, why: String) {
        self.health.fail(why);
    }

    /// Receives exactly `len` bytes at `dst`. Before the first byte it waits as long as
    /// it takes (a connection may idle between calls); once a frame started, at most
    /// the timeout.
    ///
    /// # Safety
    /// `dst..dst + len` must be writable and not referenced by Rust code meanwhile.
    unsafe fn recv_raw(&self, stream: usize, dst: *mut u8, len: usize, idle_ok: bool) -> Io {
        let fd = self.streams[stream].as_raw_fd();
        let mut done = 0;
        let mut deadline = (!idle_ok).then(|| Instant::now() + self.timeout);
        while done < len {
            if self.health.stopped() {
                return Io::Stopped;
            }
            // SAFETY: the caller's range; `done < len`.
            let n = unsafe { libc::recv(fd, dst.add(done).cast(), len - done, 0) };
            if n > 0 {
                done += n as usize;
                deadline.get_or_insert_with(|| Instant::now() + self.timeout);
                continue;
            }
            if n == 0 {
                return if done == 0 && idle_ok {
                    Io::Closed
                } else {
                    Io::Failed(format!(
                        "the peer closed the stream {done} bytes into a frame"
                    ))
                };
            }
            let e = std::io::Error::last_os_error();
            match e.kind() {
                std::io::ErrorKind::WouldBlock
                | std::io::ErrorKind::TimedOut
                | std::io::ErrorKind::Interrupted => {
                    if deadline.is_some_and(|d| Instant::now() > d) {
                        return Io::Failed(format!(
                            "no byte of a started frame for {:?} (BRAID_TIMEOUT)",
                            self.timeout
                        ));
                    }
                }
                std::io::ErrorKind::ConnectionReset if done == 0 && idle_ok => return Io::Closed,
                _ => return Io::Failed(format!("receiving: {e}")),
            }
        }
        Io::Done
    }

    /// Sends exactly `len` bytes from `src`, within the timeout.
    ///
    /// # Safety
    /// `src..src + len` must be readable and not written by anyone meanwhile.
    unsafe fn send_raw(&self, stream: usize, src: *const u8, len: usize) -> Io {
        let fd = self.streams[stream].as_raw_fd();
        let deadline = Instant::now() + self.timeout;
        let mut done = 0;
        while done < len {
            // SAFETY: the caller's range; `done < len`.
            let n = unsafe { libc::send(fd, src.add(done).cast(), len - done, libc::MSG_NOSIGNAL) };
            if n > 0 {
                done += n as usize;
                continue;
            }
            let e = std::io::Error::last_os_error();
            match e.kind() {
                std::io::ErrorKind::WouldBlock
                | std::io::ErrorKind::TimedOut
                | std::io::ErrorKind::Interrupted => {
                    if Instant::now() > deadline {
                        if self.health.stopped() {
                            return Io::Stopped;
                        }
                        return Io::Failed(format!(
                            "the peer took nothing for {:?} (BRAID_TIMEOUT)",
                            self.timeout
                        ));
                    }
                }
                _ => return Io::Failed(format!("sending: {e}")),
            }
        }
        Io::Done
    }

    /// Sends a header and `len` bytes from `body` with as few system calls as the
    /// socket allows (one, usually).
    ///
    /// # Safety
    /// As [`Inner::send_raw`] for `body..body + len`.
    unsafe fn send_frame(
        &self,
        stream: usize,
        h: &[u8; HEADER],
        body: *const u8,
        len: usize,
    ) -> Io {
        let _one_writer = self.writing[stream]
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let mut iov = [
            libc::iovec {
                iov_base: h.as_ptr() as *mut libc::c_void,
                iov_len: HEADER,
            },
            libc::iovec {
                iov_base: body as *mut libc::c_void,
                iov_len: len,
            },
        ];
        // SAFETY: a zeroed msghdr is valid; it points at the two iovecs above.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = 2;
        // SAFETY: both ranges are readable (the caller's contract, a local array).
        let fd = self.streams[stream].as_raw_fd();
        let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) };
        let n = if n < 0 { 0 } else { n as usize };
        // What did not go at once goes by the careful path (timeouts, errors).
        if n < HEADER {
            // SAFETY: the rest of the local array, then the caller's range.
            match unsafe { self.send_raw(stream, h.as_ptr().add(n), HEADER - n) } {
                Io::Done => unsafe { self.send_raw(stream, body, len) },
                other => other,
            }
        } else {
            // SAFETY: the caller's range, past what went.
            unsafe { self.send_raw(stream, body.add(n - HEADER), len - (n - HEADER)) }
        }
    }

    /// Sends a credit. A peer that closed its end (it sent its last slice, and its
    /// process may have left) takes no more credits: that is a close, not a failure; a
    /// peer that died with slices still due is named by the bootstrap's liveness, and a
    /// broken data stream by the reader.
    fn send_header(&self, h: &[u8; HEADER]) -> Io {
        // SAFETY: a local array.
        match unsafe { self.send_raw(0, h.as_ptr(), HEADER) } {
            Io::Failed(_) if self.peer_closed() => Io::Closed,
            other => other,
        }
    }

    /// Whether the peer closed or reset the connection (stream 0 no longer established).
    fn peer_closed(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            !established(&self.streams[0])
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }

    /// The poller's turn: forwards published slices (send end) or returns credits
    /// (receive end). True when it moved anything.
    fn poll(&self) -> bool {
        if self.health.failed() {
            return false;
        }
        let r = if self.send {
            self.forward()
        } else {
            self.credit()
        };
        match r {
            Ok(busy) => busy,
            Err(why) => {
                self.fail(why);
                false
            }
        }
    }

    fn forward(&self) -> Result<bool, String> {
        let mut busy = false;
        let streams = self.streams.len();
        for lane in 0..2 {
            let mut f = self.next[lane].load(Ordering::Relaxed);
            let Some(head) = self.fifo.published(lane, f, &self.got[lane])? else {
                continue;
            };
            busy = true;
            while f < head {
                let (at, bytes) = self.fifo.announced(lane, f + 1)?;
                let h = Data {
                    lane,
                    bytes,
                    seq: f + 1,
                };
                self.started[lane].store(f + 1, Ordering::Release);
                let stream = stream_of(lane, f + 1, streams);
                if streams > 1 && lane == 0 {
                    // The stream's sender thread copies it out, beside the others.
                    let job = Job {
                        header: h.encode(),
                        at: at as usize,
                        bytes: bytes as usize,
                    };
                    let queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
                    match queues.get(stream) {
                        Some(q) if q.send(job).is_ok() => {}
                        // Closing: the senders are gone.
                        _ => return Ok(busy),
                    }
                } else {
                    // SAFETY: inside the slot; the kernel writes this slot again only after
                    // the credit for it, which follows this send.
                    let r = unsafe { self.send_frame(stream, &h.encode(), at, bytes as usize) };
                    match r {
                        Io::Done => {}
                        Io::Stopped | Io::Closed => return Ok(busy),
                        Io::Failed(why) => return Err(why),
                    }
                    self.out[lane].store(f + 1, Ordering::Release);
                }
                f += 1;
                self.next[lane].store(f, Ordering::Relaxed);
            }
        }
        Ok(busy)
    }

    /// A send end's sender thread for stream `stream`: sends the Simple slices the poller
    /// hands it, in order, and raises the lane's count of forwarded slices to the longest
    /// run that every stream has sent.
    fn send_slices(&self, stream: usize, jobs: mpsc::Receiver<Job>) -> Result<(), String> {
        let streams = self.streams.len() as u64;
        while let Ok(job) = jobs.recv() {
            // SAFETY: the job's slot, as `forward` found it; see `Job`.
            let r = unsafe { self.send_frame(stream, &job.header, job.at as *const u8, job.bytes) };
            match r {
                Io::Done => {}
                Io::Stopped | Io::Closed => return Ok(()),
                Io::Failed(why) => return Err(why),
            }
            self.sent[stream].fetch_add(1, Ordering::AcqRel);
            // Stream j's first unsent slice is sent_j * S + j + 1: every slice before the
            // earliest of those has gone.
            let prefix = self
                .sent
                .iter()
                .enumerate()
                .map(|(j, c)| c.load(Ordering::Acquire) * streams + j as u64)
                .min()
                .unwrap_or(0);
            self.out[0].fetch_max(prefix, Ordering::AcqRel);
        }
        Ok(())
    }

    fn credit(&self) -> Result<bool, String> {
        let mut busy = false;
        for lane in 0..2 {
            let tail = self.fifo.tail(lane).load(Ordering::Acquire);
            if tail <= self.out[lane].load(Ordering::Relaxed) {
                continue;
            }
            busy = true;
            let got = self.started[lane].load(Ordering::Acquire);
            if tail > got {
                return Err(format!(
                    "the receiving kernel consumed {tail} slices of lane {lane}, {got} arrived"
                ));
            }
            match self.send_header(&Credit { lane, tail }.encode()) {
                Io::Done => self.out[lane].store(tail, Ordering::Release),
                Io::Stopped | Io::Closed => return Ok(busy),
                Io::Failed(why) => return Err(why),
            }
        }
        Ok(busy)
    }

    fn read_header(&self, stream: usize) -> Result<Option<[u8; HEADER]>, String> {
        let mut h = [0u8; HEADER];
        // SAFETY: a local array.
        match unsafe { self.recv_raw(stream, h.as_mut_ptr(), HEADER, true) } {
            Io::Done => Ok(Some(h)),
            Io::Closed | Io::Stopped => Ok(None),
            Io::Failed(why) => Err(why),
        }
    }

    /// Send end's reader: credits into the FIFO's `tail`.
    fn take_credits(&self) -> Result<(), String> {
        while let Some(h) = self.read_header(0)? {
            let c = Credit::decode(&h)?;
            let (got, sent) = (
                self.got[c.lane].load(Ordering::Acquire),
                self.started[c.lane].load(Ordering::Acquire),
            );
            if c.tail < got || c.tail > sent {
                return Err(format!(
                    "a credit of {} slices on lane {} after {got}, with {sent} sent",
                    c.tail, c.lane
                ));
            }
            self.got[c.lane].store(c.tail, Ordering::Release);
            self.fifo.tail(c.lane).store(c.tail, Ordering::Release);
        }
        Ok(())
    }

    /// Receive end's reader of stream `stream`: its data frames into the FIFO.
    fn take_data(&self, stream: usize) -> Result<(), String> {
        let mut lines: Vec<u64> = Vec::new();
        let streams = self.streams.len();
        // The next slice per lane this stream carries (see `stream_of`).
        let mut due = [stream as u64 + 1, 1];
        while let Some(h) = self.read_header(stream)? {
            let d = Data::decode(&h)?;
            let lane = d.lane;
            if stream_of(lane, d.seq, streams) != stream {
                return Err(format!(
                    "slice {} of lane {lane} arrived on stream {stream}, which does not carry it",
                    d.seq
                ));
            }
            if d.seq != due[lane] {
                return Err(format!(
                    "slice {} arrived on lane {lane} of stream {stream} where slice {} was due",
                    d.seq, due[lane]
                ));
            }
            due[lane] += if lane == 0 { streams as u64 } else { 1 };
            let bytes = d.bytes as usize;
            let at = self.fifo.admit(lane, d.seq, bytes)?;
            self.started[lane].fetch_max(d.seq, Ordering::AcqRel);
            if lane == 0 {
                // SAFETY: inside the slot (bytes <= its length), which the kernel does not
                // read until `head` says so below.
                match unsafe { self.recv_raw(stream, at, bytes, false) } {
                    Io::Done => {}
                    Io::Stopped => return Ok(()),
                    Io::Closed => unreachable!("only before a frame"),
                    Io::Failed(why) => return Err(why),
                }
            } else {
                // LL: the kernel polls each 8-byte half-line's flag, so every half-line
                // is stored whole.
                lines.clear();
                lines.resize(bytes / 8, 0);
                // SAFETY: a local buffer of `bytes` bytes.
                match unsafe { self.recv_raw(stream, lines.as_mut_ptr().cast(), bytes, false) } {
                    Io::Done => {}
                    Io::Stopped => return Ok(()),
                    Io::Closed => unreachable!("only before a frame"),
                    Io::Failed(why) => return Err(why),
                }
                for (i, w) in lines.iter().enumerate() {
                    // SAFETY: inside the slot, 8-byte aligned (slots are 16-aligned).
                    let word = unsafe { &*(at.add(8 * i) as *const AtomicU64) };
                    word.store(*w, Ordering::Relaxed);
                }
            }
            // In order: after the slice before it, which another stream may carry.
            if !self.wait_turn(lane, d.seq)? {
                return Ok(());
            }
            self.fifo.arrived(lane, d.seq);
            self.got[lane].store(d.seq, Ordering::Release);
        }
        Ok(())
    }

    /// Waits until slice `seq - 1` of `lane` has been announced (false: the end is
    /// closing). The sender wrote that slice before this one, so only a broken or stalled
    /// stream keeps it away, and then the timeout fails the connection.
    fn wait_turn(&self, lane: usize, seq: u64) -> Result<bool, String> {
        if self.got[lane].load(Ordering::Acquire) + 1 == seq {
            return Ok(true);
        }
        let deadline = Instant::now() + self.timeout;
        let mut spins = 0u32;
        while self.got[lane].load(Ordering::Acquire) + 1 != seq {
            if self.health.stopped() || self.health.failed() {
                return Ok(false);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "slice {seq} of lane {lane} arrived, slice {} did not within {:?} \
                     (BRAID_TIMEOUT)",
                    seq - 1,
                    self.timeout
                ));
            }
            spins += 1;
            if spins < 1000 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        Ok(true)
    }
}

impl Proxy {
    /// Starts the proxy of a connection end: `send` (the kernel sends into `fifo`) or
    /// receive (the kernel receives from `fifo`), over `streams` to the other end's proxy
    /// (the same streams in the same order on both ends; at least one).
    pub fn start(
        fifo: Fifo,
        streams: Vec<TcpStream>,
        send: bool,
        what: String,
        timeout: Duration,
        on_fail: OnFail,
    ) -> std::io::Result<Proxy> {
        if streams.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a network connection needs a stream",
            ));
        }
        for stream in &streams {
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(POLL))?;
            stream.set_write_timeout(Some(POLL))?;
        }
        let n = streams.len();
        let inner = Arc::new(Inner {
            fifo,
            streams,
            send,
            timeout,
            health: Health::new(what, on_fail),
            out: Default::default(),
            next: Default::default(),
            sent: (0..n).map(|_| Default::default()).collect(),
            writing: (0..n).map(|_| Mutex::new(())).collect(),
            queues: Mutex::new(Vec::new()),
            got: Default::default(),
            started: Default::default(),
        });
        let mut proxy = Proxy {
            inner: inner.clone(),
            threads: Vec::new(),
        };
        if send && n > 1 {
            // One sender thread per stream.
            let mut queues = Vec::with_capacity(n);
            for stream in 0..n {
                let (tx, rx) = mpsc::channel();
                queues.push(tx);
                let me = inner.clone();
                let sender = std::thread::Builder::new()
                    .name("braid-net-send".into())
                    .stack_size(256 << 10)
                    .spawn(move || {
                        if let Err(why) = me.send_slices(stream, rx) {
                            me.fail(why);
                        }
                    })?;
                proxy.threads.push(sender);
            }
            *inner.queues.lock().unwrap_or_else(|p| p.into_inner()) = queues;
        }
        // A send end reads credits on its first stream; a receive end data on each.
        let readers = if send { 1 } else { inner.streams.len() };
        for stream in 0..readers {
            let me = inner.clone();
            let reader = std::thread::Builder::new()
                .name(
                    if send {
                        "braid-net-credits"
                    } else {
                        "braid-net-data"
                    }
                    .into(),
                )
                .stack_size(256 << 10)
                .spawn(move || {
                    let r = if me.send {
                        me.take_credits()
                    } else {
                        me.take_data(stream)
                    };
                    if let Err(why) = r {
                        me.fail(why);
                    }
                })?;
            proxy.threads.push(reader);
        }
        // Without a poller the proxy drops (and its reader stops) here.
        register(inner)?;
        Ok(proxy)
    }

    /// Whether the connection failed.
    pub fn failed(&self) -> bool {
        self.inner.health.failed()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // A send end first forwards what its kernel published, then waits until the
        // peer's TCP has it all: closing a socket with unread credits in it resets the
        // connection, which discards what is still in flight (a sender finishing before
        // its receiver, on a link that loses packets, would cut off its last slices).
        let i = &self.inner;
        let deadline = Instant::now() + i.timeout;
        i.health
            .close(i.timeout, i.send.then_some((&i.fifo, &i.out)));
        if i.send && !i.health.failed() {
            for stream in &i.streams {
                wait_acknowledged(stream, deadline, || i.health.failed());
            }
        }
        for stream in &self.inner.streams {
            let _ = stream.shutdown(Shutdown::Both);
        }
        // The sender threads end when their queues go.
        self.inner
            .queues
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        for r in self.threads.drain(..) {
            let _ = r.join();
        }
    }
}

/// Waits until the peer's TCP has acknowledged everything written to `stream` (Linux:
/// `TIOCOUTQ`, the bytes not yet acknowledged, is 0), the connection leaves the
/// established state (the peer reset it or closed its end: what is queued will never be
/// acknowledged, and a reset socket keeps counting it), `give_up` says so, or `deadline`
/// passes; whether it was acknowledged. Elsewhere it cannot tell and returns false at once.
pub fn wait_acknowledged(
    stream: &TcpStream,
    deadline: Instant,
    give_up: impl Fn() -> bool,
) -> bool {
    #[cfg(target_os = "linux")]
    loop {
        let mut queued: libc::c_int = 0;
        // SAFETY: a live socket; TIOCOUTQ writes one int.
        let r = unsafe { libc::ioctl(stream.as_raw_fd(), libc::TIOCOUTQ, &mut queued) };
        if r != 0 {
            return false;
        }
        if queued == 0 {
            return true;
        }
        if !established(stream) || give_up() || Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (stream, deadline, give_up);
        false
    }
}

/// Whether the connection is in TCP's established state (Linux: `TCP_INFO`).
#[cfg(target_os = "linux")]
fn established(stream: &TcpStream) -> bool {
    // SAFETY: `tcp_info` is plain integers; all zeros is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: a live socket; the kernel writes at most `len` bytes into `info`.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    r == 0 && info.tcpi_state == TCP_ESTABLISHED
}

/// `tcp_info.tcpi_state` of an established connection (Linux's `TCP_ESTABLISHED`).
#[cfg(target_os = "linux")]
const TCP_ESTABLISHED: u8 = 1;

/// What a poller drives: one connection end's turn (true when it moved anything), and
/// whether the end has closed (the poller then lets it go).
pub trait Pollable: Send + Sync {
    fn poll(&self) -> bool;
    fn stopped(&self) -> bool;
}

impl Pollable for Inner {
    fn poll(&self) -> bool {
        Inner::poll(self)
    }
    fn stopped(&self) -> bool {
        self.health.stopped()
    }
}

/// Hands `end` to one of the process's pollers (started on first use).
pub fn register(end: Arc<dyn Pollable>) -> std::io::Result<()> {
    poller()?.add(end);
    Ok(())
}

/// One of the process's pollers: a thread that watches its proxied ends' counters and
/// does their writes. It spins while there is traffic and backs off to short sleeps when
/// there has been none for a while. Ends are dealt to the pollers in turn, so that the
/// connections of one call move in parallel.
struct Poller {
    ends: Mutex<Vec<Arc<dyn Pollable>>>,
    changed: AtomicBool,
    wake: Condvar,
}

/// Idle time after which the poller sleeps between rounds.
const SPIN_FOR: Duration = Duration::from_millis(20);
const IDLE_SLEEP: Duration = Duration::from_micros(50);

/// Pollers per process: a quarter of the CPUs, 1 to 4.
fn pollers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 4).clamp(1, 4))
}

/// The poller the next end goes to (each started on first use; they live as long as
/// the process, idle when no connection is open).
fn poller() -> std::io::Result<&'static Poller> {
    static ALL: OnceLock<Mutex<Vec<Option<&'static Poller>>>> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let all = ALL.get_or_init(|| Mutex::new(vec![None; pollers()]));
    let mut all = all.lock().unwrap_or_else(|p| p.into_inner());
    let i = NEXT.fetch_add(1, Ordering::Relaxed) as usize % all.len();
    if let Some(p) = all[i] {
        return Ok(p);
    }
    let p: &'static Poller = Box::leak(Box::new(Poller {
        ends: Mutex::new(Vec::new()),
        changed: AtomicBool::new(false),
        wake: Condvar::new(),
    }));
    std::thread::Builder::new()
        .name(format!("braid-net-poller-{i}"))
        .spawn(move || p.run())?;
    all[i] = Some(p);
    Ok(p)
}

impl Poller {
    fn add(&self, e: Arc<dyn Pollable>) {
        self.ends.lock().unwrap().push(e);
        self.changed.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    fn run(&self) {
        let mut mine: Vec<Arc<dyn Pollable>> = Vec::new();
        let mut last_busy = Instant::now();
        loop {
            if self.changed.swap(false, Ordering::AcqRel) {
                let mut all = self.ends.lock().unwrap();
                all.retain(|e| !e.stopped());
                mine = all.clone();
            }
            if mine.is_empty() {
                let all = self.ends.lock().unwrap();
                if all.is_empty() {
                    let _ = self.wake.wait_timeout(all, Duration::from_millis(200));
                }
                continue;
            }
            let mut busy = false;
            let mut gone = false;
            for e in &mine {
                if e.stopped() {
                    gone = true;
                } else {
                    busy |= e.poll();
                }
            }
            if gone {
                self.changed.store(true, Ordering::Release);
            }
            if busy {
                last_busy = Instant::now();
            } else if last_busy.elapsed() > SPIN_FOR {
                std::thread::sleep(IDLE_SLEEP);
            } else {
                std::hint::spin_loop();
            }
        }
    }
}
