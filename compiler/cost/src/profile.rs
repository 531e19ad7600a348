//! The model's constants: what a call, a message and a block cost besides the bytes on
//! the links, per protocol and per kind of path. The topology gives each path's latency
//! and bandwidth; the profile gives the software's share. Defaults are documented
//! (docs/costmodel.md); `braid tune` is to measure them per machine and write a profile
//! file, which carries a version so that an old file is refused rather than misread.

use braid_ir::Protocol;
use braid_topo::PathClass;
use serde::{Deserialize, Serialize};

/// The profile format this build reads and writes.
/// Version 2: `shared_gbps` counts memory accesses (2 to 4 per byte a step moves), where
/// version 1 counted the bytes; a version-1 profile would be read as half as fast.
pub const PROFILE_VERSION: u32 = 2;

/// Costs that depend on the protocol: Simple, LL and LL128 (measured by `braid tune` only
/// where LL128 may run; without a value it costs what Simple costs).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PerProtocol {
    pub simple: f64,
    pub ll: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ll128: Option<f64>,
}

impl PerProtocol {
    pub fn get(&self, p: Protocol) -> f64 {
        match p {
            Protocol::Ll => self.ll,
            Protocol::Ll128 => self.ll128.unwrap_or(self.simple),
            _ => self.simple,
        }
    }

    /// `x` for Simple and LL alike (and LL128, which without a value of its own costs what
    /// Simple costs).
    pub fn both(x: f64) -> PerProtocol {
        PerProtocol {
            simple: x,
            ll: x,
            ll128: None,
        }
    }

    /// Sets the value of `p` (`auto`: Simple's).
    pub fn set(&mut self, p: Protocol, x: f64) {
        match p {
            Protocol::Ll => self.ll = x,
            Protocol::Ll128 => self.ll128 = Some(x),
            _ => self.simple = x,
        }
    }
}

/// The kinds of link LL128's stress test is run on: the ranks' FIFOs in the memory of
/// the GPU that both run on (ranks sharing a GPU, in one process or several), or in a
/// peer GPU's memory written over NVLink or PCIe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkKind {
    SameGpu,
    Peer,
}

impl LinkKind {
    pub fn name(self) -> &'static str {
        match self {
            LinkKind::SameGpu => "same_gpu",
            LinkKind::Peer => "peer",
        }
    }
}

/// What LL128's stress test saw on one kind of link: how many 128-byte lines readers
/// observed with a new flag, and how many of those were torn (flag and data from
/// different stores). LL128 runs on a link kind only with a passed verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ll128Verdict {
    pub link: LinkKind,
    /// GPUs written from and read on (the same for `same_gpu`).
    pub gpus: (usize, usize),
    /// Lines in the test, and rounds written into each.
    pub lines: u64,
    pub rounds: u64,
    /// Line observations with a new flag.
    pub reads: u64,
    pub torn: u64,
    /// Lines that never showed the last round within the readers' budget.
    pub stalled: u64,
}

impl Ll128Verdict {
    /// Observations the test needs at least, per line, to say anything.
    pub const MIN_READS_PER_LINE: u64 = 16;

    /// No torn line, every line seen to its end, and enough observations to mean it.
    pub fn passed(&self) -> bool {
        self.torn == 0 && self.stalled == 0 && self.reads >= self.lines * Self::MIN_READS_PER_LINE
    }

    /// What the test saw, in a line: `same_gpu (GPU 0 -> 0): 0 of 8192000 line reads
    /// torn, 0 stalled`.
    pub fn describe(&self) -> String {
        format!(
            "{} (GPU {} -> {}): {} of {} line reads torn, {} stalled",
            self.link.name(),
            self.gpus.0,
            self.gpus.1,
            self.torn,
            self.reads,
            self.stalled
        )
    }
}

/// Whether LL128 may run on every kind of link in `uses` by `verdicts`: each kind needs
/// a verdict and every verdict of that kind passed.
pub fn ll128_allowed(verdicts: &[Ll128Verdict], uses: &[LinkKind]) -> bool {
    uses.iter().all(|&k| {
        let of: Vec<_> = verdicts.iter().filter(|v| v.link == k).collect();
        !of.is_empty() && of.iter().all(|v| v.passed())
    })
}

/// Per-message latency added to a path's own, by the kind of path.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct HopLatency {
    /// NVLink or NVSwitch.
    pub nvlink: PerProtocol,
    /// PCIe, through switches or a host bridge, or across sockets.
    pub pci: PerProtocol,
    /// Between nodes.
    pub net: PerProtocol,
}

