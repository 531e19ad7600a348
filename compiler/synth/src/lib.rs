//! Algorithm synthesis: a readable program in Braid's schedule language for a collective
//! on a topology, which the ordinary compiler then checks, lowers and verifies like any
//! hand-written one (docs/synthesis.md).
//!
//! - **Bandwidth**: rings whose rank order suits the topology ([`order::ring`]); where
//!   more rings lower the busiest link's load (the same order run the other way, over
//!   the links' other direction; across nodes, rings that cross between nodes at
//!   different ranks and so through different NICs), they run at once, each on its
//!   share of every block and its own channel. Allgather and reduce-scatter are one pass around
//!   the ring(s), allreduce a reduce-scatter pass then an allgather pass.
//! - **Latency**: direct schedules, every transfer in one step (allgather: every rank
//!   sends its block to every other rank; allreduce: every rank gathers every rank's
//!   data and reduces it itself).
//! - **All-to-all**: the direct program (each block straight to its destination, which
//!   meets the cut bound on every topology where a block's path is its only way) and,
//!   across uniform nodes, a two-level program that aggregates each node's blocks for
//!   another node into one network message.
//!
//! **Must not know:** the runtime, CUDA, the compiler's internals: its output is text.

pub mod order;
pub mod trees;

use braid_ir::Collective;
use braid_topo::Topology;
use std::fmt::Write;

/// What to optimise for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Objective {
    Bandwidth,
    Latency,
}

/// A synthesized program and what it is.
#[derive(Clone, Debug)]
pub struct Program {
    pub name: String,
    pub text: String,
    /// Rank order of the ring(s), for a bandwidth program.
    pub order: Vec<u32>,
    /// Rings running at once (0 for a direct program).
    pub rings: u32,
}

/// The collectives synthesis writes.
pub const SUPPORTED: [Collective; 6] = [
    Collective::Allgather,
    Collective::ReduceScatter,
    Collective::Allreduce,
    Collective::Broadcast,
    Collective::Reduce,
    Collective::Alltoall,
];

/// Writes a program for `collective` on `topo`.
pub fn synthesize(
    collective: Collective,
    topo: &Topology,
    objective: Objective,
) -> Result<Program, String> {
    if !SUPPORTED.contains(&collective) {
        return Err(format!(
            "synthesis writes allgather, reduce_scatter, allreduce, broadcast, reduce and alltoall, not {collective}"
        ));
    }
    let n = topo.n_ranks();
    if collective == Collective::Alltoall {
        // Every block must reach its own destination: sent straight there, each crosses
        // exactly the links of its path, which no relaying can undercut on a fabric where
        // every rank has its own way out (switch, tree); across nodes, `candidates` adds
        // the two-level program that sends fewer, larger messages over the network.
        return Ok(direct(collective, topo));
    }
    match objective {
        Objective::Latency => Ok(direct(collective, topo)),
        Objective::Bandwidth if collective.is_rooted() => {
            Ok(chain(collective, topo, &[order::ring(topo)]))
        }
        Objective::Bandwidth => {
            let base = order::ring(topo);
            let candidates = ring_sets(topo, &base);
            let scored: Vec<(order::Score, Vec<Vec<u32>>)> = candidates
                .into_iter()
                .map(|rings| {
                    let pairs: Vec<(Vec<u32>, bool)> =
                        rings.iter().map(|o| (o.clone(), true)).collect();
                    let mut s = order::score(topo, &pairs);
                    // Each of k rings carries 1/k of the data.
                    s.per_byte /= rings.len() as f64;
                    (s, rings)
                })
                .collect();
            // The lowest load per byte; more rings only when they lower it by over 1 %.
            let mut best = &scored[0];
            for c in &scored[1..] {
                if c.0.per_byte < best.0.per_byte * 0.99 {
                    best = c;
                }
            }
            let _ = n;
            Ok(rings_program(collective, topo, &best.1))
        }
    }
}

