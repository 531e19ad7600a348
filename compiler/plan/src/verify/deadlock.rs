//! Phase d: the plan runs to completion with bounded buffering.
//!
//! First, dependencies (program order plus `deps`) must be acyclic on every rank. Then
//! every block of every rank is simulated: in a streaming plan each data step moves its
//! message in `S` slices through a FIFO of `slots` slices per connection, where `S`
//! exceeds what all FIFOs together hold, so no message ever fits in the system's
//! buffering and a plan cannot lean on buffering it will not get (messages at run time
//! can be arbitrarily long); in a tiled plan (MSCCL's model) a message is one slice per chunk, as one chunk's
//! tile fills one slot. A step
//! starts when the previous step of its block and all its deps are complete; a step that
//! receives and sends streams (slice i goes out once slice i came in).
//!
//! The simulated blocks are deterministic processes blocking on FIFOs and completion flags,
//! so whether they get stuck does not depend on the order the simulation runs them in; the
//! simulation moves as many slices at once as it can, so its cost does not grow with `slots`,
//! and in a streaming plan it completes a chain of messages (see `chains.rs`) at once when
//! the chain's last step starts, so its cost does not grow with the number of connections.
//! The order in which steps complete is a topological order of happens-before, which the
//! race and postcondition phases reuse.

use super::chains::{chains, Chains};
use super::connections::Wiring;
use super::index::NONE;
use super::Ctx;
use crate::diag::{Check, PlanDiagnostic};
use crate::plan::StepKind;

/// Steps in completion order, or why the plan cannot complete.
pub(crate) fn check(cx: &Ctx, w: &Wiring) -> Result<Vec<u32>, Vec<PlanDiagnostic>> {
    let cycles = dependency_cycles(cx);
    if !cycles.is_empty() {
        return Err(cycles);
    }
    simulate(cx, w)
}

/// The global ids of a step's deps.
fn dep_gids<'a>(cx: &'a Ctx, gid: u32) -> impl Iterator<Item = u32> + 'a {
    let rank = cx.ix.id(gid).rank;
    cx.ix
        .step(gid)
        .deps
        .iter()
        .map(move |d| cx.ix.gid(rank, d.block, d.step))
}

/// The step before `gid` in its block, if any.
fn prev_in_block(cx: &Ctx, gid: u32) -> Option<u32> {
    (cx.ix.index_in_block(gid) > 0).then(|| gid - 1)
}

/// Kahn's algorithm over program order and deps; one cycle reported per rank that has any.
fn dependency_cycles(cx: &Ctx) -> Vec<PlanDiagnostic> {
    let ix = &cx.ix;
    let n = ix.n_steps();
    let mut indeg = vec![0u32; n];
    let mut dependents: Vec<Vec<u32>> = vec![Vec::new(); n];
    for g in 0..n as u32 {
        indeg[g as usize] = u32::from(prev_in_block(cx, g).is_some());
        for t in dep_gids(cx, g) {
            indeg[g as usize] += 1;
            dependents[t as usize].push(g);
        }
    }
    let mut ready: Vec<u32> = (0..n as u32).filter(|&g| indeg[g as usize] == 0).collect();
    while let Some(g) = ready.pop() {
        let next = (g + 1 < n as u32 && ix.block_of(g + 1) == ix.block_of(g)).then_some(g + 1);
        for s in next
            .into_iter()
            .chain(dependents[g as usize].iter().copied())
        {
            indeg[s as usize] -= 1;
            if indeg[s as usize] == 0 {
                ready.push(s);
            }
        }
    }
    let stuck = |g: u32| indeg[g as usize] > 0;
    let mut out = Vec::new();
    let mut reported_rank = None;
    for g in 0..n as u32 {
        let rank = ix.id(g).rank;
        if !stuck(g) || reported_rank == Some(rank) {
            continue;
        }
        reported_rank = Some(rank);
        out.push(report_cycle(cx, find_cycle(cx, g, &stuck)));
    }
    out
}

/// From a step left over by Kahn's algorithm, walk stuck predecessors until one repeats.
/// Returns the cycle in execution order: each step waits for the one before it.
fn find_cycle(cx: &Ctx, start: u32, stuck: &dyn Fn(u32) -> bool) -> Vec<u32> {
    let mut path: Vec<u32> = Vec::new();
    let mut seen = std::collections::HashMap::new();
    let mut g = start;
    loop {
        if let Some(&i) = seen.get(&g) {
            let mut cycle = path[i..].to_vec();
            cycle.reverse();
            return cycle;
        }
        seen.insert(g, path.len());
        path.push(g);
        // Every leftover step has a leftover predecessor; prefer deps, which is where
        // cycles are made.
        g = dep_gids(cx, g)
            .find(|&t| stuck(t))
            .or_else(|| prev_in_block(cx, g).filter(|&p| stuck(p)))
            .expect("a step left over by Kahn's algorithm has a left-over predecessor");
    }
}

