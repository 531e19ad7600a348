//! Bootstrap: how the ranks of one group find and trust each other before any data
//! moves, shaped after NCCL's (`ncclGetUniqueId` / `ncclCommInitRank`).
//!
//! 1. Rank 0 makes a [`UniqueId`] (root address + random secret) and the application
//!    hands it to every rank out of band.
//! 2. Every rank calls [`Bootstrap::init`]. Rank 0 accepts one authenticated join per
//!    other rank (byte layouts in `wire.rs`, the join in `join.rs`); each joiner opens
//!    its own link listener first and reports its address, and once all are in, every
//!    rank receives every rank's listening address.
//! 3. Afterwards: small control operations through rank 0 ([`Bootstrap::allgather`],
//!    [`Bootstrap::barrier`], [`Bootstrap::broadcast_from`]) and direct, authenticated
//!    TCP streams between any pair ([`Bootstrap::connect_link`] /
//!    [`Bootstrap::accept_link`]), which [`crate::tcp_link::TcpLink`] turns into links.
//!
//! Nothing blocks without bound: every operation has a deadline (the bootstrap's
//! timeout) and watches an abort flag; a peer whose connection closes or resets is
//! reported as [`RuntimeError::PeerFailed`]. Dropping a [`Bootstrap`] closes its sockets
//! and joins its thread.

mod collective;
mod handshake;
mod id;
pub mod iface;
pub(crate) mod io;
mod join;
mod links;
pub mod liveness;
mod peer;
pub mod reach;
mod wire;

pub use id::{default_listen, RootListener, Secret, UniqueId, BOOTSTRAP_ADDR_VAR};

use crate::error::{Result, RuntimeError};
use collective::{Control, Op, Role};
use io::Wait;
use links::{Acceptor, Inbox};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use wire::{kind, Frame, Hello, HelloKind};

/// What the join left this rank holding.
enum Start {
    /// Rank 0: every other rank's control stream and address (index = rank).
    Root(Vec<Option<join::Joined>>),
    /// Ranks 1..n: the control stream to rank 0.
    Member(TcpStream),
}

/// One rank's membership in a bootstrapped group.
pub struct Bootstrap {
    rank: u32,
    n_ranks: u32,
    timeout: Duration,
    secret: [u8; 32],
    abort: Arc<AtomicBool>,
    /// Where each rank accepts links.
    table: Vec<SocketAddr>,
    /// Random bytes rank 0 drew for this job and sent to all (names of shared rings).
    job: [u8; wire::NONCE_LEN],
    control: Arc<Mutex<Control>>,
    inbox: Arc<Inbox>,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
    /// Which rank failed and why, once the liveness watcher (or a control operation)
    /// noticed.
    health: Arc<liveness::Health>,
    /// The liveness streams (see `liveness.rs`).
    beats: Vec<Arc<peer::Peer>>,
    watcher: Option<JoinHandle<()>>,
}

impl Bootstrap {
    /// Joins the group `id` as `rank` of `n_ranks`, with a fresh abort flag. `timeout`
    /// bounds the join and, afterwards, every single operation.
    pub fn init(id: &UniqueId, rank: u32, n_ranks: u32, timeout: Duration) -> Result<Bootstrap> {
        Self::init_with_abort(id, rank, n_ranks, timeout, Arc::new(AtomicBool::new(false)))
    }

    /// [`Bootstrap::init`] watching `abort`: setting it ends the join and any later
    /// blocking operation with [`RuntimeError::Aborted`].
    ///
    /// Rank 0 serves the root on the socket [`UniqueId::new`] bound in this process, or
    /// binds the id's address itself if that socket is gone (an id made elsewhere).
    pub fn init_with_abort(
        id: &UniqueId,
        rank: u32,
        n_ranks: u32,
        timeout: Duration,
        abort: Arc<AtomicBool>,
    ) -> Result<Bootstrap> {
        let root = if rank == 0 {
            match id::take_root_listener(id) {
                Some(l) => Some(l),
                None => Some(TcpListener::bind(id.addr()).map_err(|e| {
                    RuntimeError::Bootstrap(format!(
                        "rank 0 cannot listen on the id's address {}: {e}",
                        id.addr()
                    ))
                })?),
            }
        } else {
            None
        };
        Self::start(id, rank, n_ranks, timeout, abort, root)
    }

