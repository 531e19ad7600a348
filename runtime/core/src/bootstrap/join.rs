//! Forming the group: rank 0 accepts one authenticated join per other rank, then tells
//! everyone where everyone listens.
//!
//! A joiner sends `Hello { kind: Join, secret, a: rank, b: n_ranks, addr: its listener }`.
//! The root closes connections with a bad hello or secret silently (logged), answers a
//! duplicate rank, an out-of-range rank or a different `n_ranks` with `REFUSED` and a
//! reason, and counts only valid joins. When all `n_ranks - 1` are in, each joiner gets
//! `WELCOME` with the address table; if the deadline passes first, the joiners already
//! in get `ERROR` naming the missing ranks, so they fail as promptly as the root.

use super::io::{prepare, Wait};
use super::wire::{
    decode_error, get_addr, kind, put_addr, secrets_equal, Frame, Hello, HelloKind, ADDR_LEN,
};
use crate::error::{Result, RuntimeError};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// How long one connection may take to present its hello before it is dropped.
pub(crate) const HANDSHAKE: Duration = Duration::from_secs(2);
/// How often an idle listener is polled.
pub(crate) const ACCEPT_POLL: Duration = Duration::from_millis(5);

/// A joined rank as the root holds it: its control stream and where it listens.
pub(crate) struct Joined {
    pub stream: TcpStream,
    pub addr: SocketAddr,
}

