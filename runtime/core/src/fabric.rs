//! What a rank needs from the other ranks of its communicator during a call: agreement on
//! the call, links per connection, and a way to abort everyone. In one process the
//! ranks share an [`InProcGroup`]; across processes the bootstrap provides the same.

use crate::error::{Result, RuntimeError};
use crate::transport::Link;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How often a blocked wait looks at the abort flag.
pub const POLL: Duration = Duration::from_millis(20);

/// The services a rank's executor uses.
pub trait Fabric: Send + Sync {
    fn rank(&self) -> u32;
    fn n_ranks(&self) -> u32;
    /// Exchanges `desc` with every rank and fails unless all are equal (a mismatched
    /// call). `seq` numbers the calls of this communicator.
    fn agree(&self, seq: u64, desc: &[u8], deadline: Instant) -> Result<()>;
    /// The link this rank sends on to `peer` on connection channel `channel`.
    fn send_link(&self, peer: u32, channel: u32, slots: u32) -> Result<Arc<dyn Link>>;
    /// The link this rank receives on from `peer` on `channel`.
    fn recv_link(&self, peer: u32, channel: u32, slots: u32) -> Result<Arc<dyn Link>>;
    /// Ends every blocked operation of every rank with an error.
    fn abort(&self, reason: &str);
    /// The abort reason, if aborted.
    fn aborted(&self) -> Option<String>;
    /// What the group learns, within `grace`, about a failure elsewhere: a link whose
    /// peer closed it is often the echo of another rank's death (the peer gave up and
    /// exited), and the group's verdict names the rank that really failed. `None` when
    /// nothing is known by then (or the fabric has no such knowledge).
    fn verdict(&self, grace: Duration) -> Option<String> {
        let _ = grace;
        None
    }
    /// This rank's place among the ranks of its host: (index, count), where known. The
    /// host backend keeps each rank's block threads on a share of the CPUs by it
    /// (`cpus.rs`: `BRAID_CPU_AFFINITY`).
    fn local_place(&self) -> Option<(u32, u32)> {
        None
    }
}

/// How long a rank whose link was closed waits for the group's verdict before naming the
/// link's peer: long enough for rank 0 to notice a dead process and tell everyone (a few
/// heartbeats), short against the 15 s in which a survivor must be told.
pub const VERDICT_GRACE: Duration = Duration::from_secs(2);

/// A shared abort flag with its reason.
#[derive(Default)]
pub struct AbortFlag {
    flag: AtomicBool,
    reason: Mutex<Option<String>>,
}

impl AbortFlag {
    pub fn set(&self, reason: &str) {
        let mut r = self.reason.lock().unwrap();
        if r.is_none() {
            *r = Some(reason.to_string());
        }
        self.flag.store(true, Ordering::SeqCst);
    }

    pub fn get(&self) -> Option<String> {
        if self.flag.load(Ordering::SeqCst) {
            self.reason.lock().unwrap().clone()
        } else {
            None
        }
    }

    pub fn check(&self) -> Result<()> {
        match self.get() {
            Some(r) => Err(RuntimeError::Aborted(r)),
            None => Ok(()),
        }
    }
}

fn timed_out(deadline: Instant, what: impl FnOnce() -> String, started: Instant) -> Result<()> {
    if Instant::now() >= deadline {
        return Err(RuntimeError::Timeout {
            seconds: started.elapsed().as_secs_f64(),
            what: what(),
        });
    }
    Ok(())
}

/// A bounded FIFO of slices between two ranks of one process. Each side copies its
/// slice with the lock released (a sender's copy into one slot and a receiver's copy out
/// of another overlap, as on a GPU), and a slot's buffer is kept for the next slice
/// instead of being freed and allocated again.
pub struct InProcLink {
    state: Mutex<Slots>,
    changed: Condvar,
    capacity: usize,
    abort: Arc<AbortFlag>,
    from: u32,
    to: u32,
}