/// Sets of rings worth trying over the order `base`: it alone; it and its reverse (the
/// links' other direction); and across nodes, one ring per rank of a node, each with
/// every node's ranks rotated so that the rings cross between nodes at different ranks
/// (through different NICs), alone or with their reverses.
fn ring_sets(topo: &Topology, base: &[u32]) -> Vec<Vec<Vec<u32>>> {
    let rev = |o: &[u32]| -> Vec<u32> { o.iter().rev().copied().collect() };
    let mut sets = vec![vec![base.to_vec()]];
    if base.len() > 2 {
        sets.push(vec![base.to_vec(), rev(base)]);
    }
    let nodes = topo.n_nodes();
    if nodes > 1 {
        if let Some(g) = topo.uniform_g().filter(|&g| g > 1) {
            let rotated: Vec<Vec<u32>> = (0..g as usize)
                .map(|k| {
                    base.chunks(g as usize)
                        .flat_map(|node| {
                            node.iter()
                                .cycle()
                                .skip(k)
                                .take(node.len())
                                .copied()
                                .collect::<Vec<_>>()
                        })
                        .collect()
                })
                .collect();
            let mut both = rotated.clone();
            both.extend(rotated.iter().map(|o| rev(o)));
            sets.push(rotated);
            sets.push(both);
        }
    }
    sets
}

fn header(out: &mut String, topo: &Topology, what: &str) {
    let _ = writeln!(
        out,
        "// Synthesized by `braid synth` for the topology `{}` ({} ranks, {} node(s)).",
        topo.name(),
        topo.n_ranks(),
        topo.n_nodes()
    );
    let _ = writeln!(out, "// {what}");
    let _ = writeln!(
        out,
        "// It applies to exactly this rank count (`where N == {}`); `braid check` verifies it.",
        topo.n_ranks()
    );
}

fn join(order: &[u32]) -> String {
    order
        .iter()
        .map(|r| r.to_string())
        .collect::<Vec<_>>()
        .join(" -> ")
}

/// Rings over `order`: ring 0 forward, ring 1 (if any) backward; ring `j` carries part
/// `j` of every block (`chunks` = rings x N, K = rings).
fn rings_program(c: Collective, topo: &Topology, orders: &[Vec<u32>]) -> Program {
    let order = &orders[0];
    let rings = orders.len() as u32;
    let n = order.len();
    let name = format!("synth_ring_{}", c.name());
    let mut out = String::new();
    header(
        &mut out,
        topo,
        &format!(
            "Bandwidth: {} around the ring {}{}.",
            match c {
                Collective::Allreduce => "a reduce-scatter pass then an allgather pass",
                Collective::Allgather => "every block travels once",
                _ => "partial sums travel once, each block ending at its owner",
            },
            join(order),
            if rings > 1 {
                format!(
                    ", with {} more ring(s) listed below, each ring carrying its share of every block",
                    rings - 1
                )
            } else {
                String::new()
            }
        ),
    );
    let _ = writeln!(out, "algorithm {name} : {} where N == {n} {{", c.name());
    let _ = writeln!(out, "    chunks {};", rings as usize * n);
    if c == Collective::ReduceScatter {
        let _ = writeln!(out, "    scratch C;");
    }
    let ring_order = |j: u32| -> Vec<u32> { orders[j as usize].clone() };
    match c {
        Collective::Allgather => {
            let _ = writeln!(
                out,
                "    for r in 0 .. N {{ copy out[r][r * K .. (r + 1) * K] <- in[r][0 .. K]; }}"
            );
            for j in 0..rings {
                let p = ring_order(j);
                let _ = writeln!(
                    out,
                    "    // ring {j}: {}; it carries part {j} of every rank's block",
                    join(&p)
                );
                for s in 0..n - 1 {
                    let _ = writeln!(
                        out,
                        "    // step {s}: each rank passes on the block it got {s} step(s) ago"
                    );
                    for i in 0..n {
                        let (from, to) = (p[i], p[(i + 1) % n]);
                        let b = p[(i + n - s) % n] as usize;
                        let chunk = b * rings as usize + j as usize;
                        let _ = writeln!(
                            out,
                            "    copy out[{to}][{chunk}] <- out[{from}][{chunk}] @ch({j});"
                        );
                    }
                }
            }
        }
        Collective::Allreduce => {
            let _ = writeln!(out, "    for r in 0 .. N {{ copy out[r][0 .. C] <- in[r][0 .. C]; }} // a no-op in place");
            for j in 0..rings {
                let p = ring_order(j);
                let base = j as usize * n;
                let _ = writeln!(
                    out,
                    "    // ring {j}: {}; chunks {base} .. {}",
                    join(&p),
                    base + n
                );
                for s in 0..n - 1 {
                    let _ = writeln!(out, "    // reduce-scatter step {s}");
                    for i in 0..n {
                        let (from, to) = (p[i], p[(i + 1) % n]);
                        let chunk = base + (i + n - s) % n;
                        let _ = writeln!(
                            out,
                            "    reduce out[{to}][{chunk}] <- out[{from}][{chunk}] @ch({j});"
                        );
                    }
                }
                for s in 0..n - 1 {
                    let _ = writeln!(out, "    // allgather step {s}");
                    for i in 0..n {
                        let (from, to) = (p[i], p[(i + 1) % n]);
                        let chunk = base + (i + 1 + n - s) % n;
                        let _ = writeln!(
                            out,
                            "    copy out[{to}][{chunk}] <- out[{from}][{chunk}] @ch({j});"
                        );
                    }
                }
            }
        }
        _ => {
            // Reduce-scatter: at step s the rank at position i sends its partial sum of
            // the block owned by the rank at position i - s - 1; at the last step the
            // receiver is that owner and writes its result.
            for j in 0..rings {
                let p = ring_order(j);
                let _ = writeln!(
                    out,
                    "    // ring {j}: {}; it carries part {j} of every block",
                    join(&p)
                );
                for s in 0..n - 1 {
                    let _ = writeln!(out, "    // step {s}");
                    for i in 0..n {
                        let (from, to) = (p[i], p[(i + 1) % n]);
                        let b = p[(i + 2 * n - s - 1) % n] as usize;
                        let part = b * rings as usize + j as usize;
                        let src = if s == 0 {
                            format!("in[{from}][{part}]")
                        } else {
                            format!("scratch[{from}][{part}]")
                        };
                        let dst = if s == n - 2 {
                            format!("out[{to}][{j}]")
                        } else {
                            format!("scratch[{to}][{part}]")
                        };
                        let _ =
                            writeln!(out, "    reduce {dst} <- in[{to}][{part}], {src} @ch({j});");
                    }
                }
            }
        }
    }
    let _ = writeln!(out, "}}");
    Program {
        name,
        text: out,
        order: order.to_vec(),
        rings,
    }
}