    /// The join itself; rank 0 passes the root socket it listens on (and keeps it as its
    /// link listener afterwards).
    pub(crate) fn start(
        id: &UniqueId,
        rank: u32,
        n_ranks: u32,
        timeout: Duration,
        abort: Arc<AtomicBool>,
        root: Option<TcpListener>,
    ) -> Result<Bootstrap> {
        if n_ranks == 0 || rank >= n_ranks {
            return Err(RuntimeError::Invalid(format!(
                "rank {rank} is not in a group of {n_ranks}"
            )));
        }
        let secret = *id.secret().as_bytes();
        let deadline = Instant::now() + timeout;
        let what = format!("rank {rank} joining a group of {n_ranks} at {}", id.addr());
        let w = Wait::new(deadline, &abort, 0, &what);
        let (start, listener, table, job) = match root {
            Some(listener) => {
                let joined = join::accept_joins(&listener, &secret, n_ranks, &w)?;
                let mut table = vec![id.addr()];
                table.extend(joined.iter().flatten().map(|j| j.addr));
                (Start::Root(joined), listener, table, handshake::nonce())
            }
            None => {
                let (stream, listener, table, job) =
                    join::join(id.addr(), &secret, rank, n_ranks, &w)?;
                (Start::Member(stream), listener, table, job)
            }
        };
        let inbox = Arc::new(Inbox::default());
        let stop = Arc::new(AtomicBool::new(false));
        let acceptor = Acceptor {
            listener,
            secret,
            rank,
            n: n_ranks,
            table: table.clone(),
            inbox: inbox.clone(),
            stop: stop.clone(),
        };
        let handle = std::thread::Builder::new()
            .name(format!("braid-links-{rank}"))
            .spawn(move || acceptor.run())?;
        let mut boot = Bootstrap {
            rank,
            n_ranks,
            timeout,
            secret,
            abort,
            table,
            job,
            control: Arc::new(Mutex::new(Control {
                role: Role::Root(Vec::new()),
                seq: 0,
                broken: None,
            })),
            inbox,
            stop,
            acceptor: Some(handle),
            health: Arc::new(liveness::Health::default()),
            beats: Vec::new(),
            watcher: None,
        };
        let epoch = Instant::now();
        let role = match start {
            Start::Member(stream) => Role::Member(Arc::new(peer::Peer::new(0, stream, epoch))),
            Start::Root(joined) => {
                // The acceptor already runs, so links to rank 0 work as soon as anyone
                // learns the table.
                join::send_welcome(&joined, &boot.table, &boot.job, &boot.abort)?;
                Role::Root(
                    joined
                        .into_iter()
                        .enumerate()
                        .map(|(r, j)| {
                            j.map(|j| Arc::new(peer::Peer::new(r as u32, j.stream, epoch)))
                        })
                        .collect(),
                )
            }
        };
        boot.control.lock().unwrap_or_else(|p| p.into_inner()).role = role;
        // The liveness streams: every member to rank 0.
        boot.beats = if rank == 0 {
            (1..n_ranks)
                .map(|r| {
                    Ok(Arc::new(peer::Peer::new(
                        r,
                        boot.accept_link(r, liveness::BEAT_TAG)?,
                        epoch,
                    )))
                })
                .collect::<Result<Vec<_>>>()?
        } else {
            vec![Arc::new(peer::Peer::new(
                0,
                boot.connect_link(0, liveness::BEAT_TAG)?,
                epoch,
            ))]
        };
        let watcher = liveness::Watcher {
            rank,
            peers: boot.beats.clone(),
            control: boot.control.clone(),
            health: boot.health.clone(),
            abort: boot.abort.clone(),
            stop: boot.stop.clone(),
            timeout: liveness::heartbeat_timeout_from_env(),
        };
        boot.watcher = Some(
            std::thread::Builder::new()
                .name(format!("braid-liveness-{rank}"))
                .spawn(move || watcher.run())?,
        );
        tracing::debug!(rank, n_ranks, "bootstrap complete");
        Ok(boot)
    }

    pub fn rank(&self) -> u32 {
        self.rank
    }

    pub fn n_ranks(&self) -> u32 {
        self.n_ranks
    }

    /// The bound on each blocking operation.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// The abort flag every blocking operation watches (share it with links and other
    /// threads; setting it is how a communicator aborts).
    pub fn abort_flag(&self) -> &Arc<AtomicBool> {
        &self.abort
    }

