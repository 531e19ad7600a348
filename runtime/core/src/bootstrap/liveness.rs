//! Liveness: every rank learns within seconds that another has died or stopped, instead
//! of at the end of a long timeout.
//!
//! Besides the control star, every member keeps one more stream to rank 0, for liveness
//! only (a link with tag `BEAT_TAG`), so it never competes with control operations. A
//! watcher thread per rank sends a `HEARTBEAT` frame on it every `BEAT` and reads what
//! came: heartbeats, a `GOODBYE` (the peer left cleanly), or rank 0's `ERROR` report. A
//! stream that closes without a goodbye means the process is gone (the kernel closes
//! its sockets however it died); a peer heard nothing from for `BRAID_HEARTBEAT_TIMEOUT`
//! seconds (default 10; 0 turns the check off) is stopped or hung. Either way the
//! watcher records which rank failed and why, sets the group's abort flag (every wait in
//! the bootstrap, the links and the engines watches it), breaks the control star, and,
//! on rank 0, reports the failure to every member, so all name the same rank.

use super::collective::Control;
use super::io::Wait;
use super::peer::Peer;
use super::wire::{decode_error, encode_error, kind, Frame};
use crate::error::RuntimeError;
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often heartbeats go out and the watcher looks.
pub(crate) const BEAT: Duration = Duration::from_millis(500);
/// The link tag of the liveness streams (no plan or transport uses it).
pub(crate) const BEAT_TAG: u64 = u64::MAX - 1;
/// Default of `BRAID_HEARTBEAT_TIMEOUT`.
pub const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(10);

/// `BRAID_HEARTBEAT_TIMEOUT` (seconds; 0: never judge a peer by its silence).
pub fn heartbeat_timeout_from_env() -> Option<Duration> {
    match std::env::var("BRAID_HEARTBEAT_TIMEOUT")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
    {
        Some(s) if s <= 0.0 => None,
        Some(s) => Some(Duration::from_secs_f64(s)),
        None => Some(DEFAULT_HEARTBEAT_TIMEOUT),
    }
}

/// What the group knows about its failure.
#[derive(Default)]
pub(crate) struct Health {
    /// The first failure noticed: which rank, and why.
    pub reason: Mutex<Option<String>>,
}

impl Health {
    /// Records `why` (the first one wins) and sets the abort flag.
    pub fn fail(&self, why: String, abort: &AtomicBool) {
        {
            let mut r = self.reason.lock().unwrap_or_else(|p| p.into_inner());
            if r.is_none() {
                tracing::warn!("{why}");
                *r = Some(why);
            }
        }
        abort.store(true, Ordering::SeqCst);
    }

