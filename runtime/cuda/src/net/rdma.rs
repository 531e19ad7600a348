//! The network transport over RDMA queue pairs (InfiniBand, RoCE; the software device in
//! tests): the same FIFOs and kernels as the stream proxy (`proxy.rs`), but a slice moves
//! by one RDMA write from the sending side's FIFO slot straight into the receiving side's,
//! with an immediate value that names it, as NCCL's IB transport does.
//!
//! * **Setup.** Each side registers its memory (the receiving side only its FIFO's slots,
//!   so a peer can write nothing else; the sending side its FIFO, and a small pad that
//!   credits target), then the two exchange endpoints and keys over a stream (a bootstrap
//!   link) and connect their queue pairs. Receives are posted for every immediate that can
//!   be in flight.
//! * **Send end** (the poller's turn): each slice the kernel published becomes one write
//!   into the peer's slot for it, immediate `(lane, seq)`; completions mark it forwarded;
//!   credits arrive as zero-length writes whose immediate carries the receiving kernel's
//!   `tail`, checked against what was sent before it reaches the FIFO's `tail`.
//! * **Receive end**: each immediate is checked (order, size, free slots) before the
//!   slice is announced (`head` for Simple; LL lines carry their flags already); the
//!   kernel's `tail` goes back as a credit.
//!
//! * **Several queue pairs** (`BRAID_NET_STREAMS`, as NCCL's
//!   `NCCL_IB_QPS_PER_CONNECTION`): slice `k` goes on queue pair `(k - 1) % Q`, each with
//!   its own registration and keys; each queue pair keeps its slices in order, and the
//!   receiving end announces a slice only after the one before it. Credits use the first.
//!
//! Any failed completion or check aborts the communicator through `on_fail`, naming the
//! connection and the device's reason.

use super::fifo::{slot_bytes, Fifo};
use super::health::{Health, OnFail};
use super::proxy::{register, Pollable};
use crate::clique::{lane_len, LANE_HEADER};
use crate::kernel::Lane;
use braid_ib::rdma::{Completion, Device, Endpoint, MrKeys, QueuePair};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Immediate values: bit 31 marks a credit, bit 30 the lane, the rest the low 30 bits of
/// the sequence number (data) or of `tail` (credit).
const CREDIT: u32 = 1 << 31;
const LANE: u32 = 1 << 30;
const LOW: u32 = LANE - 1;

fn imm(credit: bool, lane: usize, n: u64) -> u32 {
    (if credit { CREDIT } else { 0 }) | (if lane == 1 { LANE } else { 0 }) | (n as u32 & LOW)
}

/// The full count whose low bits are `low`, at or after `last` and less than 2^29 past it.
fn widen(last: u64, low: u32) -> u64 {
    last + (u64::from(low.wrapping_sub(last as u32) & LOW))
}

/// What one side tells the other per queue pair: its endpoint, slots, queue pairs, and
/// where the peer may write (per lane: the receiving side's slots; the sending side's
/// credit pad twice).
const HELLO: usize = Endpoint::BYTES + 8 + 2 * 12;

struct Hello {
    ep: Endpoint,
    slots: u32,
    qps: u32,
    at: [(u64, u32); 2],
}

impl Hello {
    fn encode(&self) -> [u8; HELLO] {
        let mut b = [0u8; HELLO];
        b[..Endpoint::BYTES].copy_from_slice(&self.ep.encode());
        let mut o = Endpoint::BYTES;
        b[o..o + 4].copy_from_slice(&self.slots.to_le_bytes());
        b[o + 4..o + 8].copy_from_slice(&self.qps.to_le_bytes());
        o += 8;
        for (addr, key) in self.at {
            b[o..o + 8].copy_from_slice(&addr.to_le_bytes());
            b[o + 8..o + 12].copy_from_slice(&key.to_le_bytes());
            o += 12;
        }
        b
    }

    fn decode(b: &[u8; HELLO]) -> Result<Hello, String> {
        let ep = Endpoint::decode(&b[..Endpoint::BYTES]).map_err(|e| e.0)?;
        let mut o = Endpoint::BYTES;
        let slots = u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let qps = u32::from_le_bytes(b[o + 4..o + 8].try_into().unwrap());
        o += 8;
        let mut at = [(0u64, 0u32); 2];
        for a in &mut at {
            *a = (
                u64::from_le_bytes(b[o..o + 8].try_into().unwrap()),
                u32::from_le_bytes(b[o + 8..o + 12].try_into().unwrap()),
            );
            o += 12;
        }
        Ok(Hello { ep, slots, qps, at })
    }
}

