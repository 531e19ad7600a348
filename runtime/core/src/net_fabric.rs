//! The fabric of a rank that lives in its own process: agreement through the bootstrap,
//! links as authenticated TCP streams made on first use and kept for later calls.

use crate::bootstrap::Bootstrap;
use crate::error::{Result, RuntimeError};
use crate::exec::SLICE_BYTES;
use crate::fabric::Fabric;
use crate::shm_link::{shm_name, ShmLink};
use crate::tcp_link::TcpLink;
use crate::transport::Link;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A link that can wait until its receiver took everything sent (before closing).
trait FlushLink: Link {
    fn flush(&self, deadline: Instant) -> Result<()>;
    fn as_link(self: Arc<Self>) -> Arc<dyn Link>;
}

impl FlushLink for TcpLink {
    fn flush(&self, deadline: Instant) -> Result<()> {
        TcpLink::flush(self, deadline)
    }
    fn as_link(self: Arc<Self>) -> Arc<dyn Link> {
        self
    }
}

impl FlushLink for ShmLink {
    fn flush(&self, deadline: Instant) -> Result<()> {
        ShmLink::flush(self, deadline)
    }
    fn as_link(self: Arc<Self>) -> Arc<dyn Link> {
        self
    }
}

/// (this rank sends?, peer, channel).
type LinkKey = (bool, u32, u32);

pub struct NetFabric {
    boot: Arc<Bootstrap>,
    /// (sends?, peer, channel) → link.
    links: Mutex<HashMap<LinkKey, Arc<dyn FlushLink>>>,
    reason: Mutex<Option<String>>,
}

impl NetFabric {
    pub fn new(boot: impl Into<Arc<Bootstrap>>) -> NetFabric {
        let boot = boot.into();
        NetFabric {
            boot,
            links: Mutex::new(HashMap::new()),
            reason: Mutex::new(None),
        }
    }

    fn link(&self, sends: bool, peer: u32, channel: u32, slots: u32) -> Result<Arc<dyn Link>> {
        if let Some(l) = self.links.lock().unwrap().get(&(sends, peer, channel)) {
            return Ok(l.clone().as_link());
        }
        // Made outside the lock: connecting waits for the peer's block thread.
        let link: Arc<dyn FlushLink> = if self.same_host(peer) {
            let (from, to) = if sends {
                (self.rank(), peer)
            } else {
                (peer, self.rank())
            };
            let name = shm_name(&self.boot.job_nonce(), from, to, channel);
            let abort = self.boot.abort_flag().clone();
            Arc::new(if sends {
                ShmLink::create_sender(&name, slots.max(1) as usize, SLICE_BYTES, abort)?
            } else {
                ShmLink::open_receiver(&name, abort, Instant::now() + self.boot.timeout())?
            })
        } else {
            let tag = u64::from(channel);
            Arc::new(if sends {
                TcpLink::connect_sender(&self.boot, peer, tag, slots.max(1) as usize)?
            } else {
                TcpLink::accept_receiver(&self.boot, peer, tag)?
            })
        };
        self.links
            .lock()
            .unwrap()
            .insert((sends, peer, channel), link.clone());
        Ok(link.as_link())
    }

    /// Ranks whose link listeners share an IP address share a host: they talk through
    /// shared memory, unless `BRAID_SHM_DISABLE=1`.
    fn same_host(&self, peer: u32) -> bool {
        !std::env::var("BRAID_SHM_DISABLE").is_ok_and(|v| v == "1") && self.shares_host(peer)
    }

    /// Whether `peer`'s link listener has this rank's IP address (its host).
    fn shares_host(&self, peer: u32) -> bool {
        match (self.boot.peer_addr(self.rank()), self.boot.peer_addr(peer)) {
            (Some(a), Some(b)) => a.ip() == b.ip(),
            _ => false,
        }
    }
}

impl Fabric for NetFabric {
    fn rank(&self) -> u32 {
        self.boot.rank()
    }

    /// The ranks of this rank's host as shared memory finds them, whatever
    /// `BRAID_SHM_DISABLE` says (over TCP they share the CPUs too).
    fn local_place(&self) -> Option<(u32, u32)> {
        let same: Vec<u32> = (0..self.n_ranks())
            .filter(|&r| self.shares_host(r))
            .collect();
        let index = same.iter().position(|&r| r == self.rank())?;
        Some((index as u32, same.len() as u32))
    }

    fn n_ranks(&self) -> u32 {
        self.boot.n_ranks()
    }

    fn agree(&self, seq: u64, desc: &[u8], _deadline: Instant) -> Result<()> {
        let mine = [&seq.to_le_bytes()[..], desc].concat();
        let all = self.boot.allgather(&mine)?;
        for (r, theirs) in all.iter().enumerate() {
            if theirs != &mine {
                let text = |b: &[u8]| String::from_utf8_lossy(b.get(8..).unwrap_or(b)).into_owned();
                return Err(RuntimeError::Mismatch(format!(
                    "rank {} made call #{seq} as {}, but rank {r} as {}",
                    self.rank(),
                    text(&mine),
                    text(theirs)
                )));
            }
        }
        Ok(())
    }

    fn send_link(&self, peer: u32, channel: u32, slots: u32) -> Result<Arc<dyn Link>> {
        self.link(true, peer, channel, slots)
    }

    fn recv_link(&self, peer: u32, channel: u32, slots: u32) -> Result<Arc<dyn Link>> {
        self.link(false, peer, channel, slots)
    }

    fn abort(&self, reason: &str) {
        self.reason
            .lock()
            .unwrap()
            .get_or_insert_with(|| reason.to_string());
        self.boot.fail(reason);
        // Dropping the links closes their sockets, so peers blocked on us fail now
        // instead of at their timeout.
        self.links.lock().unwrap().clear();
    }

    fn aborted(&self) -> Option<String> {
        if self.boot.abort_flag().load(Ordering::SeqCst) {
            // A peer's failure the bootstrap noticed names the rank; this rank's own
            // abort its reason.
            Some(
                self.boot
                    .failure()
                    .or_else(|| self.reason.lock().unwrap().clone())
                    .unwrap_or_else(|| "aborted".into()),
            )
        } else {
            None
        }
    }

    fn verdict(&self, grace: std::time::Duration) -> Option<String> {
        self.wait_for_verdict(grace)
    }
}

impl NetFabric {
    /// The bootstrap's verdict on a failure, waiting up to `grace` for it.
    fn wait_for_verdict(&self, grace: std::time::Duration) -> Option<String> {
        let until = Instant::now() + grace;
        loop {
            if let Some(f) = self.boot.failure() {
                return Some(f);
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(crate::fabric::POLL);
        }
    }
}

impl Drop for NetFabric {
    /// Closing a socket whose peer still sends acknowledgements resets the connection and
    /// destroys data in flight, so before closing, every sending link waits (up to the
    /// timeout) until its receiver has taken everything. An aborted group skips it.
    fn drop(&mut self) {
        if self.aborted().is_some() {
            return;
        }
        // Bounded separately from the call timeout: a peer that died without an abort
        // must not hold this process's exit for minutes.
        let deadline = Instant::now() + self.boot.timeout().min(std::time::Duration::from_secs(30));
        for ((sends, peer, _), link) in self.links.lock().unwrap().iter() {
            if *sends {
                if let Err(e) = link.flush(deadline) {
                    tracing::warn!("closing the link to rank {peer}: {e}");
                }
            }
        }
    }
}
