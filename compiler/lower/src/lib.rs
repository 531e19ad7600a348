//! Lowering: a verified chunk-operation program, scheduled onto a topology as an
//! execution plan.
//!
//! Each stage is a plain function from one explicit type to the next:
//!
//! ```text
//! OpProgram ──moves::split──> Moves ──graph::build (+ Dataflow)──> MoveGraph
//!     ──schedule::schedule──> Programs (per rank, per block, fused)
//!         = blocks::assign ──> Blocks ──steps::build──> Programs ──fuse::fuse──> Programs
//!           (again while a shared block stays mostly unfused)
//!     ──deps::dependencies──> StepDeps ──assemble::plan──> Plan
//! ```
//!
//! * [`moves`]: every operation becomes local moves (`cpy`, `re`) and transfers (a send on
//!   the source rank, a receive, `r` or `rrc`, on the destination rank).
//! * [`graph`]: the dataflow graph's edges, refined to the moves and ranks they order.
//! * [`route`](mod@route): the path class and transport of every connection, recorded in the plan's
//!   `connections`.
//! * [`blocks`]: MSCCL's rule (one block per connection end, at most one send peer and one
//!   receive peer per block), channels from `@ch` hints.
//! * [`steps`], [`fuse`], [`schedule`]: step lists in program order, then `rcs` / `rrs` /
//!   `rrcs` where a received slice is forwarded and the plan provably stays deadlock-free;
//!   shared blocks that do not fuse are split again.
//! * [`deps`]: cross-block dependencies not implied by program order, reduced per rank.
//!
//! For a program that `braid_passes::verify` accepted, the plan passes `braid_plan::verify`
//! in every mode it is lowered for (the tests check this for every shipped algorithm); a
//! plan that does not is a lowering bug. `docs/lowering.md` explains the choices.

pub mod access;
pub mod assemble;
pub mod blocks;
pub mod deps;
pub mod error;
pub mod fuse;
pub mod graph;
pub mod liveness;
pub mod moves;
pub mod options;
pub mod route;
pub mod schedule;
pub mod steps;
#[cfg(test)]
mod testing;

pub use error::LowerError;
pub use options::{flow_mode, Locate, LowerOptions, SourcePos};
pub use route::{route, ConnectionRoute, Route, Transport};

use braid_ir::{Layout, ModeSet, OpProgram};
use braid_passes::dataflow::Dataflow;
use braid_passes::verify::layout;
use braid_plan::Plan;
use braid_topo::Topology;

/// Lowers `prog` (already verified) for `topo`. `flow` must be `prog`'s dataflow graph in
/// [`flow_mode`] of the plan's modes: the in-place graph whenever the plan is valid in place.
/// Picks the execution model: streaming (one pass, whole messages sliced through the
/// FIFOs) when the plan is deadlock-free that way for messages of any length, else tiled
/// (MSCCL's replay per tile, where each chunk's tile fills one slot). Step-level
/// write-after-read dependencies can serialise a long message against its own reply (a
/// tree's root sends back while its child's receive waits for the child's send to end);
/// tiles bound every message, which breaks that cycle.
pub fn settle_execution(plan: &mut Plan) {
    plan.execution = braid_plan::Execution::Streaming;
    if let Err(diags) = braid_plan::verify(plan) {
        if diags.iter().any(|d| d.check == braid_plan::Check::Deadlock) {
            plan.execution = braid_plan::Execution::Tiled;
        }
    }
}

