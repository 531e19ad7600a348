//! The CUDA communicator: [`DeviceComm`] over [`CudaEngine`], made for every GPU of a
//! process at once ([`CudaComm::init_all`], several ranks per GPU allowed), or one rank
//! per process from a unique id or a launcher's environment, and the collectives on
//! device memory (checked, safe) or raw device addresses (unsafe, NCCL's contract).

use crate::clique::{Clique, Oob};
use crate::device::DeviceAlloc;
use crate::engine::CudaEngine;
use crate::error::{CudaError, Result};
use crate::net::{self, NetMap, NetTransport};
use crate::stream::Stream;
use braid_ir::Collective;
use braid_runtime::bootstrap::{Bootstrap, UniqueId};
use braid_runtime::call::CallSpec;
use braid_runtime::device_comm::{enqueue_group, DeviceComm, GroupCall, Stats};
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::launcher::LaunchEnv;
use braid_runtime::policy::Policy;
use braid_runtime::registry::Registry;
use cudarc::driver::{sys, CudaContext};
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

/// Default bytes of scratch memory per rank (plans with scratch run larger calls in
/// rounds of this size): `BRAID_SCRATCH_BYTES` overrides.
pub const DEFAULT_SCRATCH_BYTES: usize = 32 << 20;

/// Aborts `clique`'s kernels as soon as `boot`'s group fails (a peer's process gone or
/// silent, noticed by the bootstrap's liveness watcher), so a kernel waiting for a dead
/// peer returns within milliseconds instead of at its timeout. The thread ends with the
/// clique. It holds neither between its looks: the bootstrap must go when the
/// communicator does (its drop says goodbye to the peers; a process that returns from
/// `main` before a detached thread let go of it would leave without one, and peers
/// still running would take it for a crash).
fn watch_bootstrap(boot: &Arc<Bootstrap>, clique: &Arc<Clique>) -> Result<()> {
    let rank = boot.rank();
    let (boot, clique) = (Arc::downgrade(boot), Arc::downgrade(clique));
    std::thread::Builder::new()
        .name(format!("braid-cuda-watch-{rank}"))
        .spawn(move || loop {
            let (Some(c), Some(boot)) = (clique.upgrade(), boot.upgrade()) else {
                return;
            };
            if boot.abort_flag().load(std::sync::atomic::Ordering::SeqCst) {
                let why = boot
                    .failure()
                    .unwrap_or_else(|| "the group was aborted".into());
                tracing::warn!("rank {}: aborting its kernels: {why}", boot.rank());
                c.abort_because(&why);
                return;
            }
            drop((c, boot));
            std::thread::sleep(std::time::Duration::from_millis(20));
        })
        .map_err(|e| CudaError::Invalid(format!("cannot start the bootstrap watcher: {e}")))?;
    Ok(())
}

/// How a communicator is made.
#[derive(Clone, Debug)]
pub struct Options {
    /// How long a kernel waits for a peer, a FIFO or a block before the call fails.
    pub timeout: Duration,
    /// Connections through host memory even where GPUs reach each other directly.
    pub p2p_disable: bool,
    pub scratch_bytes: usize,
    pub policy: Policy,
    /// Point-to-point connections per ordered pair of ranks, made at initialisation
    /// (`BRAID_P2P_CHANNELS`; 0: no point to point on the GPU).
    pub p2p_channels: u32,
    /// Record each call's step times on the GPU (`BRAID_TRACE` set): read back with
    /// [`DeviceComm::step_times`](braid_runtime::device_comm::DeviceComm::step_times) (a `CudaComm` derefs to it).
    pub trace: bool,
    /// Every connection over the network transport, even between ranks of one machine
    /// (`BRAID_NET_FORCE`), as NCCL users force its socket transport to test it.
    pub net_force: bool,
    /// What carries network connections (`BRAID_NET_FORCE=socket|ib|soft-rdma`; by
    /// default RDMA where every rank has a port, else TCP).
    pub net_transport: NetTransport,
    /// TCP streams per network connection (`BRAID_NET_STREAMS`, or NCCL's
    /// `NCCL_NSOCKS_PERTHREAD` x `NCCL_SOCKET_NTHREADS`); the ranks use the most any asks.
    pub net_streams: u32,
    /// Queue pairs per RDMA connection (`BRAID_NET_STREAMS`, or NCCL's
    /// `NCCL_IB_QPS_PER_CONNECTION`); the ranks use the most any asks.
    pub net_qps: u32,
    /// Ranks of one launch read each other's `in` directly where the plan allows it
    /// ([`braid_plan::direct`]); `BRAID_DIRECT=0` sends everything through the FIFOs.
    pub direct: bool,
    /// Calls whose every step reads the launch's inputs run as flat launches
    /// ([`crate::flat`]); `BRAID_FLAT=0` runs them through the plan interpreter.
    pub flat: bool,
    /// Destinations one pass of a flat launch writes at most (`BRAID_FLAT_DSTS`, 1 to
    /// [`braid_plan::flat::MAX_DSTS`]: 1 merges no passes and does no forwards).
    pub flat_dsts: usize,
    /// Thread blocks a flat launch takes at most (`BRAID_FLAT_BLOCKS`; `None`: one per
    /// multiprocessor, what the cost model prices). Its blocks never wait for each
    /// other, so more than the GPU holds at once is allowed; for comparisons.
    pub flat_blocks: Option<u32>,
    /// Flat launches take the largest kernel argument whatever they hold
    /// (`BRAID_FLAT_ARGS=full`; default `packed`: the smallest that holds the launch,
    /// [`crate::flat::Packed`]); for comparisons.
    pub flat_full_args: bool,
    /// LL128's stress-test verdicts for this machine's links (the profile's, as `braid
    /// tune` measured them): calls may run LL128 only where every link of the
    /// communicator has a passed one ([`crate::ll128`]). Empty: no LL128.
    pub ll128: Vec<braid_cost::Ll128Verdict>,
}

