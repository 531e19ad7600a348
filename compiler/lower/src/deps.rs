//! Cross-block dependencies: the move edges that program order does not already enforce.
//!
//! Every move edge `(a, b, rank)` orders two steps of one rank. Inside one block it is
//! implied by program order and dropped. Across blocks it becomes a dependency of `b`'s
//! step on `a`'s step, unless it is already implied: per rank, each step gets a vector
//! clock (how many steps of each block of its rank are known complete when it starts,
//! through program order and the dependencies kept so far). Steps are visited in a
//! topological order of block order plus candidate dependencies, and a step's candidates
//! are considered latest first (by the program order of their moves), each kept only if
//! the clock does not already cover it. That is a transitive reduction as far as a rank's
//! own blocks can see: orderings through messages from other ranks are not used, so a few
//! implied dependencies may remain.

use crate::graph::MoveGraph;
use crate::steps::Programs;
use braid_plan::Dep;
use std::collections::HashMap;

/// Per rank, per block, per step: the dependencies to record.
pub type StepDeps = Vec<Vec<Vec<Vec<Dep>>>>;

/// A step of one rank: `(block, index)`.
type Local = (u32, u32);

/// Per step of one rank, the steps of other blocks it must follow.
type Candidates = HashMap<Local, Vec<Local>>;

/// The reduced cross-block dependencies of `programs`.
pub fn dependencies(programs: &Programs, graph: &MoveGraph) -> StepDeps {
    let pos = programs.positions();
    // Per rank: step -> the steps of other blocks it must follow.
    let mut cands: Vec<Candidates> = vec![HashMap::new(); programs.ranks.len()];
    for e in &graph.edges {
        let (a, b) = (pos[&(e.from, e.rank)], pos[&(e.to, e.rank)]);
        if a.block == b.block {
            debug_assert!(a.index <= b.index, "an edge runs backwards in block order");
            continue;
        }
        cands[e.rank as usize]
            .entry((b.block, b.index))
            .or_default()
            .push((a.block, a.index));
    }
    cands
        .into_iter()
        .enumerate()
        .map(|(r, c)| rank_deps(programs, r as u32, c))
        .collect()
}

/// Steps of one rank, dense: per block, the global index of its first step.
struct Dense {
    first: Vec<usize>,
    n: usize,
}

impl Dense {
    fn id(&self, (b, i): Local) -> usize {
        self.first[b as usize] + i as usize
    }
}

fn rank_deps(programs: &Programs, rank: u32, mut cands: Candidates) -> Vec<Vec<Vec<Dep>>> {
    let blocks = &programs.ranks[rank as usize];
    let mut first = Vec::with_capacity(blocks.len());
    let mut n = 0;
    for b in blocks {
        first.push(n);
        n += b.steps.len();
    }
    let dense = Dense { first, n };
    // The program-order position of a step (its first move): "latest first" uses it.
    let seq = |(b, i): Local| blocks[b as usize].steps[i as usize].moves[0];
    let pos_of: Vec<Local> = (0..blocks.len() as u32)
        .flat_map(|b| (0..blocks[b as usize].steps.len() as u32).map(move |i| (b, i)))
        .collect();

    // Kahn's algorithm over block order and candidate dependencies.
    let mut indeg = vec![0u32; dense.n];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); dense.n];
    for (&to, froms) in &cands {
        for &f in froms {
            indeg[dense.id(to)] += 1;
            dependents[dense.id(f)].push(dense.id(to));
        }
    }
    for &(b, i) in &pos_of {
        if i > 0 {
            indeg[dense.id((b, i))] += 1;
        }
    }
    let mut ready: Vec<usize> = (0..dense.n).filter(|&g| indeg[g] == 0).collect();
    let mut clocks: Vec<Vec<u32>> = vec![Vec::new(); dense.n];
    let mut deps: Vec<Vec<Vec<Dep>>> = blocks
        .iter()
        .map(|b| vec![Vec::new(); b.steps.len()])
        .collect();
    let mut visited = 0;
    while let Some(g) = ready.pop() {
        visited += 1;
        let (b, i) = pos_of[g];
        let mut clock = if i == 0 {
            vec![0; blocks.len()]
        } else {
            clocks[g - 1].clone()
        };
        let mut mine = cands.remove(&(b, i)).unwrap_or_default();
        mine.sort_by_key(|&q| std::cmp::Reverse(seq(q)));
        mine.dedup();
        for q in mine {
            if clock[q.0 as usize] > q.1 {
                continue;
            }
            for (c, t) in clock.iter_mut().zip(&clocks[dense.id(q)]) {
                *c = (*c).max(*t);
            }
            deps[b as usize][i as usize].push(Dep {
                block: q.0,
                step: q.1,
            });
        }
        deps[b as usize][i as usize].sort();
        clock[b as usize] = i + 1;
        clocks[g] = clock;
        let next = (i + 1 < blocks[b as usize].steps.len() as u32).then_some(g + 1);
        for s in next.into_iter().chain(dependents[g].iter().copied()) {
            indeg[s] -= 1;
            if indeg[s] == 0 {
                ready.push(s);
            }
        }
    }
    if visited < dense.n {
        // A cycle: a lowering bug. Keep every remaining candidate unreduced so that the
        // plan verifier reports the cycle instead of this crate hiding it.
        for ((b, i), froms) in cands {
            let d = &mut deps[b as usize][i as usize];
            d.extend(froms.into_iter().map(|(block, step)| Dep { block, step }));
            d.sort();
            d.dedup();
        }
    }
    deps
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{analyse, at, copy, program};
    use crate::{blocks, steps};
    use braid_ir::Buf::{In, Out};

    #[test]
    fn dependencies_implied_through_another_block_are_dropped() {
        // Rank 0: cpy X (local block), send X to 1, then receive into X from 2. The receive
        // must follow both the cpy (WAW) and the send (WAR); the send already follows the
        // cpy, so one dependency, on the send, is enough.
        let prog = program(
            3,
            1,
            0,
            vec![
                copy(at(Out, 0, 0), at(In, 0, 0)),
                copy(at(Out, 1, 0), at(Out, 0, 0)),
                copy(at(Out, 0, 0), at(In, 2, 0)),
            ],
        );
        let (moves, g) = analyse(&prog);
        let b = blocks::assign(&moves, &g, 3, &|_| true);
        let programs = steps::build(&moves, &b);
        let deps = dependencies(&programs, &g);
        let block_of = |m: u32| b.block_of(&moves, m, 0);
        let (local, send, recv) = (block_of(0), block_of(1), block_of(2));
        assert_eq!(
            deps[0][send as usize][0],
            vec![Dep {
                block: local,
                step: 0
            }]
        );
        assert_eq!(
            deps[0][recv as usize][0],
            vec![Dep {
                block: send,
                step: 0
            }]
        );
        assert!(deps[0][local as usize][0].is_empty());
    }
}