fn report_cycle(cx: &Ctx, mut cycle: Vec<u32>) -> PlanDiagnostic {
    let ix = &cx.ix;
    let k = cycle.len();
    let is_dep = |c: &[u32], i: usize| {
        let (prev, cur) = (c[(i + k - 1) % k], c[i]);
        dep_gids(cx, cur).any(|t| t == prev)
    };
    // Start at the smallest step that waits through a dependency (a cycle needs one).
    let start = (0..k)
        .filter(|&i| is_dep(&cycle, i))
        .min_by_key(|&i| cycle[i])
        .unwrap_or(0);
    cycle.rotate_left(start);
    let mut d = ix.at(
        Check::Deadlock,
        cycle[0],
        format!(
            "dependency cycle: this step can never start, because through {k} steps it waits for itself"
        ),
    );
    for i in 0..k {
        let (prev, cur) = (cycle[(i + k - 1) % k], cycle[i]);
        let why = if is_dep(&cycle, i) {
            "(dependency)"
        } else {
            "(program order)"
        };
        d = d.note(format!(
            "{} waits for {} {why}",
            ix.describe(cur),
            ix.id(prev)
        ));
    }
    d
}

/// What a stuck block waits for.
#[derive(Clone, Copy)]
enum Wait {
    Dep(u32),
    RecvEmpty(u32),
    SendFull(u32),
}

struct Sim<'c, 'p> {
    cx: &'c Ctx<'p>,
    w: &'c Wiring,
    slots: u64,
    slices: u64,
    pc: Vec<u32>,
    progress: Vec<u64>,
    started: Vec<bool>,
    fifo: Vec<u64>,
    complete: Vec<bool>,
    waiters: Vec<Vec<u32>>,
    /// Streaming plans only: the chains, and how many steps of each have started.
    chains: Option<Chains>,
    chain_started: Vec<u32>,
    queued: Vec<bool>,
    work: Vec<u32>,
    order: Vec<u32>,
}

impl Sim<'_, '_> {
    fn wake(&mut self, b: u32) {
        if !self.queued[b as usize] {
            self.queued[b as usize] = true;
            self.work.push(b);
        }
    }

    /// Slices the message of step `g` is cut into.
    fn slices_of(&self, g: u32) -> u64 {
        match self.cx.ix.plan.execution {
            crate::plan::Execution::Streaming => self.slices,
            // An out-of-bounds count (reported by the bounds phase) counts as a buffer.
            crate::plan::Execution::Tiled => {
                super::limits::counted(self.cx.ix.plan, self.cx.ix.step(g).count()).max(1)
            }
        }
    }

    fn current(&self, b: u32) -> Option<u32> {
        let r = self.cx.ix.block_steps(b);
        let g = r.start + self.pc[b as usize];
        (g < r.end).then_some(g)
    }

    /// Run block `b` until it finishes or blocks.
    fn advance(&mut self, b: u32) {
        let bu = b as usize;
        while let Some(g) = self.current(b) {
            let kind = self.cx.ix.step(g).kind;
            if !self.started[bu] {
                if let Some(t) = dep_gids(self.cx, g).find(|&t| !self.complete[t as usize]) {
                    self.waiters[t as usize].push(b);
                    return;
                }
                self.started[bu] = true;
                if self.start_in_chain(g) {
                    continue;
                }
            }
            if kind.sends() || kind.receives() {
                let slices = self.slices_of(g);
                let left = slices - self.progress[bu];
                let (ci, co) = (self.w.in_conn[bu], self.w.out_conn[bu]);
                let mut k = left;
                if kind.receives() {
                    k = k.min(self.fifo[ci as usize]);
                }
                if kind.sends() {
                    k = k.min(self.slots - self.fifo[co as usize]);
                }
                if k > 0 {
                    self.progress[bu] += k;
                    if kind.receives() {
                        self.fifo[ci as usize] -= k;
                        self.wake(self.w.conn_ends[ci as usize].0);
                    }
                    if kind.sends() {
                        self.fifo[co as usize] += k;
                        self.wake(self.w.conn_ends[co as usize].1);
                    }
                }
                if self.progress[bu] < slices {
                    return;
                }
            }
            self.complete[g as usize] = true;
            self.order.push(g);
            for waiter in std::mem::take(&mut self.waiters[g as usize]) {
                self.wake(waiter);
            }
            self.pc[bu] += 1;
            self.progress[bu] = 0;
            self.started[bu] = false;
        }
    }

