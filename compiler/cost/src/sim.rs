//! The simulation: every step of every block of a plan, slice by slice, in an order that
//! respects the plan's own (block order, cross-block dependencies, a receive after its
//! matching send), with the times the topology and the profile give.
//!
//! - A connection (sender rank, receiver rank, channel, replica) runs over the route
//!   the topology gives for that pair of GPUs. Every directed link on it is shared with
//!   the other connections of the call that cross it (all of them assumed busy at once):
//!   the connection's link rate is the smallest share over its route, times the
//!   protocol's payload share.
//! - A step moves its chunks' bytes (each replica its share of every chunk) in slices;
//!   a slice leaves when the previous one has and, for a step that receives, when the
//!   same slice has arrived: so a forwarded message flows through a chain of ranks
//!   pipelined slice by slice, as the kernels run it. A slice costs a fixed overhead plus
//!   its bytes at its block's rate per memory access (the profile's block rate was
//!   measured on copies, 2 accesses per byte: a step takes [`memory_accesses`] / 2 times
//!   a copy's time), and over a connection no less than its bytes at the link rate; it
//!   reaches the peer after the path's latency plus the protocol's per-message latency.
//! - A block starts when its thread wakes (`block_us`, 0 on GPUs): a rank's call wakes
//!   its blocks one after another, the `b`-th `(b + 1) * block_us` into the call, and a
//!   block whose step (its first or a later one) waits for another block's is woken again
//!   when that ends; on a GPU, where blocks poll, a step that waits for another block's
//!   step starts no sooner than `wait_us` after that step ends (its progress published
//!   behind a fence and seen), whether or not its own block was still busy then.
//!   Where one process issues the calls of ranks that share a GPU, each rank's blocks
//!   start after its own launch: rank `r` beyond the first two `(r - 1) * rank_us` into
//!   the call ([`Profile::ranks_us`]), so a plan whose later ranks wait for messages
//!   anyway hides it and one whose every rank waits for every other pays all of it.
//! - A call costs the profile's fixed call time plus the time its last step ends, or,
//!   where blocks share few cores (the host backend), at least the blocks' whole work
//!   (a start cost per block, `block_work_us` by the blocks it starts or else
//!   `block_us`, its slices, and over TCP each byte it sends at `link_work_gbps`)
//!   divided by the cores; where its ranks share one memory
//!   (several on one GPU), at least the memory accesses all its steps make (each byte a
//!   step moves, read or written 2 to 4 times: [`memory_accesses`]) over the profile's
//!   shared rate, and each stretch of the call whose running steps ask more of the
//!   memory than that rate lasts as long as the rate allows ([`crate::memory`]: a call
//!   in phases pays each phase's demand, not their average); the topology's links then
//!   bound no connection (they are not what carries the data). Each block the GPU runs adds the profile's
//!   `launch_block_us`: every rank's blocks where the ranks share one GPU, else the
//!   largest rank's, times the replicas ([`launched_blocks`]).
//!
//! - A direct pair ([`Call::direct`]): the send takes no time and moves nothing; its
//!   receive waits for nothing of it and runs as a local step (a copy or a reduction
//!   reading the peer's memory). A chain of reductions into one destination whose peers
//!   all read directly ([`braid_plan::direct::chains`], at most [`FUSE_MAX`] operands)
//!   runs as one pass: its head does every link's bytes in one step (reading each
//!   operand once and writing the destination once), its later links take no time;
//!   where the chain splits ([`braid_plan::direct::Chain::splits`]) and each part has
//!   at least [`SPLIT_MIN_BYTES`], the blocks of all its steps share the pass, so the
//!   head's step takes one part's time.
//!
//! - A call that runs as a flat launch ([`crate::flat`]: every step a direct read, a
//!   chain's one pass or a local copy, where the ranks share a GPU and the profile prices
//!   flat launches) is priced as one: the launch and its passes' memory traffic.
//!
//! - A tiled plan (MSCCL's model) runs tile by tile, as the kernel does: every step once
//!   per tile of its share (one FIFO slot per chunk), each waiting for its
//!   dependencies' and its message's same tile, and each block's tiles in order.
//!
//! Slots (the FIFO depth) are taken as deep enough never to stall a sender.
//!
//! A step's slices are priced in closed form ([`crate::slices`]), and [`predict_below`]
//! bounds a call before simulating it.

use crate::profile::Profile;
use crate::slices::{Arrivals, Slices};
use braid_ir::{Collective, Protocol};
use braid_plan::{Execution, Plan};
use braid_topo::{PathClass, Topology};
use rustc_hash::{FxHashMap as HashMap, FxHashSet};

/// The most operands a chain run as one pass has (the CUDA kernel's limit: every peer of
/// it in one launch).
pub const FUSE_MAX: usize = 8;

/// The bytes each block of a chain's one pass takes at least before the blocks of the
/// chain's steps share it (the CUDA kernel's `SPLIT_MIN_BYTES`).
pub const SPLIT_MIN_BYTES: u64 = 4096;

/// The most tiles of a tiled plan simulated one by one; longer calls group the kernel's
/// tiles.
pub const MAX_TILES: u64 = 256;