/// Every program worth comparing for `collective` on `topo` with `objective`: the
/// caller compiles each, measures it with a checker independent of this crate, and keeps
/// the best. Bandwidth: the ring sets of [`synthesize`]'s search and, across nodes, the
/// hierarchical programs (rings across nodes between the ranks of one local index, rings
/// inside each node), which send only a node's share over the network.
pub fn candidates(
    collective: Collective,
    topo: &Topology,
    objective: Objective,
) -> Result<Vec<Program>, String> {
    let mut v = vec![synthesize(collective, topo, objective)?];
    if objective == Objective::Bandwidth && topo.n_ranks() <= 64 && topo.n_ranks() >= 2 {
        // More parts spread the load finer; past 16 ranks the programs grow large, so
        // fewer variants are tried.
        let tries: &[usize] = if topo.n_ranks() <= 16 {
            &[2, 4, 8]
        } else {
            &[4]
        };
        for &parts in tries {
            match collective {
                Collective::Allgather => v.push(packed_allgather(topo, parts)),
                Collective::ReduceScatter | Collective::Allreduce => {
                    v.push(packed_reduction(collective, topo, parts))
                }
                _ => {}
            }
        }
    }
    if objective == Objective::Bandwidth && collective.is_rooted() {
        // Several chains: every ring set beyond the single ring.
        let base = order::ring(topo);
        for set in ring_sets(topo, &base).into_iter().skip(1) {
            v.push(chain(collective, topo, &set));
        }
    }
    // Up to 64 ranks: past that its N(N - 1) transfers per phase (65,280 at 256 ranks)
    // make compiling and proving it take tens of GB and many minutes, for a schedule that
    // moves no fewer bytes over the busiest link than the rings tried above.
    if objective == Objective::Bandwidth
        && collective == Collective::Allreduce
        && (2..=64).contains(&topo.n_ranks())
    {
        v.push(two_phase_direct(topo));
    }
    if topo.n_nodes() > 1 && topo.uniform_g().is_some_and(|g| g > 1) {
        if collective == Collective::Alltoall {
            // Fewer, larger messages over the network help latency and bandwidth alike.
            v.push(two_level_alltoall(topo));
        } else if objective == Objective::Bandwidth {
            if let Some(h) = hierarchical(collective, topo) {
                v.push(h);
            }
        }
    }
    Ok(v)
}

