//! A software RDMA device: queue pairs inside one process, connected through a shared
//! fabric, that do what reliable connected queue pairs do. It is the test double the
//! queue-pair transport runs against where there is no RDMA hardware (CI, and
//! `BRAID_NET_FORCE=soft-rdma` on a GPU machine), so it keeps the guarantees the transport
//! relies on and fails where hardware fails:
//!
//! * a write lands whole, in posting order, before the completion of its immediate;
//! * a write outside the local or the remote registered memory fails (protection or
//!   remote access error) and moves nothing; the queue pair is then in error, and every
//!   later request fails ("flushed"), as hardware does;
//! * an immediate that finds no receive posted fails as a receiver-not-ready error;
//! * a peer that is gone, or a fabric marked broken ([`SoftDevice::break_all`]: a host
//!   dropping off), fails the request as a transport retry error.
//!
//! Requests complete when posted (no link delay); their completions wait in each queue
//! pair's completion queue until polled.

use crate::rdma::{Completion, Device, Endpoint, MrKeys, QueuePair, RdmaError, Result};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

#[derive(Default)]
struct Fabric {
    qps: Mutex<HashMap<u32, Arc<Mutex<State>>>>,
    next: AtomicU32,
    broken: AtomicBool,
    /// Tells this fabric's endpoints from any other's (another device, another
    /// process): the GID of its queue pairs.
    id: [u8; 16],
}