pub fn lower(
    prog: &OpProgram,
    flow: &Dataflow,
    topo: &Topology,
    opts: &LowerOptions<'_>,
) -> Result<Plan, LowerError> {
    let modes = check_inputs(prog, flow, topo, opts)?;
    let moves = moves::split(prog);
    let flow_layout = layout(prog, flow.mode);
    // A copy that is the identity in `flow`'s mode has no edges there; the other mode's
    // graph orders it where it does copy.
    let others: Vec<(Dataflow, Layout)> =
        if prog.ops.iter().any(|op| op.is_identity_in(&flow_layout)) {
            modes
                .iter()
                .filter(|&m| m != flow.mode)
                .map(|m| (Dataflow::build(prog, m), layout(prog, m)))
                .collect()
        } else {
            Vec::new()
        };
    let flows: Vec<(&Dataflow, &Layout)> = std::iter::once((flow, &flow_layout))
        .chain(others.iter().map(|(f, l)| (f, l)))
        .collect();
    let graph = graph::build(&moves, &flows);
    let live = opts.fuse.then(|| {
        let layouts: Vec<Layout> = modes.iter().map(|m| layout(prog, m)).collect();
        liveness::Liveness::new(&moves, &layouts)
    });
    let header = assemble::Header {
        topology: braid_plan::Topology {
            name: opts.topology_name.unwrap_or(topo.name()).to_string(),
            fingerprint: topo.fingerprint(),
        },
        modes,
        slots: opts.slots,
        locate: opts.locate,
    };
    let build = |tiled: bool| {
        let programs = schedule::schedule(&moves, &graph, prog.shape.n, live.as_ref(), tiled);
        let deps = deps::dependencies(&programs, &graph);
        let mut plan = assemble::plan(prog, &moves, programs, deps, header.clone());
        plan.connections = connection_routes(&plan, topo)
            .iter()
            .map(ConnectionRoute::annotation)
            .collect();
        plan
    };
    let mut plan = build(false);
    settle_execution(&mut plan);
    if !opts.fuse {
        return Ok(plan);
    }
    // Forwards that streaming cannot fuse (a ring: every rank would first send a whole
    // chunk that no rank is ready to take) fuse when the plan runs tile by tile, as NCCL
    // runs its ring: taken where it needs fewer blocks and the plan verifier proves it
    // (verified only then: lowering runs when a communicator compiles its plans).
    let mut tiled = build(true);
    if blocks(&tiled) < blocks(&plan) {
        settle_execution(&mut tiled);
        if braid_plan::verify(&tiled).is_ok() {
            return Ok(tiled);
        }
    }
    Ok(plan)
}

/// Thread blocks of one replica of `plan`, over all ranks.
fn blocks(plan: &Plan) -> usize {
    plan.ranks.iter().map(|r| r.blocks.len()).sum()
}

/// The connections of `plan` with the route each takes on `topo`, sorted by (sender,
/// receiver, channel).
pub fn connection_routes(plan: &Plan, topo: &Topology) -> Vec<ConnectionRoute> {
    let mut out: Vec<ConnectionRoute> = plan
        .ranks
        .iter()
        .flat_map(|r| {
            r.blocks.iter().filter_map(move |b| {
                b.send_peer.map(|p| ConnectionRoute {
                    sender: r.rank,
                    receiver: p,
                    channel: b.channel,
                    route: route(topo, r.rank, p),
                })
            })
        })
        .collect();
    out.sort_by_key(|c| (c.sender, c.receiver, c.channel));
    out
}

/// Checks that the inputs belong together; returns the plan's call modes.
fn check_inputs(
    prog: &OpProgram,
    flow: &Dataflow,
    topo: &Topology,
    opts: &LowerOptions<'_>,
) -> Result<ModeSet, LowerError> {
    if prog.shape.n != topo.n_ranks() {
        return Err(LowerError::RankCount {
            program: prog.shape.n,
            topology: topo.n_ranks(),
        });
    }
    if flow.graph.node_count() != prog.ops.len() {
        return Err(LowerError::FlowSize {
            graph: flow.graph.node_count(),
            ops: prog.ops.len(),
        });
    }
    let requested = opts.modes.unwrap_or(prog.modes);
    let modes = ModeSet {
        out_of_place: prog.modes.out_of_place && requested.out_of_place,
        in_place: prog.modes.in_place && requested.in_place,
    };
    if modes.iter().next().is_none() {
        let names = |m: ModeSet| m.iter().map(|m| m.name()).collect::<Vec<_>>().join(" and ");
        return Err(LowerError::NoMode {
            declared: names(prog.modes),
            requested: names(requested),
        });
    }
    if modes.in_place && flow.mode != braid_ir::Mode::InPlace {
        return Err(LowerError::FlowMode { got: flow.mode });
    }
    let max = braid_plan::verify::MAX_CHANNELS;
    for op in &prog.ops {
        let Some(channel) = op.channel else { continue };
        let needed = (u64::from(channel) + 1) * u64::from(prog.channels.max(1));
        if needed > max {
            return Err(LowerError::TooManyChannels {
                channel,
                replicas: prog.channels,
                needed,
                max,
                span: op.span,
            });
        }
    }
    Ok(modes)
}