impl HopLatency {
    pub fn get(&self, class: PathClass, p: Protocol) -> f64 {
        match class {
            PathClass::Nvl => self.nvlink.get(p),
            PathClass::Net => self.net.get(p),
            _ => self.pci.get(p),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    pub version: u32,
    /// What the constants were measured on (`defaults` for the built-in ones).
    pub source: String,
    /// The topology fingerprint the profile was measured for (`None`: any).
    pub fingerprint: Option<String>,
    /// Fixed cost of a call: launch and the first flag round trip, µs.
    pub call_us: PerProtocol,
    /// Latency of one message (a step's first slice reaching its peer) on top of the
    /// path's own, µs.
    pub hop_us: HopLatency,
    /// What one block (one connection's sender or receiver) moves at most, GB/s.
    pub block_gbps: PerProtocol,
    /// Share of a link's bandwidth that carries payload (LL sends a flag with every
    /// 4 bytes of data: 0.5).
    pub efficiency: PerProtocol,
    /// Bytes one slice carries: a message is pipelined slice by slice (LL's FIFO lines
    /// are small, so its slices are too).
    pub slice_bytes: PerProtocol,
    /// Fixed cost of each slice at a block (flag and fence), µs. `braid tune --backend
    /// cuda` times it as a sending step's period on the GPU's clock (from one step's
    /// start to the next's).
    pub slice_us: PerProtocol,
    /// Fixed cost of each slice of a step that receives, µs, where the GPU measured it
    /// apart (`braid tune --backend cuda`, in LL and LL128: the period of a chain's
    /// receiving steps, which poll the message's lines before they forward them). 0 (the
    /// default, Simple, the host backend's profiles, and profiles written before it): as
    /// `slice_us`. Where it is
    /// measured (above 0 for a protocol) the hop it was measured with is a message's
    /// whole latency on NVLink (the path's nominal latency is inside the measurement),
    /// and a receive in LL or LL128 takes up each line as it lands rather than once its
    /// slice has landed whole (the flag travels with the data): a block that waits for
    /// its message ends its slice about a hop after the sender's.
    #[serde(default)]
    pub recv_slice_us: PerProtocol,
    /// What posting one message to the network costs the rank, µs: messages to other
    /// nodes leave one after another however many blocks send them.
    pub net_post_us: PerProtocol,
    /// What starting a block costs in a call, µs (a thread waking on the host backend;
    /// nothing measurable on a GPU, where the default is 0). A rank's blocks start one
    /// after another: its `b`-th block (from 0) starts `(b + 1) * block_us` into the call,
    /// and a block that waits for another block's step is woken again (`block_us`) when
    /// that step ends.
    #[serde(default)]
    pub block_us: PerProtocol,
    /// What a step that waits for another block's step of its rank pays beyond that
    /// step's end, µs, where the backend's blocks poll rather than sleep (the GPU: the
    /// step publishes its progress behind a fence, the waiting block's thread sees the
    /// counter move and releases its block). `braid tune --backend cuda` times it on a
    /// program whose local copies each wait for a receive in another block. 0: nothing
    /// (the host backend's wake-up is `block_us`; profiles written before it).
    #[serde(default)]
    pub wait_us: PerProtocol,
    /// Blocks that run at once over all ranks (the host backend's cores); 0: every block
    /// runs on its own (GPU SMs). When fewer, a call takes at least its blocks' whole
    /// work divided by this.
    #[serde(default)]
    pub cores: u32,
    /// What starting a block costs the cores where blocks outnumber them (the host
    /// backend), µs, by the blocks the call starts over all its ranks (more threads woken
    /// at once cost each more): the call's whole work counts it per block, divided by
    /// `cores`. `braid tune` times a direct broadcast on 8 ranks with 1, 2, 4 and 8
    /// replicas. Between two entries the cost is interpolated, outside them the nearest
    /// entry's; empty: `block_us`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub block_work_us: Vec<BlockWork>,
    /// What one block copies or reduces locally (no link), GB/s; 0: as `block_gbps`.
    #[serde(default)]
    pub copy_gbps: PerProtocol,
    /// What a byte sent over a link costs the cores beyond its copies into and out of the
    /// link's slots, as the rate at which the cores would do that work alone, GB/s (the
    /// host backend over TCP: the kernel's copies into and out of the socket and its
    /// protocol work). Where the blocks share few cores (`cores`), every byte a step
    /// sends over a link adds this to the call's whole work. `braid tune` finds it from a
    /// direct broadcast of 16 MiB on 8 ranks: the rate at which the model prices that
    /// call at its measured time. 0: nothing beyond the copies (shared memory; GPUs,
    /// whose blocks do not share cores).
    #[serde(default)]
    pub link_work_gbps: PerProtocol,
    /// The rate of the memory accesses of all the call's blocks together, GB/s, where its
    /// ranks share one memory (several ranks on one GPU): a call takes at least the bytes
    /// every step of every block reads and writes (`sim::memory_accesses` per byte moved)
    /// over this rate, and the topology's links bound no connection (the data never
    /// crosses them). 0: no shared memory (a rank per GPU).
    #[serde(default)]
    pub shared_gbps: PerProtocol,
    /// How sharply `shared_gbps` binds: where the blocks' own pace would take `a` µs and
    /// the memory's rate `b`, the work takes `(a^k + b^k)^(1/k)` for this `k`
    /// ([`crate::memory::combine`]): blocks that together ask about the memory's rate get
    /// less than either says (their loads queue as it fills). `braid tune --backend cuda`
    /// times a chain broadcast on 2 ranks with the replicas whose blocks alone would ask
    /// the rate, and finds the `k` for which the model reproduces it. 0: sharply, the
    /// larger of the two (profiles written before it).
    #[serde(default)]
    pub shared_knee: PerProtocol,
    /// What each block of a GPU launch adds to the call, µs: blocks starting, loading
    /// their descriptors and polling, over the GPU's SMs. A call pays it for every block
    /// its GPU runs: all its ranks' blocks where they share one GPU (`shared_gbps` set),
    /// else its largest rank's. 0 on the host backend (its blocks' start is `block_us`).
    #[serde(default)]
    pub launch_block_us: PerProtocol,
    /// What a flat launch costs ([`crate::flat`]), µs: ranks sharing one GPU whose every
    /// step reads the launch's inputs. 0: calls never run flat (the host backend, a rank
    /// per GPU).
    #[serde(default)]
    pub flat_call_us: f64,
    /// The GPU's share of that flat launch, µs: the same launch replayed from a CUDA graph
    /// (no host issuing it). Back to back, the GPU runs one call while the host issues the
    /// next, so a flat call costs the larger of the host's share (`flat_call_us`, the
    /// argument, the ranks) and the GPU's (this and the passes' memory traffic). 0: not
    /// measured; the two are added.
    #[serde(default)]
    pub flat_gpu_us: f64,
    /// What one block of a flat launch copies, GB/s (a copy's bytes; 2 accesses per
    /// byte): `braid tune` replays a flat broadcast of a few hundred KiB, whose parts are
    /// a block's full share each, from a CUDA graph. The flat kernel's blocks run short
    /// passes that a block of the interpreter, timed on a long stream (`block_gbps`),
    /// does not show. 0: not measured; a flat launch's blocks take `block_gbps`.
    #[serde(default)]
    pub flat_block_gbps: f64,
    /// What each pass over a chunk beyond the first costs a flat launch's block, µs: a
    /// pass loads, then stores, then the block synchronises before the next, so passes
    /// in a row add their latency (`flat_gpu_us` holds one). 0: nothing.
    #[serde(default)]
    pub flat_pass_us: f64,
    /// What each rank of a launch beyond the first adds to a call where the ranks share
    /// one GPU and one process issues their calls together, µs: back to back that is the
    /// host's work (each rank's checks, the joins between the ranks' streams). `call_us`
    /// and `flat_call_us` are a launch of 2 ranks, this included once. 0: nothing.
    #[serde(default)]
    pub rank_us: f64,
    /// What a flat launch's kernel argument adds to the call beyond the smallest one, per
    /// size of argument the backend launches, µs (the driver copies the argument at every
    /// launch; `braid tune` launches an empty kernel with each size back to back): a
    /// launch whose argument takes `bytes` pays the `us` of the first entry at least that
    /// large. Empty: nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flat_arg_us: Vec<ArgCost>,
    /// What the copy rate (`copy_gbps`: a block's local copies and reductions, and the
    /// cores' share of every slice) becomes, as a share of itself, when the buffers of a
    /// call take `mib` MiB over all its ranks (the host backend: a call whose buffers fit
    /// the processor's caches copies up to twice as fast as one that streams from
    /// memory). `braid tune` times one thread's copies through 4 to 256 MiB, each against
    /// 256 MiB. Where the backend stages its steps (`staged_steps`), a step's accesses
    /// to the call's buffers take the share for the call's size and those to its staging
    /// (the links' slots, a temporary: in the caches at every size) the smallest entry's;
    /// otherwise a step over a link keeps `block_gbps`. Interpolated on the logarithm of
    /// the size, outside the entries the nearest one's; empty: 1.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub copy_scale: Vec<CopyScale>,
    /// The backend stages its steps as the host backend does: every message is copied
    /// into its link and out of it, and a receive that reduces or forwards goes through a
    /// temporary, so a step costs its block and the cores the accesses
    /// [`crate::sim::staged_accesses`] counts. false: a step touches memory as the GPU
    /// kernels do (its [`crate::sim::memory_accesses`] over a copy's 2; the cores' share
    /// of a slice, where they are few, one copy of its bytes).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub staged_steps: bool,
    /// LL128's stress test on this machine's links (`braid tune`): the runtime runs LL128
    /// only over link kinds with a passed verdict here. None: LL128 nowhere.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ll128: Vec<Ll128Verdict>,
}

/// What starting a block costs the cores in a call that starts `blocks` blocks
/// ([`Profile::block_work_us`]), µs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlockWork {
    pub blocks: u32,
    pub us: f64,
}

/// A copy's rate where a call's buffers take `mib` MiB, as a share of the profile's
/// ([`Profile::copy_scale`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CopyScale {
    pub mib: u32,
    pub scale: f64,
}

