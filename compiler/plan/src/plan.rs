//! The plan data model: what one compiled (or imported) algorithm asks every rank to do.
//!
//! A plan is deliberately close to MSCCL's XML IR (ranks -> threadblocks -> steps) so that
//! MSCCL algorithms import losslessly, but every field is named, every optional field is an
//! `Option`, and a step may carry any number of dependencies (MSCCL encodes extra ones as
//! `nop` steps). `docs/plan-format.md` is the user-facing description of every field.

use braid_ir::{Buf, Collective, Layout, Mode, ModeSet, Protocol};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The only `format_version` this crate reads and writes.
pub const FORMAT_VERSION: u32 = 1;

/// Connection FIFO depth in slices when a plan does not say (NCCL's `NCCL_STEPS`).
pub const DEFAULT_SLOTS: u32 = 8;

fn default_slots() -> u32 {
    DEFAULT_SLOTS
}

/// One algorithm, lowered for one rank count (and root), ready to run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Always [`FORMAT_VERSION`]; loading rejects anything else.
    pub format_version: u32,
    /// The algorithm's name.
    pub name: String,
    pub collective: Collective,
    pub n_ranks: u32,
    /// The root rank: present exactly for broadcast and reduce.
    #[serde(default)]
    pub root: Option<u32>,
    pub topology: Topology,
    /// `C`: chunks of the larger of `in` / `out` (dsl.md section 4).
    pub chunks: u32,
    /// Chunks of `in` on a rank that has it.
    pub in_chunks: u32,
    /// Chunks of `out` on a rank that has it.
    pub out_chunks: u32,
    /// Chunks of `scratch` on every rank.
    pub scratch_chunks: u32,
    pub protocol: Protocol,
    /// Replication count: the runtime runs this many copies of the whole plan, each on its
    /// own channels and its own share of every chunk (MSCCL "instances").
    pub channels: u32,
    /// The call modes the plan is valid for (and verified in).
    pub modes: ModeSet,
    /// Depth, in slices, of every connection's FIFO at run time.
    #[serde(default = "default_slots")]
    pub slots: u32,
    /// How connections travel on the topology, where the producer recorded it (the
    /// compiler records every connection); sorted by (sender, receiver, channel).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connections: Vec<Connection>,
    /// How a runtime replays the plan over a call's data (see [`Execution`]).
    #[serde(default, skip_serializing_if = "Execution::is_streaming")]
    pub execution: Execution,
    /// The call sizes the plan is meant for, where its producer said (MSCCL's
    /// `minBytes` / `maxBytes`); any size when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<ByteRange>,
    /// Rank `i`'s program at index `i`.
    pub ranks: Vec<RankPlan>,
}

/// How a runtime replays a plan over a call's data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Execution {
    /// Each step moves its whole message once, cut into slices that stream through the
    /// connection's FIFO: a send finishes only while its receiver receives. Braid's
    /// compiler emits these where the verifier proves them deadlock-free.
    #[default]
    Streaming,
    /// MSCCL's model: the whole plan is replayed over tiles of every chunk, and one chunk's
    /// tile fills one FIFO slot, so a message of `count` chunks is `count` slices and a
    /// send finishes once its slices fit in the receiver's FIFO.
    Tiled,
}

impl Execution {
    pub fn is_streaming(&self) -> bool {
        *self == Execution::Streaming
    }
}

/// Call sizes, in bytes of the larger of the send and receive buffers: `min <= size`
/// and, when `max` is present, `size < max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ByteRange {
    pub min: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u64>,
}

impl ByteRange {
    pub fn contains(&self, bytes: u64) -> bool {
        bytes >= self.min && self.max.is_none_or(|m| bytes < m)
    }
}

/// The path and transport of one connection `(sender, receiver, channel)`, as chosen for
/// the plan's topology. Runtimes open the named transport; the path is informational.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Connection {
    pub sender: u32,
    pub receiver: u32,
    pub channel: u32,
    /// NCCL's class of the path between the two GPUs: `NVL`, `PIX`, `PXB`, `PHB`, `SYS`
    /// or `NET` (see [`PATH_CLASSES`]).
    pub path: String,
    pub transport: Transport,
}

/// The path class names a [`Connection`] may carry, best first.
pub const PATH_CLASSES: [&str; 6] = ["NVL", "PIX", "PXB", "PHB", "SYS", "NET"];