    pub fn abort(&self) {
        self.abort.store(true, Ordering::Relaxed);
    }

    /// Aborts the group because of `why`, which becomes the group's failure unless one
    /// is known already (what rank 0 tells the others, and [`Bootstrap::failure`]).
    pub fn fail(&self, why: &str) {
        self.health.fail(why.to_string(), &self.abort);
    }

    /// Which rank failed and why, once this rank knows (a peer's process gone, a peer
    /// silent past `BRAID_HEARTBEAT_TIMEOUT`, rank 0's report, a failed control
    /// operation). Set before the abort flag.
    pub fn failure(&self) -> Option<String> {
        self.health.reason()
    }

    /// Random bytes rank 0 drew for this job and sent every rank over its authenticated
    /// join, as hex: unpredictable to anyone outside the group (names of shared rings).
    pub fn job_nonce(&self) -> String {
        self.job.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Where `rank` accepts links.
    pub fn peer_addr(&self, rank: u32) -> Option<SocketAddr> {
        self.table.get(rank as usize).copied()
    }

    /// Every rank's `mine`, indexed by rank. All ranks must call it (in the same order
    /// relative to the other control operations).
    pub fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let table = self.control_op(Op::Allgather, 0, mine)?;
        collective::decode_table(&table, self.n_ranks)
    }

    /// Returns once every rank has called it.
    pub fn barrier(&self) -> Result<()> {
        self.control_op(Op::Barrier, 0, &[]).map(|_| ())
    }

    /// Rank `root`'s `bytes` on every rank (`bytes` is ignored on the others). Ranks
    /// naming different roots get [`RuntimeError::Mismatch`].
    pub fn broadcast_from(&self, root: u32, bytes: &[u8]) -> Result<Vec<u8>> {
        if root >= self.n_ranks {
            return Err(RuntimeError::Invalid(format!(
                "broadcast root {root} is not in a group of {}",
                self.n_ranks
            )));
        }
        let mine = if root == self.rank { bytes } else { &[] };
        self.control_op(Op::Broadcast, root, mine)
    }

    fn control_op(&self, op: Op, root: u32, mine: &[u8]) -> Result<Vec<u8>> {
        let mut ctl = self.control.lock().unwrap_or_else(|p| p.into_inner());
        collective::run(
            &mut ctl,
            op,
            root,
            mine,
            self.timeout,
            &self.abort,
            &self.health,
        )
    }

    /// Opens a stream to `peer`, which must call `accept_link(self.rank(), tag)`. The
    /// stream is authenticated (secret, this rank, `peer`, `tag`), has Nagle off and
    /// short read/write timeouts (see [`crate::tcp_link::TcpLink`], which expects them).
    pub fn connect_link(&self, peer: u32, tag: u64) -> Result<TcpStream> {
        let addr = self.peer_addr(peer).ok_or_else(|| {
            RuntimeError::Invalid(format!("rank {peer} is not in a group of {}", self.n_ranks))
        })?;
        let what = format!(
            "rank {} connecting a link to rank {peer} (tag {tag})",
            self.rank
        );
        let w = Wait::new(Instant::now() + self.timeout, &self.abort, peer, &what);
        let stream = join::connect_retry(addr, &w)?;
        io::prepare(&stream)?;
        let hello = Hello {
            kind: HelloKind::Link,
            nonce: handshake::nonce(),
            a: self.rank,
            b: peer,
            tag,
            addr: None,
        };
        handshake::open(&stream, &self.secret, &hello, &w)?;
        let reply = Frame::read(&stream, &w)?;
        match reply.kind {
            kind::LINK_OK => Ok(stream),
            kind::REFUSED => Err(RuntimeError::Bootstrap(format!(
                "rank {peer} refused the link: {}",
                reply.text()
            ))),
            k => Err(RuntimeError::Bootstrap(format!(
                "unexpected frame kind {k} from rank {peer} during {what}"
            ))),
        }
    }

