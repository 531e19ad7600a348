//! [`TcpLink`]: one direction of a connection between two ranks over TCP, for ranks in
//! different processes or on different hosts.
//!
//! Wire format on the stream (after the bootstrap's link handshake):
//! * sender → receiver: per slice, `len u64 LE | bytes [len]`;
//! * receiver → sender: per slice consumed, one `ACK` byte; or, when the slice's length
//!   differs from the buffer the receiver offered, `NAK | expected len u64 LE`, after
//!   which the link is dead on both ends.
//!
//! The sender counts unacknowledged slices and blocks while `slots` are out, the
//! back-pressure a GPU connection's receive slots give; TCP's own buffering would
//! otherwise let it run arbitrarily far ahead. Every wait is a loop of short socket
//! timeouts that checks the deadline and the abort flag, so a dead peer or an abort ends
//! `send`/`recv` promptly. Any error leaves the link failed (the stream may be mid-frame):
//! later calls return the same error, and the stream is shut down so the other end fails
//! promptly too. Dropping a healthy sender first waits briefly for the receiver to take
//! what was sent (see the `Drop` impl), so "send returned" means the slice will arrive.

use crate::bootstrap::io::{read_full, read_some, write_full, Wait};
use crate::bootstrap::Bootstrap;
use crate::error::{Result, RuntimeError};
use crate::transport::Link;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long dropping a sender waits for the receiver to take the slices in flight.
pub const DROP_LINGER: Duration = Duration::from_secs(1);

const ACK: u8 = 0x06;
const NAK: u8 = 0x15;

/// Which end of the link this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Sender { slots: usize },
    Receiver,
}

struct State {
    /// Slices sent and not yet acknowledged (sender only).
    in_flight: usize,
    failed: Option<RuntimeError>,
}

/// One direction of a TCP connection; implements [`Link`].
pub struct TcpLink {
    stream: TcpStream,
    peer: u32,
    end: End,
    abort: Arc<AtomicBool>,
    state: Mutex<State>,
}

impl TcpLink {
    /// The sending end over `stream` (from [`Bootstrap::connect_link`] or
    /// [`Bootstrap::accept_link`]) to rank `peer`, with at most `slots` slices
    /// unacknowledged.
    pub fn sender(
        stream: TcpStream,
        peer: u32,
        slots: usize,
        abort: Arc<AtomicBool>,
    ) -> Result<TcpLink> {
        if slots == 0 {
            return Err(RuntimeError::Invalid(
                "a link needs at least one slot".into(),
            ));
        }
        Self::new(stream, peer, End::Sender { slots }, abort)
    }

    /// The receiving end over `stream` from rank `peer`.
    pub fn receiver(stream: TcpStream, peer: u32, abort: Arc<AtomicBool>) -> Result<TcpLink> {
        Self::new(stream, peer, End::Receiver, abort)
    }

    /// Connects to `peer` (which calls [`TcpLink::accept_receiver`] with this rank and
    /// `tag`) and returns the sending end, watching the bootstrap's abort flag.
    pub fn connect_sender(boot: &Bootstrap, peer: u32, tag: u64, slots: usize) -> Result<TcpLink> {
        Self::sender(
            boot.connect_link(peer, tag)?,
            peer,
            slots,
            boot.abort_flag().clone(),
        )
    }

    /// Accepts the link `peer` opens with [`TcpLink::connect_sender`] and returns the
    /// receiving end.
    pub fn accept_receiver(boot: &Bootstrap, peer: u32, tag: u64) -> Result<TcpLink> {
        Self::receiver(
            boot.accept_link(peer, tag)?,
            peer,
            boot.abort_flag().clone(),
        )
    }

    fn new(stream: TcpStream, peer: u32, end: End, abort: Arc<AtomicBool>) -> Result<TcpLink> {
        // The bootstrap hands streams out prepared; streams from elsewhere get the same.
        crate::bootstrap::io::prepare(&stream)?;
        Ok(TcpLink {
            stream,
            peer,
            end,
            abort,
            state: Mutex::new(State {
                in_flight: 0,
                failed: None,
            }),
        })
    }

    /// The rank on the other end.
    pub fn peer(&self) -> u32 {
        self.peer
    }

    /// The sender's slot count; `None` on the receiving end.
    pub fn slots(&self) -> Option<usize> {
        match self.end {
            End::Sender { slots } => Some(slots),
            End::Receiver => None,
        }
    }

    /// Slices sent and not yet acknowledged (0 on the receiving end).
    pub fn in_flight(&self) -> usize {
        self.lock().in_flight
    }