    /// Counts step `g` as started in its chain (streaming plans); when it is the chain's
    /// last step to start, completes the whole chain and returns `true`.
    fn start_in_chain(&mut self, g: u32) -> bool {
        let Some(ch) = &self.chains else {
            return false;
        };
        let c = ch.of[g as usize];
        if c == NONE {
            return false;
        }
        self.chain_started[c as usize] += 1;
        if self.chain_started[c as usize] != ch.size[c as usize] {
            return false;
        }
        let ch = self.chains.take().expect("streaming");
        for &m in ch.members(c) {
            let mb = self.cx.ix.block_of(m);
            let mu = mb as usize;
            debug_assert_eq!(self.current(mb), Some(m));
            debug_assert!(self.started[mu]);
            if self.cx.ix.step(m).kind.sends() {
                // Only this message's slices can be in the FIFO: its receiver has
                // consumed every earlier message, and its sender sent nothing later.
                let out = self.w.out_conn[mu] as usize;
                let rb = self.w.conn_ends[out].1 as usize;
                debug_assert_eq!(self.fifo[out], self.progress[mu] - self.progress[rb]);
                self.fifo[out] = 0;
            }
            self.complete[m as usize] = true;
            self.order.push(m);
            for waiter in std::mem::take(&mut self.waiters[m as usize]) {
                self.wake(waiter);
            }
            self.pc[mu] += 1;
            self.progress[mu] = 0;
            self.started[mu] = false;
            self.wake(mb);
        }
        self.chains = Some(ch);
        true
    }

    fn wait_of(&self, b: u32, g: u32) -> Wait {
        let bu = b as usize;
        if !self.started[bu] {
            let t = dep_gids(self.cx, g)
                .find(|&t| !self.complete[t as usize])
                .expect("a block that has not started its step waits for a dependency");
            return Wait::Dep(t);
        }
        let kind = self.cx.ix.step(g).kind;
        let ci = self.w.in_conn[bu];
        if kind.receives() && self.fifo[ci as usize] == 0 {
            Wait::RecvEmpty(ci)
        } else {
            Wait::SendFull(self.w.out_conn[bu])
        }
    }

    fn target(&self, wait: Wait) -> u32 {
        match wait {
            Wait::Dep(t) => self.cx.ix.block_of(t),
            Wait::RecvEmpty(c) => self.w.conn_ends[c as usize].0,
            Wait::SendFull(c) => self.w.conn_ends[c as usize].1,
        }
    }

    /// `rank 0, block 1, step 1 [...] waits for ...`.
    fn explain_wait(&self, b: u32, g: u32) -> String {
        let ix = &self.cx.ix;
        let here = ix.describe(g);
        let slice = self.progress[b as usize] + 1;
        match self.wait_of(b, g) {
            Wait::Dep(t) => format!("{here} waits for {} to complete (dependency)", ix.id(t)),
            Wait::RecvEmpty(c) => {
                let (sb, _, ch) = self.w.conn_ends[c as usize];
                let (sr, sbi) = ix.block_id(sb);
                format!(
                    "{here} waits to receive slice {slice} of {} from rank {sr} on channel {ch}, which block {sbi} of rank {sr} has not sent",
                    self.slices_of(g)
                )
            }
            Wait::SendFull(c) => {
                let (_, rb, ch) = self.w.conn_ends[c as usize];
                let (rr, rbi) = ix.block_id(rb);
                format!(
                    "{here} waits to send slice {slice} of {} to rank {rr} on channel {ch}: the FIFO is full ({} slices) and block {rbi} of rank {rr} is not receiving",
                    self.slices_of(g), self.slots
                )
            }
        }
    }
}