/// A GID no other fabric of any process has: the process id and a per-process count.
fn fabric_id() -> [u8; 16] {
    static COUNT: AtomicU32 = AtomicU32::new(0);
    let mut g = [0u8; 16];
    g[..4].copy_from_slice(b"soft");
    g[4..8].copy_from_slice(&std::process::id().to_le_bytes());
    g[8..12].copy_from_slice(&COUNT.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    g
}

/// A range of registered memory, by address.
#[derive(Clone, Copy)]
struct Region {
    addr: usize,
    len: usize,
}

impl Region {
    fn holds(&self, at: usize, len: usize) -> bool {
        at >= self.addr
            && at
                .checked_add(len)
                .is_some_and(|e| e <= self.addr + self.len)
    }
}

#[derive(Default)]
struct State {
    peer: Option<u32>,
    regions: HashMap<u32, Region>,
    recvs: VecDeque<u64>,
    cq: VecDeque<Completion>,
    error: Option<String>,
    depth: u32,
}

/// A software RDMA device; queue pairs of devices that share a fabric can connect.
#[derive(Clone)]
pub struct SoftDevice {
    fabric: Arc<Fabric>,
}

impl Default for SoftDevice {
    fn default() -> Self {
        Self::new()
    }
}

impl SoftDevice {
    /// A device on a fabric of its own (its queue pairs connect to each other).
    pub fn new() -> SoftDevice {
        SoftDevice {
            fabric: Arc::new(Fabric {
                next: AtomicU32::new(1),
                id: fabric_id(),
                ..Fabric::default()
            }),
        }
    }

    /// The process's shared software device.
    pub fn process() -> SoftDevice {
        static ONE: OnceLock<SoftDevice> = OnceLock::new();
        ONE.get_or_init(SoftDevice::new).clone()
    }

    /// Every later request on this fabric fails, as if the link went down.
    pub fn break_all(&self) {
        self.fabric.broken.store(true, Ordering::Release);
    }
}

struct SoftQp {
    fabric: Arc<Fabric>,
    qpn: u32,
    state: Arc<Mutex<State>>,
}

impl Device for SoftDevice {
    fn name(&self) -> String {
        "soft-rdma".into()
    }

    fn queue_pair(&self, depth: u32) -> Result<Box<dyn QueuePair>> {
        let qpn = self.fabric.next.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(Mutex::new(State {
            depth: depth.max(1),
            ..State::default()
        }));
        self.fabric.qps.lock().unwrap().insert(qpn, state.clone());
        Ok(Box::new(SoftQp {
            fabric: self.fabric.clone(),
            qpn,
            state,
        }))
    }
}

fn lock(s: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

impl SoftQp {
    /// Records a failed request: its completion, and the queue pair in error.
    fn fail(&self, st: &mut State, wr_id: u64, why: String) {
        st.cq.push_back(Completion {
            wr_id,
            status: Err(why.clone()),
            recv: None,
        });
        st.error.get_or_insert(why);
    }

    fn usable(&self, st: &State) -> Result<()> {
        match &st.error {
            Some(why) => Err(RdmaError(format!(
                "queue pair {} is in error ({why}): request flushed",
                self.qpn
            ))),
            None => Ok(()),
        }
    }
}

impl QueuePair for SoftQp {
    fn endpoint(&self) -> Endpoint {
        Endpoint {
            qpn: self.qpn,
            lid: 0,
            gid: self.fabric.id,
            psn: 0,
        }
    }

    fn connect(&self, remote: &Endpoint) -> Result<()> {
        if remote.gid != self.fabric.id {
            return Err(RdmaError(
                "the peer's queue pair is on another software RDMA fabric (the software \
                 device connects the ranks of one process only)"
                    .into(),
            ));
        }
        if !self.fabric.qps.lock().unwrap().contains_key(&remote.qpn) {
            return Err(RdmaError(format!(
                "no queue pair {} on this software fabric",
                remote.qpn
            )));
        }
        lock(&self.state).peer = Some(remote.qpn);
        Ok(())
    }

    unsafe fn register(&self, addr: *mut u8, len: usize) -> Result<MrKeys> {
        let key = self.fabric.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.state).regions.insert(
            key,
            Region {
                addr: addr as usize,
                len,
            },
        );
        Ok(MrKeys {
            lkey: key,
            rkey: key,
        })
    }

    unsafe fn write(
        &self,
        wr_id: u64,
        local: *const u8,
        len: u32,
        lkey: u32,
        remote: u64,
        rkey: u32,
        imm: Option<u32>,
    ) -> Result<()> {
        let len = len as usize;
        let peer = {
            let mut st = lock(&self.state);
            self.usable(&st)?;
            let Some(peer) = st.peer else {
                return Err(RdmaError(format!(
                    "queue pair {} is not connected",
                    self.qpn
                )));
            };
            // A zero-length write reads nothing locally (no scatter/gather entry).
            let fits = len == 0
                || st
                    .regions
                    .get(&lkey)
                    .is_some_and(|r| r.holds(local as usize, len));
            if !fits {
                self.fail(&mut st, wr_id, "local protection error".into());
                return Ok(());
            }
            peer
        };
        let target = self.fabric.qps.lock().unwrap().get(&peer).cloned();
        let gone = self.fabric.broken.load(Ordering::Acquire) || target.is_none();
        let outcome = match target {
            Some(t) if !gone => {
                let mut ps = lock(&t);
                let to = remote as usize;
                if ps.error.is_some() {
                    Err("transport retry counter exceeded (the peer's queue pair is in error)")
                } else if !ps.regions.get(&rkey).is_some_and(|r| r.holds(to, len)) {
                    Err("remote access error")
                } else if imm.is_some() && ps.recvs.is_empty() {
                    Err("receiver not ready: RNR retry counter exceeded")
                } else {
                    if len > 0 {
                        // SAFETY: both ranges are inside registered memory (checked above),
                        // which stays allocated while its queue pair lives (`register`'s
                        // contract); the peer's lock is held, so it cannot deregister
                        // meanwhile.
                        unsafe { std::ptr::copy(local, to as *mut u8, len) };
                    }
                    if let Some(imm) = imm {
                        let id = ps.recvs.pop_front().expect("checked");
                        ps.cq.push_back(Completion {
                            wr_id: id,
                            status: Ok(()),
                            recv: Some((imm, len as u32)),
                        });
                    }
                    Ok(())
                }
            }
            _ => Err("transport retry counter exceeded (the peer is unreachable)"),
        };
        let mut st = lock(&self.state);
        match outcome {
            Ok(()) => st.cq.push_back(Completion {
                wr_id,
                status: Ok(()),
                recv: None,
            }),
            Err(why) => self.fail(&mut st, wr_id, why.into()),
        }
        Ok(())
    }

    fn post_recv(&self, wr_id: u64) -> Result<()> {
        let mut st = lock(&self.state);
        self.usable(&st)?;
        if st.recvs.len() >= st.depth as usize {
            return Err(RdmaError(format!(
                "queue pair {}: receive queue full ({} posted)",
                self.qpn, st.depth
            )));
        }
        st.recvs.push_back(wr_id);
        Ok(())
    }

    fn poll(&self, out: &mut Vec<Completion>) -> Result<()> {
        out.extend(lock(&self.state).cq.drain(..));
        Ok(())
    }
}

impl Drop for SoftQp {
    fn drop(&mut self) {
        // Gone from the fabric before the memory it registered can go: a writer holds the
        // fabric's entry (and our lock) while it copies.
        self.fabric.qps.lock().unwrap().remove(&self.qpn);
        let mut st = lock(&self.state);
        st.regions.clear();
        st.error.get_or_insert_with(|| "destroyed".into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(d: &SoftDevice) -> (Box<dyn QueuePair>, Box<dyn QueuePair>) {
        let a = d.queue_pair(4).unwrap();
        let b = d.queue_pair(4).unwrap();
        a.connect(&b.endpoint()).unwrap();
        b.connect(&a.endpoint()).unwrap();
        (a, b)
    }

    fn polled(q: &dyn QueuePair) -> Vec<Completion> {
        let mut v = Vec::new();
        q.poll(&mut v).unwrap();
        v
    }

    #[test]
    fn writes_land_before_their_immediate_and_outside_memory_fails() {
        let d = SoftDevice::new();
        let (a, b) = pair(&d);
        let mut src = vec![7u8; 64];
        let mut dst = vec![0u8; 64];
        // SAFETY: both vectors outlive the queue pairs (dropped at the end of the test).
        let (ka, kb) = unsafe {
            (
                a.register(src.as_mut_ptr(), 64).unwrap(),
                b.register(dst.as_mut_ptr(), 64).unwrap(),
            )
        };
        b.post_recv(11).unwrap();
        let remote = dst.as_ptr() as u64 + 8;
        // SAFETY: inside the registered vectors.
        unsafe { a.write(1, src.as_ptr(), 16, ka.lkey, remote, kb.rkey, Some(5)) }.unwrap();
        assert_eq!(
            polled(&*b),
            vec![Completion {
                wr_id: 11,
                status: Ok(()),
                recv: Some((5, 16))
            }]
        );
        assert_eq!(&dst[8..24], &[7u8; 16]);
        assert_eq!(dst[24], 0);
        assert_eq!(polled(&*a)[0].status, Ok(()));
        // No receive posted: the immediate fails, nothing moves, the pair is in error.
        src.fill(9);
        // SAFETY: as above.
        unsafe { a.write(2, src.as_ptr(), 16, ka.lkey, remote, kb.rkey, Some(6)) }.unwrap();
        let c = polled(&*a);
        assert!(c[0]
            .status
            .as_ref()
            .unwrap_err()
            .contains("receiver not ready"));
        assert_eq!(&dst[8..24], &[7u8; 16]);
        assert!(b.post_recv(12).is_ok());
        // SAFETY: as above.
        let later = unsafe { a.write(3, src.as_ptr(), 8, ka.lkey, remote, kb.rkey, None) };
        assert!(later.unwrap_err().0.contains("flushed"));
        // A fresh pair: a write past the peer's memory fails and moves nothing.
        let (c2, d2) = pair(&d);
        // SAFETY: as above.
        let (kc, kd) = unsafe {
            (
                c2.register(src.as_mut_ptr(), 64).unwrap(),
                d2.register(dst.as_mut_ptr(), 64).unwrap(),
            )
        };
        let end = dst.as_ptr() as u64 + 60;
        // SAFETY: the local range is registered; the remote one is checked by the device.
        unsafe { c2.write(4, src.as_ptr(), 16, kc.lkey, end, kd.rkey, None) }.unwrap();
        assert!(polled(&*c2)[0]
            .status
            .as_ref()
            .unwrap_err()
            .contains("remote access"));
        assert_eq!(&dst[56..], &[0, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn a_broken_fabric_or_a_vanished_peer_fails_requests() {
        let d = SoftDevice::new();
        let (a, b) = pair(&d);
        let mut buf = vec![1u8; 8];
        // SAFETY: `buf` outlives both queue pairs.
        let k = unsafe { a.register(buf.as_mut_ptr(), 8).unwrap() };
        // SAFETY: as above.
        let kb = unsafe { b.register(buf.as_mut_ptr(), 8).unwrap() };
        d.break_all();
        // SAFETY: registered.
        unsafe {
            a.write(
                1,
                buf.as_ptr(),
                8,
                k.lkey,
                buf.as_ptr() as u64,
                kb.rkey,
                None,
            )
        }
        .unwrap();
        assert!(polled(&*a)[0]
            .status
            .as_ref()
            .unwrap_err()
            .contains("retry"));
        let d2 = SoftDevice::new();
        let (c, e) = pair(&d2);
        // SAFETY: as above.
        let kc = unsafe { c.register(buf.as_mut_ptr(), 8).unwrap() };
        drop(e);
        // SAFETY: registered.
        unsafe { c.write(2, buf.as_ptr(), 8, kc.lkey, 0, 0, None) }.unwrap();
        assert!(polled(&*c)[0]
            .status
            .as_ref()
            .unwrap_err()
            .contains("unreachable"));
        let q = d2.queue_pair(1).unwrap();
        let mut far = q.endpoint();
        far.qpn = 999;
        assert!(q.connect(&far).unwrap_err().0.contains("no queue pair 999"));
        // A queue pair of another fabric (another process, in practice) is refused even
        // where its number exists here.
        let other = SoftDevice::new().queue_pair(1).unwrap();
        let e = q.connect(&other.endpoint()).unwrap_err().0;
        assert!(e.contains("one process only"), "{e}");
    }
}