/// The most blocks `BRAID_FLAT_BLOCKS` may give a flat launch.
pub const MAX_FLAT_BLOCKS: u32 = 4096;

impl Default for Options {
    fn default() -> Options {
        Options {
            timeout: Duration::from_secs_f64(braid_runtime::comm::DEFAULT_TIMEOUT_S),
            p2p_disable: false,
            scratch_bytes: DEFAULT_SCRATCH_BYTES,
            policy: Policy::default(),
            p2p_channels: crate::p2p::DEFAULT_CHANNELS,
            trace: false,
            net_force: false,
            net_transport: NetTransport::Auto,
            net_streams: 1,
            net_qps: 1,
            direct: true,
            flat: true,
            flat_dsts: braid_plan::flat::MAX_DSTS,
            flat_blocks: None,
            flat_full_args: false,
            ll128: Vec::new(),
        }
    }
}

impl Options {
    /// `BRAID_TIMEOUT`, `BRAID_P2P_DISABLE`, `BRAID_SCRATCH_BYTES`, `BRAID_PROTO`,
    /// `BRAID_CHANNELS`, `BRAID_P2P_CHANNELS`, `BRAID_TRACE`, `BRAID_NET_FORCE`,
    /// `BRAID_NET_STREAMS`, `BRAID_DIRECT`, `BRAID_FLAT`, `BRAID_FLAT_DSTS`, `BRAID_FLAT_BLOCKS`,
    /// `BRAID_FLAT_ARGS`.
    pub fn from_env() -> Result<Options> {
        let scratch_bytes = match std::env::var("BRAID_SCRATCH_BYTES") {
            Err(_) => DEFAULT_SCRATCH_BYTES,
            Ok(v) => v
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|&b| b >= 1 << 16)
                .ok_or_else(|| {
                    CudaError::Invalid(format!(
                        "BRAID_SCRATCH_BYTES={v}: expected a byte count of at least 65536"
                    ))
                })?,
        };
        let (net_force, net_transport) =
            net::parse_force(std::env::var("BRAID_NET_FORCE").ok().as_deref());
        Ok(Options {
            timeout: braid_runtime::comm::timeout_from_env(),
            p2p_disable: flag_on(std::env::var("BRAID_P2P_DISABLE").ok().as_deref()),
            net_force,
            net_transport,
            net_streams: net::streams_from(|k| std::env::var(k).ok())
                .map_err(CudaError::Invalid)?,
            net_qps: net::qps_from(|k| std::env::var(k).ok()).map_err(CudaError::Invalid)?,
            scratch_bytes,
            policy: Policy::from_env()?,
            p2p_channels: crate::p2p::channels_from(
                std::env::var("BRAID_P2P_CHANNELS").ok().as_deref(),
            )
            .map_err(CudaError::Invalid)?,
            trace: std::env::var_os("BRAID_TRACE").is_some_and(|v| !v.is_empty()),
            direct: std::env::var("BRAID_DIRECT").map_or(true, |v| v.trim() != "0"),
            flat: std::env::var("BRAID_FLAT").map_or(true, |v| v.trim() != "0"),
            flat_dsts: std::env::var("BRAID_FLAT_DSTS")
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
                .map_or(braid_plan::flat::MAX_DSTS, |d| {
                    d.clamp(1, braid_plan::flat::MAX_DSTS)
                }),
            flat_blocks: match std::env::var("BRAID_FLAT_BLOCKS") {
                Ok(v) if !v.trim().is_empty() => match v.trim().parse::<u32>() {
                    Ok(b) if (1..=MAX_FLAT_BLOCKS).contains(&b) => Some(b),
                    _ => {
                        return Err(CudaError::Invalid(format!(
                            "BRAID_FLAT_BLOCKS={v}: expected a block count from 1 to \
                             {MAX_FLAT_BLOCKS}"
                        )))
                    }
                },
                _ => None,
            },
            flat_full_args: match std::env::var("BRAID_FLAT_ARGS") {
                Ok(v) if v.trim() == "full" => true,
                Ok(v) if v.trim().is_empty() || v.trim() == "packed" => false,
                Ok(v) => {
                    return Err(CudaError::Invalid(format!(
                        "BRAID_FLAT_ARGS={v}: expected packed or full"
                    )))
                }
                Err(_) => false,
            },
            ll128: Vec::new(),
        })
    }
}