/// The body of [`two_level_alltoall`]'s program (its loops are over the rank grid, so the
/// text is the same for every uniform topology).
const TWO_LEVEL_ALLTOALL_BODY: &str = "    chunks N;
    scratch C;
    mode outofplace;
    // hop 1, inside each node: same-node blocks go straight to their slot; the
    // others to the proxy rank(n, j) of their destination rank(m, j), at scratch
    // chunk (m * G + l) * K for source rank(n, l)
    for n in 0 .. NODES {
        for l in 0 .. G {
            for j in 0 .. G {
                copy out[rank(n, j)][rank(n, l) * K .. (rank(n, l) + 1) * K] <- in[rank(n, l)][rank(n, j) * K .. (rank(n, j) + 1) * K];
                for i in 1 .. NODES {
                    let m = (n + i) % NODES;
                    copy scratch[rank(n, j)][(m * G + l) * K .. (m * G + l + 1) * K] <- in[rank(n, l)][rank(m, j) * K .. (rank(m, j) + 1) * K];
                }
            }
        }
    }
    // hop 2, between nodes: proxy rank(n, j) sends node m's worth (G blocks) to rank(m, j)
    for n in 0 .. NODES {
        for j in 0 .. G {
            for i in 1 .. NODES {
                let m = (n + i) % NODES;
                copy out[rank(m, j)][n * G * K .. (n + 1) * G * K] <- scratch[rank(n, j)][m * G * K .. (m + 1) * G * K];
            }
        }
    }
}
";

/// All-to-all in two hops across uniform nodes: inside each node, every rank hands the
/// blocks it has for a rank of another node to its node's rank with the destination's
/// local index (its proxy), which gathers them in scratch, one node's worth per
/// destination node, contiguous; then each proxy sends every other node's worth as one
/// message to the rank of its own local index there, where it lands in its final slots
/// (ranks are numbered node-major, so a node's sources are contiguous in `out`).
fn two_level_alltoall(topo: &Topology) -> Program {
    let g = topo.uniform_g().unwrap_or(1) as usize;
    let nodes = topo.n_nodes() as usize;
    let n = g * nodes;
    let name = "synth_hier_alltoall".to_string();
    let mut out = String::new();
    header(
        &mut out,
        topo,
        "Two hops: inside each node to the proxy with the destination's local index, then one message per pair of nodes between proxies of equal local index: NODES-1 network messages per rank instead of (NODES-1) x G.",
    );
    let _ = writeln!(
        out,
        "algorithm {name} : alltoall where N == {n}, NODES == {nodes}, G == {g} {{"
    );
    out.push_str(TWO_LEVEL_ALLTOALL_BODY);
    Program {
        name,
        text: out,
        order: (0..n as u32).collect(),
        rings: 0,
    }
}