    /// Waits until the receiver has taken every slice sent so far (no-op on the
    /// receiving end).
    pub fn flush(&self, deadline: Instant) -> Result<()> {
        if self.end == End::Receiver {
            return Ok(());
        }
        self.guarded(|st| {
            let what = format!("waiting for rank {} to take the slices sent", self.peer);
            let w = Wait::new(deadline, &self.abort, self.peer, &what);
            while st.in_flight > 0 {
                self.read_acks(st, &w)?;
            }
            Ok(())
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `op` unless the link already failed; a failure is remembered and the stream
    /// shut down, so the peer's next wait ends at once.
    fn guarded(&self, op: impl FnOnce(&mut State) -> Result<()>) -> Result<()> {
        let mut st = self.lock();
        if let Some(e) = &st.failed {
            return Err(e.clone());
        }
        let result = op(&mut st);
        if let Err(e) = &result {
            st.failed = Some(e.clone());
            let _ = self.stream.shutdown(Shutdown::Both);
        }
        result
    }

    /// Reads acknowledgements until at least one arrives.
    fn read_acks(&self, st: &mut State, w: &Wait) -> Result<()> {
        let mut buf = [0u8; 64];
        let n = read_some(&self.stream, &mut buf[..st.in_flight.min(64)], w)?;
        for (i, b) in buf[..n].iter().enumerate() {
            match *b {
                ACK => st.in_flight -= 1,
                NAK => {
                    let mut len = [0u8; 8];
                    let have = (n - i - 1).min(8);
                    len[..have].copy_from_slice(&buf[i + 1..i + 1 + have]);
                    read_full(&self.stream, &mut len[have..], w)?;
                    return Err(RuntimeError::Mismatch(format!(
                        "rank {} expected a slice of {} bytes but this link sent a different length",
                        self.peer,
                        u64::from_le_bytes(len)
                    )));
                }
                other => {
                    return Err(RuntimeError::PeerFailed {
                        peer: self.peer,
                        reason: format!(
                        "protocol violation: byte {other:#04x} where an acknowledgement belongs"
                    ),
                    })
                }
            }
        }
        Ok(())
    }
}

impl Link for TcpLink {
    fn send(&self, slice: &[u8], deadline: Instant) -> Result<()> {
        let End::Sender { slots } = self.end else {
            return Err(RuntimeError::Invalid(format!(
                "send on the receiving end of the link from rank {}",
                self.peer
            )));
        };
        self.guarded(|st| {
            let what = format!(
                "sending a slice of {} bytes to rank {}",
                slice.len(),
                self.peer
            );
            let w = Wait::new(deadline, &self.abort, self.peer, &what);
            while st.in_flight >= slots {
                self.read_acks(st, &w)?;
            }
            write_full(
                &self.stream,
                &[&(slice.len() as u64).to_le_bytes(), slice],
                &w,
            )?;
            st.in_flight += 1;
            Ok(())
        })
    }

    fn recv(&self, buf: &mut [u8], deadline: Instant) -> Result<()> {
        if self.end != End::Receiver {
            return Err(RuntimeError::Invalid(format!(
                "recv on the sending end of the link to rank {}",
                self.peer
            )));
        }
        self.guarded(|st| {
            let what = format!(
                "receiving a slice of {} bytes from rank {}",
                buf.len(),
                self.peer
            );
            let w = Wait::new(deadline, &self.abort, self.peer, &what);
            let mut head = [0u8; 8];
            read_full(&self.stream, &mut head, &w)?;
            let len = u64::from_le_bytes(head);
            if len != buf.len() as u64 {
                let mut nak = vec![NAK];
                nak.extend_from_slice(&(buf.len() as u64).to_le_bytes());
                let _ = write_full(&self.stream, &[&nak], &w);
                return Err(RuntimeError::Mismatch(format!(
                    "rank {} sent a slice of {len} bytes where {} were expected",
                    self.peer,
                    buf.len()
                )));
            }
            read_full(&self.stream, buf, &w)?;
            // The slice arrived intact; a sender that has already gone (it may drop its
            // end once its last slice is taken) fails the next call, not this one.
            if let Err(e) = write_full(&self.stream, &[&[ACK]], &w) {
                st.failed = Some(e);
            }
            Ok(())
        })
    }
}

impl Drop for TcpLink {
    /// A healthy sender first waits (up to [`DROP_LINGER`], or until abort) for the
    /// receiver to take what was sent: closing a socket with unread acknowledgements
    /// resets the connection, which can discard slices still in flight, so a sender that
    /// finishes before its receiver would otherwise cut off its own last slices.
    fn drop(&mut self) {
        let healthy = self.lock().failed.is_none();
        if healthy && self.in_flight() > 0 {
            let _ = self.flush(Instant::now() + DROP_LINGER);
        }
        let _ = self.stream.shutdown(Shutdown::Write);
    }
}

impl std::fmt::Debug for TcpLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpLink")
            .field("peer", &self.peer)
            .field("end", &self.end)
            .finish_non_exhaustive()
    }
}
