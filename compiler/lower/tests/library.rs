//! Every shipped algorithm compiles on every preset where its `where` holds (rooted ones
//! for several roots), and every plan passes the independent plan verifier in every mode
//! it declares, obeys MSCCL's block rule, round-trips through JSON and keeps provenance.

mod common;

use braid_ir::ModeSet;
use braid_lower::{connection_routes, route, Transport};
use braid_plan::Plan;
use braid_topo::Topology;
use common::*;
use std::collections::HashSet;

#[test]
fn every_plan_passes_the_plan_verifier() {
    let all = all_plans();
    assert!(all.len() > 150, "only {} plans compiled", all.len());
    for c in all {
        assert_verifies(&c.plan, &c.what);
        assert_eq!(c.plan.modes, c.prog.modes, "{}", c.what);
    }
    let names: HashSet<&str> = all.iter().map(|c| c.algorithm.as_str()).collect();
    let shipped: usize = library().iter().map(|(_, _, f)| f.algorithms.len()).sum();
    assert_eq!(names.len(), shipped, "every algorithm compiles somewhere");
}

#[test]
fn every_plan_obeys_the_block_rule() {
    for c in all_plans() {
        for r in &c.plan.ranks {
            // (channel, peer, direction) -> block: each connection end in exactly one block.
            let mut ends = HashSet::new();
            for b in &r.blocks {
                for (peer, dir) in [(b.send_peer, "send"), (b.recv_peer, "recv")] {
                    if let Some(p) = peer {
                        assert_ne!(p, r.rank, "{}: a block talks to its own rank", c.what);
                        assert!(
                            ends.insert((b.channel, p, dir)),
                            "{}: rank {} has two blocks that {dir} with {p} on channel {}",
                            c.what,
                            r.rank,
                            b.channel
                        );
                    }
                }
                for s in &b.steps {
                    assert!(!s.kind.sends() || b.send_peer.is_some(), "{}", c.what);
                    assert!(!s.kind.receives() || b.recv_peer.is_some(), "{}", c.what);
                }
                let local = b.send_peer.is_none() && b.recv_peer.is_none();
                let talks = b.steps.iter().any(|s| s.kind.sends() || s.kind.receives());
                assert!(
                    local != talks,
                    "{}: local steps share a block with communication",
                    c.what
                );
            }
        }
    }
}

#[test]
fn dependencies_only_cross_blocks_and_are_not_implied() {
    for c in all_plans() {
        for r in &c.plan.ranks {
            for (bi, b) in r.blocks.iter().enumerate() {
                let mut latest = vec![None; r.blocks.len()];
                for s in &b.steps {
                    for d in &s.deps {
                        assert_ne!(
                            d.block as usize, bi,
                            "{}: a dependency inside a block",
                            c.what
                        );
                        // Deps on one block only ever move forward along a block's steps.
                        let prev = latest[d.block as usize].replace(d.step);
                        assert!(prev < Some(d.step), "{}: a repeated dependency", c.what);
                    }
                }
            }
        }
    }
}

/// Serialising is slow in debug builds, so the 32-rank plans are left to the other tests.
#[test]
fn plans_round_trip_through_json() {
    for c in all_plans().iter().filter(|c| c.plan.n_ranks <= 16) {
        let text = c.plan.to_json_pretty();
        let back = Plan::from_json(&text).unwrap_or_else(|e| panic!("{}: {e}", c.what));
        assert_eq!(back, c.plan, "{}", c.what);
        assert_eq!(back.to_json_pretty(), text, "{}", c.what);
    }
}

#[test]
fn every_step_keeps_its_provenance() {
    for c in all_plans() {
        for s in c
            .plan
            .ranks
            .iter()
            .flat_map(|r| &r.blocks)
            .flat_map(|b| &b.steps)
        {
            let o = s
                .origin
                .as_ref()
                .unwrap_or_else(|| panic!("{}: a step without origin", c.what));
            assert!(o.line > 0 && o.col > 0, "{}", c.what);
            assert!(
                o.text.starts_with("copy") || o.text.starts_with("reduce"),
                "{}: origin text {:?}",
                c.what,
                o.text
            );
        }
    }
}

#[test]
fn plans_record_the_topology_and_program_header() {
    for c in all_plans() {
        let topo = Topology::from_arg(&c.topo).unwrap();
        let p = &c.plan;
        assert_eq!(p.topology.name, c.topo);
        assert_eq!(p.topology.fingerprint, topo.fingerprint());
        assert_eq!(p.n_ranks, topo.n_ranks());
        assert_eq!(p.ranks.len() as u32, p.n_ranks);
        assert_eq!(
            (p.chunks, p.scratch_chunks),
            (c.prog.chunks, c.prog.scratch)
        );
        assert_eq!(
            (p.channels, p.protocol, p.root),
            (c.prog.channels, c.prog.protocol, c.prog.root)
        );
    }
}

