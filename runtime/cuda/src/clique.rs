//! The ranks of one communicator that live in this process, and everything they share:
//! their GPUs' contexts, the connections between ranks (created once, on first use, and
//! shared by every plan and call afterwards), each rank's counters, status words and
//! scratch, and the abort word. A communicator made by `init_all` has every rank here; one
//! made by `init_rank` has one, and reaches the others' processes through the bootstrap.
//!
//! A connection `(sender, receiver, channel)` is one allocation in the receiver's memory
//! (or host memory) holding two lanes, Simple and LL, each a header (head and tail
//! counters on separate 128-byte lines) and `slots` slots. Each end of a lane has a
//! counter (slices sent, or received) in its rank's counter array, which the kernel reads
//! at the start of a call and writes back at its end.

use crate::device::{enable_peer, DeviceAlloc, HostAlloc};
use crate::error::{CudaError, Result};
use crate::kernel::{Lane, LANES};
use crate::net::{self, fifo::Fifo, proxy::Proxy, NetMap};
use crate::program::{self, BlockEnds, Conn, EndDesc};
use crate::transport::{self, Region};
use braid_plan::Plan;
use braid_runtime::device_comm::Stats;
use cudarc::driver::{result, sys, CudaContext};
use rustc_hash::FxHashMap;
use std::collections::{HashMap, HashSet};
use std::net::TcpStream;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Grid blocks one rank's launch may have.
pub const MAX_GRID: usize = 1024;
/// Connection-end lane counters per rank.
pub const MAX_COUNTERS: usize = 16384;
/// Bytes before a lane's first slot (head at 0, tail at 128).
pub const LANE_HEADER: usize = 256;
pub const TAIL_AT: u64 = 128;
/// The first connection channel of point-to-point traffic, apart from every plan's.
pub const P2P_CHANNEL: u32 = braid_runtime::p2p::P2P_CHANNEL;
/// Slots per lane of a point-to-point connection.
pub const P2P_SLOTS: u32 = 4;

/// Exchanges between this process's ranks and the others' (the bootstrap).
pub trait Oob: Send + Sync {
    /// Every rank's `mine`, indexed by rank.
    fn allgather(&self, mine: &[u8]) -> braid_runtime::Result<Vec<Vec<u8>>>;
    fn barrier(&self) -> braid_runtime::Result<()>;
    /// A stream to `peer`, which takes it with `accept_link(self's rank, tag)`.
    fn connect_link(&self, peer: u32, tag: u64) -> braid_runtime::Result<TcpStream>;
    /// The stream `peer` opened with `connect_link(this rank, tag)`.
    fn accept_link(&self, peer: u32, tag: u64) -> braid_runtime::Result<TcpStream>;
}

impl Oob for braid_runtime::bootstrap::Bootstrap {
    fn allgather(&self, mine: &[u8]) -> braid_runtime::Result<Vec<Vec<u8>>> {
        braid_runtime::bootstrap::Bootstrap::allgather(self, mine)
    }
    fn barrier(&self) -> braid_runtime::Result<()> {
        braid_runtime::bootstrap::Bootstrap::barrier(self)
    }
    fn connect_link(&self, peer: u32, tag: u64) -> braid_runtime::Result<TcpStream> {
        braid_runtime::bootstrap::Bootstrap::connect_link(self, peer, tag)
    }
    fn accept_link(&self, peer: u32, tag: u64) -> braid_runtime::Result<TcpStream> {
        braid_runtime::bootstrap::Bootstrap::accept_link(self, peer, tag)
    }
}

/// One rank of this process.
pub struct Local {
    pub rank: u32,
    pub ctx: Arc<CudaContext>,
    /// Dependency counters (`MAX_GRID`), the finished count, then the failure word.
    pub state: DeviceAlloc,
    /// Connection-end counters.
    pub counters: DeviceAlloc,
    /// Scratch memory, allocated with the first plan that has scratch.
    pub scratch: OnceLock<DeviceAlloc>,
}

impl Local {
    /// Device address of the failure word.
    pub fn fail_addr(&self) -> u64 {
        self.state.ptr() + 8 * (MAX_GRID as u64 + 1)
    }
}

/// Both lanes of one end of a connection, for the table.
pub(crate) type Ends = [EndDesc; LANES];

