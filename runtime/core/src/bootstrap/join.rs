//! Forming the group: rank 0 accepts one authenticated join per other rank, then tells
//! everyone where everyone listens.
//!
//! A joiner opens with `Hello { kind: Join, a: rank, b: n_ranks, addr: its listener }`
//! and the challenge-response of `handshake.rs`. The root runs every handshake on a
//! thread of its own with its own deadline, so connections that stay silent (or many of
//! them) cannot hold up real ranks; a connection that fails the handshake is closed
//! silently (logged). Authenticated joins are judged in order: a duplicate rank, an
//! out-of-range rank or a different `n_ranks` is answered with `REFUSED` and a reason.
//! When all `n_ranks - 1` are in, each joiner gets `WELCOME` with the address table and
//! the job's random nonce; if the deadline passes first, the joiners already in get
//! `ERROR` naming the missing ranks, so they fail as promptly as the root.

use super::handshake::{self, Accepted};
use super::io::{prepare, Wait};
use super::wire::{
    decode_error, get_addr, kind, put_addr, Frame, Hello, HelloKind, ADDR_LEN, NONCE_LEN,
};
use crate::error::{Result, RuntimeError};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// How long one connection may take to complete its handshake before it is dropped.
pub(crate) const HANDSHAKE: Duration = Duration::from_secs(2);
/// How often an idle listener is polled.
pub(crate) const ACCEPT_POLL: Duration = Duration::from_millis(5);
/// Handshakes in flight at once; further connections are closed at once until some end.
pub(crate) const MAX_HANDSHAKES: usize = 1024;

/// A joined rank as the root holds it: its control stream and where it listens.
pub(crate) struct Joined {
    pub stream: TcpStream,
    pub addr: SocketAddr,
}

/// Runs handshakes of accepted connections on threads of their own and hands the
/// authenticated ones over; `stop` (set when the owner is done) ends them early.
pub(crate) struct Handshakes {
    secret: [u8; 32],
    what: &'static str,
    in_flight: Arc<AtomicUsize>,
    pub stop: Arc<AtomicBool>,
    tx: mpsc::Sender<(TcpStream, SocketAddr, Hello)>,
    pub rx: mpsc::Receiver<(TcpStream, SocketAddr, Hello)>,
}

impl Handshakes {
    pub fn new(secret: [u8; 32], what: &'static str) -> Handshakes {
        let (tx, rx) = mpsc::channel();
        Handshakes {
            secret,
            what,
            in_flight: Arc::new(AtomicUsize::new(0)),
            stop: Arc::new(AtomicBool::new(false)),
            tx,
            rx,
        }
    }

    /// Starts the handshake of one accepted connection (`me` names this rank in logs).
    pub fn start(&self, stream: TcpStream, from: SocketAddr, me: u32) {
        if self.in_flight.fetch_add(1, Ordering::SeqCst) >= MAX_HANDSHAKES {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!(
                "rank {me}: {MAX_HANDSHAKES} handshakes in flight; closed a connection from {from}"
            );
            return;
        }
        let (secret, what) = (self.secret, self.what);
        let (in_flight, stop, tx) = (self.in_flight.clone(), self.stop.clone(), self.tx.clone());
        let spawned = std::thread::Builder::new()
            .name("braid-handshake".into())
            .spawn(move || {
                let w = Wait::new(Instant::now() + HANDSHAKE, &stop, u32::MAX, what);
                match prepare(&stream).and_then(|_| handshake::accept(&stream, &secret, &w)) {
                    Ok(Accepted::Peer(hello)) => {
                        let _ = tx.send((stream, from, hello));
                    }
                    Ok(Accepted::Stranger(why)) => {
                        tracing::warn!("rank {me}: refused a connection from {from}: {why}")
                    }
                    Err(e) => tracing::warn!("rank {me}: dropped a connection from {from}: {e}"),
                }
                in_flight.fetch_sub(1, Ordering::SeqCst);
            });
        if let Err(e) = spawned {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!("rank {me}: cannot start a handshake thread: {e}");
        }
    }
}

impl Drop for Handshakes {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
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
    let shakes = Handshakes::new(*secret, "reading a join request");
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
        let mut idle = true;
        match listener.accept() {
            Ok((stream, from)) => {
                idle = false;
                shakes.start(stream, from, 0);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => tracing::warn!("bootstrap root: accept failed: {e}"),
        }
        while let Ok((stream, from, hello)) = shakes.rx.try_recv() {
            idle = false;
            if admit(stream, from, hello, n, &mut joined) {
                count += 1;
            }
        }
        if idle {
            std::thread::sleep(ACCEPT_POLL);
        }
    }
    Ok(joined)
}