/// What the ranks agreed on for their network connections.
struct Agreed {
    rdma: Option<Arc<dyn braid_ib::rdma::Device>>,
    streams: u32,
    qps: u32,
}

/// The RDMA device this rank's network connections use and the TCP streams or queue pairs
/// per connection, agreed by every rank (one exchange): RDMA when every rank opens a device,
/// TCP streams when any cannot, and an error on every rank when one forces RDMA
/// (`BRAID_NET_FORCE=ib`) and some rank has none; the most TCP streams and queue pairs per
/// connection any rank asks for.
fn agree_network(
    boot: &Bootstrap,
    rank: u32,
    near: braid_ib::open::Near,
    opts: &Options,
) -> Result<Agreed> {
    let demand = matches!(
        opts.net_transport,
        NetTransport::Ib | NetTransport::SoftRdma
    );
    let (rdma, why) = match net::rdma_device(opts.net_transport, near) {
        Ok(d) => (d, String::new()),
        Err(why) => (None, why),
    };
    let asked = |n: u32| n.clamp(1, net::MAX_STREAMS) as u8;
    let all = boot.allgather(&[
        u8::from(rdma.is_some()),
        u8::from(demand),
        asked(opts.net_streams),
        asked(opts.net_qps),
    ])?;
    // The most any rank asked for.
    let most = |i: usize| {
        all.iter()
            .map(|a| a.get(i).copied().unwrap_or(1))
            .max()
            .unwrap_or(1)
            .clamp(1, net::MAX_STREAMS as u8) as u32
    };
    let (streams, qps) = (most(2), most(3));
    let lacking: Vec<usize> = (0..all.len())
        .filter(|&r| all[r].first() != Some(&1))
        .collect();
    let demanded: Vec<usize> = (0..all.len())
        .filter(|&r| all[r].get(1) == Some(&1))
        .collect();
    if lacking.is_empty() {
        return Ok(Agreed { rdma, streams, qps });
    }
    if !demanded.is_empty() {
        return Err(CudaError::Invalid(format!(
            "rank(s) {demanded:?} ask for RDMA (BRAID_NET_FORCE) but rank(s) {lacking:?} have no \
             RDMA device{}",
            if why.is_empty() {
                String::new()
            } else {
                format!(" (rank {rank}: {why})")
            }
        )));
    }
    if rdma.is_some() {
        tracing::info!("network connections over TCP: rank(s) {lacking:?} have no RDMA device");
    }
    Ok(Agreed {
        rdma: None,
        streams,
        qps,
    })
}

/// Whether a flag variable's value (`BRAID_P2P_DISABLE`) turns it on:
/// set, not empty, not `0`.
pub fn flag_on(value: Option<&str>) -> bool {
    value.is_some_and(|v| !matches!(v.trim(), "" | "0"))
}

/// Whether a CUDA driver library can be loaded here. Check this before calling anything
/// else of cudarc: without a driver its functions panic.
pub fn driver_present() -> bool {
    // SAFETY: only tries to load the library.
    unsafe { sys::is_culib_present() }
}

/// How many GPUs this machine has (0 without a driver).
pub fn device_count() -> usize {
    if !driver_present() {
        return 0;
    }
    CudaContext::device_count().map_or(0, |n| n as usize)
}