/// How a connection's bytes travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Transport {
    /// GPU to GPU over NVLink (directly or through NVSwitch).
    #[serde(rename = "p2p-nvlink")]
    P2pNvlink,
    /// GPU to GPU over PCIe peer-to-peer.
    #[serde(rename = "p2p-pcie")]
    P2pPcie,
    /// Through pinned host memory, where the GPUs cannot reach each other directly (across
    /// CPU sockets, or through a host bridge without P2P).
    #[serde(rename = "host-staged")]
    HostStaged,
    /// Through NICs and the network, between nodes.
    #[serde(rename = "net")]
    Net,
}

impl Transport {
    /// The name written in plans.
    pub fn name(self) -> &'static str {
        match self {
            Transport::P2pNvlink => "p2p-nvlink",
            Transport::P2pPcie => "p2p-pcie",
            Transport::HostStaged => "host-staged",
            Transport::Net => "net",
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which topology the plan was compiled for.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// As given on the command line (`nvswitch:8`, `cluster:2x8`, a file name).
    pub name: String,
    /// A digest of the topology's content, so a plan is not silently run elsewhere.
    pub fingerprint: String,
}

/// The blocks (MSCCL threadblocks) one rank runs concurrently.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RankPlan {
    pub rank: u32,
    pub blocks: Vec<Block>,
}

/// A sequential program with at most one send peer and one receive peer, on one channel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Block {
    /// Index of the block within its rank.
    pub id: u32,
    pub channel: u32,
    #[serde(default)]
    pub send_peer: Option<u32>,
    #[serde(default)]
    pub recv_peer: Option<u32>,
    pub steps: Vec<Step>,
}

/// One instruction of a block.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub kind: StepKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src: Option<Slice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<Slice>,
    /// Steps of other blocks of the same rank that must complete before this one starts.
    /// (The previous step of the block always must.)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deps: Vec<Dep>,
    /// The source statement this step was compiled from, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
}

impl Step {
    /// Chunks the step moves: its `src` count, else its `dst` count (0 for `nop`).
    pub fn count(&self) -> u32 {
        self.src.or(self.dst).map_or(0, |s| s.count)
    }
}

/// `count` consecutive chunks of one buffer of the step's own rank, from `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slice {
    pub buf: Buf,
    pub offset: u32,
    pub count: u32,
}

impl Slice {
    /// One past the last chunk, without overflow.
    pub fn end(&self) -> u64 {
        u64::from(self.offset) + u64::from(self.count)
    }
}

impl fmt::Display for Slice {
    /// `out[3]` for one chunk, `out[3..5]` for several (half-open), as in the language.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.count == 1 {
            write!(f, "{}[{}]", self.buf, self.offset)
        } else {
            write!(f, "{}[{}..{}]", self.buf, self.offset, self.end())
        }
    }
}

/// "Step `step` of block `block` of this rank must have completed."
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dep {
    pub block: u32,
    pub step: u32,
}

/// Provenance: the source statement (and loop variables) that produced a step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Origin {
    pub line: u32,
    pub col: u32,
    /// The statement's source text.
    pub text: String,
    /// Loop variables and `let` bindings in force, outermost first.
    #[serde(default)]
    pub bindings: Vec<(String, i64)>,
}

impl fmt::Display for Origin {
    /// `line 7:5: reduce out[r + 1][s] <- out[r][s]; (r = 0, s = 2)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}:{}: {}", self.line, self.col, self.text.trim())?;
        if !self.bindings.is_empty() {
            let b: Vec<String> = self
                .bindings
                .iter()
                .map(|(n, v)| format!("{n} = {v}"))
                .collect();
            write!(f, " ({})", b.join(", "))?;
        }
        Ok(())
    }
}

/// MSCCL's instruction set, spelled out. The serde names are MSCCL's `type` attribute
/// values. `docs/plan-format.md` gives each kind's exact reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum StepKind {
    /// Send `src` to the block's send peer.
    #[serde(rename = "s")]
    Send,
    /// Receive from the recv peer into `dst`.
    #[serde(rename = "r")]
    Recv,
    /// Receive into `dst` and forward the received data to the send peer.
    #[serde(rename = "rcs")]
    RecvCopySend,
    /// Receive, combine with `src`, send the result on; nothing is stored.
    #[serde(rename = "rrs")]
    RecvReduceSend,
    /// Receive; `dst = src (+) received`.
    #[serde(rename = "rrc")]
    RecvReduceCopy,
    /// Receive; `dst = src (+) received`, and send that result on.
    #[serde(rename = "rrcs")]
    RecvReduceCopySend,
    /// Local `dst = src`.
    #[serde(rename = "cpy")]
    Copy,
    /// Local `dst = dst (+) src`.
    #[serde(rename = "re")]
    Reduce,
    /// Nothing; only its dependencies matter.
    #[serde(rename = "nop")]
    Nop,
}