#[derive(Default)]
struct Conns {
    /// Every connection of the communicator made so far, whoever's (the same set in
    /// every process, so every process agrees on what is still missing).
    made: HashSet<Conn>,
    /// Slots per lane of each connection.
    slots: HashMap<Conn, u32>,
    /// The ends this process's ranks hold: (connection, sending end?).
    ends: HashMap<(Conn, bool), Ends>,
    /// Next free counter per local rank.
    next_counter: HashMap<u32, u32>,
    /// FIFOs created here (receivers here).
    own: Vec<Box<dyn Region>>,
    /// Peers' FIFOs opened here (senders here, receivers in other processes).
    opened: Vec<Box<dyn Region>>,
    /// The proxies of this process's network connection ends ([`Proxy`] or
    /// [`net::rdma::RdmaEnd`]), dropped (flushed) before the FIFOs they serve.
    proxies: Vec<Box<dyn std::any::Any + Send>>,
}

pub struct Clique {
    pub n: u32,
    pub locals: Vec<Local>,
    /// The other processes' ranks, when there are any.
    pub oob: Option<Arc<dyn Oob>>,
    /// Whether connections go peer to peer (else through host memory).
    pub p2p: bool,
    /// Whether calls may run LL128: every link of the communicator passed its stress
    /// test, as every rank agreed ([`crate::ll128`]).
    pub ll128: bool,
    /// Which connections go over the network.
    pub net: NetMap,
    /// The RDMA device network connections use (`None`: TCP streams).
    pub rdma: Option<Arc<dyn braid_ib::rdma::Device>>,
    pub timeout: Duration,
    pub scratch_bytes: usize,
    /// `BRAID_TRACE`: prepared plans record their step times.
    pub trace: bool,
    /// Ranks of one launch may read each other's `in` (`Options::direct`).
    pub direct: bool,
    /// Calls that qualify run as flat launches (`Options::flat`, and direct reads on).
    pub flat: bool,
    /// Destinations a pass of a flat launch writes at most (`Options::flat_dsts`).
    pub flat_dsts: usize,
    /// Blocks a flat launch takes at most (`Options::flat_blocks`; `None`: one per
    /// multiprocessor).
    pub flat_blocks: Option<u32>,
    /// Flat launches take the full kernel argument (`Options::flat_full_args`).
    pub flat_full_args: bool,
    /// Word 0: abort; word 1 + i: local rank i's failure report. Host-mapped.
    words: Arc<HostAlloc>,
    conns: Mutex<Conns>,
    /// Point-to-point channels per ordered pair, once [`Clique::connect_p2p`] made them
    /// (read on every send and receive: no lock).
    p2p_channels: OnceLock<u32>,
    /// Launches of this clique so far: per GPU, the stream and rank of the last launch
    /// that did not hold every rank on that GPU (to refuse a launch that would wait
    /// behind it forever); per stream, how many launches it has seen.
    pub launches: Mutex<Launches>,
    /// Per GPU: an event joining several ranks' streams around one launch.
    join: Mutex<FxHashMap<usize, Event>>,
    /// Launch programs of flat launches made so far, per plan digest and ranks of the
    /// launch in order ([`Clique::flat_program`]).
    flat_programs: Mutex<FxHashMap<FlatKey, Option<Arc<crate::flat::Program>>>>,
    /// Why the clique was aborted, when the reason came from outside (a peer's failure
    /// the bootstrap noticed).
    abort_reason: Arc<Mutex<Option<String>>>,
}

/// A flat launch program's key: the plan's digest and the ranks of the launch in order.
type FlatKey = (u64, [u32; crate::kernel::MAX_LOCAL], usize);

/// Flat launch programs a clique keeps at most (it starts over past them).
const FLAT_PROGRAMS: usize = 256;

/// What [`Clique::launches`] keeps (looked up at every launch: a fast hash of small
/// keys).
#[derive(Default)]
pub struct Launches {
    pub last_solo: FxHashMap<usize, Option<(usize, u32)>>,
    pub per_stream: FxHashMap<usize, u64>,
}

/// A CUDA event handle owned by the clique.
struct Event(sys::CUevent, Arc<CudaContext>);

// SAFETY: event handles may be used from any thread.
unsafe impl Send for Event {}

impl Drop for Event {
    fn drop(&mut self) {
        if self.1.bind_to_thread().is_ok() {
            // SAFETY: created by `join_event`, destroyed once.
            let _ = unsafe { result::event::destroy(self.0) };
        }
    }
}