/// Two-level programs for uniform multi-node topologies.
fn hierarchical(c: Collective, topo: &Topology) -> Option<Program> {
    let g = topo.uniform_g()? as usize;
    let nodes = topo.n_nodes() as usize;
    let n = g * nodes;
    let order = order::ring(topo);
    // Each node's ranks in ring order, as local indices.
    let local_order: Vec<Vec<usize>> = order
        .chunks(g)
        .map(|ch| ch.iter().map(|&r| r as usize % g).collect())
        .collect();
    let rank = |node: usize, local: usize| (node % nodes) * g + local % g;
    let name = format!("synth_hier_{}", c.name());
    let mut out = String::new();
    let what = match c {
        Collective::Allgather => "Bandwidth, two levels: each rank's block goes first to the ranks of its local index on the other nodes (rings across nodes, one per local index, each through its own NICs), then inside every node around a ring, as groups of one block per node.",
        Collective::Allreduce => "Bandwidth, two levels: a reduce-scatter inside each node (groups of one block per node), then a reduce-scatter and an allgather across nodes between the ranks of one local index, then an allgather inside each node: only a node's share crosses the network.",
        Collective::ReduceScatter => "Bandwidth, two levels: a reduce-scatter inside each node (groups of one block per node), then one across nodes between the ranks of one local index: only a node's share crosses the network.",
        _ => return None,
    };
    header(&mut out, topo, what);
    let _ = writeln!(
        out,
        "algorithm {name} : {} where N == {n}, NODES == {nodes}, G == {g} {{",
        c.name()
    );
    let _ = writeln!(out, "    chunks N;");
    // Reduce-scatter reduces in scratch (its output holds only the rank's own block).
    let buf = if c == Collective::ReduceScatter {
        "scratch"
    } else {
        "out"
    };
    if c == Collective::ReduceScatter {
        let _ = writeln!(out, "    scratch C;");
    }
    let group = |local: usize| -> Vec<usize> { (0..nodes).map(|m| rank(m, local)).collect() };
    let inter = |out: &mut String, kind: &str, reduce: bool| {
        for l in 0..g {
            let _ = writeln!(out, "    // across nodes, local rank {l}: {kind}");
            for s in 0..nodes - 1 {
                for m in 0..nodes {
                    let (from, to) = (rank(m, l), rank(m + 1, l));
                    let owner = if reduce {
                        (m + 2 * nodes - s - 1) % nodes
                    } else {
                        (m + nodes - s) % nodes
                    };
                    let b = rank(owner, l);
                    let op = if reduce { "reduce" } else { "copy" };
                    let _ = writeln!(out, "    {op} {buf}[{to}][{b}] <- {buf}[{from}][{b}];");
                }
            }
        }
    };
    let intra = |out: &mut String, kind: &str, reduce: bool| {
        for (m, q) in local_order.iter().enumerate() {
            let _ = writeln!(
                out,
                "    // inside node {m}, ring of local ranks {:?}: {kind}",
                q
            );
            for s in 0..g - 1 {
                for i in 0..g {
                    let (from, to) = (rank(m, q[i]), rank(m, q[(i + 1) % g]));
                    let owner = if reduce {
                        q[(i + 2 * g - s - 1) % g]
                    } else {
                        q[(i + g - s) % g]
                    };
                    let op = if reduce { "reduce" } else { "copy" };
                    for b in group(owner) {
                        let _ = writeln!(out, "    {op} {buf}[{to}][{b}] <- {buf}[{from}][{b}];");
                    }
                }
            }
        }
    };
    match c {
        Collective::Allgather => {
            let _ = writeln!(
                out,
                "    for r in 0 .. N {{ copy out[r][r * K .. (r + 1) * K] <- in[r][0 .. K]; }}"
            );
            inter(&mut out, "allgather of the ranks' own blocks", false);
            intra(&mut out, "allgather of groups", false);
        }
        Collective::ReduceScatter => {
            let _ = writeln!(
                out,
                "    for r in 0 .. N {{ copy scratch[r][0 .. C] <- in[r][0 .. C]; }}"
            );
            intra(&mut out, "reduce-scatter of groups", true);
            inter(&mut out, "reduce-scatter", true);
            let _ = writeln!(out, "    for r in 0 .. N {{ copy out[r][0 .. K] <- scratch[r][r * K .. (r + 1) * K]; }}");
        }
        _ => {
            let _ = writeln!(out, "    for r in 0 .. N {{ copy out[r][0 .. C] <- in[r][0 .. C]; }} // a no-op in place");
            intra(&mut out, "reduce-scatter of groups", true);
            inter(&mut out, "reduce-scatter", true);
            inter(&mut out, "allgather", false);
            intra(&mut out, "allgather of groups", false);
        }
    }
    let _ = writeln!(out, "}}");
    Some(Program {
        name,
        text: out,
        order,
        rings: g as u32,
    })
}