/// Rank 0: accepts joins on `listener` until every rank is in. Returns the joined ranks
/// indexed by rank (index 0 empty).
pub(crate) fn accept_joins(
    listener: &TcpListener,
    secret: &[u8; 32],
    n: u32,
    w: &Wait,
) -> Result<Vec<Option<Joined>>> {
    listener.set_nonblocking(true)?;
    let mut joined: Vec<Option<Joined>> = (0..n).map(|_| None).collect();
    let mut count = 1;
    while count < n {
        if let Err(e) = w.check() {
            let missing: Vec<u32> = (1..n).filter(|r| joined[*r as usize].is_none()).collect();
            let err = match e {
                RuntimeError::Timeout { seconds, .. } => RuntimeError::Timeout {
                    seconds,
                    what: format!("rank(s) {missing:?} of {n} to join the bootstrap"),
                },
                other => other,
            };
            tell_all(&joined, &err);
            return Err(err);
        }
        match listener.accept() {
            Ok((stream, from)) => {
                if admit(stream, from, secret, n, &mut joined, w) {
                    count += 1;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(ACCEPT_POLL),
            Err(e) => {
                tracing::warn!("bootstrap root: accept failed: {e}");
                std::thread::sleep(ACCEPT_POLL);
            }
        }
    }
    Ok(joined)
}

/// Handles one connection at the root during the join; true if it joined.
fn admit(
    stream: TcpStream,
    from: SocketAddr,
    secret: &[u8; 32],
    n: u32,
    joined: &mut [Option<Joined>],
    w: &Wait,
) -> bool {
    let deadline = w.deadline.min(Instant::now() + HANDSHAKE);
    let hw = Wait::new(deadline, w.abort, u32::MAX, "reading a join request");
    let hello = match prepare(&stream).and_then(|_| Hello::read(&stream, &hw)) {
        Ok(Ok(h)) => h,
        Ok(Err(why)) => {
            tracing::warn!("bootstrap root: refused a connection from {from}: {why}");
            return false;
        }
        Err(e) => {
            tracing::warn!("bootstrap root: dropped a connection from {from}: {e}");
            return false;
        }
    };
    if !secrets_equal(&hello.secret, secret) {
        tracing::warn!("bootstrap root: refused a connection from {from}: wrong secret");
        return false;
    }
    let addr = match (hello.kind, hello.addr) {
        (HelloKind::Join, Some(addr)) => addr,
        _ => {
            tracing::warn!("bootstrap root: refused a connection from {from}: not a join request");
            return false;
        }
    };
    let rank = hello.a;
    let verdict = judge_join(rank, hello.b, n, |r| {
        joined[r as usize].as_ref().map(|j| j.addr)
    });
    if let Err(why) = verdict {
        refuse(&stream, &why, &hw);
        tracing::warn!("bootstrap root: refused rank {rank} from {from}: {why}");
        return false;
    }
    tracing::debug!("bootstrap root: rank {rank} joined from {from}, listening on {addr}");
    joined[rank as usize] = Some(Joined { stream, addr });
    true
}

/// Whether `rank` claiming a group of `claimed_n` may join a group of `n`; `taken(r)` is
/// where rank `r` already joined from, if it did.
pub(crate) fn judge_join(
    rank: u32,
    claimed_n: u32,
    n: u32,
    taken: impl Fn(u32) -> Option<SocketAddr>,
) -> std::result::Result<(), String> {
    if claimed_n != n {
        return Err(format!(
            "rank {rank} was started with n_ranks = {claimed_n}, but the group has {n} ranks"
        ));
    }
    if rank == 0 || rank >= n {
        return Err(format!(
            "rank {rank} cannot join a group of {n} (joiners are ranks 1..{n})"
        ));
    }
    match taken(rank) {
        Some(at) => Err(format!(
            "duplicate rank {rank}: it already joined (listening on {at})"
        )),
        None => Ok(()),
    }
}

/// Best-effort `REFUSED` reply.
pub(crate) fn refuse(stream: &TcpStream, why: &str, w: &Wait) {
    let _ = Frame::new(kind::REFUSED, 0, why.as_bytes().to_vec()).write(stream, w);
}

/// Best-effort `ERROR` to every joined rank, then closes them.
fn tell_all(joined: &[Option<Joined>], err: &RuntimeError) {
    let streams: Vec<&TcpStream> = joined.iter().flatten().map(|j| &j.stream).collect();
    super::collective::report_failure(&streams, err);
}

/// Rank 0: sends every joiner the table of listening addresses. Everyone has joined by
/// now, so this gets a short wait of its own rather than what is left of the join's. On a
/// failure the others are told, as for a failed join.
pub(crate) fn send_welcome(
    joined: &[Option<Joined>],
    table: &[SocketAddr],
    abort: &AtomicBool,
) -> Result<()> {
    let mut payload = vec![0u8; table.len() * ADDR_LEN];
    for (i, a) in table.iter().enumerate() {
        put_addr(&mut payload[i * ADDR_LEN..], a);
    }
    let frame = Frame::new(kind::WELCOME, 0, payload);
    let deadline = Instant::now() + HANDSHAKE;
    for (rank, j) in joined.iter().enumerate() {
        let Some(j) = j else { continue };
        let what = format!("sending the address table to rank {rank}");
        if let Err(e) = frame.write(&j.stream, &Wait::new(deadline, abort, rank as u32, &what)) {
            tell_all(joined, &e);
            return Err(e);
        }
    }
    Ok(())
}

/// Ranks 1..n: connects to the root (retrying while it is not up yet), opens this rank's
/// link listener on the interface that reaches the root, joins, and returns the control
/// stream, the listener and the address table.
pub(crate) fn join(
    root: SocketAddr,
    secret: &[u8; 32],
    rank: u32,
    n: u32,
    w: &Wait,
) -> Result<(TcpStream, TcpListener, Vec<SocketAddr>)> {
    let stream = connect_retry(root, w)?;
    prepare(&stream)?;
    // Peers reach this rank the way the root does, so listen on the address this
    // connection leaves from.
    let listener = TcpListener::bind(SocketAddr::new(stream.local_addr()?.ip(), 0))?;
    let addr = listener.local_addr()?;
    let hello = Hello {
        kind: HelloKind::Join,
        secret: *secret,
        a: rank,
        b: n,
        tag: 0,
        addr: Some(addr),
    };
    super::io::write_full(&stream, &[&hello.encode()], w)?;
    let frame = Frame::read(&stream, w).map_err(|e| match e {
        RuntimeError::PeerFailed { reason, .. } => RuntimeError::Bootstrap(format!(
            "the bootstrap root at {root} closed the connection without welcoming rank {rank} \
             (wrong secret, i.e. an id from another group; or the root failed): {reason}"
        )),
        other => other,
    })?;
    match frame.kind {
        kind::WELCOME if frame.payload.len() == n as usize * ADDR_LEN => {
            let table = frame
                .payload
                .chunks(ADDR_LEN)
                .map(get_addr)
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| {
                    RuntimeError::Bootstrap(format!("bad address table from the root: {e}"))
                })?;
            Ok((stream, listener, table))
        }
        kind::REFUSED => Err(RuntimeError::Bootstrap(format!(
            "the bootstrap root at {root} refused rank {rank}: {}",
            frame.text()
        ))),
        kind::ERROR => Err(decode_error(&frame.payload)),
        k => Err(RuntimeError::Bootstrap(format!(
            "unexpected frame kind {k} from the bootstrap root"
        ))),
    }
}

/// Connects to `addr`, retrying refused connections until the deadline (the other side
/// may not be listening yet).
pub(crate) fn connect_retry(addr: SocketAddr, w: &Wait) -> Result<TcpStream> {
    let mut backoff = Duration::from_millis(10);
    let mut last = String::from("none");
    loop {
        match w.check() {
            Err(RuntimeError::Timeout { seconds, what }) => {
                let what = format!("{what}: connecting to {addr} (last error: {last})");
                return Err(RuntimeError::Timeout { seconds, what });
            }
            Err(e) => return Err(e),
            Ok(()) => {}
        }
        let left = w.deadline.saturating_duration_since(Instant::now());
        match TcpStream::connect_timeout(
            &addr,
            left.clamp(Duration::from_millis(1), Duration::from_secs(1)),
        ) {
            Ok(s) => return Ok(s),
            Err(e) => {
                tracing::debug!("connecting to {addr} while {}: {e}; retrying", w.what);
                last = e.to_string();
                std::thread::sleep(backoff.min(left));
                backoff = (backoff * 2).min(Duration::from_millis(200));
            }
        }
    }
}