/// One queue pair of a connection end.
struct Qp {
    qp: Box<dyn QueuePair>,
    /// This side's key for the queue pair (sources of a send end's writes).
    local: MrKeys,
    /// Where this side writes: per lane, the peer's slot 0 and key (send end), or the
    /// peer's credit pad (receive end).
    remote: [(u64, u32); 2],
}

/// What only the poller's turn touches.
#[derive(Default)]
struct Turn {
    completions: Vec<Completion>,
    /// Send end: per lane and queue pair, the last slice whose write completed.
    /// Receive end: per lane and queue pair, the next slice due on it.
    mark: [Vec<u64>; 2],
    /// Receive end: slices arrived out of order, not yet announced.
    early: [InOrder; 2],
}

/// Slices that arrive out of order (each queue pair keeps its own in order), announced
/// in order.
#[derive(Default)]
struct InOrder {
    early: Vec<u64>,
}

impl InOrder {
    /// Slice `seq` arrived with `got` announced so far: announce up to the returned count
    /// (`got` itself while a slice before `seq` is missing).
    fn arrive(&mut self, got: u64, seq: u64) -> u64 {
        if seq != got + 1 {
            self.early.push(seq);
            return got;
        }
        let mut got = seq;
        while let Some(i) = self.early.iter().position(|&s| s == got + 1) {
            self.early.swap_remove(i);
            got += 1;
        }
        got
    }
}

struct Inner {
    // Dropped first: the queue pairs deregister the memory below before it can go.
    qps: Vec<Qp>,
    fifo: Fifo,
    /// The sending side's credit target (written by the peer's zero-length writes only).
    _pad: Option<Box<[u64; 2]>>,
    send: bool,
    health: Health,
    /// Send end: slices whose write completed, all before them too. Receive end: slices
    /// credited.
    out: [AtomicU64; 2],
    /// Send end: credits received. Receive end: slices announced.
    got: [AtomicU64; 2],
    /// Send end: slices whose write was posted.
    started: [AtomicU64; 2],
    turn: Mutex<Turn>,
}

/// One connection end carried by a queue pair; dropping it flushes and stops it.
pub struct RdmaEnd {
    inner: Arc<Inner>,
    timeout: Duration,
}

impl RdmaEnd {
    /// Sets up the end over `stream` (to the other end, which calls this too) on `device`
    /// and hands it to a poller.
    ///
    /// One call does the whole setup, which waits for the peer's; a process with several
    /// ends uses [`Setup`]'s phases instead, each over all its ends, so that no end waits
    /// for a peer that waits for another end of this process.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        device: &dyn Device,
        fifo: Fifo,
        stream: TcpStream,
        send: bool,
        what: String,
        timeout: Duration,
        on_fail: OnFail,
        qps: u32,
    ) -> Result<RdmaEnd, String> {
        Setup::offer(device, fifo, stream, send, what, timeout, on_fail, qps)?
            .connect()?
            .start()
    }

    pub fn failed(&self) -> bool {
        self.inner.health.failed()
    }
}

/// An end being set up, in three phases that only write, then read: [`Setup::offer`]
/// (queue pair, memory, endpoint sent), [`Setup::connect`] (the peer's endpoint read,
/// connected, receives posted, ready sent), [`Setup::start`] (the peer's ready read,
/// polling).
pub struct Setup {
    qps: Vec<Qp>,
    fifo: Fifo,
    pad: Option<Box<[u64; 2]>>,
    stream: TcpStream,
    send: bool,
    what: String,
    timeout: Duration,
    on_fail: OnFail,
}