impl StepKind {
    pub const ALL: [StepKind; 9] = [
        StepKind::Send,
        StepKind::Recv,
        StepKind::RecvCopySend,
        StepKind::RecvReduceSend,
        StepKind::RecvReduceCopy,
        StepKind::RecvReduceCopySend,
        StepKind::Copy,
        StepKind::Reduce,
        StepKind::Nop,
    ];

    /// MSCCL's short name, as written in JSON and in `--explain` output.
    pub fn short_name(self) -> &'static str {
        match self {
            StepKind::Send => "s",
            StepKind::Recv => "r",
            StepKind::RecvCopySend => "rcs",
            StepKind::RecvReduceSend => "rrs",
            StepKind::RecvReduceCopy => "rrc",
            StepKind::RecvReduceCopySend => "rrcs",
            StepKind::Copy => "cpy",
            StepKind::Reduce => "re",
            StepKind::Nop => "nop",
        }
    }

    /// Whether the step puts a message on the block's send connection.
    pub fn sends(self) -> bool {
        matches!(
            self,
            StepKind::Send
                | StepKind::RecvCopySend
                | StepKind::RecvReduceSend
                | StepKind::RecvReduceCopySend
        )
    }

    /// Whether the step takes a message from the block's receive connection.
    pub fn receives(self) -> bool {
        matches!(
            self,
            StepKind::Recv
                | StepKind::RecvCopySend
                | StepKind::RecvReduceSend
                | StepKind::RecvReduceCopy
                | StepKind::RecvReduceCopySend
        )
    }

    /// Whether the kind requires `src` (and must not have one otherwise).
    pub fn has_src(self) -> bool {
        matches!(
            self,
            StepKind::Send
                | StepKind::RecvReduceSend
                | StepKind::RecvReduceCopy
                | StepKind::RecvReduceCopySend
                | StepKind::Copy
                | StepKind::Reduce
        )
    }

    /// Whether the kind requires `dst` (and must not have one otherwise).
    pub fn has_dst(self) -> bool {
        matches!(
            self,
            StepKind::Recv
                | StepKind::RecvCopySend
                | StepKind::RecvReduceCopy
                | StepKind::RecvReduceCopySend
                | StepKind::Copy
                | StepKind::Reduce
        )
    }

    /// Whether the step combines values with the reduction operator.
    pub fn reduces(self) -> bool {
        matches!(
            self,
            StepKind::RecvReduceSend
                | StepKind::RecvReduceCopy
                | StepKind::RecvReduceCopySend
                | StepKind::Reduce
        )
    }

    /// Whether the step moves data at all (everything but `nop`).
    pub fn moves_data(self) -> bool {
        self != StepKind::Nop
    }
}

impl fmt::Display for StepKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.short_name())
    }
}

/// Names one step: `(rank, block, step)`, all indices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StepId {
    pub rank: u32,
    pub block: u32,
    pub step: u32,
}

impl fmt::Display for StepId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rank {}, block {}, step {}",
            self.rank, self.block, self.step
        )
    }
}

impl Plan {
    /// The buffer layout of one call mode. Meaningful once the verifier's structure phase
    /// has accepted the header (root, chunks).
    pub fn layout(&self, mode: Mode) -> Layout {
        Layout::new(
            self.collective,
            self.n_ranks,
            self.chunks,
            self.scratch_chunks,
            self.root,
            mode,
        )
    }

    /// The step `id` names, if it exists (ranks are looked up by position).
    pub fn step(&self, id: StepId) -> Option<&Step> {
        self.ranks
            .get(id.rank as usize)?
            .blocks
            .get(id.block as usize)?
            .steps
            .get(id.step as usize)
    }

    /// The block `(rank, block)`, if it exists.
    pub fn block(&self, rank: u32, block: u32) -> Option<&Block> {
        self.ranks.get(rank as usize)?.blocks.get(block as usize)
    }

    /// Steps over all ranks and blocks.
    pub fn step_count(&self) -> usize {
        self.ranks
            .iter()
            .flat_map(|r| &r.blocks)
            .map(|b| b.steps.len())
            .sum()
    }

    /// Blocks over all ranks.
    pub fn block_count(&self) -> usize {
        self.ranks.iter().map(|r| r.blocks.len()).sum()
    }

    /// The recorded path and transport of connection `(sender, receiver, channel)`.
    pub fn connection(&self, sender: u32, receiver: u32, channel: u32) -> Option<&Connection> {
        self.connections
            .iter()
            .find(|c| (c.sender, c.receiver, c.channel) == (sender, receiver, channel))
    }
}