/// The slices queued, the slots being copied into or out of now, and buffers free for
/// reuse.
#[derive(Default)]
struct Slots {
    queued: VecDeque<Vec<u8>>,
    busy: usize,
    free: Vec<Vec<u8>>,
}

impl InProcLink {
    fn new(capacity: u32, abort: Arc<AbortFlag>, from: u32, to: u32) -> InProcLink {
        InProcLink {
            state: Mutex::new(Slots::default()),
            changed: Condvar::new(),
            capacity: capacity.max(1) as usize,
            abort,
            from,
            to,
        }
    }
}

impl Link for InProcLink {
    fn send(&self, slice: &[u8], deadline: Instant) -> Result<()> {
        let started = Instant::now();
        let mut st = self.state.lock().unwrap();
        while st.queued.len() + st.busy >= self.capacity {
            self.abort.check()?;
            timed_out(
                deadline,
                || format!("rank {} to accept a slice from rank {}", self.to, self.from),
                started,
            )?;
            st = self.changed.wait_timeout(st, POLL).unwrap().0;
        }
        st.busy += 1;
        let mut buf = st.free.pop().unwrap_or_default();
        drop(st);
        buf.clear();
        buf.extend_from_slice(slice);
        let mut st = self.state.lock().unwrap();
        st.busy -= 1;
        st.queued.push_back(buf);
        self.changed.notify_all();
        Ok(())
    }

    fn recv(&self, buf: &mut [u8], deadline: Instant) -> Result<()> {
        let started = Instant::now();
        let mut st = self.state.lock().unwrap();
        let s = loop {
            if let Some(s) = st.queued.pop_front() {
                break s;
            }
            self.abort.check()?;
            timed_out(
                deadline,
                || format!("a slice from rank {} at rank {}", self.from, self.to),
                started,
            )?;
            st = self.changed.wait_timeout(st, POLL).unwrap().0;
        };
        // The slot stays taken (the sender may not refill it) until its bytes are out.
        st.busy += 1;
        drop(st);
        let result = if s.len() != buf.len() {
            Err(RuntimeError::Mismatch(format!(
                "rank {} sent a slice of {} bytes where rank {} expected {}",
                self.from,
                s.len(),
                self.to,
                buf.len()
            )))
        } else {
            buf.copy_from_slice(&s);
            Ok(())
        };
        let mut st = self.state.lock().unwrap();
        st.busy -= 1;
        if st.free.len() < self.capacity {
            st.free.push(s);
        }
        self.changed.notify_all();
        result
    }
}

/// The ranks of one process: shared links, call board and abort flag.
pub struct InProcGroup {
    n: u32,
    abort: Arc<AbortFlag>,
    links: Mutex<HashMap<(u32, u32, u32), Arc<InProcLink>>>,
    board: Mutex<Vec<(u64, Vec<u8>)>>,
    board_changed: Condvar,
}

impl InProcGroup {
    pub fn new(n: u32) -> Arc<InProcGroup> {
        Arc::new(InProcGroup {
            n,
            abort: Arc::new(AbortFlag::default()),
            links: Mutex::new(HashMap::new()),
            board: Mutex::new(vec![(0, Vec::new()); n as usize]),
            board_changed: Condvar::new(),
        })
    }

    /// The fabric rank `rank` uses.
    pub fn member(self: &Arc<Self>, rank: u32) -> InProcFabric {
        InProcFabric {
            group: self.clone(),
            rank,
        }
    }

    fn link(&self, from: u32, to: u32, channel: u32, slots: u32) -> Arc<InProcLink> {
        self.links
            .lock()
            .unwrap()
            .entry((from, to, channel))
            .or_insert_with(|| Arc::new(InProcLink::new(slots, self.abort.clone(), from, to)))
            .clone()
    }
}

/// One rank's view of an [`InProcGroup`].
pub struct InProcFabric {
    group: Arc<InProcGroup>,
    rank: u32,
}