impl Setup {
    /// Makes the end's `qps` queue pairs (at least one), registers its memory with each
    /// and sends their endpoints.
    #[allow(clippy::too_many_arguments)]
    pub fn offer(
        device: &dyn Device,
        fifo: Fifo,
        mut stream: TcpStream,
        send: bool,
        what: String,
        timeout: Duration,
        on_fail: OnFail,
        qps: u32,
    ) -> Result<Setup, String> {
        let n = fifo.slots();
        let qps = qps.max(1);
        let whole = fifo.slot(0, 0).0 as usize - LANE_HEADER;
        debug_assert_eq!(
            fifo.slot(1, 0).0 as usize - whole,
            lane_len(Lane::Simple, n) + LANE_HEADER
        );
        // The sending side's credit target, shared by its queue pairs.
        let mut pad = send.then(|| Box::new([0u64; 2]));
        let mut made = Vec::with_capacity(qps as usize);
        let mut hellos = Vec::with_capacity(qps as usize * HELLO);
        for _ in 0..qps {
            let qp = device
                .queue_pair(4 * n + 4)
                .map_err(|e| format!("{}: {e}", device.name()))?;
            let mut local = None;
            let at = match pad.as_mut() {
                Some(p) => {
                    // The sources of this end's writes. SAFETY: the FIFO's memory lives in
                    // `fifo` (an Arc) in the end, dropped after the queue pairs (field
                    // order).
                    let len = super::fifo::fifo_len(n);
                    local = Some(unsafe { qp.register(whole as *mut u8, len) }.map_err(|e| e.0)?);
                    // SAFETY: the pad is boxed in the end, dropped after the queue pairs.
                    let k = unsafe { qp.register(p.as_mut_ptr().cast(), 16) }.map_err(|e| e.0)?;
                    let a = p.as_ptr() as u64;
                    [(a, k.rkey), (a, k.rkey)]
                }
                None => {
                    let mut at = [(0, 0); 2];
                    for (lane, a) in at.iter_mut().enumerate() {
                        let (p, _) = fifo.slot(lane, 0);
                        let bytes = n as usize * slot_bytes(lane);
                        // SAFETY: the lane's slots, inside the FIFO (as above).
                        // Only the slots: a peer can overwrite slice data, never a counter.
                        let k = unsafe { qp.register(p, bytes) }.map_err(|e| e.0)?;
                        local.get_or_insert(k);
                        *a = (p as u64, k.rkey);
                    }
                    at
                }
            };
            let mine = Hello {
                ep: qp.endpoint(),
                slots: n,
                qps,
                at,
            };
            hellos.extend_from_slice(&mine.encode());
            made.push(Qp {
                qp,
                local: local.expect("registered above"),
                remote: [(0, 0); 2],
            });
        }
        stream
            .set_read_timeout(Some(timeout))
            .and_then(|_| stream.write_all(&hellos))
            .map_err(|e| format!("sending the queue pairs' endpoints: {e}"))?;
        Ok(Setup {
            qps: made,
            fifo,
            pad,
            stream,
            send,
            what,
            timeout,
            on_fail,
        })
    }

    pub fn connect(mut self) -> Result<Setup, String> {
        let n = self.fifo.slots();
        let qps = self.qps.len() as u32;
        for q in self.qps.iter_mut() {
            let mut b = [0u8; HELLO];
            self.stream
                .read_exact(&mut b)
                .map_err(|e| format!("receiving the peer's queue pair endpoint: {e}"))?;
            let theirs = Hello::decode(&b)?;
            if theirs.slots != n {
                return Err(format!(
                    "the peer's FIFO has {} slots per lane, this one {n}",
                    theirs.slots
                ));
            }
            if theirs.qps != qps {
                return Err(format!(
                    "the peer runs the connection over {} queue pairs, this end over {qps}",
                    theirs.qps
                ));
            }
            q.qp.connect(&theirs.ep).map_err(|e| e.0)?;
            for i in 0..2 * u64::from(n) + 2 {
                q.qp.post_recv(i).map_err(|e| e.0)?;
            }
            q.remote = theirs.at;
        }
        // Both sides post their receives before either writes.
        self.stream
            .write_all(&[1])
            .map_err(|e| format!("telling the peer this queue pair is ready: {e}"))?;
        Ok(self)
    }

