//! Blocking socket I/O that can always be interrupted.
//!
//! Every stream the bootstrap and [`crate::tcp_link::TcpLink`] use has short read and write
//! timeouts ([`POLL`]); each call below loops over those short waits and, between them,
//! checks a deadline and an abort flag. That is what guarantees nothing hangs on a dead or
//! silent peer: a call ends at most one [`POLL`] after its deadline or the abort.

use crate::error::{Result, RuntimeError};
use std::io::{ErrorKind, IoSlice, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long one blocking socket call may wait before the deadline and abort flag are
/// checked again.
pub(crate) const POLL: Duration = Duration::from_millis(50);

/// The limits of one blocking operation and what to call it in errors.
pub(crate) struct Wait<'a> {
    pub start: Instant,
    pub deadline: Instant,
    pub abort: &'a AtomicBool,
    /// The rank on the other end (named in `PeerFailed`), or `u32::MAX` if unknown.
    pub peer: u32,
    pub what: &'a str,
}

impl<'a> Wait<'a> {
    pub fn new(deadline: Instant, abort: &'a AtomicBool, peer: u32, what: &'a str) -> Self {
        Wait {
            start: Instant::now(),
            deadline,
            abort,
            peer,
            what,
        }
    }

    /// Fails if the abort flag is set or the deadline has passed.
    pub fn check(&self) -> Result<()> {
        if self.abort.load(Ordering::Relaxed) {
            return Err(RuntimeError::Aborted(format!(
                "abort flag set while {}",
                self.what
            )));
        }
        if Instant::now() >= self.deadline {
            return Err(self.timeout());
        }
        Ok(())
    }

    pub fn timeout(&self) -> RuntimeError {
        RuntimeError::Timeout {
            seconds: self.start.elapsed().as_secs_f64(),
            what: self.what.to_string(),
        }
    }

    fn closed(&self, detail: &str) -> RuntimeError {
        RuntimeError::PeerFailed {
            peer: self.peer,
            reason: format!("{detail} while {}", self.what),
        }
    }

    /// `None` when the error only means "try again"; otherwise the error to report.
    fn classify(&self, e: std::io::Error) -> Option<RuntimeError> {
        match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted => None,
            ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::BrokenPipe
            | ErrorKind::NotConnected
            | ErrorKind::UnexpectedEof => Some(self.closed(&format!("connection lost ({e})"))),
            _ => Some(RuntimeError::Io(format!("{e} while {}", self.what))),
        }
    }
}

/// Puts a stream into the mode the functions below expect: blocking, with [`POLL`]
/// timeouts, and with Nagle's algorithm off (headers and acknowledgements are tiny and
/// latency-bound).
pub(crate) fn prepare(stream: &TcpStream) -> Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(POLL))?;
    stream.set_write_timeout(Some(POLL))?;
    Ok(())
}

/// Reads at least one byte into `buf` (which must not be empty).
pub(crate) fn read_some(mut stream: &TcpStream, buf: &mut [u8], w: &Wait) -> Result<usize> {
    loop {
        w.check()?;
        match stream.read(buf) {
            Ok(0) => return Err(w.closed("connection closed")),
            Ok(n) => return Ok(n),
            Err(e) => {
                if let Some(err) = w.classify(e) {
                    return Err(err);
                }
            }
        }
    }
}

/// Fills `buf` completely.
pub(crate) fn read_full(stream: &TcpStream, buf: &mut [u8], w: &Wait) -> Result<()> {
    let mut done = 0;
    while done < buf.len() {
        done += read_some(stream, &mut buf[done..], w)?;
    }
    Ok(())
}

/// Writes all of `bufs`, in order, as one byte stream.
pub(crate) fn write_full(mut stream: &TcpStream, bufs: &[&[u8]], w: &Wait) -> Result<()> {
    let mut slices: Vec<IoSlice> = bufs
        .iter()
        .filter(|b| !b.is_empty())
        .map(|b| IoSlice::new(b))
        .collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        w.check()?;
        match stream.write_vectored(rest) {
            Ok(0) => return Err(w.closed("connection closed")),
            Ok(n) => IoSlice::advance_slices(&mut rest, n),
            Err(e) => {
                if let Some(err) = w.classify(e) {
                    return Err(err);
                }
            }
        }
    }
    Ok(())
}