/// Allgather over packed trees ([`trees::pack`]): each rank's block in `parts` parts,
/// each part to every rank along its own spanning tree.
fn packed_allgather(topo: &Topology, parts: usize) -> Program {
    let n = topo.n_ranks() as usize;
    let name = format!("synth_trees{parts}_allgather");
    let trees = trees::pack(topo, parts);
    let mut out = String::new();
    header(
        &mut out,
        topo,
        &format!("Bandwidth: every rank's block in {parts} parts, each part to every rank along its own spanning tree, the trees packed so that traffic spreads over every link in proportion to its bandwidth."),
    );
    let _ = writeln!(out, "algorithm {name} : allgather where N == {n} {{");
    let _ = writeln!(out, "    chunks {};", n * parts);
    let _ = writeln!(
        out,
        "    for r in 0 .. N {{ copy out[r][r * K .. (r + 1) * K] <- in[r][0 .. K]; }}"
    );
    // The trees, then their copies level by level (every tree's first hops, then every
    // tree's second ...), so that no rank waits on a deep hop of one tree before the
    // shallow hops of the others.
    let mut copies: Vec<(usize, usize, u32, u32)> = Vec::new();
    for (src, per) in trees.iter().enumerate() {
        for (j, tree) in per.iter().enumerate() {
            let chunk = src * parts + j;
            let edges: Vec<String> = tree.iter().map(|(a, b)| format!("{a}->{b}")).collect();
            let _ = writeln!(
                out,
                "    // rank {src}, part {j} (chunk {chunk}): {}",
                edges.join(" ")
            );
            copies.extend(
                trees::leveled(tree, src as u32)
                    .into_iter()
                    .map(|(d, a, b)| (d, chunk, a, b)),
            );
        }
    }
    copies.sort_by_key(|&(d, chunk, _, _)| (d, chunk));
    let mut level = 0;
    for (d, chunk, a, b) in copies {
        if d != level {
            level = d;
            let _ = writeln!(out, "    // hop {d} of every tree");
        }
        let _ = writeln!(out, "    copy out[{b}][{chunk}] <- out[{a}][{chunk}];");
    }
    let _ = writeln!(out, "}}");
    Program {
        name,
        text: out,
        order: (0..n as u32).collect(),
        rings: parts as u32,
    }
}

/// Reduce-scatter or allreduce over packed trees: each part's tree taken leaves first,
/// every rank adding what its children hold into its own copy and passing the sum to its
/// parent, so the owner ends with the part's full reduction; allreduce then sends it back
/// down the same tree. Links are full duplex, so trees balanced for one direction are
/// balanced for the other.
fn packed_reduction(c: Collective, topo: &Topology, parts: usize) -> Program {
    let n = topo.n_ranks() as usize;
    let name = format!("synth_trees{parts}_{}", c.name());
    let trees = trees::pack(topo, parts);
    let mut out = String::new();
    header(
        &mut out,
        topo,
        &format!(
            "Bandwidth: every block in {parts} parts, each part reduced up its own spanning tree toward the block's owner{}, the trees packed so that traffic spreads over every link in proportion to its bandwidth.",
            if c == Collective::Allreduce { " and sent back down it" } else { "" }
        ),
    );
    let _ = writeln!(out, "algorithm {name} : {} where N == {n} {{", c.name());
    let _ = writeln!(out, "    chunks {};", n * parts);
    // Reduce-scatter sums in scratch (its output is the rank's own block only); allreduce
    // in its output.
    let buf = if c == Collective::ReduceScatter {
        "scratch"
    } else {
        "out"
    };
    if c == Collective::ReduceScatter {
        let _ = writeln!(out, "    scratch C;");
        let _ = writeln!(
            out,
            "    for r in 0 .. N {{ copy scratch[r][0 .. C] <- in[r][0 .. C]; }}"
        );
    } else {
        let _ = writeln!(
            out,
            "    for r in 0 .. N {{ copy out[r][0 .. C] <- in[r][0 .. C]; }} // a no-op in place"
        );
    }
    // (depth of the child, chunk, parent, child) for every edge of every tree.
    let mut edges: Vec<(usize, usize, u32, u32)> = Vec::new();
    for (owner, per) in trees.iter().enumerate() {
        for (j, tree) in per.iter().enumerate() {
            let chunk = owner * parts + j;
            let shown: Vec<String> = tree.iter().map(|(a, b)| format!("{b}->{a}")).collect();
            let _ = writeln!(
                out,
                "    // block {owner}, part {j} (chunk {chunk}), sums flowing: {}",
                shown.join(" ")
            );
            edges.extend(
                trees::leveled(tree, owner as u32)
                    .into_iter()
                    .map(|(d, a, b)| (d, chunk, a, b)),
            );
        }
    }
    // Up the trees, deepest hops first: a rank passes its sum on only once all its
    // children's sums are in it.
    edges.sort_by_key(|&(d, chunk, _, _)| (std::cmp::Reverse(d), chunk));
    let mut level = usize::MAX;
    for &(d, chunk, parent, child) in &edges {
        if d != level {
            level = d;
            let _ = writeln!(out, "    // sums {d} hop(s) from the owners");
        }
        let _ = writeln!(
            out,
            "    reduce {buf}[{parent}][{chunk}] <- {buf}[{child}][{chunk}];"
        );
    }
    if c == Collective::ReduceScatter {
        let _ = writeln!(
            out,
            "    for r in 0 .. N {{ copy out[r][0 .. K] <- scratch[r][r * K .. (r + 1) * K]; }}"
        );
    } else {
        edges.sort_by_key(|&(d, chunk, _, _)| (d, chunk));
        let mut level = 0;
        for &(d, chunk, parent, child) in &edges {
            if d != level {
                level = d;
                let _ = writeln!(out, "    // results, hop {d} down the trees");
            }
            let _ = writeln!(
                out,
                "    copy out[{child}][{chunk}] <- out[{parent}][{chunk}];"
            );
        }
    }
    let _ = writeln!(out, "}}");
    Program {
        name,
        text: out,
        order: (0..n as u32).collect(),
        rings: parts as u32,
    }
}