impl Clique {
    /// The clique of `locals` (rank, context) of a communicator of `n` ranks, with the
    /// timeout, scratch size and tracing of `opts`.
    pub fn new(
        n: u32,
        locals: Vec<(u32, Arc<CudaContext>)>,
        oob: Option<Arc<dyn Oob>>,
        (p2p, ll128): (bool, bool),
        (net, rdma): (NetMap, Option<Arc<dyn braid_ib::rdma::Device>>),
        opts: &crate::comm::Options,
        stats: &Stats,
    ) -> Result<Clique> {
        if p2p {
            for (i, (_, a)) in locals.iter().enumerate() {
                for (_, b) in &locals[i + 1..] {
                    if a.ordinal() != b.ordinal() {
                        enable_peer(a, b)?;
                        enable_peer(b, a)?;
                    }
                }
            }
        }
        // Connections over the network are meant to carry the data (BRAID_NET_FORCE
        // tests the network with ranks of one machine): no direct reads then.
        let direct = opts.direct && !net.any();
        let words = Arc::new(HostAlloc::new(&locals[0].1, 4 * (1 + locals.len()))?);
        stats.allocated(1);
        let mut out = Vec::with_capacity(locals.len());
        for (rank, ctx) in locals {
            let state = DeviceAlloc::new(&ctx, 8 * (MAX_GRID + 2), 0)?;
            let counters = DeviceAlloc::new(&ctx, 8 * MAX_COUNTERS, 0)?;
            stats.allocated(2);
            out.push(Local {
                rank,
                ctx,
                state,
                counters,
                scratch: OnceLock::new(),
            });
        }
        Ok(Clique {
            n,
            locals: out,
            oob,
            p2p,
            ll128,
            net,
            rdma,
            timeout: opts.timeout,
            scratch_bytes: opts.scratch_bytes,
            trace: opts.trace,
            direct,
            flat: direct && opts.flat,
            flat_dsts: opts.flat_dsts,
            flat_blocks: opts.flat_blocks,
            flat_full_args: opts.flat_full_args,
            words,
            conns: Mutex::new(Conns::default()),
            p2p_channels: OnceLock::new(),
            launches: Mutex::new(Launches::default()),
            join: Mutex::new(FxHashMap::default()),
            flat_programs: Mutex::new(FxHashMap::default()),
            abort_reason: Arc::new(Mutex::new(None)),
        })
    }

