//! Shared helpers: fixture paths, the golden-file check, and plan builders.

#![allow(dead_code)] // each test binary uses a different subset

use braid_plan::{render_diagnostics, verify, Plan};
use std::path::{Path, PathBuf};

/// `tests/plans` at the workspace root.
pub fn plans_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/plans")
}

pub fn good(name: &str) -> PathBuf {
    plans_dir().join("good").join(format!("{name}.json"))
}

pub fn bad(name: &str) -> PathBuf {
    plans_dir().join("bad").join(format!("{name}.json"))
}

pub fn load(path: &Path) -> Plan {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Plan::from_json(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn blessing() -> bool {
    std::env::var_os("BLESS").is_some_and(|v| v == "1")
}

/// What a bad fixture must produce: the load error, or the verifier's diagnostics.
pub fn rendered_failure(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    match Plan::from_json(&text) {
        Err(e) => format!("{e}\n"),
        Ok(plan) => match verify(&plan) {
            Ok(report) => panic!(
                "{} should be rejected, but verified: {}",
                path.display(),
                report.summary()
            ),
            Err(diags) => render_diagnostics(&diags),
        },
    }
}

/// Golden-file check: `NAME.json` must be rejected with exactly the text in
/// `NAME.stderr`. With `BLESS=1` the expectation is rewritten instead.
pub fn check_bad(path: &Path) {
    let got = rendered_failure(path);
    let golden = path.with_extension("stderr");
    if blessing() {
        std::fs::write(&golden, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&golden).unwrap_or_else(|_| {
        panic!(
            "{} is missing; run with BLESS=1 to create it. Output:\n{got}",
            golden.display()
        )
    });
    assert!(
        want == got,
        "{} differs from the golden file (BLESS=1 rewrites it)\n--- want\n{want}\n--- got\n{got}",
        path.display()
    );
}

/// Whether a good fixture is in canonical form; with `BLESS=1` it is rewritten so.
pub fn check_canonical(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap();
    let canonical = Plan::from_json(&text).unwrap().to_json_pretty();
    if blessing() {
        std::fs::write(path, &canonical).unwrap();
        return;
    }
    assert!(
        text == canonical,
        "{} is not in canonical form (BLESS=1 rewrites it)",
        path.display()
    );
}

// ---------------------------------------------------------------------------------------
// Builders for plans too large or too parametric to keep as fixtures.

use braid_ir::{Buf, Collective, ModeSet, Protocol};
use braid_plan::{Block, Dep, RankPlan, Slice, Step, StepKind, Topology, FORMAT_VERSION};

pub fn slice(buf: Buf, offset: u32, count: u32) -> Slice {
    Slice { buf, offset, count }
}

pub fn step(kind: StepKind, src: Option<Slice>, dst: Option<Slice>, deps: &[(u32, u32)]) -> Step {
    Step {
        kind,
        src,
        dst,
        deps: deps
            .iter()
            .map(|&(block, step)| Dep { block, step })
            .collect(),
        origin: None,
    }
}

pub fn block(id: u32, send: Option<u32>, recv: Option<u32>, steps: Vec<Step>) -> Block {
    Block {
        id,
        channel: 0,
        send_peer: send,
        recv_peer: recv,
        steps,
    }
}

/// A plan header with the sizes the layout implies and no ranks yet.
pub fn header(collective: Collective, n: u32, chunks: u32, root: Option<u32>) -> Plan {
    let mut p = Plan {
        format_version: FORMAT_VERSION,
        name: format!("{collective}_{n}"),
        collective,
        n_ranks: n,
        root,
        topology: Topology {
            name: format!("nvswitch:{n}"),
            fingerprint: "test".into(),
        },
        chunks,
        in_chunks: 0,
        out_chunks: 0,
        scratch_chunks: 0,
        protocol: Protocol::Simple,
        channels: 1,
        modes: collective.default_modes(),
        slots: 8,
        connections: Vec::new(),
        execution: Default::default(),
        bytes: None,
        ranks: Vec::new(),
    };
    let l = p.layout(braid_ir::Mode::OutOfPlace);
    let holder = root.unwrap_or(0);
    p.in_chunks = l.size(Buf::In, holder).unwrap_or(0);
    p.out_chunks = l.size(Buf::Out, holder).unwrap_or(0);
    p
}

/// Ring all-reduce on `n` ranks with `C = rounds * n`: per rank a copy block, a send-only
/// block and a receive-only block (so sends and receives overlap and bounded FIFOs never
/// deadlock). Each round is a reduce-scatter then an all-gather over `n` chunks.
pub fn ring_allreduce(n: u32, rounds: u32) -> Plan {
    let c = n * rounds;
    let mut p = header(Collective::Allreduce, n, c, None);
    p.modes = ModeSet::BOTH;
    let m = |x: i64| x.rem_euclid(i64::from(n)) as u32;
    for r in 0..n {
        let ri = i64::from(r);
        let copy = vec![step(
            StepKind::Copy,
            Some(slice(Buf::In, 0, c)),
            Some(slice(Buf::Out, 0, c)),
            &[],
        )];
        let (mut sends, mut recvs): (Vec<Step>, Vec<Step>) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let base = round * n;
            let out = |chunk: u32| Some(slice(Buf::Out, base + chunk, 1));
            for s in 0..i64::from(n) - 1 {
                // The first send of the plan waits for the copy; every other send waits
                // for the receive that produced its chunk.
                let deps = match (round, s) {
                    (0, 0) => vec![(0, 0)],
                    (_, 0) => vec![],
                    _ => vec![(2, recvs.len() as u32 - 1)],
                };
                sends.push(step(StepKind::Send, out(m(ri - s)), None, &deps));
                let c = m(ri - 1 - s);
                let rdeps: &[(u32, u32)] = if s == 0 && round == 0 { &[(0, 0)] } else { &[] };
                recvs.push(step(StepKind::RecvReduceCopy, out(c), out(c), rdeps));
            }
            for s in 0..i64::from(n) - 1 {
                let dep = (2, recvs.len() as u32 - 1);
                sends.push(step(StepKind::Send, out(m(ri + 1 - s)), None, &[dep]));
                recvs.push(step(StepKind::Recv, None, out(m(ri - s)), &[]));
            }
        }
        p.ranks.push(RankPlan {
            rank: r,
            blocks: vec![
                block(0, None, None, copy),
                block(1, Some((r + 1) % n), None, sends),
                block(2, None, Some((r + n - 1) % n), recvs),
            ],
        });
    }
    p
}

/// Ring all-gather on `n` ranks (`C = n`, `K = 1`): a copy block, a send-only block that
/// sends the rank's input and then forwards each chunk once it has arrived, and a
/// receive-only block.
pub fn ring_allgather(n: u32) -> Plan {
    let mut p = header(Collective::Allgather, n, n, None);
    for r in 0..n {
        let copy = step(
            StepKind::Copy,
            Some(slice(Buf::In, 0, 1)),
            Some(slice(Buf::Out, r, 1)),
            &[],
        );
        let mut sends = vec![step(StepKind::Send, Some(slice(Buf::In, 0, 1)), None, &[])];
        let mut recvs = Vec::new();
        for s in 1..n {
            let from = (r + n - s) % n;
            recvs.push(step(
                StepKind::Recv,
                None,
                Some(slice(Buf::Out, from, 1)),
                &[],
            ));
            if s + 1 < n {
                let dep = (2, recvs.len() as u32 - 1);
                sends.push(step(
                    StepKind::Send,
                    Some(slice(Buf::Out, from, 1)),
                    None,
                    &[dep],
                ));
            }
        }
        p.ranks.push(RankPlan {
            rank: r,
            blocks: vec![
                block(0, None, None, vec![copy]),
                block(1, Some((r + 1) % n), None, sends),
                block(2, None, Some((r + n - 1) % n), recvs),
            ],
        });
    }
    p
}

/// Pipelined chain broadcast from rank 0: each chunk goes down the chain as its own
/// message; middle ranks store and forward with `rcs`.
pub fn chain_broadcast(n: u32, chunks: u32) -> Plan {
    let mut p = header(Collective::Broadcast, n, chunks, Some(0));
    for r in 0..n {
        let mut blocks = Vec::new();
        let send = (r + 1 < n).then_some(r + 1);
        let recv = r.checked_sub(1);
        let steps = (0..chunks)
            .map(|c| match (recv, send) {
                (None, _) => step(StepKind::Send, Some(slice(Buf::In, c, 1)), None, &[]),
                (Some(_), Some(_)) => step(
                    StepKind::RecvCopySend,
                    None,
                    Some(slice(Buf::Out, c, 1)),
                    &[],
                ),
                (Some(_), None) => step(StepKind::Recv, None, Some(slice(Buf::Out, c, 1)), &[]),
            })
            .collect();
        if n > 1 {
            blocks.push(block(0, send, recv, steps));
        }
        if r == 0 {
            let id = blocks.len() as u32;
            blocks.push(block(
                id,
                None,
                None,
                vec![step(
                    StepKind::Copy,
                    Some(slice(Buf::In, 0, chunks)),
                    Some(slice(Buf::Out, 0, chunks)),
                    &[],
                )],
            ));
        }
        p.ranks.push(RankPlan { rank: r, blocks });
    }
    p
}

/// Direct all-to-all: one send block and one receive block per peer.
pub fn direct_alltoall(n: u32) -> Plan {
    let mut p = header(Collective::Alltoall, n, n, None);
    for r in 0..n {
        let mut blocks = vec![block(
            0,
            None,
            None,
            vec![step(
                StepKind::Copy,
                Some(slice(Buf::In, r, 1)),
                Some(slice(Buf::Out, r, 1)),
                &[],
            )],
        )];
        for q in (0..n).filter(|&q| q != r) {
            let id = blocks.len() as u32;
            blocks.push(block(
                id,
                Some(q),
                None,
                vec![step(StepKind::Send, Some(slice(Buf::In, q, 1)), None, &[])],
            ));
            blocks.push(block(
                id + 1,
                None,
                Some(q),
                vec![step(StepKind::Recv, None, Some(slice(Buf::Out, q, 1)), &[])],
            ));
        }
        p.ranks.push(RankPlan { rank: r, blocks });
    }
    p
}

/// All-pairs all-reduce (`C = n`, scratch `n`): every rank sends chunk `q` to rank `q`,
/// which reduces what it received into `out`, then sends its reduced chunk to everyone.
/// One send block and one receive block per peer, plus a local block: dense
/// happens-before over many blocks.
pub fn allpairs_allreduce(n: u32) -> Plan {
    let mut p = header(Collective::Allreduce, n, n, None);
    p.scratch_chunks = n;
    for r in 0..n {
        let peers: Vec<u32> = (0..n).filter(|&q| q != r).collect();
        // Block 0: local copy then one reduce per peer; send block 1 + 2i and receive
        // block 2 + 2i talk to peers[i].
        let mut local = vec![step(
            StepKind::Copy,
            Some(slice(Buf::In, r, 1)),
            Some(slice(Buf::Out, r, 1)),
            &[],
        )];
        for (i, &q) in peers.iter().enumerate() {
            local.push(step(
                StepKind::Reduce,
                Some(slice(Buf::Scratch, q, 1)),
                Some(slice(Buf::Out, r, 1)),
                &[(2 + 2 * i as u32, 0)],
            ));
        }
        let done = local.len() as u32 - 1;
        let mut blocks = vec![block(0, None, None, local)];
        for (i, &q) in peers.iter().enumerate() {
            let i = i as u32;
            blocks.push(block(
                1 + 2 * i,
                Some(q),
                None,
                vec![
                    step(StepKind::Send, Some(slice(Buf::In, q, 1)), None, &[]),
                    step(
                        StepKind::Send,
                        Some(slice(Buf::Out, r, 1)),
                        None,
                        &[(0, done)],
                    ),
                ],
            ));
            blocks.push(block(
                2 + 2 * i,
                None,
                Some(q),
                vec![
                    step(StepKind::Recv, None, Some(slice(Buf::Scratch, q, 1)), &[]),
                    step(StepKind::Recv, None, Some(slice(Buf::Out, q, 1)), &[]),
                ],
            ));
        }
        p.ranks.push(RankPlan { rank: r, blocks });
    }
    p
}

/// The shipped plan `name` for `collective` on `n` ranks of `nvswitch:n` (root 0 where
/// rooted).
pub fn shipped(name: &str, collective: braid_ir::Collective, n: u32) -> Plan {
    let topo = braid_topo::Topology::from_arg(&format!("nvswitch:{n}")).unwrap();
    braid_library::Library::new(topo)
        .plans(collective, collective.is_rooted().then_some(0))
        .into_iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("{name} applies to {n} ranks"))
        .plan()
        .clone()
}
