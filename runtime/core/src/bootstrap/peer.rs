//! One end of the control star as both the control operations and the liveness watcher
//! use it: frames are written under a lock of their own (a heartbeat may go out while an
//! operation waits to read), and reading skips heartbeats, noting when the peer was last
//! heard from.

use super::io::Wait;
use super::wire::{kind, Frame};
use crate::error::{Result, RuntimeError};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

pub(crate) struct Peer {
    /// The rank on the other end.
    pub rank: u32,
    pub stream: TcpStream,
    write: Mutex<()>,
    /// Milliseconds since `epoch` when anything last arrived from the peer.
    last_seen: AtomicU64,
    epoch: Instant,
}

impl Peer {
    pub fn new(rank: u32, stream: TcpStream, epoch: Instant) -> Peer {
        let p = Peer {
            rank,
            stream,
            write: Mutex::new(()),
            last_seen: AtomicU64::new(0),
            epoch,
        };
        p.touch();
        p
    }

    /// Notes that the peer was heard from now.
    pub fn touch(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.last_seen.store(ms, Ordering::Relaxed);
    }

    /// How long since the peer was last heard from.
    pub fn silent_for(&self) -> std::time::Duration {
        let now = self.epoch.elapsed().as_millis() as u64;
        std::time::Duration::from_millis(now.saturating_sub(self.last_seen.load(Ordering::Relaxed)))
    }

    /// Writes one frame (never interleaved with another writer's).
    pub fn send(&self, frame: &Frame, w: &Wait) -> Result<()> {
        let _g = self.write.lock().unwrap_or_else(|p| p.into_inner());
        frame.write(&self.stream, w)
    }

    /// Reads the next frame that is not a heartbeat. A peer that said goodbye (it left
    /// the group cleanly) while this rank still waits for it has failed this rank.
    pub fn recv(&self, w: &Wait) -> Result<Frame> {
        loop {
            let f = Frame::read(&self.stream, w)?;
            self.touch();
            match f.kind {
                kind::HEARTBEAT => {}
                kind::GOODBYE => {
                    return Err(RuntimeError::PeerFailed {
                        peer: self.rank,
                        reason: format!("rank {} left the group while {}", self.rank, w.what),
                    })
                }
                _ => return Ok(f),
            }
        }
    }
}