/// The value at `x` of the `n` points `point(i)` (x growing): linear between two points,
/// the nearest point's outside them; `None` without points.
fn interpolate(n: usize, point: impl Fn(usize) -> (f64, f64), x: f64) -> Option<f64> {
    if n == 0 {
        return None;
    }
    let (first, last) = (point(0), point(n - 1));
    if x <= first.0 {
        return Some(first.1);
    }
    if x >= last.0 {
        return Some(last.1);
    }
    let i = (1..n).find(|&i| point(i).0 >= x)?;
    let ((x0, y0), (x1, y1)) = (point(i - 1), point(i));
    Some(y0 + (x - x0) / (x1 - x0) * (y1 - y0))
}

/// What a launch with a kernel argument of `bytes` costs beyond one with the smallest
/// ([`Profile::flat_arg_us`]), µs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArgCost {
    pub bytes: u32,
    pub us: f64,
}

impl Default for PerProtocol {
    fn default() -> Self {
        PerProtocol {
            simple: 0.0,
            ll: 0.0,
            ll128: None,
        }
    }
}

impl Default for Profile {
    /// NCCL's published tuning constants for Hopper (its `hwLat` and `baseLat` tables,
    /// LL at half the bandwidth, its network post overhead of 1 µs, three times that for
    /// Simple), the slice size of Braid's kernels, and a block's copy rate as measured
    /// for one thread block on an H200.
    fn default() -> Self {
        Profile {
            version: PROFILE_VERSION,
            source: "defaults".into(),
            fingerprint: None,
            call_us: PerProtocol {
                simple: 8.4,
                ll: 6.6,
                ll128: None,
            },
            hop_us: HopLatency {
                nvlink: PerProtocol {
                    simple: 3.4,
                    ll: 0.6,
                    ll128: None,
                },
                pci: PerProtocol {
                    simple: 5.7,
                    ll: 1.0,
                    ll128: None,
                },
                net: PerProtocol {
                    simple: 14.0,
                    ll: 2.7,
                    ll128: None,
                },
            },
            block_gbps: PerProtocol {
                simple: 40.0,
                ll: 20.0,
                ll128: None,
            },
            efficiency: PerProtocol {
                simple: 1.0,
                ll: 0.5,
                ll128: None,
            },
            slice_bytes: PerProtocol {
                simple: 262144.0,
                ll: 32768.0,
                ll128: None,
            },
            slice_us: PerProtocol {
                simple: 0.3,
                ll: 0.1,
                ll128: None,
            },
            recv_slice_us: PerProtocol::default(),
            net_post_us: PerProtocol {
                simple: 3.0,
                ll: 1.0,
                ll128: None,
            },
            block_us: PerProtocol::default(),
            wait_us: PerProtocol::default(),
            cores: 0,
            block_work_us: Vec::new(),
            copy_gbps: PerProtocol::default(),
            link_work_gbps: PerProtocol::default(),
            shared_gbps: PerProtocol::default(),
            shared_knee: PerProtocol::default(),
            launch_block_us: PerProtocol::default(),
            flat_call_us: 0.0,
            flat_gpu_us: 0.0,
            flat_block_gbps: 0.0,
            flat_pass_us: 0.0,
            rank_us: 0.0,
            flat_arg_us: Vec::new(),
            copy_scale: Vec::new(),
            staged_steps: false,
            ll128: Vec::new(),
        }
    }
}