impl Fabric for InProcFabric {
    fn rank(&self) -> u32 {
        self.rank
    }

    /// Every rank of the group lives in this process.
    fn local_place(&self) -> Option<(u32, u32)> {
        Some((self.rank, self.group.n))
    }

    fn n_ranks(&self) -> u32 {
        self.group.n
    }

    fn agree(&self, seq: u64, desc: &[u8], deadline: Instant) -> Result<()> {
        let g = &self.group;
        let started = Instant::now();
        let mut board = g.board.lock().unwrap();
        board[self.rank as usize] = (seq, desc.to_vec());
        g.board_changed.notify_all();
        loop {
            let behind: Vec<u32> = (0..g.n).filter(|&r| board[r as usize].0 < seq).collect();
            if behind.is_empty() {
                break;
            }
            g.abort.check()?;
            timed_out(
                deadline,
                || format!("ranks {behind:?} to make call #{seq}"),
                started,
            )?;
            board = g.board_changed.wait_timeout(board, POLL).unwrap().0;
        }
        for r in 0..g.n {
            let (s, d) = &board[r as usize];
            if *s == seq && d != desc {
                return Err(RuntimeError::Mismatch(format!(
                    "rank {} made call #{seq} as {}, but rank {r} as {}",
                    self.rank,
                    String::from_utf8_lossy(desc),
                    String::from_utf8_lossy(d)
                )));
            }
        }
        Ok(())
    }

    fn send_link(&self, peer: u32, channel: u32, slots: u32) -> Result<Arc<dyn Link>> {
        Ok(self.group.link(self.rank, peer, channel, slots))
    }

    fn recv_link(&self, peer: u32, channel: u32, slots: u32) -> Result<Arc<dyn Link>> {
        Ok(self.group.link(peer, self.rank, channel, slots))
    }

    fn abort(&self, reason: &str) {
        self.group.abort.set(reason);
    }

    fn aborted(&self) -> Option<String> {
        self.group.abort.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slices cross in order and whole while both sides copy at once (reused buffers of
    /// other lengths included); a full link refuses a further slice until one is taken;
    /// a receive of the wrong length is an error and frees its slot.
    #[test]
    fn a_link_keeps_order_bounds_its_slots_and_reports_a_wrong_length() {
        let g = InProcGroup::new(2);
        let tx = g.member(0).send_link(1, 0, 2).unwrap();
        let rx = g.member(1).recv_link(0, 0, 2).unwrap();
        let far = || Instant::now() + Duration::from_secs(10);
        let slice = |i: usize| vec![(i % 251) as u8; 1 + (i * 7919) % 5000];
        let sender = std::thread::spawn({
            let tx = tx.clone();
            move || (0..2000).try_for_each(|i| tx.send(&slice(i), far()))
        });
        for i in 0..2000 {
            let want = slice(i);
            let mut got = vec![0xffu8; want.len()];
            rx.recv(&mut got, far()).unwrap();
            assert_eq!(got, want, "slice {i}");
        }
        sender.join().unwrap().unwrap();
        // Two slots: a third slice waits, and times out.
        tx.send(&[1, 2], far()).unwrap();
        tx.send(&[3, 4], far()).unwrap();
        let soon = Instant::now() + Duration::from_millis(50);
        assert!(matches!(
            tx.send(&[5, 6], soon),
            Err(RuntimeError::Timeout { .. })
        ));
        let mut wrong = [0u8; 3];
        assert!(matches!(
            rx.recv(&mut wrong, far()),
            Err(RuntimeError::Mismatch(_))
        ));
        // The wrong receive took its slice: one slot free again, the next slice is the second.
        tx.send(&[5, 6], Instant::now() + Duration::from_millis(50))
            .unwrap();
        let mut two = [0u8; 2];
        rx.recv(&mut two, far()).unwrap();
        assert_eq!(two, [3, 4]);
        rx.recv(&mut two, far()).unwrap();
        assert_eq!(two, [5, 6]);
    }
}