/// A call to price.
#[derive(Clone, Copy, Debug)]
pub struct Call {
    /// Bytes of one rank's larger buffer (nccl-tests' size).
    pub bytes: u64,
    /// Bytes per element.
    pub elem: u64,
    pub protocol: Protocol,
    /// Replicas of the plan, each on its share of every chunk.
    pub replicas: u32,
    /// The ranks run in one launch and the call is out of place: where the plan allows
    /// ([`braid_plan::direct`]), a receiver reads its sender's `in` itself and the send
    /// costs nothing.
    pub direct: bool,
    /// The ranks run in one launch (whether or not the call is out of place): a call in
    /// place may still run as a flat launch ([`crate::flat`]).
    pub together: bool,
    /// Every rank's call is in place: its copies onto themselves
    /// ([`braid_plan::direct::copies_onto_itself_in_place`], a broadcast root's own copy,
    /// an all-gather's own chunk) cost nothing, as the backends skip them.
    pub in_place: bool,
}

/// When one step of one block ran, in the simulation (µs from the call's start).
#[derive(Clone, Debug, PartialEq)]
pub struct StepTime {
    pub rank: u32,
    pub block: u32,
    pub step: u32,
    pub kind: &'static str,
    pub start_us: f64,
    pub end_us: f64,
}

/// What the model predicts for one call.
#[derive(Clone, Debug)]
pub struct Prediction {
    pub total_us: f64,
    /// Every step of replica 0 (the others run alike, on their own connections).
    pub timeline: Vec<StepTime>,
    /// Bytes of one chunk of one replica.
    pub chunk_bytes: u64,
    /// What made the call last longer than its simulated steps, where something did;
    /// the timeline then shows the steps' order, not that longer span.
    pub bound: Option<Bound>,
}

/// A limit of the whole call beyond its steps ([`Prediction::bound`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// The blocks' whole work over the cores (the host backend: more threads than
    /// cores).
    Cores,
    /// The whole memory traffic over the rate of the one memory the ranks share.
    Memory,
}

impl Bound {
    pub fn name(self) -> &'static str {
        match self {
            Bound::Cores => "cores",
            Bound::Memory => "memory",
        }
    }

    /// What the bound is, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Bound::Cores => "the blocks' whole work over the cores",
            Bound::Memory => "the whole memory traffic over the rate of the memory the ranks share",
        }
    }
}

impl Prediction {
    /// Where the timeline's last step ends (µs).
    pub fn steps_end_us(&self) -> f64 {
        self.timeline.iter().map(|s| s.end_us).fold(0f64, f64::max)
    }
}

/// Bytes of one chunk for a call of `bytes` on `plan` (padding ignored).
pub fn chunk_bytes(plan: &Plan, bytes: u64, elem: u64) -> u64 {
    let n = u64::from(plan.n_ranks.max(1));
    let elem = elem.max(1);
    let count = if plan.collective.has_k() {
        bytes / elem / n
    } else {
        bytes / elem
    };
    let per_segment = if plan.collective.has_k() {
        (u64::from(plan.chunks) / n).max(1)
    } else {
        u64::from(plan.chunks).max(1)
    };
    count.div_ceil(per_segment) * elem
}

/// A connection's ends and what it is worth.
struct Conn {
    /// The payload rate its links give it (their share, times the protocol's payload
    /// share).
    link_gbps: f64,
    latency_us: f64,
    /// Crosses the network (each slice posted by the rank's proxy, one at a time).
    net: bool,
}

/// A step kind's name in timelines.
pub fn kind_name(k: braid_plan::StepKind) -> &'static str {
    use braid_plan::StepKind as K;
    match k {
        K::Send => "send",
        K::Recv => "recv",
        K::RecvCopySend => "recv-copy-send",
        K::RecvReduceSend => "recv-reduce-send",
        K::RecvReduceCopy => "recv-reduce-copy",
        K::RecvReduceCopySend => "recv-reduce-copy-send",
        K::Copy => "copy",
        K::Reduce => "reduce",
        K::Nop => "nop",
    }
}

/// Times a step touches each byte it moves in the memory the ranks share: a send reads
/// its source and writes the FIFO, a receive reads the FIFO and writes its destination,
/// a reduction reads one more operand, a forward writes the next FIFO too. Where ranks
/// share one memory this, not the step's bytes, is what the call's traffic is made of
/// (a one-shot all-reduce on 2 ranks sends and reduces its whole input, 5 accesses per
/// byte; a two-shot one sends, reduces, sends and receives halves, 4.5).
pub fn memory_accesses(k: braid_plan::StepKind) -> f64 {
    use braid_plan::StepKind as K;
    match k {
        K::Nop => 0.0,
        K::Send | K::Recv | K::Copy => 2.0,
        K::RecvCopySend | K::RecvReduceSend | K::RecvReduceCopy | K::Reduce => 3.0,
        K::RecvReduceCopySend => 4.0,
    }
}

/// Memory accesses per byte a step makes where the backend stages its steps (the host
/// backend, [`Profile::staged_steps`]): those to the call's buffers, and those to the
/// staging that stays in the caches at every size (the links' slots, the block's
/// temporary). A send reads its source and writes the link's slot, a receive reads the
/// slot and writes its destination; a receive that reduces or forwards lands in the
/// temporary first (a write and a read of it), is reduced there (the operand read from
/// the call's buffer) and is copied from there into the next link (a read and a write);
/// a forward that keeps its bytes writes them to its destination and sends them from
/// there while they are still in the caches.
pub fn staged_accesses(k: braid_plan::StepKind) -> (f64, f64) {
    use braid_plan::StepKind as K;
    match k {
        K::Nop => (0.0, 0.0),
        K::Send | K::Recv => (1.0, 1.0),
        K::Copy => (2.0, 0.0),
        K::Reduce => (3.0, 0.0),
        K::RecvCopySend => (1.0, 3.0),
        K::RecvReduceSend => (1.0, 5.0),
        K::RecvReduceCopy => (2.0, 3.0),
        K::RecvReduceCopySend => (2.0, 5.0),
    }
}