    pub fn start(mut self) -> Result<RdmaEnd, String> {
        self.stream
            .read_exact(&mut [0u8; 1])
            .map_err(|e| format!("waiting for the peer's queue pair: {e}"))?;
        let k = self.qps.len() as u64;
        let turn = Turn {
            completions: Vec::new(),
            // Send end: nothing completed; receive end: queue pair q's first slice q + 1.
            mark: std::array::from_fn(|_| {
                (0..k).map(|q| if self.send { 0 } else { q + 1 }).collect()
            }),
            early: Default::default(),
        };
        let inner = Arc::new(Inner {
            qps: self.qps,
            fifo: self.fifo,
            _pad: self.pad,
            send: self.send,
            health: Health::new(format!("{} (RDMA)", self.what), self.on_fail),
            out: Default::default(),
            got: Default::default(),
            started: Default::default(),
            turn: Mutex::new(turn),
        });
        register(inner.clone()).map_err(|e| format!("starting a network poller: {e}"))?;
        Ok(RdmaEnd {
            inner,
            timeout: self.timeout,
        })
    }
}

impl Drop for RdmaEnd {
    fn drop(&mut self) {
        // A send end first forwards what its kernel published.
        let i = &self.inner;
        i.health
            .close(self.timeout, i.send.then_some((&i.fifo, &i.out)));
    }
}

impl Inner {
    fn turn(&self) -> Result<bool, String> {
        let mut t = self.turn.lock().unwrap_or_else(|p| p.into_inner());
        let t = &mut *t;
        let mut busy = false;
        for (q, path) in self.qps.iter().enumerate() {
            t.completions.clear();
            path.qp.poll(&mut t.completions).map_err(|e| e.0)?;
            busy |= !t.completions.is_empty();
            for i in 0..t.completions.len() {
                let c = &t.completions[i];
                if let Err(why) = &c.status {
                    return Err(why.clone());
                }
                let wr_id = c.wr_id;
                match c.recv {
                    Some((v, bytes)) => {
                        self.arrived(q, v, bytes, &mut t.mark, &mut t.early)?;
                        path.qp.post_recv(wr_id).map_err(|e| e.0)?;
                    }
                    None if self.send => {
                        // Completions of one queue pair come in posting order: this
                        // write's slice is out, and every slice is whose queue pairs all
                        // completed past it.
                        let lane = (wr_id >> 62) as usize;
                        t.mark[lane][q] = wr_id & ((1 << 62) - 1);
                        let k = self.qps.len() as u64;
                        let mut out = self.out[lane].load(Ordering::Relaxed);
                        while t.mark[lane][(out % k) as usize] > out {
                            out += 1;
                        }
                        self.out[lane].store(out, Ordering::Release);
                    }
                    None => {}
                }
            }
        }
        busy |= if self.send {
            self.forward()?
        } else {
            self.credit()?
        };
        Ok(busy)
    }

    /// An immediate arrived on queue pair `q`: a credit (send end) or a slice (receive
    /// end; `due` the next slice per lane and queue pair, `early` those that came before
    /// the slices ahead of them).
    fn arrived(
        &self,
        q: usize,
        v: u32,
        bytes: u32,
        due: &mut [Vec<u64>; 2],
        early: &mut [InOrder; 2],
    ) -> Result<(), String> {
        let lane = usize::from(v & LANE != 0);
        if (v & CREDIT != 0) != self.send {
            return Err(format!(
                "an immediate {v:#x} of the wrong kind for this end"
            ));
        }
        if self.send {
            let got = self.got[lane].load(Ordering::Relaxed);
            let tail = widen(got, v & LOW);
            let sent = self.started[lane].load(Ordering::Acquire);
            if tail > sent {
                return Err(format!(
                    "a credit of {tail} slices on lane {lane}, with {sent} sent"
                ));
            }
            self.got[lane].store(tail, Ordering::Release);
            self.fifo.tail(lane).store(tail, Ordering::Release);
            return Ok(());
        }
        let want = due[lane][q];
        if v & LOW != want as u32 & LOW {
            return Err(format!(
                "slice {} (low bits) arrived on lane {lane} of queue pair {q} where slice \
                 {want} was due",
                v & LOW
            ));
        }
        due[lane][q] += self.qps.len() as u64;
        // The bytes are already in the slot (the write precedes its immediate); a slice
        // that breaks the protocol is refused before the kernel is told.
        self.fifo.admit(lane, want, bytes as usize)?;
        // Announced in order: this one, and those that came early behind it.
        let got = self.got[lane].load(Ordering::Relaxed);
        let upto = early[lane].arrive(got, want);
        if upto > got {
            self.fifo.arrived(lane, upto);
            self.got[lane].store(upto, Ordering::Release);
        }
        Ok(())
    }