    pub fn reason(&self) -> Option<String> {
        self.reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// The watcher's state, moved into its thread.
pub(crate) struct Watcher {
    pub rank: u32,
    /// The liveness streams: to rank 0 (members), to every member (rank 0).
    pub peers: Vec<Arc<Peer>>,
    pub control: Arc<Mutex<Control>>,
    pub health: Arc<Health>,
    pub abort: Arc<AtomicBool>,
    pub stop: Arc<AtomicBool>,
    pub timeout: Option<Duration>,
}

/// What one look at a peer found.
enum Seen {
    Nothing,
    Left,
    /// The peer failed (why).
    Failed(String),
    /// Rank 0 reported a failure (its text names the rank).
    Reported(RuntimeError),
}

impl Watcher {
    pub fn run(self) {
        let mut left: Vec<u32> = Vec::new();
        for p in &self.peers {
            let _ = p.stream.set_nonblocking(true);
        }
        while !self.stop.load(Ordering::Relaxed) && !self.abort.load(Ordering::Relaxed) {
            let quiet = AtomicBool::new(false);
            let watched: Vec<&Arc<Peer>> = self
                .peers
                .iter()
                .filter(|p| !left.contains(&p.rank))
                .collect();
            for p in watched {
                let w = Wait::new(Instant::now() + BEAT, &quiet, p.rank, "sending a heartbeat");
                let _ = p.send(&Frame::new(kind::HEARTBEAT, 0, Vec::new()), &w);
                match self.look(p) {
                    Seen::Nothing => {}
                    Seen::Left => left.push(p.rank),
                    Seen::Failed(why) => {
                        let why = format!("{why} (noticed by rank {})", self.rank);
                        let text = format!("rank {} failed: {why}", p.rank);
                        return self.failed(
                            RuntimeError::PeerFailed {
                                peer: p.rank,
                                reason: why,
                            },
                            text,
                        );
                    }
                    Seen::Reported(err) => {
                        let text = err.to_string();
                        return self.failed(err, text);
                    }
                }
            }
            if let Some(t) = self.timeout {
                if let Some(p) = self
                    .peers
                    .iter()
                    .find(|p| !left.contains(&p.rank) && p.silent_for() > t)
                {
                    let why = format!(
                        "sent no heartbeat for {:.1} s (stopped or hung; BRAID_HEARTBEAT_TIMEOUT={})",
                        p.silent_for().as_secs_f64(),
                        t.as_secs_f64()
                    );
                    let why = format!("{why} (noticed by rank {})", self.rank);
                    let text = format!("rank {} failed: {why}", p.rank);
                    return self.failed(
                        RuntimeError::PeerFailed {
                            peer: p.rank,
                            reason: why,
                        },
                        text,
                    );
                }
            }
            // Sleep a beat, waking early when the bootstrap goes away.
            let until = Instant::now() + BEAT;
            while Instant::now() < until && !self.stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// Reads whatever `p` sent on its liveness stream.
    fn look(&self, p: &Peer) -> Seen {
        loop {
            let mut probe = [0u8; 1];
            match p.stream.peek(&mut probe) {
                Ok(0) => {
                    return Seen::Failed(
                        "closed its connection without a goodbye: its process is gone".into(),
                    )
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Seen::Nothing,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Seen::Failed(format!("its connection failed: {e}")),
            }
            // A frame has started: read it whole (it is 13 bytes, or an error report).
            let _ = p.stream.set_nonblocking(false);
            let quiet = AtomicBool::new(false);
            let w = Wait::new(
                Instant::now() + Duration::from_secs(2),
                &quiet,
                p.rank,
                "reading a heartbeat",
            );
            let frame = Frame::read(&p.stream, &w);
            let _ = p.stream.set_nonblocking(true);
            match frame {
                Ok(f) => {
                    p.touch();
                    match f.kind {
                        kind::HEARTBEAT => {}
                        kind::GOODBYE => return Seen::Left,
                        kind::ERROR => return Seen::Reported(decode_error(&f.payload)),
                        k => return Seen::Failed(format!("sent an unexpected frame (kind {k})")),
                    }
                }
                Err(e) => return Seen::Failed(format!("its connection failed: {e}")),
            }
        }
    }

    /// A failure (`text` names the rank): record it and abort first (an operation that
    /// holds the control star ends on the abort), then break the star and, on rank 0,
    /// tell every member, so all name the same rank.
    fn failed(&self, err: RuntimeError, text: String) {
        self.health.fail(text, &self.abort);
        self.control
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .broken
            .get_or_insert(err.clone());
        if self.rank == 0 {
            let dead = match &err {
                RuntimeError::PeerFailed { peer, .. } => *peer,
                _ => u32::MAX,
            };
            report(
                self.peers
                    .iter()
                    .filter(|p| p.rank != dead)
                    .map(|p| p.as_ref()),
                &err,
            );
        }
    }
}

/// Best effort: tells each member about `err` in an `ERROR` frame, then closes its
/// stream. Bounded to a short wait per member.
pub(crate) fn report<'a>(members: impl Iterator<Item = &'a Peer>, err: &RuntimeError) {
    let frame = Frame::new(kind::ERROR, 0, encode_error(err));
    let quiet = AtomicBool::new(false);
    for m in members {
        let w = Wait::new(
            Instant::now() + Duration::from_millis(200),
            &quiet,
            m.rank,
            "reporting a failure",
        );
        let _ = m.send(&frame, &w);
        let _ = m.stream.shutdown(Shutdown::Both);
    }
}