/// Predicts `call` on `plan` over `topo`. `Err` when the plan does not fit the topology
/// (more ranks than GPUs) or its steps cannot be ordered (a cyclic plan, which the
/// verifier rejects).
pub fn predict(
    plan: &Plan,
    topo: &Topology,
    profile: &Profile,
    call: &Call,
) -> Result<Prediction, String> {
    match predict_below(plan, topo, profile, call, f64::INFINITY)? {
        Priced::Predicted(p) => Ok(p),
        Priced::Above(_) => unreachable!("nothing is above an infinite limit"),
    }
}

/// A prediction, or a bound that put the call above its limit.
#[derive(Clone, Debug)]
pub enum Priced {
    Predicted(Prediction),
    /// The call takes at least this long (µs), which is at or above the limit: it was
    /// not simulated.
    Above(f64),
}

/// [`predict`], unless a bound that costs a fraction of the simulation shows that the
/// call takes `limit` µs or more: the blocks' slices one after another, the cores' and
/// the shared memory's work. What `rank` uses to skip replica counts and protocols that
/// cannot beat the best one found; `f64::NEG_INFINITY` gives the bound alone (no flat
/// launch has one: it is priced outright).
pub fn predict_below(
    plan: &Plan,
    topo: &Topology,
    profile: &Profile,
    call: &Call,
    limit: f64,
) -> Result<Priced, String> {
    Wired::new(plan, topo, call.direct)?.price(profile, call, limit)
}

/// A connection as the topology routes it, before any call shares its links.
struct Route<'a> {
    /// Its sender's end (rank, block).
    sender: (usize, usize),
    path: &'a braid_topo::Path,
    hops: Vec<(u32, u32)>,
    net: bool,
}

/// What pricing a plan on a topology needs that no replica count, protocol, size or
/// profile changes: its wiring, its direct pairs and chains (for calls with or without
/// direct reads), its connections' routes, and its steps in order with what each waits
/// for. [`predict_below`] makes one per call; pricing many options of one plan
/// ([`crate::near::price_near`]) makes it once.
pub struct Wired<'a> {
    plan: &'a Plan,
    /// Receivers read their senders' `in` where the plan allows ([`Call::direct`]).
    direct_reads: bool,
    direct: braid_plan::direct::Direct,
    /// Chains run as one pass: each head with the operands it reads and the blocks that
    /// may share its pass (1: the head alone), and the links.
    heads: HashMap<(u32, u32, u32), (usize, usize)>,
    links: FxHashSet<(u32, u32, u32)>,
    /// The copies onto themselves of an in-place call, skipped where it is one
    /// ([`Call::in_place`], [`braid_plan::direct::copies_onto_itself_in_place`]).
    in_place_copies: FxHashSet<(u32, u32, u32)>,
    /// Directed links and their bandwidths, and how many of the plan's connections (one
    /// replica) cross each.
    link_gbps: std::collections::HashMap<(u32, u32), f64>,
    crossing: HashMap<(u32, u32), u32>,
    routes: Vec<Route<'a>>,
    /// Every step (rank, block, step), rank by rank, block by block.
    ids: Vec<(usize, usize, usize)>,
    /// What each step waits for, and the send it takes its message from.
    preds: Vec<Vec<usize>>,
    matched: Vec<Option<usize>>,
    /// Per step: its block's last step, and for a block's last step its first (`MAX`
    /// for the others); what each step is waited for by.
    block_last: Vec<usize>,
    block_first: Vec<usize>,
    step_succs: Vec<Vec<usize>>,
}