/// The flat launch of 2 ranks sharing a GPU: `braid tune --backend cuda` on an H100 with 4
/// ranks sharing it, the launch timed in 7 processes (2026-12-07,
/// `bench/2026-12-07-h100-model-check-final/b-tune-in-seven-processes/4r.tgz`,
/// `4r/profile.json`), rounded: a direct broadcast of 1 element back to back, 4.2 µs (another
/// H100 the same night ran it at 4.9-7.1 by process; an H200 at 6.6 on 2026-12-04).
const SHARED_FLAT_CALL_US: f64 = 4.2;

/// The GPU's share of that flat launch: the same broadcast replayed from CUDA graphs
/// (2.95 µs in that tune; 3.0 on every H100 and H200 since 2026-12-06).
const SHARED_FLAT_GPU_US: f64 = 2.95;

/// What each rank beyond two added to that flat launch in the same tune (the broadcast
/// on 4 ranks, 5.4 µs against 4.2 on 2: 0.59; 0.8-1.5 on the other H100 and the H200).
const SHARED_RANK_US: f64 = 0.59;

/// What the flat kernel's three arguments cost beyond the smallest in the same tune (its
/// three entry points launched empty, back to back: 2.26 µs at 536 bytes, 2.28 at 2,200,
/// 2.31 at 3,744), rounded.
const SHARED_FLAT_ARG_US: [ArgCost; 3] = [
    ArgCost {
        bytes: 536,
        us: 0.0,
    },
    ArgCost {
        bytes: 2200,
        us: 0.02,
    },
    ArgCost {
        bytes: 3744,
        us: 0.05,
    },
];