    /// The launch program of the flat launch of `calls` (one plan, `digest`), made once
    /// per plan and ranks ([`crate::flat::launch_program`]; `None` where they cannot
    /// run as one).
    pub fn flat_program(
        &self,
        plan: &braid_plan::Plan,
        digest: u64,
        calls: &[crate::flat::RankCall<'_>],
    ) -> Option<Arc<crate::flat::Program>> {
        let mut ranks = [0u32; crate::kernel::MAX_LOCAL];
        for (slot, c) in ranks.iter_mut().zip(calls) {
            *slot = c.rank;
        }
        if calls.len() > ranks.len() {
            return None;
        }
        let key = (digest, ranks, calls.len());
        let mut m = self.flat_programs.lock().ok()?;
        if let Some(p) = m.get(&key) {
            return p.clone();
        }
        if m.len() >= FLAT_PROGRAMS {
            m.clear();
        }
        let p = crate::flat::launch_program(plan, calls, self.flat_dsts).map(Arc::new);
        m.insert(key, p.clone());
        p
    }

    /// Whether every rank of the communicator is here, on one GPU, with direct reads on:
    /// each call of all ranks is one launch, and out-of-place calls read peers' `in`
    /// where the plan allows.
    pub fn launches_together(&self) -> bool {
        self.direct
            && self.oob.is_none()
            && self.locals.len() == self.n as usize
            && self
                .locals
                .iter()
                .all(|l| l.ctx.ordinal() == self.locals[0].ctx.ordinal())
    }

    /// The position of `rank` among the local ranks.
    pub fn local_index(&self, rank: u32) -> Option<usize> {
        self.locals.iter().position(|l| l.rank == rank)
    }

    /// Local ranks on the same GPU as local rank `i` (itself included).
    pub fn sharing_gpu(&self, i: usize) -> usize {
        let d = self.locals[i].ctx.ordinal();
        self.locals.iter().filter(|l| l.ctx.ordinal() == d).count()
    }

    /// The device address of the abort word.
    pub fn abort_addr(&self) -> u64 {
        self.words.ptr()
    }

    /// Device address of local rank `i`'s failure report.
    pub fn report_addr(&self, i: usize) -> u64 {
        self.words.ptr() + 4 * (1 + i as u64)
    }

    /// The event that joins streams of `ctx`'s GPU around a launch (made on first use).
    pub fn join_event(&self, ctx: &Arc<CudaContext>) -> Result<sys::CUevent> {
        let mut j = self.join.lock().unwrap();
        if let Some(e) = j.get(&ctx.ordinal()) {
            return Ok(e.0);
        }
        ctx.bind_to_thread()?;
        let e = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?;
        j.insert(ctx.ordinal(), Event(e, ctx.clone()));
        Ok(e)
    }

    /// Asks every kernel of this process's ranks to stop.
    pub fn abort(&self) {
        self.words.write_u32(0, 1);
    }

    /// [`Clique::abort`], remembering why (the first reason wins).
    pub fn abort_because(&self, why: &str) {
        self.on_fail()(why.to_string());
    }

    /// What aborts the clique with a reason, for threads that outlive a borrow of it
    /// (the network proxies).
    fn on_fail(&self) -> net::proxy::OnFail {
        let (words, reason) = (self.words.clone(), self.abort_reason.clone());
        Arc::new(move |why: String| {
            reason.lock().unwrap().get_or_insert(why);
            words.write_u32(0, 1);
        })
    }

    /// Whether the kernels see FIFOs in host memory (host-staged or network
    /// connections): they then read them uncached.
    pub fn host_fifo(&self) -> bool {
        !self.p2p || self.net.any()
    }

    /// Why the clique was aborted, if a reason was given.
    pub fn abort_reason(&self) -> Option<String> {
        self.abort_reason.lock().unwrap().clone()
    }

    pub fn aborted(&self) -> bool {
        self.words.read_u32(0) != 0
    }

    /// Local rank `i`'s failure report (0: none).
    pub fn report(&self, i: usize) -> u32 {
        self.words.read_u32(1 + i)
    }

    /// Local rank `i`'s scratch memory, allocated on first need.
    pub fn scratch(&self, i: usize, stats: &Stats) -> Result<u64> {
        let l = &self.locals[i];
        if let Some(s) = l.scratch.get() {
            return Ok(s.ptr());
        }
        let s = DeviceAlloc::new(&l.ctx, self.scratch_bytes, 0)?;
        stats.allocated(1);
        Ok(l.scratch.get_or_init(|| s).ptr())
    }

    /// Makes every connection `plan` needs that does not exist yet. Collective over the
    /// processes when some connection has an end elsewhere: every process calls it for
    /// the same plans in the same order (every rank prepares the same choices).
    pub fn connect(&self, plan: &Plan, stats: &Stats) -> Result<()> {
        let what = format!("plan `{}`", plan.name);
        let slots = plan.slots.max(braid_plan::DEFAULT_SLOTS);
        self.connect_all(program::connections(plan), slots, plan.slots, &what, stats)
    }

    /// Makes the point-to-point connections: `channels` per ordered pair of ranks (every
    /// pair: a send may go to any rank, and a rank that takes no part in a group must not
    /// be needed to connect the others). Collective over the processes, at
    /// initialisation.
    pub fn connect_p2p(&self, channels: u32, stats: &Stats) -> Result<()> {
        let mut needed = Vec::new();
        for k in 0..channels {
            for sender in 0..self.n {
                for receiver in (0..self.n).filter(|&r| r != sender) {
                    needed.push(Conn {
                        sender,
                        receiver,
                        channel: P2P_CHANNEL + k,
                    });
                }
            }
        }
        self.connect_all(needed, P2P_SLOTS, P2P_SLOTS, "point to point", stats)?;
        let _ = self.p2p_channels.set(channels);
        Ok(())
    }

    /// Point-to-point channels per ordered pair of ranks (0: none were made).
    pub fn p2p_channels(&self) -> u32 {
        self.p2p_channels.get().copied().unwrap_or(0)
    }

    /// Both lanes of local rank `rank`'s end of its point-to-point connection on channel
    /// `k` to (`send`) or from `peer`.
    pub fn p2p_end(&self, rank: u32, peer: u32, send: bool, k: u32) -> Option<Ends> {
        let (sender, receiver) = if send { (rank, peer) } else { (peer, rank) };
        let conn = Conn {
            sender,
            receiver,
            channel: P2P_CHANNEL + k,
        };
        self.conns.lock().unwrap().ends.get(&(conn, send)).copied()
    }

    /// Makes every connection of `needed` that does not exist yet, with `slots` slots per
    /// lane; those that exist must have at least `need`. Collective over the processes
    /// when some connection has an end elsewhere: every process calls it with the same
    /// connections in the same order.
    fn connect_all(
        &self,
        needed: Vec<Conn>,
        slots: u32,
        need: u32,
        what: &str,
        stats: &Stats,
    ) -> Result<()> {
        let mut c = self.conns.lock().unwrap();
        for conn in needed.iter().filter(|x| c.made.contains(x)) {
            let have = c.slots[conn];
            if have < need {
                return Err(CudaError::Invalid(format!(
                    "{what} needs {need} slots per connection; the communicator's connection \
                     {}->{} channel {} has {have}",
                    conn.sender, conn.receiver, conn.channel
                )));
            }
        }
        let missing: Vec<Conn> = needed.into_iter().filter(|x| !c.made.contains(x)).collect();
        if missing.is_empty() {
            return Ok(());
        }
        let len: usize = Lane::ALL
            .into_iter()
            .filter(|&l| self.has_lane(l, false))
            .map(|l| lane_len(l, slots))
            .sum();
        let local = |r: u32| self.local_index(r);
        // Receivers here create their FIFOs.
        let mut offers: Vec<(usize, Vec<u8>)> = Vec::new();
        let mut created: HashMap<usize, u64> = HashMap::new();
        let is_net = |conn: &Conn| self.net.between(conn.sender, conn.receiver);
        if missing.iter().any(is_net) && slots > program::NET_MAX_SLOTS {
            return Err(CudaError::Invalid(format!(
                "{what} asks for {slots} slots per connection; network connections hold at \
                 most {}",
                program::NET_MAX_SLOTS
            )));
        }
        // Network connections: each end's FIFO in its own host memory, kept for its proxy.
        let mut net_fifos: HashMap<(usize, bool), Fifo> = HashMap::new();
        for (i, conn) in missing.iter().enumerate() {
            let Some(ri) = local(conn.receiver) else {
                continue;
            };
            let same = local(conn.sender).is_some();
            if is_net(conn) {
                let (fifo, ptr) = self.net_fifo(ri, slots)?;
                stats.allocated(1);
                created.insert(i, ptr);
                net_fifos.insert((i, false), fifo);
                continue;
            }
            let t = transport::choose(same, self.p2p);
            let (region, desc) = t.create(&self.locals[ri].ctx, len)?;
            stats.allocated(1);
            created.insert(i, region.ptr());
            c.own.push(region);
            if !same {
                offers.push((i, desc));
            }
        }
        // Descriptions travel to the senders' processes.
        let mut remote: HashMap<usize, Vec<u8>> = HashMap::new();
        if let Some(oob) = &self.oob {
            let all = oob.allgather(&encode_offers(&offers))?;
            stats.exchanged();
            for (r, bytes) in all.iter().enumerate() {
                for (i, desc) in decode_offers(bytes).map_err(|e| {
                    CudaError::Invalid(format!("rank {r} sent a malformed FIFO description: {e}"))
                })? {
                    let Some(conn) = missing.get(i) else {
                        return Err(CudaError::Invalid(format!(
                            "rank {r} offered connection {i} of {}",
                            missing.len()
                        )));
                    };
                    if conn.receiver == r as u32 && local(conn.sender).is_some() {
                        remote.insert(i, desc);
                    }
                }
            }
        }
        // Ends here: counters, and the sender's view of the FIFO.
        for (i, conn) in missing.iter().enumerate() {
            let base_recv = created.get(&i).copied();
            let gpu = |r: u32| local(r).map(|i| self.locals[i].ctx.ordinal());
            let net = is_net(conn);
            let scope = !net && gpu_scope(self.p2p, gpu(conn.sender), gpu(conn.receiver));
            if let Some(si) = local(conn.sender) {
                let base = match base_recv {
                    _ if net => {
                        let (fifo, ptr) = self.net_fifo(si, slots)?;
                        stats.allocated(1);
                        net_fifos.insert((i, true), fifo);
                        ptr
                    }
                    Some(p) => p,
                    None => {
                        let desc = remote.get(&i).ok_or_else(|| {
                            CudaError::Invalid(format!(
                                "rank {} did not describe the FIFO of its connection from \
                                 rank {} (channel {})",
                                conn.receiver, conn.sender, conn.channel
                            ))
                        })?;
                        let t = transport::choose(false, self.p2p);
                        let region = t.open(&self.locals[si].ctx, desc)?;
                        stats.allocated(1);
                        let p = region.ptr();
                        c.opened.push(region);
                        p
                    }
                };
                let ends = self.lanes(&mut c, conn.sender, base, slots, scope, net)?;
                c.ends.insert((*conn, true), ends);
            }
            if let Some(base) = base_recv {
                let ends = self.lanes(&mut c, conn.receiver, base, slots, scope, false)?;
                c.ends.insert((*conn, false), ends);
            }
        }
        self.start_proxies(&mut c, &missing, net_fifos)?;
        if let Some(oob) = &self.oob {
            // Every sender has opened its FIFOs: shared files need no name any more.
            oob.barrier()?;
            stats.exchanged();
        }
        for r in c.own.iter_mut() {
            r.opened_by_all();
        }
        for conn in missing {
            c.made.insert(conn);
            c.slots.insert(conn, slots);
        }
        Ok(())
    }

    /// Whether connections (network ones: `net`) have `lane`. LL128's only where the
    /// communicator may run it (its links passed the stress test, never over a proxy):
    /// elsewhere its slots would be memory no call uses.
    fn has_lane(&self, lane: Lane, net: bool) -> bool {
        lane != Lane::Ll128 || (self.ll128 && !net)
    }

    /// The lanes of a connection end of local rank `rank` at FIFO base `base`, with a
    /// fresh counter each, in lane order. A lane the end does not have ([`Self::has_lane`]:
    /// LL128, the last) is left unconnected (no slots): no kernel uses it, since the
    /// engine prepares LL128 only where the clique has the lane (`Clique::ll128`, never
    /// with a network connection).
    fn lanes(
        &self,
        c: &mut Conns,
        rank: u32,
        base: u64,
        slots: u32,
        gpu_scope: bool,
        net: bool,
    ) -> Result<Ends> {
        let next = c.next_counter.entry(rank).or_insert(0);
        if *next as usize + LANES > MAX_COUNTERS {
            return Err(CudaError::Invalid(format!(
                "rank {rank} has more than {} connection ends",
                MAX_COUNTERS / LANES
            )));
        }
        let mut out = [EndDesc::default(); LANES];
        let mut at = base;
        for lane in Lane::ALL.into_iter().filter(|&l| self.has_lane(l, net)) {
            out[lane as usize] = EndDesc {
                slots: at + LANE_HEADER as u64,
                head: at,
                tail: at + TAIL_AT,
                counter: *next,
                nslots: slots,
                gpu_scope,
                net,
            };
            *next += 1;
            at += lane_len(lane, slots) as u64;
        }
        Ok(out)
    }

    /// A network connection end's FIFO in local rank `i`'s pinned host memory: the
    /// proxy's view of it, and the address kernels use.
    fn net_fifo(&self, i: usize, slots: u32) -> Result<(Fifo, u64)> {
        let mem = Arc::new(HostAlloc::new(
            &self.locals[i].ctx,
            net::fifo::fifo_len(slots),
        )?);
        let ptr = mem.ptr();
        Ok((Fifo::new(mem, slots).map_err(CudaError::Invalid)?, ptr))
    }

    /// Connects the streams of the network connections among `missing` and starts a
    /// proxy on each end here. Senders connect first, then receivers accept: connecting
    /// waits for the peer's acceptor thread only, so no process waits on another's order.
    fn start_proxies(
        &self,
        c: &mut Conns,
        missing: &[Conn],
        mut fifos: HashMap<(usize, bool), Fifo>,
    ) -> Result<()> {
        if fifos.is_empty() {
            return Ok(());
        }
        let local = |r: u32| self.local_index(r).is_some();
        // Queue pairs run over one stream (their setup); TCP connections over several.
        let per_conn = if self.rdma.is_some() {
            1
        } else {
            self.net.streams.max(1)
        };
        let mut streams: Vec<(usize, bool, Vec<TcpStream>)> = Vec::new();
        let tag = |conn: &Conn, k: u32| net::tag(conn.channel, k);
        let link_err = |conn: &Conn, e: braid_runtime::RuntimeError| {
            CudaError::Invalid(format!(
                "network connection {}->{} channel {}: {e}",
                conn.sender, conn.receiver, conn.channel
            ))
        };
        for (i, conn) in missing.iter().enumerate() {
            if !fifos.contains_key(&(i, true)) {
                continue;
            }
            if local(conn.receiver) {
                let (mut a, mut b) = (Vec::new(), Vec::new());
                for _ in 0..per_conn {
                    let (x, y) = net::loopback_pair().map_err(|e| {
                        CudaError::Invalid(format!(
                            "a loopback stream for a network connection: {e}"
                        ))
                    })?;
                    a.push(x);
                    b.push(y);
                }
                streams.push((i, true, a));
                streams.push((i, false, b));
            } else {
                let oob = self.oob.as_ref().expect("a remote rank has a bootstrap");
                let s = (0..per_conn)
                    .map(|k| oob.connect_link(conn.receiver, tag(conn, k)))
                    .collect::<braid_runtime::Result<Vec<_>>>()
                    .map_err(|e| link_err(conn, e))?;
                streams.push((i, true, s));
            }
        }
        for (i, conn) in missing.iter().enumerate() {
            if fifos.contains_key(&(i, false)) && !local(conn.sender) {
                let oob = self.oob.as_ref().expect("a remote rank has a bootstrap");
                let s = (0..per_conn)
                    .map(|k| oob.accept_link(conn.sender, tag(conn, k)))
                    .collect::<braid_runtime::Result<Vec<_>>>()
                    .map_err(|e| link_err(conn, e))?;
                streams.push((i, false, s));
            }
        }
        let mut pending = Vec::new();
        for (i, send, mut stream) in streams {
            let conn = missing[i];
            let fifo = fifos.remove(&(i, send)).expect("a FIFO per end");
            let what = format!(
                "{}->{} channel {} ({} end)",
                conn.sender,
                conn.receiver,
                conn.channel,
                if send { "sending" } else { "receiving" }
            );
            match &self.rdma {
                // Each phase over every end before the next (see `rdma::Setup`).
                Some(dev) => pending.push((
                    what.clone(),
                    net::rdma::Setup::offer(
                        dev.as_ref(),
                        fifo,
                        stream.remove(0),
                        send,
                        what,
                        self.timeout,
                        self.on_fail(),
                        self.net.qps.max(1),
                    ),
                )),
                None => c.proxies.push(Box::new(
                    Proxy::start(fifo, stream, send, what, self.timeout, self.on_fail()).map_err(
                        |e| CudaError::Invalid(format!("starting a network proxy: {e}")),
                    )?,
                )),
            }
        }
        let rdma_err = |what: &str, e: String| {
            CudaError::Invalid(format!("network connection {what} over RDMA: {e}"))
        };
        let mut connected = Vec::new();
        for (what, s) in pending {
            let s = s.map_err(|e| rdma_err(&what, e))?;
            connected.push((what.clone(), s.connect().map_err(|e| rdma_err(&what, e))?));
        }
        for (what, s) in connected {
            c.proxies
                .push(Box::new(s.start().map_err(|e| rdma_err(&what, e))?));
        }
        Ok(())
    }

    /// The connection ends of every grid block of local rank `rank` for `plan` (after
    /// [`Clique::connect`]).
    pub fn block_ends(&self, plan: &Plan, rank: u32) -> Result<Vec<BlockEnds>> {
        let c = self.conns.lock().unwrap();
        let get = |conn: Option<Conn>, send: bool| -> Result<Ends> {
            match conn {
                None => Ok([EndDesc::default(); LANES]),
                Some(conn) => c.ends.get(&(conn, send)).copied().ok_or_else(|| {
                    CudaError::Invalid(format!(
                        "connection {}->{} channel {} is not open on rank {rank}",
                        conn.sender, conn.receiver, conn.channel
                    ))
                }),
            }
        };
        (0..program::grid(plan, rank))
            .map(|g| {
                let (s, r) = program::block_conns(plan, rank, g);
                Ok(BlockEnds {
                    send: get(s, true)?,
                    recv: get(r, false)?,
                })
            })
            .collect()
    }
}

/// Bytes of one lane with `slots` slots.
pub fn lane_len(lane: Lane, slots: u32) -> usize {
    LANE_HEADER + slots as usize * lane.slot_bytes()
}

impl Drop for Clique {
    fn drop(&mut self) {
        // Kernels still running may use everything here.
        for l in &self.locals {
            let _ = l.ctx.synchronize();
        }
        let aborted = self.aborted();
        let c = self.conns.get_mut().unwrap();
        // Close what we opened of our peers; our own FIFOs are freed once every peer has
        // done the same (unless the group was aborted: nobody waits). That wait happens
        // on a thread of its own: destroying a communicator is not collective (one thread
        // may destroy several ranks' communicators one after the other, as nccl-tests
        // does), so it must not block on the other ranks.
        c.opened.clear();
        // Network ends: what the kernels published goes out before the streams close.
        c.proxies.clear();
        let own = std::mem::take(&mut c.own);
        match &self.oob {
            Some(oob) if !aborted => {
                let oob = oob.clone();
                let reaper = std::thread::Builder::new()
                    .name("braid-cuda-teardown".into())
                    .spawn(move || {
                        if let Err(e) = oob.barrier() {
                            tracing::warn!("teardown barrier: {e}");
                        }
                        drop(own);
                    });
                if let Err(e) = reaper {
                    tracing::warn!(
                        "no teardown thread ({e}): FIFOs freed without waiting for the peers"
                    );
                }
            }
            _ => drop(own),
        }
    }
}

/// `[conn u32][len u32][payload]...`, little-endian.
fn encode_offers(offers: &[(usize, Vec<u8>)]) -> Vec<u8> {
    let mut v = Vec::new();
    for (i, d) in offers {
        v.extend_from_slice(&(*i as u32).to_le_bytes());
        v.extend_from_slice(&(d.len() as u32).to_le_bytes());
        v.extend_from_slice(d);
    }
    v
}

fn decode_offers(mut b: &[u8]) -> std::result::Result<Vec<(usize, Vec<u8>)>, String> {
    let mut v = Vec::new();
    while !b.is_empty() {
        if b.len() < 8 {
            return Err("truncated entry".into());
        }
        let i = u32::from_le_bytes(b[..4].try_into().unwrap()) as usize;
        let len = u32::from_le_bytes(b[4..8].try_into().unwrap()) as usize;
        let payload = b.get(8..8 + len).ok_or("truncated payload")?;
        v.push((i, payload.to_vec()));
        b = &b[8 + len..];
    }
    Ok(v)
}

/// Whether GPU-scope fences order a connection's protocol (`program::GPU_SCOPE`): both
/// ends in this process (`Some` GPU ordinal) on the same GPU, with the FIFO in that GPU's
/// memory (`p2p`; without it the FIFO is in host memory). Anything else, a peer in another
/// process included (even on the same GPU), needs system scope.
pub fn gpu_scope(p2p: bool, sender_gpu: Option<usize>, receiver_gpu: Option<usize>) -> bool {
    p2p && sender_gpu.is_some() && sender_gpu == receiver_gpu
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{LL128_SLOT_BYTES, LL_SLOT_BYTES, SIMPLE_SLOT_BYTES};

    #[test]
    fn offers_round_trip_and_garbage_is_refused() {
        let v = encode_offers(&[(3, vec![1, 2, 3]), (9, b"/dev/shm/x".to_vec())]);
        let d = decode_offers(&v).unwrap();
        assert_eq!(d, vec![(3, vec![1, 2, 3]), (9, b"/dev/shm/x".to_vec())]);
        assert!(decode_offers(&v[..v.len() - 1]).is_err());
        assert!(decode_offers(&[1, 0, 0]).is_err());
    }

    #[test]
    fn lanes_hold_their_slots_after_a_header() {
        assert_eq!(lane_len(Lane::Simple, 8), 256 + 8 * SIMPLE_SLOT_BYTES);
        assert_eq!(lane_len(Lane::Ll, 2), 256 + 2 * LL_SLOT_BYTES);
        assert_eq!(lane_len(Lane::Ll128, 2), 256 + 2 * LL128_SLOT_BYTES);
    }

    #[test]
    fn gpu_scope_only_for_both_ends_on_one_gpu_of_this_process_over_device_memory() {
        assert!(gpu_scope(true, Some(0), Some(0)));
        assert!(!gpu_scope(true, Some(0), Some(1)));
        assert!(!gpu_scope(false, Some(0), Some(0)));
        assert!(!gpu_scope(true, Some(0), None));
        assert!(!gpu_scope(true, None, Some(0)));
        assert!(!gpu_scope(true, None, None));
    }
}