impl<'a> Wired<'a> {
    /// `Err` when the plan does not fit the topology or its connections name steps it
    /// does not have.
    pub fn new(plan: &'a Plan, topo: &'a Topology, direct_reads: bool) -> Result<Self, String> {
        let n = plan.n_ranks;
        if n > topo.n_ranks() {
            return Err(format!(
                "the plan has {n} ranks, the topology {}",
                topo.n_ranks()
            ));
        }
        let wiring = braid_plan::wiring::links(plan);
        let direct = if direct_reads {
            braid_plan::direct::direct_over(plan, &wiring)
        } else {
            braid_plan::direct::Direct::default()
        };
        let at = |ri: usize, bi: usize, si: usize| (ri as u32, bi as u32, si as u32);
        let mut heads: HashMap<(u32, u32, u32), (usize, usize)> = HashMap::default();
        let mut links: FxHashSet<(u32, u32, u32)> = Default::default();
        for c in braid_plan::direct::chains(plan, &direct) {
            let (hb, hs) = c.steps[0];
            let ops = c.operands(plan);
            if ops <= FUSE_MAX {
                let sharing = if c.splits { c.steps.len() } else { 1 };
                heads.insert((c.rank, hb, hs), (ops, sharing));
                links.extend(c.steps[1..].iter().map(|&(b, s)| (c.rank, b, s)));
            }
        }
        let hops =
            |s: u32, r: u32| -> Vec<(u32, u32)> { topo.path(s, r).hops_directed().collect() };
        let mut crossing: HashMap<(u32, u32), u32> = HashMap::default();
        for l in &wiring {
            for h in hops(l.sender_rank, l.receiver_rank) {
                *crossing.entry(h).or_insert(0) += 1;
            }
        }
        let routes = wiring
            .iter()
            .filter_map(|l| {
                let (Some(s), Some(_)) = (l.sender, l.receiver) else {
                    return None;
                };
                Some(Route {
                    sender: s,
                    path: topo.path(l.sender_rank, l.receiver_rank),
                    hops: hops(l.sender_rank, l.receiver_rank),
                    net: topo.node_of(l.sender_rank) != topo.node_of(l.receiver_rank),
                })
            })
            .collect();
        // Steps in an order every input is ready by: Kahn's algorithm over block order,
        // dependencies, and send -> matching receive.
        let ids: Vec<(usize, usize, usize)> = plan
            .ranks
            .iter()
            .enumerate()
            .flat_map(|(ri, r)| {
                r.blocks
                    .iter()
                    .enumerate()
                    .flat_map(move |(bi, b)| (0..b.steps.len()).map(move |si| (ri, bi, si)))
            })
            .collect();
        // Each block's first step's place in `ids` (steps are listed rank by rank, block
        // by block): a step's place is its block's plus its index.
        let mut first_of: Vec<Vec<usize>> = Vec::with_capacity(plan.ranks.len());
        let mut next = 0;
        for r in &plan.ranks {
            first_of.push(
                r.blocks
                    .iter()
                    .map(|b| {
                        let at = next;
                        next += b.steps.len();
                        at
                    })
                    .collect(),
            );
        }
        let layout = plan.layout(braid_ir::Mode::InPlace);
        let in_place_copies = ids
            .iter()
            .filter(|&&(ri, bi, si)| {
                let step = &plan.ranks[ri].blocks[bi].steps[si];
                braid_plan::direct::copies_onto_itself_in_place(plan, &layout, ri, step)
            })
            .map(|&(ri, bi, si)| (ri as u32, bi as u32, si as u32))
            .collect();
        let index = |ri: usize, bi: usize, si: usize| -> Option<usize> {
            let steps = plan.ranks.get(ri)?.blocks.get(bi)?.steps.len();
            (si < steps).then(|| first_of[ri][bi] + si)
        };
        let mut preds: Vec<Vec<usize>> = vec![Vec::new(); ids.len()];
        // The send step each receiving step takes its message from.
        let mut matched: Vec<Option<usize>> = vec![None; ids.len()];
        for l in &wiring {
            let (Some((sr, sb)), Some((rr, rb))) = (l.sender, l.receiver) else {
                continue;
            };
            for (&s, &r) in l.sends.iter().zip(&l.recvs) {
                if direct.recvs.contains_key(&at(rr, rb, r)) {
                    // The receiver reads the sender's `in`: it waits for nothing of the
                    // send.
                    continue;
                }
                let (Some(si), Some(ri)) = (index(sr, sb, s), index(rr, rb, r)) else {
                    return Err("a connection's send or receive is not a step of the plan".into());
                };
                preds[ri].push(si);
                matched[ri] = Some(si);
            }
        }
        for (i, &(ri, bi, si)) in ids.iter().enumerate() {
            if si > 0 {
                preds[i].push(i - 1);
            }
            for d in &plan.ranks[ri].blocks[bi].steps[si].deps {
                if let Some(j) = index(ri, d.block as usize, d.step as usize) {
                    preds[i].push(j);
                }
            }
        }
        // Per step: its block's last step, and for a block's last step its first (a block's
        // first step of tile `k` waits for its last of tile `k - 1`).
        let mut block_last = vec![0usize; ids.len()];
        let mut block_first = vec![usize::MAX; ids.len()];
        for (i, &(ri, bi, si)) in ids.iter().enumerate() {
            let last = first_of[ri][bi] + plan.ranks[ri].blocks[bi].steps.len() - 1;
            block_last[i] = last;
            if si == 0 {
                block_first[last] = i;
            }
        }
        let mut step_succs: Vec<Vec<usize>> = vec![Vec::new(); ids.len()];
        for (i, p) in preds.iter().enumerate() {
            for &j in p {
                step_succs[j].push(i);
            }
        }
        Ok(Wired {
            plan,
            direct_reads,
            direct,
            heads,
            links,
            in_place_copies,
            link_gbps: topo.directed_bandwidths(),
            crossing,
            routes,
            ids,
            preds,
            matched,
            block_last,
            block_first,
            step_succs,
        })
    }

    /// [`predict_below`] of `call` on this plan; `Err` also when `call.direct` is not the
    /// kind of call this was made for.
    pub fn price(&self, profile: &Profile, call: &Call, limit: f64) -> Result<Priced, String> {
        if call.direct != self.direct_reads {
            return Err(format!(
                "a call with direct reads {} priced on a wiring made for calls {} them",
                if call.direct { "on" } else { "off" },
                if self.direct_reads { "with" } else { "without" }
            ));
        }
        price(self, profile, call, limit)
    }
}