impl Profile {
    /// What starting a block costs the cores in a call that starts `blocks` blocks over
    /// all its ranks ([`Profile::block_work_us`]), µs; `None` where none is measured.
    pub fn block_work_us(&self, blocks: u64) -> Option<f64> {
        let t = &self.block_work_us;
        interpolate(
            t.len(),
            |i| (f64::from(t[i].blocks), t[i].us),
            blocks as f64,
        )
    }

    /// The share of its copy rates a call whose buffers take `bytes` over all its ranks
    /// copies at ([`Profile::copy_scale`]).
    pub fn copy_scale(&self, bytes: u64) -> f64 {
        let t = &self.copy_scale;
        let mib = bytes.max(1) as f64 / f64::from(1u32 << 20);
        interpolate(
            t.len(),
            |i| (f64::from(t[i].mib).log2(), t[i].scale),
            mib.log2(),
        )
        .unwrap_or(1.0)
    }

    /// What a flat launch whose kernel argument takes `bytes` adds beyond the smallest
    /// argument ([`Profile::flat_arg_us`]), µs: the first measured size at least that
    /// large; nothing where none is measured, and the largest's where every one is
    /// smaller.
    pub fn flat_arg_us(&self, bytes: usize) -> f64 {
        self.flat_arg_us
            .iter()
            .find(|a| a.bytes as usize >= bytes)
            .or(self.flat_arg_us.last())
            .map_or(0.0, |a| a.us)
    }

    /// What the ranks of a launch beyond the first add to a call of `n` ranks: where they
    /// share one GPU (`shared_gbps` set), `rank_us` for each beyond the first two (the
    /// launch of two is in `call_us` and `flat_call_us`); nothing otherwise.
    pub fn ranks_us(&self, proto: braid_ir::Protocol, n: u32) -> f64 {
        if self.shared_gbps.get(proto) > 0.0 {
            self.rank_us * f64::from(n.saturating_sub(2))
        } else {
            0.0
        }
    }

    /// The built-in constants for ranks that share one GPU and launch together (several
    /// ranks of one process on it): what `braid tune --backend cuda` measured on an H100
    /// with 4 ranks sharing it (2026-12-07, `bench/2026-12-07-h100-model-check-final/
    /// b-tune-in-seven-processes/4r.tgz`, `4r/profile.json`), rounded, LL128 left out (it
    /// is slower than Simple and LL within one GPU). The defaults describe a rank per GPU
    /// over NVLink, which prices such ranks' calls as if their data crossed links and
    /// their memory were their own.
    pub fn shared_gpu() -> Profile {
        let d = Profile::default();
        Profile {
            source: "defaults for ranks sharing one GPU".into(),
            call_us: PerProtocol {
                simple: 4.65,
                ll: 5.75,
                ll128: None,
            },
            hop_us: HopLatency {
                nvlink: PerProtocol {
                    simple: 1.57,
                    ll: 0.29,
                    ll128: None,
                },
                ..d.hop_us
            },
            block_gbps: PerProtocol {
                simple: 56.0,
                ll: 45.0,
                ll128: None,
            },
            slice_us: PerProtocol {
                simple: 1.28,
                ll: 1.09,
                ll128: None,
            },
            recv_slice_us: PerProtocol {
                simple: 0.0,
                ll: 1.34,
                ll128: None,
            },
            wait_us: PerProtocol {
                simple: 0.77,
                ll: 0.93,
                ll128: None,
            },
            shared_gbps: PerProtocol {
                simple: 2980.0,
                ll: 1200.0,
                ll128: None,
            },
            shared_knee: PerProtocol {
                simple: 5.0,
                ll: 0.0,
                ll128: None,
            },
            launch_block_us: PerProtocol {
                simple: 0.0,
                ll: 0.004,
                ll128: None,
            },
            flat_call_us: SHARED_FLAT_CALL_US,
            flat_gpu_us: SHARED_FLAT_GPU_US,
            rank_us: SHARED_RANK_US,
            flat_arg_us: SHARED_FLAT_ARG_US.to_vec(),
            copy_scale: Vec::new(),
            ..d
        }
    }

    /// Whether these are built-in constants ([`Profile::default`], [`Profile::shared_gpu`])
    /// rather than a measured profile.
    pub fn is_builtin(&self) -> bool {
        self.source.starts_with("defaults")
    }