/// Allreduce as a direct reduce-scatter then a direct allgather: every rank sends each
/// chunk straight to its owner, which reduces, then the owners send the results straight
/// to everyone. Two steps, and each rank sends 2(N-1)/N of the data: on a switch that
/// gives every rank the same bandwidth, as little as a ring sends, in fewer steps.
fn two_phase_direct(topo: &Topology) -> Program {
    let n = topo.n_ranks();
    let name = "synth_two_phase_allreduce".to_string();
    let mut out = String::new();
    header(&mut out, topo, "Bandwidth in two steps: a direct reduce-scatter (rank r reduces chunk r from every rank), then a direct allgather.");
    let _ = write!(
        out,
        "algorithm {name} : allreduce where N == {n} {{\n    chunks N;\n    for r in 0 .. N {{\n        reduce out[r][r] <- in[r][r], in[r + 1][r];\n        for j in 2 .. N {{ reduce out[r][r] <- in[r + j][r]; }}\n    }}\n    for r in 0 .. N {{\n        for j in 1 .. N {{ copy out[r + j][r] <- out[r][r]; }}\n    }}\n}}\n"
    );
    Program {
        name,
        text: out,
        order: (0..n).collect(),
        rings: 0,
    }
}

/// Broadcast or reduce pipelined along chains, one per ring of `orders`, each rotated to
/// start (broadcast) or end (reduce) at the root and carrying its share of the chunks:
/// every rank receives (or sends) each share once, chunk by chunk, so each chain streams
/// at its slowest hop, and several chains spread the data over more links (the other
/// direction; across nodes, other NICs). One branch per root.
fn chain(c: Collective, topo: &Topology, orders: &[Vec<u32>]) -> Program {
    let order = &orders[0];
    let n = order.len();
    let k = orders.len();
    let name = format!("synth_chain_{}", c.name());
    let mut out = String::new();
    header(
        &mut out,
        topo,
        &format!(
            "Bandwidth: {} along {} chain(s) from the root on (the first along the ring {}), each pipelined over 2N chunks of its share.",
            if c == Collective::Broadcast { "the root's data flows" } else { "partial sums flow toward the root" },
            k,
            join(order)
        ),
    );
    let _ = writeln!(out, "algorithm {name} : {} where N == {n} {{", c.name());
    let _ = writeln!(out, "    chunks {};", 2 * n * k);
    if c == Collective::Reduce {
        let _ = writeln!(out, "    scratch C;");
    }
    if c == Collective::Broadcast {
        let _ = writeln!(
            out,
            "    copy out[ROOT][0 .. C] <- in[ROOT][0 .. C]; // a no-op in place"
        );
    }
    for (r_idx, root) in (0..n as u32).enumerate() {
        let kw = if r_idx == 0 { "if" } else { "} else if" };
        let _ = writeln!(out, "    {kw} ROOT == {root} {{");
        for (j, o) in orders.iter().enumerate() {
            let at = o
                .iter()
                .position(|&x| x == root)
                .expect("every rank is on every ring");
            let p: Vec<u32> = o[at..].iter().chain(&o[..at]).copied().collect();
            let (lo, hi) = (j * 2 * n, (j + 1) * 2 * n);
            let _ = writeln!(
                out,
                "        // chain {j}: {}, chunks {lo} .. {hi}",
                join(&p)
            );
            let _ = writeln!(out, "        for c in {lo} .. {hi} {{");
            if n == 1 {
                let _ = writeln!(out, "            copy out[{root}][c] <- in[{root}][c];");
            } else if c == Collective::Broadcast {
                let _ = writeln!(
                    out,
                    "            copy out[{}][c] <- in[{root}][c] @ch({j});",
                    p[1]
                );
                for i in 2..n {
                    let _ = writeln!(
                        out,
                        "            copy out[{}][c] <- out[{}][c] @ch({j});",
                        p[i],
                        p[i - 1]
                    );
                }
            } else {
                // From the far end of the chain back to the root.
                let last = n - 1;
                if last == 1 {
                    let _ = writeln!(
                        out,
                        "            reduce out[{root}][c] <- in[{root}][c], in[{}][c] @ch({j});",
                        p[1]
                    );
                } else {
                    let _ = writeln!(
                        out,
                        "            reduce scratch[{}][c] <- in[{}][c], in[{}][c] @ch({j});",
                        p[last - 1],
                        p[last - 1],
                        p[last]
                    );
                    for i in (1..last - 1).rev() {
                        let _ = writeln!(
                            out,
                            "            reduce scratch[{}][c] <- in[{}][c], scratch[{}][c] @ch({j});",
                            p[i],
                            p[i],
                            p[i + 1]
                        );
                    }
                    let _ = writeln!(
                        out,
                        "            reduce out[{root}][c] <- in[{root}][c], scratch[{}][c] @ch({j});",
                        p[1]
                    );
                }
            }
            let _ = writeln!(out, "        }}");
        }
    }
    let _ = writeln!(out, "    }}");
    let _ = writeln!(out, "}}");
    Program {
        name,
        text: out,
        order: order.to_vec(),
        rings: k as u32,
    }
}