fn simulate(cx: &Ctx, w: &Wiring) -> Result<Vec<u32>, Vec<PlanDiagnostic>> {
    let (nb, ns) = (cx.ix.n_blocks(), cx.ix.n_steps());
    let slots = u64::from(cx.ix.plan.slots);
    let mut sim = Sim {
        cx,
        w,
        slots,
        // More slices than every FIFO together can hold: a receive-and-forward chain
        // buffers `slots` slices per hop, so `slots + 1` alone would accept plans that
        // deadlock once messages are longer than the chain's buffering.
        slices: slots * (w.conn_ends.len() as u64 + 1) + 1,
        pc: vec![0; nb],
        progress: vec![0; nb],
        started: vec![false; nb],
        fifo: vec![0; w.conn_ends.len()],
        complete: vec![false; ns],
        waiters: vec![Vec::new(); ns],
        chains: None,
        chain_started: Vec::new(),
        queued: vec![true; nb],
        work: (0..nb as u32).rev().collect(),
        order: Vec::with_capacity(ns),
    };
    if cx.ix.plan.execution == crate::plan::Execution::Streaming {
        let ch = chains(cx, w);
        sim.chain_started = vec![0; ch.size.len()];
        sim.chains = Some(ch);
    }
    while let Some(b) = sim.work.pop() {
        sim.queued[b as usize] = false;
        sim.advance(b);
    }
    let stuck: Vec<u32> = (0..nb as u32)
        .filter(|&b| sim.current(b).is_some())
        .collect();
    if stuck.is_empty() {
        return Ok(sim.order);
    }
    Err(report_deadlock(&sim, &stuck))
}

/// Each stuck block waits for exactly one other stuck block, so the waits form cycles with
/// tails; one diagnostic per cycle, listing the cycle and counting its tail.
fn report_deadlock(sim: &Sim, stuck: &[u32]) -> Vec<PlanDiagnostic> {
    let ix = &sim.cx.ix;
    let nb = ix.n_blocks();
    // 0 = unvisited, 1 = on the current walk, 2 = assigned to a group.
    let mut state = vec![0u8; nb];
    let mut group = vec![NONE; nb];
    let mut cycles: Vec<Vec<u32>> = Vec::new();
    let mut tails: Vec<Vec<u32>> = Vec::new();
    for &b in stuck {
        if state[b as usize] != 0 {
            continue;
        }
        let mut path = Vec::new();
        let mut cur = b;
        while state[cur as usize] == 0 && sim.current(cur).is_some() {
            state[cur as usize] = 1;
            path.push(cur);
            let g = sim.current(cur).expect("stuck");
            cur = sim.target(sim.wait_of(cur, g));
        }
        let id = if state[cur as usize] == 1 {
            let at = path.iter().position(|&p| p == cur).expect("on path");
            cycles.push(path[at..].to_vec());
            tails.push(path[..at].to_vec());
            (cycles.len() - 1) as u32
        } else if state[cur as usize] == 2 && group[cur as usize] != NONE {
            let id = group[cur as usize];
            tails[id as usize].extend(&path);
            id
        } else {
            // Waits on a block that finished: impossible once connections match; report
            // the chain as its own group rather than lose it.
            cycles.push(path.clone());
            tails.push(Vec::new());
            (cycles.len() - 1) as u32
        };
        for p in path {
            state[p as usize] = 2;
            group[p as usize] = id;
        }
    }
    let plan = ix.plan;
    cycles
        .into_iter()
        .zip(tails)
        .map(|(mut cycle, tail)| {
            let first = (0..cycle.len())
                .min_by_key(|&i| cycle[i])
                .expect("non-empty");
            cycle.rotate_left(first);
            let site = sim.current(cycle[0]).expect("stuck");
            let mut d = ix.at(
                Check::Deadlock,
                site,
                match plan.execution {
                    crate::plan::Execution::Streaming => format!(
                        "deadlock: {} block(s) wait for each other in a cycle (connection FIFOs of {} slices, each message cut into {} slices)",
                        cycle.len(),
                        plan.slots,
                        sim.slices
                    ),
                    crate::plan::Execution::Tiled => format!(
                        "deadlock: {} block(s) wait for each other in a cycle (tiled: connection FIFOs of {} slots, one slot per chunk)",
                        cycle.len(),
                        plan.slots
                    ),
                },
            );
            for &b in &cycle {
                d = d.note(sim.explain_wait(b, sim.current(b).expect("stuck")));
            }
            if !tail.is_empty() {
                let mut names: Vec<String> = tail
                    .iter()
                    .take(8)
                    .map(|&b| {
                        let (r, bi) = ix.block_id(b);
                        format!("rank {r} block {bi}")
                    })
                    .collect();
                if tail.len() > 8 {
                    names.push(format!("and {} more", tail.len() - 8));
                }
                d = d.note(format!(
                    "{} more block(s) are stuck behind this cycle: {}",
                    tail.len(),
                    names.join(", ")
                ));
            }
            if cycle.iter().any(|&b| {
                let g = sim.current(b).expect("stuck");
                matches!(sim.wait_of(b, g), Wait::SendFull(_))
                    && ix.step(g).kind == StepKind::Send
            }) {
                d = d.note("a send completes only once the receiver takes its data; put a send and the receive it must overlap with in different blocks");
            }
            d
        })
        .collect()
}