    /// Takes the stream `peer` opened with `connect_link(self.rank(), tag)`, waiting for
    /// it up to the timeout.
    pub fn accept_link(&self, peer: u32, tag: u64) -> Result<TcpStream> {
        if peer >= self.n_ranks {
            return Err(RuntimeError::Invalid(format!(
                "rank {peer} is not in a group of {}",
                self.n_ranks
            )));
        }
        let what = format!(
            "rank {} waiting for a link from rank {peer} (tag {tag})",
            self.rank
        );
        let w = Wait::new(Instant::now() + self.timeout, &self.abort, peer, &what);
        self.inbox.take((peer, tag), || w.check())
    }
}

impl std::fmt::Debug for Bootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bootstrap")
            .field("rank", &self.rank)
            .field("n_ranks", &self.n_ranks)
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl Bootstrap {
    /// Rank 0 of a failed group, going away: waits (briefly) until the members have
    /// closed their streams, reading whatever they still send. Closing a socket with
    /// unread data resets the connection, and a reset destroys the failure report still
    /// on its way to the member, which would then only learn that rank 0 vanished.
    fn linger(&self) {
        let ctl = self.control.lock().unwrap_or_else(|p| p.into_inner());
        let mut open: Vec<&TcpStream> = self.beats.iter().map(|p| &p.stream).collect();
        if let collective::Role::Root(members) = &ctl.role {
            open.extend(members.iter().flatten().map(|p| &p.stream));
        }
        for s in &open {
            let _ = s.set_nonblocking(true);
        }
        let deadline = Instant::now() + LINGER;
        let mut sink = [0u8; 4096];
        while !open.is_empty() && Instant::now() < deadline {
            open.retain(|s| match std::io::Read::read(&mut &**s, &mut sink) {
                Ok(0) => false,
                Ok(_) => true,
                Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
            });
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// How long a leaving rank waits at most for its goodbyes to be acknowledged.
const SETTLE: Duration = Duration::from_secs(1);

/// Before the streams close: reads (and drops) what the peers sent since the watcher
/// stopped, and waits, up to [`SETTLE`], until the peer's TCP has acknowledged every byte
/// sent (the goodbye). Closing a socket with unread bytes resets the connection, and a
/// reset discards a goodbye not yet acknowledged (a lossy link retransmitting it): the
/// peer would then take the rank for dead (seen in CI, ranks across a link that drops
/// packets).
fn settle<'a>(streams: impl Iterator<Item = &'a TcpStream> + Clone) {
    use std::io::Read;
    let end = Instant::now() + SETTLE;
    for s in streams.clone() {
        let _ = s.set_nonblocking(true);
    }
    loop {
        let mut all_acked = true;
        for s in streams.clone() {
            let mut sink = [0u8; 256];
            // A peer that closed or reset its end needs nothing more (a reset socket keeps
            // counting its unsent bytes).
            let closed = loop {
                match (&*s).read(&mut sink) {
                    Ok(0) => break true,
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break false,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break true,
                }
            };
            all_acked &= closed || unacknowledged(s) == 0;
        }
        if all_acked || Instant::now() >= end {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Bytes `s` sent that its peer has not acknowledged yet (0 where unknown).
#[cfg(target_os = "linux")]
fn unacknowledged(s: &TcpStream) -> i32 {
    use std::os::fd::AsRawFd;
    let mut queued: libc::c_int = 0;
    // SAFETY: a live socket; TIOCOUTQ writes one int.
    let r = unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &mut queued) };
    if r == 0 {
        queued
    } else {
        0
    }
}

#[cfg(not(target_os = "linux"))]
fn unacknowledged(_: &TcpStream) -> i32 {
    0
}

/// How long rank 0 of a failed group waits for its members to close (see `linger`).
const LINGER: Duration = Duration::from_millis(1500);

impl Drop for Bootstrap {
    /// Says goodbye on the control star (unless the group failed or was aborted, which
    /// peers must learn as a failure), stops and joins the threads; the sockets close with
    /// their owners.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.watcher.take() {
            let _ = h.join();
        }
        if !self.abort.load(Ordering::SeqCst) {
            let quiet = AtomicBool::new(false);
            for p in &self.beats {
                let w = Wait::new(
                    Instant::now() + Duration::from_millis(200),
                    &quiet,
                    p.rank,
                    "saying goodbye",
                );
                let _ = p.send(&Frame::new(kind::GOODBYE, 0, Vec::new()), &w);
            }
            settle(self.beats.iter().map(|p| &p.stream));
        }
        if self.rank == 0 && self.abort.load(Ordering::SeqCst) {
            self.linger();
        }
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
    }
}