/// Each declared mode alone, and the plan without fusion, verify too.
#[test]
fn single_modes_and_unfused_plans_verify() {
    for (_, source, parsed) in library() {
        for alg in &parsed.algorithms {
            for t in ["nvswitch:5", "pcie:8", "cluster:2x8"] {
                let topo = Topology::from_arg(t).unwrap();
                let root = alg.collective.is_rooted().then_some(topo.n_ranks() - 1);
                let Some(prog) = program(alg, &topo, root) else {
                    continue;
                };
                let what = format!("{} on {t}", alg.name.name);
                for mode in prog.modes.iter() {
                    let only = ModeSet {
                        out_of_place: mode == braid_ir::Mode::OutOfPlace,
                        in_place: mode == braid_ir::Mode::InPlace,
                    };
                    let plan = compile_with(&prog, &topo, &source, Some(only), true);
                    assert_eq!(plan.modes, only);
                    assert_verifies(&plan, &format!("{what}, {mode} only"));
                }
                let plan = compile_with(&prog, &topo, &source, None, false);
                assert_verifies(&plan, &format!("{what}, unfused"));
                let fused = plan
                    .ranks
                    .iter()
                    .flat_map(|r| &r.blocks)
                    .flat_map(|b| &b.steps)
                    .filter(|s| s.kind.sends() && s.kind.receives())
                    .count();
                assert_eq!(fused, 0, "{what}: fusion off, yet fused steps");
            }
        }
    }
}

/// The recorded route of every connection follows from its path (see also
/// `tests/routes.rs`).
#[test]
fn every_connection_of_every_plan_has_the_route_of_its_path() {
    for c in all_plans() {
        let topo = Topology::from_arg(&c.topo).unwrap();
        let expected: Vec<_> = connection_routes(&c.plan, &topo)
            .iter()
            .map(|r| r.annotation())
            .collect();
        assert_eq!(c.plan.connections, expected, "{}", c.what);
        for conn in &c.plan.connections {
            let r = route(&topo, conn.sender, conn.receiver);
            let cross = topo.node_of(conn.sender) != topo.node_of(conn.receiver);
            assert_eq!(cross, r.transport == Transport::Net, "{}: {conn:?}", c.what);
            if topo.p2p_direct(conn.sender, conn.receiver) {
                assert!(matches!(
                    r.transport,
                    Transport::P2pNvlink | Transport::P2pPcie
                ));
            } else {
                assert!(matches!(
                    r.transport,
                    Transport::HostStaged | Transport::Net
                ));
            }
        }
    }
}

/// Whether `s` copies chunks onto themselves when `plan` runs in place (`in` and `out` one
/// buffer): skipped by the executors, so nothing needs to wait for it.
fn identity_in_place(plan: &Plan, rank: u32, s: &braid_plan::Step) -> bool {
    use braid_ir::{Buf, Collective};
    let (Some(src), Some(dst)) = (s.src, s.dst) else {
        return false;
    };
    let shift = match plan.collective {
        Collective::Allreduce | Collective::Broadcast | Collective::Reduce => Some(0),
        Collective::Allgather => Some(rank * plan.in_chunks),
        _ => None, // reduce_scatter's `out` lies inside `in`: no `out <- in` copy is one
    };
    plan.modes.in_place
        && s.kind == braid_plan::StepKind::Copy
        && src.buf == Buf::In
        && dst.buf == Buf::Out
        && src.count == dst.count
        && shift.is_some_and(|k| dst.offset == src.offset + k)
}

#[test]
fn no_read_of_in_waits_for_a_copy_of_it_onto_itself() {
    // A broadcast root copies `in` to `out` and sends `in`: in place the copy is the
    // identity, out of place it touches nothing the sends read, so its sends start at once.
    let mut checked = 0;
    for c in all_plans() {
        for r in &c.plan.ranks {
            // Per step (block, index): the identity copies it follows, through program
            // order and dependencies, by the copy's source chunks.
            let steps: Vec<(usize, usize)> = r
                .blocks
                .iter()
                .enumerate()
                .flat_map(|(b, blk)| (0..blk.steps.len()).map(move |i| (b, i)))
                .collect();
            let mut after: std::collections::HashMap<(usize, usize), Vec<(u32, u32)>> =
                Default::default();
            // Dependencies point to other blocks' earlier steps: resolve by fixpoint.
            loop {
                let mut changed = false;
                for &(b, i) in &steps {
                    let step = &r.blocks[b].steps[i];
                    let mut set: Vec<(u32, u32)> = Vec::new();
                    let mut preds: Vec<(usize, usize)> = step
                        .deps
                        .iter()
                        .map(|d| (d.block as usize, d.step as usize))
                        .collect();
                    if i > 0 {
                        preds.push((b, i - 1));
                    }
                    for p in preds {
                        let ps = &r.blocks[p.0].steps[p.1];
                        if identity_in_place(&c.plan, r.rank, ps) {
                            let s = ps.src.unwrap();
                            set.push((s.offset, s.offset + s.count));
                        }
                        set.extend(after.get(&p).into_iter().flatten().copied());
                    }
                    set.sort_unstable();
                    set.dedup();
                    let e = after.entry((b, i)).or_default();
                    if *e != set {
                        *e = set;
                        changed = true;
                    }
                }
                if !changed {
                    break;
                }
            }
            for &(b, i) in &steps {
                let step = &r.blocks[b].steps[i];
                let Some(src) = step.src.filter(|s| s.buf == braid_ir::Buf::In) else {
                    continue;
                };
                if identity_in_place(&c.plan, r.rank, step) {
                    checked += 1;
                    continue;
                }
                let (lo, hi) = (src.offset, src.offset + src.count);
                if let Some(w) = after[&(b, i)].iter().find(|w| w.0 < hi && lo < w.1) {
                    panic!(
                        "{}: rank {} block {b} step {i} reads in[{lo}..{hi}] after the copy of \
                         in[{}..{}] onto itself in place",
                        c.what, r.rank, w.0, w.1
                    );
                }
            }
        }
    }
    assert!(
        checked > 10,
        "only {checked} identity copies in the library"
    );
}