/// Direct (one-step) schedules, written as loops: they depend on nothing but N.
fn direct(c: Collective, topo: &Topology) -> Program {
    let n = topo.n_ranks();
    let name = format!("synth_direct_{}", c.name());
    let mut out = String::new();
    header(
        &mut out,
        topo,
        "Latency: every transfer in one step, straight to the rank that needs it.",
    );
    let body = match c {
        Collective::Allgather => "    for r in 0 .. N {\n        for q in 0 .. N { copy out[q][r * K .. (r + 1) * K] <- in[r][0 .. K]; }\n    }\n".to_string(),
        Collective::ReduceScatter => "    scratch C;\n    // every rank sends each block to its owner, which reduces what arrives\n    for q in 0 .. N { copy scratch[q][q * K .. (q + 1) * K] <- in[q][q * K .. (q + 1) * K]; }\n    for d in 1 .. N {\n        for q in 0 .. N { reduce scratch[q][q * K .. (q + 1) * K] <- in[q + d][q * K .. (q + 1) * K]; }\n    }\n    for q in 0 .. N { copy out[q][0 .. K] <- scratch[q][q * K .. (q + 1) * K]; }\n".to_string(),
        Collective::Alltoall => "    mode outofplace;\n    // every rank's block for rank p goes straight to p's slot for it\n    for r in 0 .. N {\n        for p in 0 .. N { copy out[p][r * K .. (r + 1) * K] <- in[r][p * K .. (p + 1) * K]; }\n    }\n".to_string(),
        Collective::Broadcast => "    // the root sends straight to every rank\n    for i in 0 .. N { copy out[ROOT + i][0 .. C] <- in[ROOT][0 .. C]; }\n".to_string(),
        Collective::Reduce => "    scratch N;\n    // every rank sends straight to the root, which reduces\n    for i in 0 .. N { copy scratch[ROOT][i] <- in[ROOT + i][0]; }\n    copy out[ROOT][0] <- scratch[ROOT][0];\n    for i in 1 .. N { reduce out[ROOT][0] <- scratch[ROOT][i]; }\n".to_string(),
        _ => "    scratch N;\n    // every rank gathers every rank's data, then reduces it itself\n    for q in 0 .. N {\n        for r in 0 .. N { copy scratch[q][r] <- in[r][0]; }\n    }\n    for q in 0 .. N {\n        copy out[q][0] <- scratch[q][0];\n        for r in 1 .. N { reduce out[q][0] <- scratch[q][r]; }\n    }\n".to_string(),
    };
    let chunks = match c {
        Collective::Allreduce | Collective::Reduce => "",
        Collective::Broadcast => "    chunks 1;\n",
        _ => "    chunks N;\n",
    };
    let _ = write!(
        out,
        "algorithm {name} : {} where N == {n} {{\n{chunks}{body}}}\n",
        c.name()
    );
    Program {
        name,
        text: out,
        order: (0..n).collect(),
        rings: 0,
    }
}