/// [`Wired::price`].
fn price(w: &Wired, profile: &Profile, call: &Call, limit: f64) -> Result<Priced, String> {
    let Wired {
        plan,
        direct,
        heads,
        links,
        in_place_copies,
        ids,
        preds,
        matched,
        block_last,
        block_first,
        step_succs,
        ..
    } = w;
    let plan: &Plan = plan;
    let proto = call.protocol;
    let replicas = call.replicas.max(1);
    let chunk = chunk_bytes(plan, call.bytes, call.elem).div_ceil(u64::from(replicas));
    if let Some(p) = crate::flat::predict(plan, profile, call, direct) {
        return Ok(Priced::Predicted(p));
    }
    let at = |ri: usize, bi: usize, si: usize| (ri as u32, bi as u32, si as u32);
    let eff = profile.efficiency.get(proto);
    let block = profile.block_gbps.get(proto);
    // What a receiving step's slice costs where the GPU measured it apart from a sending
    // step's (0: not measured, every step at `slice_us` and the rules before it).
    let recv_slice_us = profile.recv_slice_us.get(proto);
    let measured_recv = profile.measured_receive(proto);
    // Whether a measured NVLink hop is the message's whole latency (below).
    let whole_hop = measured_recv || profile.one_gpu();
    // Where a GPU's blocks poll LL or LL128 lines, a receive reads each line as it lands
    // and forwards it at once; Simple publishes a slice only once it is written whole,
    // and a network proxy forwards whole slices too.
    let lines_land = profile.lines_land(proto);
    let slice_us = profile.slice_us.get(proto);
    let mut conns: HashMap<(usize, usize), Conn> = HashMap::default(); // keyed by sender end
    for r in &w.routes {
        let path = r.path;
        let share = r
            .hops
            .iter()
            .map(|h| {
                w.link_gbps.get(h).copied().unwrap_or(path.bandwidth_gbps)
                    / f64::from((w.crossing[h] * replicas).max(1))
            })
            .fold(f64::INFINITY, f64::min);
        let share = if profile.shared_gbps.get(proto) > 0.0 {
            // The ranks share one memory: the topology's links carry nothing; what bounds
            // a connection is its block, and the call, the memory's shared rate (below).
            f64::INFINITY
        } else if share.is_finite() {
            share
        } else {
            path.bandwidth_gbps
        };
        // `hop_us` is on top of the path's nominal latency, except where the tune
        // measured it with the receiving steps' cost, or on ranks sharing one GPU (the
        // NVLink class, the one it measures): there it is one rank's step ending, then
        // the next rank's, the message's whole latency, the path's inside it (ranks
        // sharing a GPU cross no link at all: the preset's nominal latency added to
        // Simple's measured hop priced an 8-rank ring's every link 0.7 µs dear, and the
        // ranks' stagger went round it twice).
        let hop = profile.hop_us.get(path.class, proto);
        let latency_us = if whole_hop && path.class == PathClass::Nvl {
            hop
        } else {
            path.latency_us + hop
        };
        conns.insert(
            r.sender,
            Conn {
                link_gbps: share * eff,
                latency_us,
                net: r.net,
            },
        );
    }
    // A tiled plan (MSCCL's model) runs its blocks' steps once per tile of the share,
    // each tile of a chunk one FIFO slot (the profile's slice): step `s` of tile `k`
    // waits for what it waits for in tile `k`, and a block's first step of tile `k` for
    // its last of tile `k - 1`. A streaming plan is one tile. Long calls simulate at most
    // `MAX_TILES` tiles, each several of the kernel's (as many slices, so the same
    // costs; only the pipeline's fill is coarser).
    let piece = profile.slice_bytes.get(proto).max(1.0) as u64;
    let (tiles, per_tile) = if plan.execution == Execution::Tiled && chunk > piece {
        let group = chunk.div_ceil(piece).div_ceil(MAX_TILES);
        (chunk.div_ceil(group * piece) as usize, group * piece)
    } else {
        (1, chunk)
    };
    let tile_bytes = |k: usize| per_tile.min(chunk.saturating_sub(k as u64 * per_tile));
    // Units tile by tile: the simulation goes through the tiles roughly in order, so
    // what it touches next lies close by.
    let steps = ids.len();
    let unit = |i: usize, k: usize| k * steps + i;
    let n_units = steps * tiles;
    // What unit `u` waits for (no allocation: the simulation visits every unit).
    let unit_preds = |u: usize| {
        let (i, k) = (u % steps, u / steps);
        let prev_tile = (ids[i].2 == 0 && k > 0).then(|| unit(block_last[i], k - 1));
        preds[i].iter().map(move |&j| unit(j, k)).chain(prev_tile)
    };
    let block_us = profile.block_us.get(proto);
    // When another block's step is seen where blocks poll, after it ends.
    let wait_us = profile.wait_us.get(proto);
    // What a block's start costs the cores (where few share the blocks), by the blocks
    // the call starts.
    let started = ids.iter().filter(|id| id.2 == 0).count() as u64 * u64::from(replicas);
    let block_work_us = profile.block_work_us(started).unwrap_or(block_us);
    // Every replica posts its own copy of each network message through the same proxy.
    let net_post = profile.net_post_us.get(proto) * f64::from(replicas);
    // When each rank's network proxy is next free.
    let mut proxy = vec![0f64; plan.ranks.len()];
    // Where the call's buffers fit the caches, copies run faster than the rate measured
    // through more memory (the host backend's profile says how much): local copies and
    // the cores' work. A step over a link keeps its block's rate (its slots stay in the
    // caches whatever the call's size).
    let footprint = chunk_bytes(plan, call.bytes, call.elem)
        * u64::from(plan.in_chunks + plan.out_chunks + plan.scratch_chunks)
        * u64::from(plan.n_ranks);
    let scale = profile.copy_scale(footprint);
    // The share where they stay in the caches (the smallest footprint's).
    let cached = profile.copy_scale(1);
    // What a slice costs the cores when they are few: its bytes at the copy rate (none
    // without one: GPUs).
    let copy_work_gbps = match profile.copy_gbps.get(proto) {
        r if r > 0.0 && profile.cores > 0 => r,
        _ => f64::INFINITY,
    };
    // What a byte sent over a link costs the cores beyond its copies (the host over TCP),
    // µs; none where the blocks do not share cores.
    let link_work = match profile.link_work_gbps.get(proto) {
        r if r > 0.0 && profile.cores > 0 => 1.0 / (r * 1e3),
        _ => 0.0,
    };
    // Local copies and reductions run at the copy rate when the profile has one.
    let local_gbps = match profile.copy_gbps.get(proto) {
        r if r > 0.0 => r * scale * eff,
        _ => block * eff,
    };
    // What every tile of a step shares, looked up once.
    struct StepInfo {
        skipped: bool,
        chunks: u64,
        fused: Option<(usize, usize)>,
        accesses: f64,
        copies: f64,
        /// The cores' work per byte beyond the copies (a send over a link), µs.
        link_work: f64,
        factor: f64,
        sends: bool,
        block_gbps: f64,
        link_gbps: f64,
        latency: f64,
        net: bool,
        net_in: bool,
        /// The fixed cost of each of its slices (`slice_us`, or `recv_slice_us` for a
        /// step that receives where the GPU measured it).
        slice_us: f64,
    }
    let info: Vec<StepInfo> = ids
        .iter()
        .enumerate()
        .map(|(i, &(ri, bi, si))| {
            let step = &plan.ranks[ri].blocks[bi].steps[si];
            let skipped = direct.sends.contains(&at(ri, bi, si))
                || links.contains(&at(ri, bi, si))
                || (call.in_place && in_place_copies.contains(&at(ri, bi, si)));
            // The step's memory accesses per byte (a chain's head reads every operand
            // once and writes the destination once). A block moves bytes at a rate per
            // access: its rate was measured on copies (2 accesses per byte), so a step
            // takes accesses / 2 times a copy's time at its block.
            let fused = heads.get(&at(ri, bi, si)).copied();
            let accesses = fused.map_or(memory_accesses(step.kind), |(ops, _)| ops as f64 + 1.0);
            // What the step's bytes cost the cores, in copies at the copy rate, and its
            // block, as a share of its rate: where the backend stages its steps, its
            // accesses to the call's buffers at their rate and to the staging at the
            // rate in the caches. A block's rate over a link was measured (`braid tune`)
            // on a chain whose buffers take the copy table's reference (256 MiB), where
            // a send costs half a copy at the copy rate and half at the rate in the
            // caches: a step over a link is priced against that. Else its accesses over
            // a copy's 2 (the cores' share of it one copy).
            let sends = step.kind.sends() && !skipped;
            let over_link = sends && conns.contains_key(&(ri, bi));
            let (copies, factor) = match fused {
                None if profile.staged_steps => {
                    let cost = |(b, c): (f64, f64)| b / 2.0 / scale + c / 2.0 / cached;
                    let copies = cost(staged_accesses(step.kind));
                    let factor = if over_link {
                        copies / (0.5 + 0.5 / cached)
                    } else {
                        copies * scale
                    };
                    (copies, factor)
                }
                _ => (1.0 / scale, accesses / 2.0),
            };
            let conn = conns.get(&(ri, bi)).filter(|_| sends);
            StepInfo {
                skipped,
                chunks: step.src.or(step.dst).map_or(0, |s| u64::from(s.count)),
                fused,
                accesses,
                copies,
                link_work: if over_link { link_work } else { 0.0 },
                factor,
                sends,
                // A slice's time at its block's rate, and over a connection no less than
                // at the links' rate.
                block_gbps: conn.map_or(local_gbps, |_| block * eff),
                link_gbps: conn.map_or(f64::INFINITY, |c| c.link_gbps),
                latency: conn.map_or(0.0, |c| c.latency_us),
                net: conn.is_some_and(|c| c.net),
                net_in: matched[i].is_some_and(|j| {
                    let (sr, sb, _) = ids[j];
                    conns.get(&(sr, sb)).is_some_and(|c| c.net)
                }),
                slice_us: if measured_recv && step.kind.receives() {
                    recv_slice_us
                } else {
                    slice_us
                },
            }
        })
        .collect();
    // A unit's slices' count and what each costs.
    let cost_of = |i: usize, k: usize| -> (usize, f64) {
        let st = &info[i];
        let per_chunk = if st.skipped { 0 } else { tile_bytes(k) };
        let bytes = st.chunks * per_chunk;
        // Each chunk is cut into slices of its own, as both backends cut a step's
        // regions (a step over 8 chunks of one element is 8 slices, not 1).
        let n = (per_chunk as f64 / profile.slice_bytes.get(proto)).ceil() as usize
            * st.chunks as usize;
        let n = n.max(1);
        let slice = bytes as f64 / n as f64;
        // A pass its chain's blocks share (each part at least SPLIT_MIN_BYTES, as the
        // kernel decides) takes a part's time.
        let parts = match st.fused {
            Some((_, n)) if n > 1 && bytes >= n as u64 * SPLIT_MIN_BYTES => n as f64,
            _ => 1.0,
        };
        let work_factor = st.factor / parts;
        let cost = st.slice_us
            + (slice * work_factor / (st.block_gbps * 1e3)).max(slice / (st.link_gbps * 1e3));
        (n, cost)
    };
    // A unit's slices. A receive whose lines are read as they land takes up each slice
    // as the sender's starts (the shorter of the two slices' times before its arrival).
    let slices_of = |i: usize, k: usize| -> Slices {
        let st = &info[i];
        let (n, cost) = cost_of(i, k);
        let lead = match matched[i] {
            Some(j) if lines_land && !st.net_in && !st.skipped && !info[j].skipped => {
                cost.min(cost_of(j, k).1)
            }
            _ => 0.0,
        };
        Slices {
            n,
            cost,
            lead,
            net_in: st.net_in,
            net: st.net,
            net_post,
            sends: st.sends,
            latency: st.latency,
        }
    };
    // What the order of the simulation does not change: the blocks' whole work, the
    // memory accesses, and each block's slices one after another (a block's units run
    // in turn: the call takes at least as long as any block's). Every tile of a step
    // but its last is alike.
    let mut work = 0f64;
    let mut moved = 0f64;
    let mut in_turn = vec![0f64; steps];
    // Each step's slices in a tile but its last, and in its last (the same where the call
    // is one tile), for the simulation below.
    let per_step: Vec<(Slices, Slices)> = (0..steps)
        .map(|i| (slices_of(i, 0), slices_of(i, tiles - 1)))
        .collect();
    // Where one process issues the ranks' launches one after another (ranks sharing a
    // GPU), a rank's blocks start only once its own launch is issued: the ranks beyond
    // the first two (whose launch `call_us` includes) each after one more `rank_us`. A
    // plan whose later ranks wait anyway (a chain) hides it; one whose every rank waits
    // for every other (a ring) pays all of it.
    // When step `i`'s block wakes, if it is the block's first: after the rank's earlier
    // blocks' threads on the host, and after the rank's launch.
    let woken =
        |i: usize| block_us * (ids[i].1 + 1) as f64 + profile.ranks_us(proto, ids[i].0 as u32 + 1);
    for i in 0..steps {
        if ids[i].2 == 0 {
            // The block starts: on the host a thread wakes, once for the cores, and after
            // the rank's earlier blocks' threads (they are woken one after another).
            work += block_work_us;
            in_turn[block_last[i]] += woken(i);
        }
        if info[i].skipped {
            continue;
        }
        let alike = [(0, tiles - 1), (tiles - 1, 1)];
        for &(k, count) in alike.iter().filter(|&&(_, c)| c > 0) {
            let bytes = tile_bytes(k) * info[i].chunks;
            let sl = if k + 1 == tiles {
                per_step[i].1
            } else {
                per_step[i].0
            };
            let count = count as f64;
            moved += count * bytes as f64 * info[i].accesses;
            // The cores' share: the copies its slices make, at the copy rate.
            work += count * bytes as f64 * info[i].copies / (copy_work_gbps * 1e3);
            work += count * bytes as f64 * info[i].link_work;
            in_turn[block_last[i]] += count * sl.n as f64 * sl.cost;
        }
    }
    // Replicas run alike: each block's work, times the replicas, shared by the cores.
    let busy = if profile.cores > 0 {
        work * f64::from(replicas) / f64::from(profile.cores)
    } else {
        0.0
    };
    let shared = match profile.shared_gbps.get(proto) {
        r if r > 0.0 => moved * f64::from(replicas) / (r * 1e3),
        _ => 0.0,
    };
    let launch = profile.launch_block_us.get(proto)
        * launched_blocks(plan, replicas, profile.shared_gbps.get(proto) > 0.0) as f64;
    let fixed = profile.call_us.get(proto) + launch;
    let bound = fixed + in_turn.iter().copied().fold(busy.max(shared), f64::max);
    if bound >= limit {
        return Ok(Priced::Above(bound));
    }
    // The simulation's state, made only for a call the bound did not put above its limit.
    let mut waiting: Vec<usize> = (0..n_units)
        .map(|u| preds[u % steps].len() + usize::from(ids[u % steps].2 == 0 && u >= steps))
        .collect();
    // Ready units, earliest start first, so that what a rank's proxy does is simulated
    // in time order. The key is the start time's bits (non-negative floats order as
    // their bits do).
    // Of units ready at once, the earlier step (then tile) first: the heap holds that
    // order's index (`tie`), which gives the unit back (`untie`).
    let tie = |u: usize| (u % steps) * tiles + u / steps;
    let untie = |t: usize| unit(t / tiles, t % tiles);
    let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<(u64, usize)>> = (0..n_units)
        .filter(|&u| waiting[u] == 0)
        .map(|u| std::cmp::Reverse((0, tie(u))))
        .collect();
    let mut end = vec![0f64; n_units];
    // Each unit's start, for the memory's share ([`crate::memory`]).
    let mut began = vec![0f64; n_units];
    // When each slice of a sending unit reaches its receiver.
    // (Kept for the units that have some, until their receive takes them: few at a time.)
    let mut arrivals: HashMap<usize, Arrivals> = HashMap::default();
    // Each step's start (its first tile's) and end (its last tile's).
    let mut span: Vec<(f64, f64)> = vec![(0.0, 0.0); ids.len()];
    let mut order = Vec::with_capacity(ids.len());
    let mut done = 0;
    while let Some(std::cmp::Reverse((_, t))) = ready.pop() {
        let u = untie(t);
        done += 1;
        let (i, k) = (u % steps, u / steps);
        let si = ids[i].2;
        let ri = ids[i].0;
        let st = &info[i];
        let matched_unit = matched[i].map(|j| unit(j, k));
        // What the step waits for in its own block (the step before) and in others.
        let (mut own, mut other) = (0f64, 0f64);
        let mut waits = false;
        for j in unit_preds(u).filter(|&j| Some(j) != matched_unit) {
            let (rj, bj, _) = ids[j % steps];
            if (rj, bj) == (ri, ids[i].1) {
                own = own.max(end[j]);
            } else {
                other = other.max(end[j]);
                waits = true;
            }
        }
        let mut t = own.max(other);
        if si == 0 && k == 0 {
            // The block starts when its thread has woken: on the host after those of the
            // rank's earlier blocks (the rank's call wakes them one after another), and,
            // where it waited for another block's step (`t > 0`: with `block_us > 0`
            // every step ends after 0), again after that step.
            t = if t > 0.0 {
                woken(i).max(t + block_us)
            } else {
                woken(i)
            };
        } else if other > own {
            // A later step whose block waited for another block's step: its thread slept
            // and is woken again when that step ends.
            t = other + block_us;
        }
        if waits {
            // Where blocks poll (the GPU), another block's step is seen `wait_us` after
            // it ends, whether the block was still busy with its own step then or not
            // (it reads the step's published progress either way).
            t = t.max(other + wait_us);
        }
        let start = t;
        // Only this receive reads its message's arrivals.
        let incoming = matched_unit.map(|j| arrivals.remove(&j).unwrap_or_default());
        let out = if st.skipped {
            if let Some(l) = incoming.as_ref().and_then(Arrivals::last) {
                t = t.max(l);
            }
            Arrivals::default()
        } else {
            let slices = if k + 1 == tiles {
                per_step[i].1
            } else {
                per_step[i].0
            };
            let (e, out) = crate::slices::run(&slices, t, incoming.as_ref(), &mut proxy[ri]);
            t = e;
            out
        };
        end[u] = t;
        began[u] = start;
        if !matches!(&out, Arrivals::Listed(v) if v.is_empty()) {
            arrivals.insert(u, out);
        }
        if k == 0 {
            span[i].0 = start;
        }
        if k + 1 == tiles {
            span[i].1 = t;
            order.push(i);
        }
        let next_tile = (block_last[i] == i && k + 1 < tiles).then(|| unit(block_first[i], k + 1));
        for s in step_succs[i].iter().map(|&x| unit(x, k)).chain(next_tile) {
            waiting[s] -= 1;
            if waiting[s] == 0 {
                // Its start: the latest of its predecessors' ends, or of the first
                // slice's arrival for the message it receives.
                let ms = matched[s % steps].map(|j| unit(j, s / steps));
                let at = unit_preds(s)
                    .map(|j| {
                        if Some(j) == ms {
                            arrivals.get(&j).and_then(Arrivals::first).unwrap_or(end[j])
                        } else {
                            end[j]
                        }
                    })
                    .fold(0f64, f64::max);
                ready.push(std::cmp::Reverse((at.max(0.0).to_bits(), tie(s))));
            }
        }
    }
    if done != n_units {
        return Err("the plan's steps wait on each other in a cycle".into());
    }
    // Where the ranks share one memory, each stretch of the call whose steps ask more of
    // it than its shared rate lasts as long as that rate allows ([`crate::memory`]); the
    // timeline is shown on that clock.
    let shared_rate = profile.shared_gbps.get(proto);
    let stretch = if shared_rate > 0.0 {
        let traffic = (0..n_units).filter(|&u| !info[u % steps].skipped).map(|u| {
            let (i, k) = (u % steps, u / steps);
            crate::memory::Traffic {
                start: began[u],
                end: end[u],
                bytes: (tile_bytes(k) * info[i].chunks) as f64
                    * info[i].accesses
                    * f64::from(replicas),
            }
        });
        crate::memory::Stretch::new(traffic, shared_rate, profile.shared_knee.get(proto))
    } else {
        crate::memory::Stretch::default()
    };
    let timeline: Vec<StepTime> = order
        .into_iter()
        .map(|i| {
            let (ri, bi, si) = ids[i];
            let b = &plan.ranks[ri].blocks[bi];
            StepTime {
                rank: plan.ranks[ri].rank,
                block: b.id,
                step: si as u32,
                kind: kind_name(b.steps[si].kind),
                start_us: stretch.at(span[i].0),
                end_us: stretch.at(span[i].1),
            }
        })
        .collect();
    let last = stretch.at(end.iter().copied().fold(0f64, f64::max));
    let bound = if busy > last && busy >= shared {
        Some(Bound::Cores)
    } else if shared > last {
        Some(Bound::Memory)
    } else {
        None
    };
    Ok(Priced::Predicted(Prediction {
        total_us: fixed + last.max(busy).max(shared),
        timeline,
        chunk_bytes: chunk,
        bound,
    }))
}

/// The blocks one GPU runs for a call of `plan` with `replicas`: every rank's where the
/// ranks share one GPU (`shared`), else the largest rank's.
pub fn launched_blocks(plan: &Plan, replicas: u32, shared: bool) -> u64 {
    let per_rank = plan.ranks.iter().map(|r| r.blocks.len() as u64);
    let blocks = if shared {
        per_rank.sum()
    } else {
        per_rank.max().unwrap_or(0)
    };
    blocks * u64::from(replicas.max(1))
}

/// A collective's time with no software cost: the bytes that must leave the busiest
/// rank at its best link, a lower bound any plan's prediction should stay above.
pub fn collective_floor_us(c: Collective, n: u32, bytes: u64, best_gbps: f64) -> f64 {
    let n = f64::from(n.max(1));
    let b = bytes as f64;
    let leaving = match c {
        Collective::Allreduce => 2.0 * (n - 1.0) / n * b,
        Collective::Allgather | Collective::ReduceScatter | Collective::Alltoall => {
            (n - 1.0) / n * b
        }
        Collective::Broadcast | Collective::Reduce => b,
    };
    leaving / (best_gbps * 1e3)
}