    /// The constants a call is priced with whose ranks launch together on one GPU or not
    /// (`together`): these, except that the built-in ones for a rank per GPU give way to
    /// [`Profile::shared_gpu`] for ranks launching together. A measured profile is always
    /// used as it is.
    pub fn for_launch(&self, together: bool) -> std::borrow::Cow<'_, Profile> {
        if together && self.is_builtin() && !self.one_gpu() {
            std::borrow::Cow::Owned(Profile::shared_gpu())
        } else {
            std::borrow::Cow::Borrowed(self)
        }
    }

    /// Whether a GPU measured what a receiving step's slice costs in `p` apart from a
    /// sending step's ([`Profile::recv_slice_us`]): then the NVLink hop is a message's
    /// whole latency.
    pub fn measured_receive(&self, p: braid_ir::Protocol) -> bool {
        self.recv_slice_us.get(p) > 0.0 && self.cores == 0
    }

    /// Whether a receive in `p` takes up its message's lines as they land (LL and LL128
    /// on a GPU whose receiving steps were measured: the flag travels with the data)
    /// rather than once a slice has landed whole (Simple publishes a slice once it is
    /// written).
    pub fn lines_land(&self, p: braid_ir::Protocol) -> bool {
        self.measured_receive(p) && p.flags_each_line()
    }

    /// Whether the profile was measured with several ranks on one GPU: a shared memory
    /// rate and no cores to share (the host backend's profiles count cores). Such ranks
    /// run in one launch when they are one process's.
    pub fn one_gpu(&self) -> bool {
        self.cores == 0 && (self.shared_gbps.simple > 0.0 || self.shared_gbps.ll > 0.0)
    }

    /// The profile the runtime prices calls with on a topology of `fingerprint`: the file
    /// `BRAID_PROFILE` names (what `braid tune -o FILE` wrote), else the defaults. A
    /// profile measured for another topology is refused, not silently used.
    pub fn from_env(fingerprint: &str) -> Result<Profile, String> {
        let Some(path) = std::env::var_os("BRAID_PROFILE").filter(|p| !p.is_empty()) else {
            return Ok(Profile::default());
        };
        let shown = std::path::Path::new(&path).display().to_string();
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("BRAID_PROFILE={shown}: {e}"))?;
        let p = Profile::from_json(&text).map_err(|e| format!("BRAID_PROFILE={shown}: {e}"))?;
        match &p.fingerprint {
            Some(f) if f != fingerprint => Err(format!(
                "BRAID_PROFILE={shown} was measured on topology {f}, this one is {fingerprint}"
            )),
            _ => Ok(p),
        }
    }

    /// Reads a profile file; refuses another format version.
    pub fn from_json(text: &str) -> Result<Profile, String> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("not a profile: {e}"))?;
        match v.get("version").and_then(|v| v.as_u64()) {
            Some(n) if n == u64::from(PROFILE_VERSION) => {}
            Some(n) => {
                return Err(format!(
                    "profile version {n}; this build reads version {PROFILE_VERSION}"
                ))
            }
            None => return Err("not a profile: no version".into()),
        }
        let p: Profile = serde_json::from_value(v).map_err(|e| format!("not a profile: {e}"))?;
        p.check()?;
        Ok(p)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a profile serialises") + "\n"
    }

    /// Every constant finite and in range (a profile file is input).
    pub fn check(&self) -> Result<(), String> {
        let pp = |name: &str, p: &PerProtocol, positive: bool| -> Result<(), String> {
            for (proto, v) in [("simple", p.simple), ("ll", p.ll)] {
                let ok = v.is_finite() && if positive { v > 0.0 } else { v >= 0.0 } && v < 1e9;
                if !ok {
                    return Err(format!("{name}.{proto} = {v} is out of range"));
                }
            }
            Ok(())
        };
        pp("call_us", &self.call_us, false)?;
        pp("hop_us.nvlink", &self.hop_us.nvlink, false)?;
        pp("hop_us.pci", &self.hop_us.pci, false)?;
        pp("hop_us.net", &self.hop_us.net, false)?;
        pp("block_gbps", &self.block_gbps, true)?;
        pp("efficiency", &self.efficiency, true)?;
        pp("slice_us", &self.slice_us, false)?;
        pp("recv_slice_us", &self.recv_slice_us, false)?;
        pp("net_post_us", &self.net_post_us, false)?;
        pp("block_us", &self.block_us, false)?;
        pp("wait_us", &self.wait_us, false)?;
        pp("copy_gbps", &self.copy_gbps, false)?;
        pp("link_work_gbps", &self.link_work_gbps, false)?;
        pp("shared_gbps", &self.shared_gbps, false)?;
        pp("launch_block_us", &self.launch_block_us, false)?;
        for (proto, k) in [
            ("simple", self.shared_knee.simple),
            ("ll", self.shared_knee.ll),
        ]
        .into_iter()
        .chain(self.shared_knee.ll128.map(|k| ("ll128", k)))
        {
            if !(k == 0.0 || (1.0..=1e3).contains(&k)) {
                return Err(format!(
                    "shared_knee.{proto} = {k} is out of range (0, or 1 to 1000)"
                ));
            }
        }
        for (name, v) in [
            ("flat_call_us", self.flat_call_us),
            ("flat_gpu_us", self.flat_gpu_us),
            ("flat_block_gbps", self.flat_block_gbps),
            ("flat_pass_us", self.flat_pass_us),
        ] {
            if !(v.is_finite() && (0.0..1e9).contains(&v)) {
                return Err(format!("{name} = {v} is out of range"));
            }
        }
        // Tables of (key, µs): each time in range, each key above 0 and the keys growing.
        let table = |name: &str, unit: &str, rows: Vec<(u32, f64)>, max: f64| {
            for (k, us) in &rows {
                if !(us.is_finite() && (0.0..max).contains(us)) || *k == 0 {
                    return Err(format!("{name} at {k} {unit} = {us} is out of range"));
                }
            }
            if rows.windows(2).any(|w| w[0].0 >= w[1].0) {
                return Err(format!("{name}: the {unit} must grow"));
            }
            Ok(())
        };
        table(
            "block_work_us",
            "blocks",
            self.block_work_us
                .iter()
                .map(|w| (w.blocks, w.us))
                .collect(),
            1e9,
        )?;
        table(
            "flat_arg_us",
            "bytes",
            self.flat_arg_us.iter().map(|a| (a.bytes, a.us)).collect(),
            1e6,
        )?;
        table(
            "copy_scale",
            "MiB",
            self.copy_scale.iter().map(|c| (c.mib, c.scale)).collect(),
            100.0,
        )?;
        if let Some(c) = self.copy_scale.iter().find(|c| c.scale <= 0.0) {
            return Err(format!(
                "copy_scale at {} MiB = {} is out of range",
                c.mib, c.scale
            ));
        }
        if self.efficiency.simple > 1.0 || self.efficiency.ll > 1.0 {
            return Err("efficiency is a share: at most 1".into());
        }
        for v in [self.slice_bytes.simple, self.slice_bytes.ll] {
            if !(v >= 64.0 && v <= f64::from(1u32 << 30)) {
                return Err(format!(
                    "slice_bytes = {v} is out of range (64 bytes to 1 GiB)"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_round_trips_and_another_version_is_refused() {
        let p = Profile::default();
        assert_eq!(Profile::from_json(&p.to_json()).unwrap(), p);
        let old = p.to_json().replace("\"version\": 2", "\"version\": 1");
        assert!(Profile::from_json(&old).unwrap_err().contains("version 1"));
        let bad = p
            .to_json()
            .replace("\"simple\": 262144.0", "\"simple\": 0.0");
        assert!(Profile::from_json(&bad)
            .unwrap_err()
            .contains("slice_bytes"));
        // The argument costs round trip; sizes out of order are refused.
        let shared = Profile::shared_gpu();
        assert!(shared.to_json().contains("flat_arg_us"));
        assert_eq!(Profile::from_json(&shared.to_json()).unwrap(), shared);
        let mut swapped = shared.clone();
        swapped.flat_arg_us.swap(0, 1);
        assert!(Profile::from_json(&swapped.to_json())
            .unwrap_err()
            .contains("flat_arg_us"));
        // A flat block's rate and a pass's cost round trip; negative ones are refused,
        // each by name.
        let mut flat = shared.clone();
        flat.flat_block_gbps = 37.0;
        flat.flat_pass_us = 0.47;
        assert_eq!(Profile::from_json(&flat.to_json()).unwrap(), flat);
        for (name, set) in [
            (
                "flat_block_gbps",
                (|p: &mut Profile| p.flat_block_gbps = -1.0) as fn(&mut Profile),
            ),
            ("flat_pass_us", |p: &mut Profile| p.flat_pass_us = -1.0),
        ] {
            let mut bad = flat.clone();
            set(&mut bad);
            let err = Profile::from_json(&bad.to_json()).unwrap_err();
            assert!(
                err.contains(&format!("{name} = -1 is out of range")),
                "{err}"
            );
        }
        // So does the host's block-start table; counts out of order or of 0 are refused.
        let mut host = Profile {
            cores: 2,
            ..Profile::default()
        };
        host.block_work_us = vec![
            BlockWork {
                blocks: 15,
                us: 57.0,
            },
            BlockWork {
                blocks: 120,
                us: 97.0,
            },
        ];
        assert_eq!(Profile::from_json(&host.to_json()).unwrap(), host);
        let mut bad = host.clone();
        bad.block_work_us.swap(0, 1);
        assert!(Profile::from_json(&bad.to_json())
            .unwrap_err()
            .contains("block_work_us: the blocks must grow"));
        bad.block_work_us = vec![BlockWork { blocks: 0, us: 1.0 }];
        assert!(Profile::from_json(&bad.to_json())
            .unwrap_err()
            .contains("out of range"));
        // The copy rates by size: round trip; sizes out of order and shares of 0 refused.
        host.copy_scale = vec![
            CopyScale { mib: 4, scale: 2.0 },
            CopyScale {
                mib: 256,
                scale: 1.0,
            },
        ];
        assert_eq!(Profile::from_json(&host.to_json()).unwrap(), host);
        let mut bad = host.clone();
        bad.copy_scale.swap(0, 1);
        assert!(Profile::from_json(&bad.to_json())
            .unwrap_err()
            .contains("copy_scale: the MiB must grow"));
        bad.copy_scale = vec![CopyScale { mib: 4, scale: 0.0 }];
        assert!(Profile::from_json(&bad.to_json())
            .unwrap_err()
            .contains("copy_scale at 4 MiB"));
    }

    /// The link work (the host over TCP) round trips; a profile written before it reads
    /// as none; a rate below 0 is refused with its name.
    #[test]
    fn link_work_round_trips_defaults_to_none_and_refuses_a_negative_rate() {
        let mut p = Profile {
            cores: 2,
            ..Profile::default()
        };
        p.link_work_gbps.simple = 4.5;
        assert_eq!(Profile::from_json(&p.to_json()).unwrap(), p);
        let mut older: serde_json::Value = serde_json::from_str(&p.to_json()).unwrap();
        older.as_object_mut().unwrap().remove("link_work_gbps");
        let older = Profile::from_json(&older.to_string()).unwrap();
        assert_eq!(older.link_work_gbps, PerProtocol::default());
        p.link_work_gbps.simple = -1.0;
        assert!(Profile::from_json(&p.to_json())
            .unwrap_err()
            .contains("link_work_gbps.simple = -1 is out of range"));
    }

    #[test]
    fn a_shared_memorys_knee_round_trips_is_sharp_when_absent_and_is_checked() {
        let mut p = Profile::shared_gpu();
        p.shared_knee.simple = 4.5;
        p.shared_knee.ll128 = Some(2.0);
        assert_eq!(Profile::from_json(&p.to_json()).unwrap(), p);
        // A profile written before the knee reads as sharp (0), as it was measured.
        let mut older: serde_json::Value = serde_json::from_str(&p.to_json()).unwrap();
        older.as_object_mut().unwrap().remove("shared_knee");
        let older = Profile::from_json(&older.to_string()).unwrap();
        assert_eq!(older.shared_knee, PerProtocol::default());
        // Between sharp and the softest knee, negative, or not a number: refused.
        for (bad, shown) in [(0.5, "0.5"), (-1.0, "-1"), (5000.0, "5000")] {
            let mut q = p.clone();
            q.shared_knee.simple = bad;
            let err = Profile::from_json(&q.to_json()).unwrap_err();
            assert!(
                err.contains(&format!("shared_knee.simple = {shown} is out of range")),
                "{err}"
            );
        }
        let mut q = p.clone();
        q.shared_knee.ll128 = Some(0.9);
        assert!(Profile::from_json(&q.to_json())
            .unwrap_err()
            .contains("shared_knee.ll128"));
        let mut q = p.clone();
        q.shared_knee.ll = f64::NAN;
        assert!(q.check().unwrap_err().contains("shared_knee.ll"));
    }

    #[test]
    fn ll128_costs_what_simple_costs_until_measured_and_its_verdicts_round_trip() {
        let mut p = Profile::default();
        assert!(
            !p.to_json().contains("ll128"),
            "nothing written when unmeasured"
        );
        assert_eq!(
            p.call_us.get(Protocol::Ll128),
            p.call_us.get(Protocol::Simple)
        );
        p.call_us.set(Protocol::Ll128, 3.25);
        p.ll128.push(Ll128Verdict {
            link: LinkKind::SameGpu,
            gpus: (0, 0),
            lines: 4096,
            rounds: 2000,
            reads: 900_000,
            torn: 0,
            stalled: 0,
        });
        let back = Profile::from_json(&p.to_json()).unwrap();
        assert_eq!(back, p);
        assert_eq!(back.call_us.get(Protocol::Ll128), 3.25);
        assert_eq!(back.call_us.get(Protocol::Simple), 8.4);
        assert!(back.to_json().contains("\"same_gpu\""));
        assert!(ll128_allowed(&back.ll128, &[LinkKind::SameGpu]));
        assert!(!ll128_allowed(
            &back.ll128,
            &[LinkKind::SameGpu, LinkKind::Peer]
        ));
        let torn = Ll128Verdict {
            torn: 1,
            ..back.ll128[0].clone()
        };
        assert!(!ll128_allowed(
            &[back.ll128[0].clone(), torn],
            &[LinkKind::SameGpu]
        ));
    }
}