    fn forward(&self) -> Result<bool, String> {
        let mut busy = false;
        for lane in 0..2 {
            let mut f = self.started[lane].load(Ordering::Relaxed);
            let Some(head) = self.fifo.published(lane, f, &self.got[lane])? else {
                continue;
            };
            busy = true;
            while f < head {
                let (at, bytes) = self.fifo.announced(lane, f + 1)?;
                let slot = f % u64::from(self.fifo.slots());
                let path = &self.qps[(f % self.qps.len() as u64) as usize];
                let (base, rkey) = path.remote[lane];
                let to = base + slot * slot_bytes(lane) as u64;
                let id = ((lane as u64) << 62) | (f + 1);
                // SAFETY: the slot lies in the registered FIFO; the kernel writes it again
                // only after the credit for it, which follows this write's delivery.
                unsafe {
                    path.qp.write(
                        id,
                        at,
                        bytes,
                        path.local.lkey,
                        to,
                        rkey,
                        Some(imm(false, lane, f + 1)),
                    )
                }
                .map_err(|e| e.0)?;
                f += 1;
                self.started[lane].store(f, Ordering::Release);
            }
        }
        Ok(busy)
    }

    fn credit(&self) -> Result<bool, String> {
        let n = u64::from(self.fifo.slots());
        let mut busy = false;
        for lane in 0..2 {
            let tail = self.fifo.tail(lane).load(Ordering::Acquire);
            if tail <= self.out[lane].load(Ordering::Relaxed) {
                continue;
            }
            busy = true;
            // The kernel may consume an LL slice as soon as its lines land, before its
            // immediate is polled here: up to a FIFO's worth ahead.
            let got = self.got[lane].load(Ordering::Acquire);
            if tail > got + n {
                return Err(format!(
                    "the receiving kernel consumed {tail} slices of lane {lane}, {got} arrived"
                ));
            }
            // Credits on the first queue pair.
            let path = &self.qps[0];
            let (pad, rkey) = path.remote[lane];
            // SAFETY: a zero-length write reads no local memory.
            unsafe {
                path.qp.write(
                    u64::MAX,
                    std::ptr::null(),
                    0,
                    path.local.lkey,
                    pad,
                    rkey,
                    Some(imm(true, lane, tail)),
                )
            }
            .map_err(|e| e.0)?;
            self.out[lane].store(tail, Ordering::Release);
        }
        Ok(busy)
    }
}

impl Pollable for Inner {
    fn poll(&self) -> bool {
        if self.health.failed() {
            return false;
        }
        match self.turn() {
            Ok(busy) => busy,
            Err(why) => {
                self.health.fail(why);
                false
            }
        }
    }
    fn stopped(&self) -> bool {
        self.health.stopped()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_from_several_queue_pairs_are_announced_in_order() {
        let mut o = InOrder::default();
        let mut got = 0;
        let mut announced = Vec::new();
        for seq in [2, 3, 1, 6, 4, 5, 7] {
            let upto = o.arrive(got, seq);
            announced.push(upto);
            got = upto;
        }
        assert_eq!(announced, [0, 0, 3, 3, 4, 6, 7]);
        assert!(o.early.is_empty());
    }

    #[test]
    fn immediates_carry_kind_lane_and_low_bits_and_widen_back() {
        let v = imm(true, 1, (5 << 30) + 77);
        assert_eq!((v & CREDIT != 0, v & LANE != 0, v & LOW), (true, true, 77));
        assert_eq!(widen((5 << 30) + 70, 77), (5 << 30) + 77);
        // Across the wrap of the low bits.
        assert_eq!(widen((1 << 30) - 2, 3), (1 << 30) + 3);
        let h = Hello {
            ep: Endpoint {
                qpn: 3,
                lid: 1,
                gid: [2; 16],
                psn: 4,
            },
            slots: 8,
            qps: 3,
            at: [(10, 11), (12, 13)],
        };
        let d = Hello::decode(&h.encode()).unwrap();
        assert_eq!((d.ep, d.slots, d.qps, d.at), (h.ep, 8, 3, h.at));
    }
}