/// Device memory a call may use: where it starts, how long it is, on which GPU.
pub trait DeviceMemory {
    fn addr(&self) -> u64;
    fn len(&self) -> usize;
    fn device(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Device memory owned by Braid (`cuMemAlloc`), zeroed. Freeing it waits for the
/// device, so no call still running can see it go.
pub struct DeviceBuffer {
    alloc: DeviceAlloc,
    device: usize,
}

impl DeviceBuffer {
    pub fn new(ctx: &Arc<CudaContext>, len: usize) -> Result<DeviceBuffer> {
        Ok(DeviceBuffer {
            alloc: DeviceAlloc::new(ctx, len, 0)?,
            device: ctx.ordinal(),
        })
    }

    /// Copies `data` to the start of the buffer (synchronous: finish the streams that
    /// use the buffer first).
    pub fn upload(&self, data: &[u8]) -> Result<()> {
        if data.len() > self.alloc.len() {
            return Err(CudaError::Invalid(format!(
                "{} bytes do not fit a buffer of {}",
                data.len(),
                self.alloc.len()
            )));
        }
        self.alloc.upload(data)
    }

    /// The first `n` bytes (synchronous, as [`DeviceBuffer::upload`]).
    pub fn download(&self, n: usize) -> Result<Vec<u8>> {
        if n > self.alloc.len() {
            return Err(CudaError::Invalid(format!(
                "{n} bytes are more than a buffer of {}",
                self.alloc.len()
            )));
        }
        self.alloc.download(n)
    }
}

impl DeviceMemory for DeviceBuffer {
    fn addr(&self) -> u64 {
        self.alloc.ptr()
    }
    fn len(&self) -> usize {
        self.alloc.len()
    }
    fn device(&self) -> usize {
        self.device
    }
}

/// Device memory allocated by someone else (a stream-ordered pool, a virtual-memory
/// mapping, a framework's allocator).
#[derive(Clone, Copy, Debug)]
pub struct RawDeviceMemory {
    addr: u64,
    len: usize,
    device: usize,
}

impl RawDeviceMemory {
    /// # Safety
    /// `len` bytes at `addr` must be device memory GPU `device` can read and write, and
    /// stay allocated until every call given this value has completed on its stream.
    pub unsafe fn new(addr: u64, len: usize, device: usize) -> RawDeviceMemory {
        RawDeviceMemory { addr, len, device }
    }
}

impl DeviceMemory for RawDeviceMemory {
    fn addr(&self) -> u64 {
        self.addr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn device(&self) -> usize {
        self.device
    }
}

/// The buffers of one call. In place, the one buffer is laid out as NCCL lays it out
/// (allgather's input is the rank's block of the output; reduce_scatter's output the
/// rank's block of the input).
#[derive(Clone, Copy)]
pub enum Bufs<'a> {
    OutOfPlace {
        send: &'a dyn DeviceMemory,
        recv: &'a dyn DeviceMemory,
    },
    InPlace(&'a dyn DeviceMemory),
}

/// One rank of a communicator on a GPU.
pub struct CudaComm {
    inner: DeviceComm<CudaEngine>,
}

impl Deref for CudaComm {
    type Target = DeviceComm<CudaEngine>;
    fn deref(&self) -> &DeviceComm<CudaEngine> {
        &self.inner
    }
}

fn open_ctx(device: usize) -> Result<Arc<CudaContext>> {
    if !driver_present() {
        return Err(CudaError::NoDriver);
    }
    let have = CudaContext::device_count()? as usize;
    if device >= have {
        return Err(CudaError::Invalid(format!(
            "GPU {device} does not exist; this machine has {have}"
        )));
    }
    Ok(CudaContext::new(device)?)
}

pub(crate) fn can_access_peer(a: &CudaContext, b: &CudaContext) -> Result<bool> {
    let mut can = 0;
    // SAFETY: out-parameter; both devices exist.
    unsafe { sys::cuDeviceCanAccessPeer(&mut can, a.cu_device(), b.cu_device()) }.result()?;
    Ok(can != 0)
}

impl CudaComm {
    /// One communicator per entry of `devices`, rank `r` on GPU `devices[r]`, all in this
    /// process (NCCL's `ncclCommInitAll`, but a GPU may appear several times: its ranks
    /// then share it, each with its share of the multiprocessors).
    pub fn init_all(
        devices: &[usize],
        registry: Arc<Registry>,
        opts: &Options,
    ) -> Result<Vec<CudaComm>> {
        if devices.is_empty() {
            return Err(CudaError::Invalid(
                "a communicator needs at least one rank".into(),
            ));
        }
        let mut ctxs: Vec<Arc<CudaContext>> = Vec::new();
        let mut per_rank = Vec::with_capacity(devices.len());
        for &d in devices {
            let ctx = match ctxs.iter().find(|c| c.ordinal() == d) {
                Some(c) => c.clone(),
                None => {
                    let c = open_ctx(d)?;
                    ctxs.push(c.clone());
                    c
                }
            };
            per_rank.push(ctx);
        }
        let arch = crate::modules::arch(&ctxs[0])?;
        for c in &ctxs[1..] {
            if crate::modules::arch(c)? != arch {
                return Err(CudaError::Invalid(
                    "GPUs of different architectures in one communicator are not supported yet"
                        .into(),
                ));
            }
        }
        let mut p2p = !opts.p2p_disable;
        for a in &ctxs {
            for b in &ctxs {
                if p2p && a.ordinal() != b.ordinal() && !can_access_peer(a, b)? {
                    tracing::warn!(
                        "GPU {} cannot access GPU {} peer to peer: connections are host-staged",
                        a.ordinal(),
                        b.ordinal()
                    );
                    p2p = false;
                }
            }
        }
        if ctxs.len() < devices.len() {
            tracing::warn!(
                "{} ranks on {} GPU(s): ranks sharing a GPU run correctly but share its \
                 multiprocessors and memory bandwidth",
                devices.len(),
                ctxs.len()
            );
        }
        let n = devices.len() as u32;
        let stats = Stats::default();
        let locals = per_rank
            .into_iter()
            .enumerate()
            .map(|(r, c)| (r as u32, c))
            .collect();
        let net = NetMap {
            force: opts.net_force,
            hosts: Vec::new(),
            streams: opts.net_streams,
            qps: opts.net_qps,
        };
        let rdma = if net.any() {
            net::rdma_device(opts.net_transport, Default::default()).map_err(CudaError::Invalid)?
        } else {
            None
        };
        let ll128 = crate::ll128::allowed(
            &opts.ll128,
            crate::ll128::uses(ctxs.len() < devices.len(), ctxs.len() > 1, p2p, net.any()),
        );
        let clique = Arc::new(Clique::new(
            n,
            locals,
            None,
            (p2p, ll128),
            (net, rdma),
            opts,
            &stats,
        )?);
        clique.connect_p2p(opts.p2p_channels, &stats)?;
        // What the clique set up is counted on rank 0.
        let mut first = Some(stats);
        Ok((0..n as usize)
            .map(|i| {
                let s = first.take().unwrap_or_default();
                CudaComm {
                    inner: DeviceComm::new(
                        CudaEngine::new(clique.clone(), i, s),
                        registry.clone(),
                        opts.policy.clone(),
                    ),
                }
            })
            .collect())
    }

    /// Rank `rank` of `n`, in this process, on GPU `device`, joining the group of `id`
    /// (NCCL's `ncclCommInitRank`). Collective: every rank calls it.
    pub fn init_rank(
        id: &UniqueId,
        rank: u32,
        n: u32,
        device: usize,
        registry: Arc<Registry>,
        opts: &Options,
    ) -> Result<CudaComm> {
        let boot = Bootstrap::init(id, rank, n, opts.timeout)?;
        Self::with_bootstrap(Arc::new(boot), device, registry, opts)
    }

    /// This process's rank of a group started by a launcher (torchrun, Open MPI, Slurm),
    /// on the GPU of its local rank.
    pub fn from_launch_env(registry: Arc<Registry>, opts: &Options) -> Result<CudaComm> {
        let env = LaunchEnv::from_env()?;
        if !driver_present() {
            return Err(CudaError::NoDriver);
        }
        let boot = Bootstrap::from_launch_env(&env, opts.timeout)?;
        let visible = CudaContext::device_count()?.max(1) as u32;
        let device = env.local_rank.unwrap_or(env.rank % visible) as usize;
        Self::with_bootstrap(Arc::new(boot), device, registry, opts)
    }

    /// This process's rank of `boot`'s group on GPU `device`. Collective: every rank
    /// calls it. Connections go peer to peer when every rank's GPU reaches every other's
    /// and none asked otherwise; else through shared host memory, on every rank alike.
    pub fn with_bootstrap(
        boot: Arc<Bootstrap>,
        device: usize,
        registry: Arc<Registry>,
        opts: &Options,
    ) -> Result<CudaComm> {
        let ctx = open_ctx(device)?;
        let (rank, n) = (boot.rank(), boot.n_ranks());
        let stats = Stats::default();
        let arch = crate::modules::arch(&ctx)?;
        let bus = pci_bus_id(&ctx)?;
        if opts.net_transport == NetTransport::SoftRdma && n > 1 {
            return Err(CudaError::Invalid(
                "BRAID_NET_FORCE=soft-rdma: the software RDMA device connects ranks of one \
                 process only (use `1` or `socket` for ranks in several processes)"
                    .into(),
            ));
        }
        let me = net::host_identity();
        // A rank that forces the network forces it on all: both ends of a connection
        // must run the same transport.
        let all =
            boot.allgather(format!("{arch} {bus} {} {me}", u8::from(opts.net_force)).as_bytes())?;
        let mut ok = !opts.p2p_disable;
        let mut sharing = Vec::new();
        let mut hosts = Vec::with_capacity(all.len());
        let mut force = false;
        for info in &all {
            let info = String::from_utf8_lossy(info);
            let mut parts = info.splitn(4, ' ');
            force |= parts.nth(2) == Some("1");
            hosts.push(parts.next().unwrap_or_default().to_string());
        }
        let mut net = NetMap::from_identities(force, &hosts);
        let rdma = if net.any() {
            stats.exchanged();
            // The RDMA port nearest this rank's GPU.
            let near = braid_ib::open::Near {
                pci: Some(&bus),
                ordinal: device,
            };
            let agreed = agree_network(&boot, rank, near, opts)?;
            net.streams = agreed.streams;
            net.qps = agreed.qps;
            agreed.rdma
        } else {
            None
        };
        for (r, info) in all.iter().enumerate() {
            let info = String::from_utf8_lossy(info);
            let mut parts = info.splitn(4, ' ');
            let their_arch = parts.next().unwrap_or_default();
            let their_bus = parts.next().unwrap_or_default();
            if their_arch != arch {
                return Err(CudaError::Invalid(format!(
                    "rank {r} has a {their_arch} GPU, rank {rank} {arch}: GPUs of different \
                     architectures are not supported yet"
                )));
            }
            if hosts[r] != me {
                // Another machine: the network transport connects it; its bus ids name
                // that machine's GPUs.
                continue;
            }
            if r as u32 != rank && their_bus == bus {
                sharing.push(r);
            }
            if ok && r as u32 != rank && !reaches(&ctx, their_bus)? {
                tracing::warn!(
                    "rank {rank}: GPU {device} cannot reach rank {r}'s GPU ({their_bus}) peer \
                     to peer"
                );
                ok = false;
            }
        }
        if !sharing.is_empty() {
            tracing::warn!(
                "rank {rank} shares GPU {device} with rank(s) {sharing:?} of other processes: \
                 correct, not fast (the processes take turns on the GPU)"
            );
        }
        // LL128 where every rank's links passed its stress test (every rank must run the
        // protocol its peers run).
        let other_gpu = all.iter().enumerate().any(|(r, info)| {
            let info = String::from_utf8_lossy(info);
            hosts[r] == me && info.split(' ').nth(1) != Some(bus.as_str())
        });
        let mine = crate::ll128::allowed(
            &opts.ll128,
            crate::ll128::uses(!sharing.is_empty(), other_gpu, ok, net.any()),
        );
        let votes = boot.allgather(&[u8::from(ok), u8::from(mine)])?;
        let p2p = votes.iter().all(|v| v.first() == Some(&1));
        let ll128 = p2p && votes.iter().all(|v| v.get(1) == Some(&1));
        if !p2p {
            tracing::info!("rank {rank}: connections staged through shared host memory");
        }
        stats.exchanged();
        stats.exchanged();
        let oob: Arc<dyn Oob> = boot.clone();
        let clique = Arc::new(Clique::new(
            n,
            vec![(rank, ctx)],
            Some(oob),
            (p2p, ll128),
            (net, rdma),
            opts,
            &stats,
        )?);
        watch_bootstrap(&boot, &clique)?;
        clique.connect_p2p(opts.p2p_channels, &stats)?;
        Ok(CudaComm {
            inner: DeviceComm::new(
                CudaEngine::new(clique, 0, stats),
                registry,
                opts.policy.clone(),
            ),
        })
    }

    /// The GPU (ordinal) this rank runs on.
    pub fn device(&self) -> usize {
        self.engine().device()
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        self.engine().context()
    }

    /// Slices this rank has sent and received through the FIFOs of its connections so
    /// far (every lane of every connection end it holds): calls whose pairs all go
    /// direct leave it unchanged. For tests and diagnostics; read it when this rank's
    /// streams have finished.
    pub fn fifo_slices(&self) -> Result<u64> {
        let e = self.engine();
        let local = &e.clique().locals[e.local_index()];
        let bytes = local.counters.download(local.counters.len())?;
        Ok(bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .sum())
    }

    /// Whether every rank's call is one launch, with direct reads between them
    /// ([`crate::clique::Clique::launches_together`]).
    pub fn launches_together(&self) -> bool {
        self.engine().clique().launches_together()
    }

    /// Whether connections go peer to peer (`false`: host-staged).
    pub fn p2p(&self) -> bool {
        self.engine().p2p()
    }

    /// Whether some connection goes over the network transport (ranks on other hosts,
    /// or `BRAID_NET_FORCE`).
    pub fn network(&self) -> bool {
        self.engine().clique().net.any()
    }

    /// How this rank's connections go, in words: `p2p`, `host-staged`, `network`, or
    /// the network beside one of the first two (ranks on several hosts).
    pub fn links(&self) -> &'static str {
        let net = &self.engine().clique().net;
        match (net.force, net.any(), self.p2p()) {
            (true, _, _) => "network",
            (false, true, true) => "network + p2p",
            (false, true, false) => "network + host-staged",
            (false, false, true) => "p2p",
            (false, false, false) => "host-staged",
        }
    }

    /// What carries this rank's network connections, in words (`None` without any):
    /// `1 TCP stream`, `3 TCP streams`, `RDMA on mlx5_0:1, 2 queue pairs`.
    pub fn network_carrier(&self) -> Option<String> {
        let c = self.engine().clique();
        if !c.net.any() {
            return None;
        }
        let plural =
            |n: u32, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        Some(match &c.rdma {
            Some(dev) => format!(
                "RDMA on {}, {}",
                dev.name(),
                plural(c.net.qps.max(1), "queue pair", "queue pairs")
            ),
            None => plural(c.net.streams.max(1), "TCP stream", "TCP streams"),
        })
    }

    /// Whether sends and receives between ranks are served ([`crate::p2p`]; off with
    /// `BRAID_P2P_CHANNELS=0`).
    pub fn serves_p2p(&self) -> bool {
        self.n_ranks() == 1 || self.engine().clique().p2p_channels() > 0
    }

    /// The addresses NCCL would be given for `bufs`, after checking that they are on this
    /// rank's GPU and large enough for `spec`.
    fn addresses(&self, spec: &CallSpec, bufs: Bufs) -> Result<(u64, u64)> {
        let (rank, n) = (self.rank(), self.n_ranks());
        spec.check(n)?;
        let sizes = spec.sizes(rank, n);
        let c = spec.collective;
        let check = |what: &str, m: &dyn DeviceMemory, need: usize| -> Result<()> {
            if m.device() != self.device() {
                return Err(CudaError::Invalid(format!(
                    "{c} on rank {rank}: the {what} buffer is on GPU {}, the rank on GPU {}",
                    m.device(),
                    self.device()
                )));
            }
            if m.len() < need {
                return Err(CudaError::Invalid(format!(
                    "{c} on rank {rank}: the {what} buffer has {} bytes, the call needs {need}",
                    m.len()
                )));
            }
            Ok(())
        };
        match bufs {
            Bufs::OutOfPlace { send, recv } => {
                if let Some(need) = sizes.send {
                    check("send", send, need)?;
                }
                if let Some(need) = sizes.recv {
                    check("receive", recv, need)?;
                }
                Ok((send.addr(), recv.addr()))
            }
            Bufs::InPlace(buf) => {
                if c == Collective::Alltoall {
                    return Err(CudaError::Invalid("alltoall has no in-place mode".into()));
                }
                check("in-place", buf, sizes.larger)?;
                Ok(spec.in_place_buffers(rank, buf.addr()))
            }
        }
    }

    /// Enqueues one collective on `stream` and returns at once. `count` is NCCL's count
    /// for the collective; `root` is given for broadcast and reduce only.
    #[allow(clippy::too_many_arguments)]
    pub fn call(
        &self,
        collective: Collective,
        bufs: Bufs,
        count: usize,
        dtype: DType,
        op: RedOp,
        root: Option<u32>,
        stream: &Stream,
    ) -> Result<()> {
        let spec = CallSpec {
            collective,
            count,
            dtype,
            op,
            root,
        };
        let (send, recv) = self.addresses(&spec, bufs)?;
        // SAFETY: the buffers are device memory of this rank's GPU, large enough (checked
        // above), and live until the call completes: a `DeviceBuffer` cannot be freed
        // before the device finishes (cuMemFree waits), a `RawDeviceMemory` was promised
        // so by its maker.
        unsafe { self.inner.enqueue(&spec, send, recv, stream) }?;
        Ok(())
    }

    pub fn all_reduce(
        &self,
        bufs: Bufs,
        count: usize,
        dtype: DType,
        op: RedOp,
        stream: &Stream,
    ) -> Result<()> {
        self.call(Collective::Allreduce, bufs, count, dtype, op, None, stream)
    }

    pub fn all_gather(
        &self,
        bufs: Bufs,
        sendcount: usize,
        dtype: DType,
        stream: &Stream,
    ) -> Result<()> {
        self.call(
            Collective::Allgather,
            bufs,
            sendcount,
            dtype,
            RedOp::Sum,
            None,
            stream,
        )
    }

    pub fn reduce_scatter(
        &self,
        bufs: Bufs,
        recvcount: usize,
        dtype: DType,
        op: RedOp,
        stream: &Stream,
    ) -> Result<()> {
        self.call(
            Collective::ReduceScatter,
            bufs,
            recvcount,
            dtype,
            op,
            None,
            stream,
        )
    }

    pub fn broadcast(
        &self,
        bufs: Bufs,
        count: usize,
        dtype: DType,
        root: u32,
        stream: &Stream,
    ) -> Result<()> {
        self.call(
            Collective::Broadcast,
            bufs,
            count,
            dtype,
            RedOp::Sum,
            Some(root),
            stream,
        )
    }

    pub fn reduce(
        &self,
        bufs: Bufs,
        count: usize,
        dtype: DType,
        op: RedOp,
        root: u32,
        stream: &Stream,
    ) -> Result<()> {
        self.call(
            Collective::Reduce,
            bufs,
            count,
            dtype,
            op,
            Some(root),
            stream,
        )
    }

    /// `count` is what one rank sends to one peer.
    pub fn all_to_all(
        &self,
        send: &dyn DeviceMemory,
        recv: &dyn DeviceMemory,
        count: usize,
        dtype: DType,
        stream: &Stream,
    ) -> Result<()> {
        self.call(
            Collective::Alltoall,
            Bufs::OutOfPlace { send, recv },
            count,
            dtype,
            RedOp::Sum,
            None,
            stream,
        )
    }

    /// Enqueues one collective with NCCL's raw arguments.
    ///
    /// # Safety
    /// `send` and `recv` must be device memory this rank's GPU can access, holding
    /// [`CallSpec::sizes`] bytes where the rank has them, allocated and otherwise unused
    /// until the call completes on `stream`.
    pub unsafe fn enqueue_raw(
        &self,
        spec: &CallSpec,
        send: u64,
        recv: u64,
        stream: &Stream,
    ) -> Result<()> {
        // SAFETY: passed on.
        unsafe { self.inner.enqueue(spec, send, recv, stream) }?;
        Ok(())
    }
}

/// One rank's call in a [`group`].
pub struct GroupItem<'a> {
    pub comm: &'a CudaComm,
    pub collective: Collective,
    pub bufs: Bufs<'a>,
    pub count: usize,
    pub dtype: DType,
    pub op: RedOp,
    pub root: Option<u32>,
    pub stream: &'a Stream,
}

/// Enqueues the calls of several ranks of this process at once (NCCL's group): the ranks
/// that share a GPU run as one launch, so they may even share one stream. Nothing is
/// launched unless every call is valid.
pub fn group(items: &[GroupItem]) -> Result<()> {
    let mut calls: crate::engine::Group<GroupCall<'_, CudaEngine>> = Default::default();
    for it in items {
        let spec = CallSpec {
            collective: it.collective,
            count: it.count,
            dtype: it.dtype,
            op: it.op,
            root: it.root,
        };
        let (send, recv) = it.comm.addresses(&spec, it.bufs)?;
        calls.push(GroupCall {
            comm: &it.comm.inner,
            spec,
            send,
            recv,
            stream: it.stream,
        });
    }
    // SAFETY: as in `CudaComm::call`, for every item.
    unsafe { enqueue_group(&calls) }?;
    Ok(())
}

fn pci_bus_id(ctx: &CudaContext) -> Result<String> {
    let mut buf = [0 as std::ffi::c_char; 32];
    // SAFETY: `buf` has room for the id and its terminator (the driver needs 13 bytes).
    unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, ctx.cu_device()) }
        .result()?;
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Whether this process's GPU can reach the GPU with PCI bus id `bus` directly (its own
/// GPU counts). Asks the driver about the two devices; no context is created on the
/// peer's GPU.
fn reaches(ctx: &CudaContext, bus: &str) -> Result<bool> {
    if pci_bus_id(ctx)? == bus {
        return Ok(true);
    }
    let Ok(id) = std::ffi::CString::new(bus) else {
        return Ok(false);
    };
    let mut dev = 0;
    // SAFETY: out-parameter; `id` is a terminated string.
    let found = unsafe { sys::cuDeviceGetByPCIBusId(&mut dev, id.as_ptr()) };
    if found != sys::CUresult::CUDA_SUCCESS {
        // Not visible to this process (CUDA_VISIBLE_DEVICES): nothing says it is reachable.
        return Ok(false);
    }
    let mut can = 0;
    // SAFETY: out-parameter; both devices exist.
    unsafe { sys::cuDeviceCanAccessPeer(&mut can, ctx.cu_device(), dev) }.result()?;
    Ok(can != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_take_any_value_but_empty_and_zero() {
        assert!(!flag_on(None));
        assert!(!flag_on(Some("")));
        assert!(!flag_on(Some(" 0 ")));
        assert!(flag_on(Some("1")));
        assert!(flag_on(Some("yes")));
    }

    #[test]
    fn without_a_driver_nothing_opens() {
        if driver_present() {
            return;
        }
        let r = CudaComm::init_all(&[0, 0], Arc::new(Registry::new()), &Options::default());
        assert!(matches!(r, Err(CudaError::NoDriver)));
        assert_eq!(device_count(), 0);
    }

    /// Each rank's `agree_network` with its own `BRAID_NET_FORCE` transport, over a real
    /// bootstrap on loopback (no GPU needed).
    fn agree(transports: &[NetTransport]) -> Vec<Result<bool>> {
        let n = transports.len() as u32;
        let (id, _root) = braid_runtime::bootstrap::UniqueId::new(None).unwrap();
        std::thread::scope(|s| {
            let handles: Vec<_> = transports
                .iter()
                .enumerate()
                .map(|(r, &t)| {
                    let id = id.clone();
                    s.spawn(move || {
                        let boot =
                            Bootstrap::init(&id, r as u32, n, Duration::from_secs(20)).unwrap();
                        let opts = Options {
                            net_force: true,
                            net_transport: t,
                            ..Options::default()
                        };
                        agree_network(&boot, r as u32, Default::default(), &opts)
                            .map(|a| a.rdma.is_some())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn ranks_agree_on_the_network_transport_or_all_fail() {
        use NetTransport::*;
        // Every rank has a device: RDMA on all.
        let r = agree(&[SoftRdma, SoftRdma]);
        assert!(r.iter().all(|x| matches!(x, Ok(true))), "{r:?}");
        // One has none and nobody insists: TCP on all, the device not used.
        let r = agree(&[Socket, Auto, Socket]);
        assert!(r.iter().all(|x| matches!(x, Ok(false))), "{r:?}");
        // One insists on RDMA, another has none: every rank fails, naming both.
        let r = agree(&[SoftRdma, Socket]);
        for x in &r {
            let Err(CudaError::Invalid(why)) = x else {
                panic!("{r:?}")
            };
            assert!(why.contains("rank(s) [0] ask for RDMA"), "{why}");
            assert!(why.contains("rank(s) [1] have no RDMA device"), "{why}");
        }
        // Hardware asked for where there is none: the reason reaches the user.
        if braid_ib::open::open_from_env().is_err() {
            let r = agree(&[Ib, Auto]);
            let Err(CudaError::Invalid(why)) = &r[0] else {
                panic!("{r:?}")
            };
            assert!(why.contains("BRAID_NET_FORCE=ib"), "{why}");
            assert!(matches!(r[1], Err(CudaError::Invalid(_))), "{r:?}");
        }
    }
}
