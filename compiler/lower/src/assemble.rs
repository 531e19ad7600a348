//! The last step: blocks, steps, dependencies and origins as a [`Plan`].

use crate::deps::StepDeps;
use crate::moves::Moves;
use crate::options::Locate;
use crate::steps::Programs;
use braid_ir::{Buf, Layout, Mode, ModeSet, OpProgram};
use braid_plan::{Block, Origin, Plan, RankPlan, Step, Topology, FORMAT_VERSION};

/// Everything the plan header needs besides the program.
#[derive(Clone)]
pub struct Header<'a> {
    pub topology: Topology,
    pub modes: ModeSet,
    pub slots: u32,
    pub locate: Option<Locate<'a>>,
}

/// The origin of each operation, computed once and shared by its steps.
fn origins(prog: &OpProgram, locate: Option<Locate<'_>>) -> Vec<Option<Origin>> {
    let Some(locate) = locate else {
        return vec![None; prog.ops.len()];
    };
    prog.ops
        .iter()
        .map(|op| {
            locate(op.span).map(|p| Origin {
                line: p.line,
                col: p.col,
                text: p.text,
                bindings: op
                    .bindings
                    .iter()
                    .map(|b| (b.name.to_string(), b.value))
                    .collect(),
            })
        })
        .collect()
}

/// Assembles the plan. A fused step's origin is its receive's statement.
pub fn plan(
    prog: &OpProgram,
    moves: &Moves,
    programs: Programs,
    mut deps: StepDeps,
    h: Header<'_>,
) -> Plan {
    let origins = origins(prog, h.locate);
    let ranks = programs
        .ranks
        .into_iter()
        .enumerate()
        .map(|(r, blocks)| RankPlan {
            rank: r as u32,
            blocks: blocks
                .into_iter()
                .enumerate()
                .map(|(b, block)| Block {
                    id: b as u32,
                    channel: block.key.channel,
                    send_peer: block.key.send_peer,
                    recv_peer: block.key.recv_peer,
                    steps: block
                        .steps
                        .into_iter()
                        .enumerate()
                        .map(|(i, d)| Step {
                            kind: d.kind,
                            src: d.src,
                            dst: d.dst,
                            deps: std::mem::take(&mut deps[r][b][i]),
                            origin: origins[moves.get(d.moves[0]).op.index()].clone(),
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect();
    // Buffer sizes as a rank that has every buffer sees them (the root, if any).
    let layout = Layout::new(
        prog.collective,
        prog.shape.n,
        prog.chunks,
        prog.scratch,
        prog.root,
        Mode::OutOfPlace,
    );
    let holder = prog.root.unwrap_or(0);
    Plan {
        format_version: FORMAT_VERSION,
        name: prog.algorithm.clone(),
        collective: prog.collective,
        n_ranks: prog.shape.n,
        root: prog.root,
        topology: h.topology,
        chunks: prog.chunks,
        in_chunks: layout.size(Buf::In, holder).unwrap_or(0),
        out_chunks: layout.size(Buf::Out, holder).unwrap_or(0),
        scratch_chunks: prog.scratch,
        protocol: prog.protocol,
        channels: prog.channels,
        modes: h.modes,
        slots: h.slots,
        connections: Vec::new(),
        execution: Default::default(),
        bytes: None,
        ranks,
    }
}
