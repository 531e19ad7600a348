//! Point-to-point streams between ranks. Every rank runs one acceptor thread on its link
//! listener; a connecting rank opens with `Hello { kind: Link, a: from, b: to, tag }` and
//! the challenge-response of `handshake.rs`, and waits for `LINK_OK` (or `REFUSED` with a
//! reason); the acceptor files the stream under `(from, tag)` until
//! `accept_link(from, tag)` takes it. Links can therefore be made in any order, by any
//! threads.
//!
//! On rank 0 the link listener is the root's socket; a join arriving after the group
//! formed is answered with `REFUSED` (a duplicate rank or a wrong group size), so a late
//! joiner fails with the reason instead of a bare "connection closed".
//!
//! Every handshake runs on a thread of its own with its own deadline (`join::Handshakes`),
//! so connections that never complete theirs cannot delay real links.

use super::io::Wait;
use super::join::{judge_join, refuse, Handshakes, ACCEPT_POLL, HANDSHAKE};
use super::wire::{kind, Frame, Hello, HelloKind};
use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Accepted, authenticated link streams not yet taken, keyed by (connecting rank, tag).
#[derive(Default)]
pub(crate) struct Inbox {
    pub pending: Mutex<HashMap<(u32, u64), TcpStream>>,
    pub arrived: Condvar,
}

impl Inbox {
    /// Waits for the stream from `(peer, tag)`, checking `check` (deadline, abort) at
    /// least every 50 ms.
    pub fn take(
        &self,
        key: (u32, u64),
        check: impl Fn() -> crate::Result<()>,
    ) -> crate::Result<TcpStream> {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(s) = pending.remove(&key) {
                return Ok(s);
            }
            check()?;
            pending = self
                .arrived
                .wait_timeout(pending, Duration::from_millis(50))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// What the acceptor thread needs to judge a connection.
pub(crate) struct Acceptor {
    pub listener: TcpListener,
    pub secret: [u8; 32],
    pub rank: u32,
    pub n: u32,
    /// The address table, to name the rank holding a duplicate's slot.
    pub table: Vec<SocketAddr>,
    pub inbox: Arc<Inbox>,
    pub stop: Arc<AtomicBool>,
}

impl Acceptor {
    /// The acceptor thread's body: polls the listener until `stop`, handshakes on
    /// threads of their own, then judges and files each authenticated link.
    pub fn run(self) {
        if let Err(e) = self.listener.set_nonblocking(true) {
            tracing::warn!("rank {}: link listener unusable: {e}", self.rank);
            return;
        }
        let shakes = Handshakes::new(self.secret, "reading a link request");
        while !self.stop.load(Ordering::Relaxed) {
            let mut idle = true;
            match self.listener.accept() {
                Ok((stream, from)) => {
                    idle = false;
                    shakes.start(stream, from, self.rank);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => tracing::warn!("rank {}: accepting a link failed: {e}", self.rank),
            }
            while let Ok((stream, from, hello)) = shakes.rx.try_recv() {
                idle = false;
                self.handle(stream, from, hello);
            }
            if idle {
                std::thread::sleep(ACCEPT_POLL);
            }
        }
    }

    fn handle(&self, stream: TcpStream, from: SocketAddr, hello: Hello) {
        let me = self.rank;
        let w = Wait::new(
            Instant::now() + HANDSHAKE,
            &self.stop,
            u32::MAX,
            "answering a link request",
        );
        let verdict = match hello.kind {
            HelloKind::Join => match judge_join(hello.a, hello.b, self.n, |r| {
                self.table.get(r as usize).copied()
            }) {
                Err(why) => Err(format!("{why}; the group has already formed")),
                Ok(()) => Err("the group has already formed".to_string()),
            },
            HelloKind::Link if hello.b != me => Err(format!(
                "link addressed to rank {}, this is rank {me}",
                hello.b
            )),
            HelloKind::Link if hello.a >= self.n => {
                Err(format!("rank {} is not in a group of {}", hello.a, self.n))
            }
            HelloKind::Link => Ok((hello.a, hello.tag)),
        };
        let key = match verdict {
            Ok(key) => key,
            Err(why) => {
                refuse(&stream, &why, &w);
                return tracing::warn!("rank {me}: refused a connection from {from}: {why}");
            }
        };
        let mut pending = self.inbox.pending.lock().unwrap_or_else(|p| p.into_inner());
        if pending.contains_key(&key) {
            let why = format!(
                "a link from rank {} with tag {} is already waiting to be accepted",
                key.0, key.1
            );
            drop(pending);
            refuse(&stream, &why, &w);
            return tracing::warn!("rank {me}: refused a connection from {from}: {why}");
        }
        if let Err(e) = Frame::new(kind::LINK_OK, 0, Vec::new()).write(&stream, &w) {
            return tracing::warn!(
                "rank {me}: link from rank {} (tag {}) lost during the handshake: {e}",
                key.0,
                key.1
            );
        }
        tracing::debug!(
            "rank {me}: accepted link from rank {} with tag {}",
            key.0,
            key.1
        );
        pending.insert(key, stream);
        self.inbox.arrived.notify_all();
    }
}