/// Judges one authenticated connection at the root during the join; true if it joined.
fn admit(
    stream: TcpStream,
    from: SocketAddr,
    hello: Hello,
    n: u32,
    joined: &mut [Option<Joined>],
) -> bool {
    let stop = AtomicBool::new(false);
    let hw = Wait::new(
        Instant::now() + HANDSHAKE,
        &stop,
        u32::MAX,
        "answering a join request",
    );
    let addr = match (hello.kind, hello.addr) {
        (HelloKind::Join, Some(addr)) => addr,
        _ => {
            refuse(
                &stream,
                "not a join request: the group is still forming",
                &hw,
            );
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

/// Best-effort `REFUSED` reply, then a graceful close: closing with the joiner's bytes
/// still unread would reset the connection, and the reset can reach the joiner before the
/// reply does (it then reads "connection reset" instead of the reason; seen in CI). So
/// the root says it is done writing and reads whatever the joiner still sends until it
/// closes, for at most `LINGER` (a joiner reads the reply and closes at once; on a loaded
/// machine it may not run for a while, and 250 ms proved too short on two busy cores).
pub(crate) fn refuse(stream: &TcpStream, why: &str, w: &Wait) {
    use std::io::Read;
    const LINGER: Duration = Duration::from_secs(2);
    if Frame::new(kind::REFUSED, 0, why.as_bytes().to_vec())
        .write(stream, w)
        .is_err()
    {
        return;
    }
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let end = Instant::now() + LINGER;
    let mut sink = [0u8; 512];
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match (&*stream).read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
}

/// Best-effort `ERROR` to every joined rank, then closes them.
fn tell_all(joined: &[Option<Joined>], err: &RuntimeError) {
    let frame = Frame::new(kind::ERROR, 0, super::wire::encode_error(err));
    let quiet = AtomicBool::new(false);
    for j in joined.iter().flatten() {
        let w = Wait::new(
            Instant::now() + Duration::from_millis(200),
            &quiet,
            u32::MAX,
            "reporting a failure",
        );
        let _ = frame.write(&j.stream, &w);
        let _ = j.stream.shutdown(std::net::Shutdown::Both);
    }
}

/// Rank 0: sends every joiner the table of listening addresses and the job's nonce.
/// Everyone has joined by now, so this gets a short wait of its own rather than what is
/// left of the join's. On a failure the others are told, as for a failed join.
pub(crate) fn send_welcome(
    joined: &[Option<Joined>],
    table: &[SocketAddr],
    job: &[u8; NONCE_LEN],
    abort: &AtomicBool,
) -> Result<()> {
    let mut payload = vec![0u8; table.len() * ADDR_LEN + NONCE_LEN];
    for (i, a) in table.iter().enumerate() {
        put_addr(&mut payload[i * ADDR_LEN..], a);
    }
    payload[table.len() * ADDR_LEN..].copy_from_slice(job);
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

/// What a joiner gets: its control stream to the root, its link listener, the address
/// table and the job's nonce.
pub(crate) type Welcome = (TcpStream, TcpListener, Vec<SocketAddr>, [u8; NONCE_LEN]);

/// Ranks 1..n: connects to the root (retrying while it is not up yet), opens this rank's
/// link listener on the interface that reaches the root, joins, and returns what the
/// root sent.
pub(crate) fn join(
    root: SocketAddr,
    secret: &[u8; 32],
    rank: u32,
    n: u32,
    w: &Wait,
) -> Result<Welcome> {
    let stream = connect_retry(root, w)?;
    prepare(&stream)?;
    // Peers reach this rank on the interface BRAID_SOCKET_IFNAME / NCCL_SOCKET_IFNAME
    // names, else the way the root does: on the address this connection leaves from.
    let ip = match super::iface::listen_ip_from_env()? {
        Some(ip) => ip,
        None => stream.local_addr()?.ip(),
    };
    let listener = TcpListener::bind(SocketAddr::new(ip, 0)).map_err(|e| {
        RuntimeError::Bootstrap(format!(
            "rank {rank} cannot listen for its peers on {ip}: {e}"
        ))
    })?;
    let addr = listener.local_addr()?;
    let hello = Hello {
        kind: HelloKind::Join,
        nonce: handshake::nonce(),
        a: rank,
        b: n,
        tag: 0,
        addr: Some(addr),
    };
    handshake::open(&stream, secret, &hello, w).map_err(|e| match e {
        RuntimeError::PeerFailed { reason, .. } => RuntimeError::Bootstrap(format!(
            "the bootstrap root at {root} closed the connection during rank {rank}'s handshake: {reason}"
        )),
        other => other,
    })?;
    let frame = Frame::read(&stream, w).map_err(|e| match e {
        RuntimeError::PeerFailed { reason, .. } => RuntimeError::Bootstrap(format!(
            "the bootstrap root at {root} closed the connection without welcoming rank {rank}: {reason}"
        )),
        other => other,
    })?;
    let table_len = n as usize * ADDR_LEN;
    match frame.kind {
        kind::WELCOME if frame.payload.len() == table_len + NONCE_LEN => {
            let table = frame.payload[..table_len]
                .chunks(ADDR_LEN)
                .map(get_addr)
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| {
                    RuntimeError::Bootstrap(format!("bad address table from the root: {e}"))
                })?;
            let job = frame.payload[table_len..].try_into().expect("16 bytes");
            Ok((stream, listener, table, job))
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
