//! Blocking socket I/O that can always be interrupted.
//!
//! Every stream the bootstrap and [`crate::tcp_link::TcpLink`] use has short read and write
//! timeouts ([`POLL`]); each call below loops over those short waits and, between them,
//! checks a deadline and an abort flag. That is what guarantees nothing hangs on a dead or
//! silent peer: a call ends at most one [`POLL`] after its deadline or the abort.

use crate::error::{Result, RuntimeError};
use std::io::{ErrorKind, IoSlice, Read};
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

/// `stream.write_vectored(bufs)`, except that a peer that has closed the connection is
/// an error (`EPIPE`) and never a `SIGPIPE`: `writev` raises the signal, which kills a
/// process that has not ignored it (a C or Python program using the NCCL library;
/// Rust's runtime ignores it, so Rust programs never see the difference). Linux's
/// `sendmsg` takes `MSG_NOSIGNAL`, as std's own `TcpStream::write` does with `send`.
#[cfg(target_os = "linux")]
fn send_vectored(stream: &TcpStream, bufs: &[IoSlice<'_>]) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: `IoSlice` is ABI-compatible with `iovec` on Unix (std's guarantee); the
    // header points at `bufs`, which outlives the call, with at most IOV_MAX entries;
    // `sendmsg` only reads them.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = bufs.len().min(1024) as _;
        let n = libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL);
        if n < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn send_vectored(mut stream: &TcpStream, bufs: &[IoSlice<'_>]) -> std::io::Result<usize> {
    std::io::Write::write_vectored(&mut stream, bufs)
}

/// Writes all of `bufs`, in order, as one byte stream.
pub(crate) fn write_full(stream: &TcpStream, bufs: &[&[u8]], w: &Wait) -> Result<()> {
    let mut slices: Vec<IoSlice> = bufs
        .iter()
        .filter(|b| !b.is_empty())
        .map(|b| IoSlice::new(b))
        .collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        w.check()?;
        match send_vectored(stream, rest) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    const CHILD: &str = "BRAID_TEST_SIGPIPE_CHILD";

    /// Writing to a peer that closed must be an error, not a signal that kills the
    /// process. The test's process ignores SIGPIPE (Rust's runtime does), so it runs
    /// itself again with the signal's default action, as a C program has it.
    #[test]
    fn a_write_to_a_closed_peer_is_an_error_not_a_sigpipe() {
        if std::env::var_os(CHILD).is_some() {
            // SAFETY: restores the default action of one signal in this test process.
            unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            drop(l.accept().unwrap());
            let abort = AtomicBool::new(false);
            let w = Wait::new(Instant::now() + Duration::from_secs(20), &abort, 1, "test");
            let big = vec![7u8; 1 << 16];
            let failed = (0..10_000).any(|_| write_full(&s, &[&big, &big], &w).is_err());
            assert!(failed, "writes to a closed peer kept succeeding");
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "bootstrap::io::tests::a_write_to_a_closed_peer_is_an_error_not_a_sigpipe",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the writer died ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // The child ran the test (not zero tests by a wrong name).
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("1 passed"),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}
