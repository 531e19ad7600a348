//! Sends and receives on the GPU (`braid_cuda::p2p`), as NCCL's grouped ncclSend /
//! ncclRecv: rings and uneven all-to-all exchanges in one group, several messages to one
//! peer in order, empty and odd sizes, both protocols and several channels, every kind of
//! application memory, all ranks on one stream, a CUDA graph replayed, and a receive from
//! a peer that never sends failing with a named cause instead of hanging. Every received
//! byte is checked, and so are the 16 bytes after each receive buffer (untouched).

use super::support::{Kind, Mem, KINDS};
use super::{download, open, opts, upload, Ranks};
use braid_cuda::{CudaComm, Options, P2pOp, Stream};
use std::time::Instant;

type Cases = Vec<(String, Result<(), String>)>;

/// One message of an exchange.
#[derive(Clone, Copy, Debug)]
pub struct Msg {
    pub from: u32,
    pub to: u32,
    pub bytes: usize,
    pub seed: u64,
}

/// The message's bytes (distinct per message and position).
fn pattern(m: &Msg) -> Vec<u8> {
    let mut x =
        m.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (u64::from(m.from) << 32 | u64::from(m.to));
    (0..m.bytes)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

const GUARD: usize = 16;
const FILL: u8 = 0xEE;

/// Sizes across the protocols' boundaries and the channel split.
pub const SIZES: [usize; 9] = [
    0,
    1,
    7,
    4099,
    64 << 10,
    (64 << 10) + 1,
    (512 << 10) + 17,
    (3 << 20) + 5,
    (9 << 20) + 3,
];

/// A ring (rank r to r+1) of `bytes`, then the other way round, in one group.
pub fn ring(n: u32, bytes: usize, seed: u64) -> Vec<Msg> {
    (0..n)
        .flat_map(|r| {
            [
                Msg {
                    from: r,
                    to: (r + 1) % n,
                    bytes,
                    seed,
                },
                Msg {
                    from: r,
                    to: (r + n - 1) % n,
                    bytes: bytes / 2 + 1,
                    seed: seed + 1,
                },
            ]
        })
        .collect()
}

/// Every rank to every other, sizes uneven per pair, with a second (small) message to
/// each peer after the first.
pub fn all_to_all(n: u32, scale: usize, seed: u64) -> Vec<Msg> {
    let mut v = Vec::new();
    for from in 0..n {
        for to in (0..n).filter(|&t| t != from) {
            let bytes = (from as usize * 7 + to as usize * 13 + 1) * scale + from as usize;
            v.push(Msg {
                from,
                to,
                bytes,
                seed: seed + u64::from(from * 31 + to),
            });
            v.push(Msg {
                from,
                to,
                bytes: 100 + to as usize,
                seed: seed + 1000 + u64::from(from * 31 + to),
            });
        }
    }
    v
}

/// Buffers of one rank's side of an exchange: its sends (filled) and its receives
/// (`bytes + GUARD`, filled with `FILL`), allocated as `kind` on the rank's stream.
struct Side {
    sends: Vec<(Msg, Mem)>,
    recvs: Vec<(Msg, Mem)>,
}

fn side(comm: &CudaComm, stream: &Stream, msgs: &[Msg], kind: Kind) -> Result<Side, String> {
    let r = comm.rank();
    let mut s = Side {
        sends: Vec::new(),
        recvs: Vec::new(),
    };
    for m in msgs {
        if m.from == r {
            let mem = Mem::new(comm.context(), kind, m.bytes, stream)?;
            let data = pattern(m);
            upload(&mem, &data, stream)?;
            // The upload reads `data` asynchronously: wait before it goes away.
            stream.synchronize().map_err(|e| e.to_string())?;
            s.sends.push((*m, mem));
        }
        if m.to == r {
            let mem = Mem::new(comm.context(), kind, m.bytes + GUARD, stream)?;
            mem.fill_async(FILL, stream)?;
            s.recvs.push((*m, mem));
        }
    }
    Ok(s)
}

/// The side's operations in the group's order (the messages' order).
fn ops<'a>(comm: &'a CudaComm, stream: &'a Stream, s: &Side, msgs: &[Msg]) -> Vec<P2pOp<'a>> {
    let r = comm.rank();
    let mut out = Vec::new();
    let (mut si, mut ri) = (0, 0);
    for m in msgs {
        if m.from == r {
            let (_, mem) = &s.sends[si];
            si += 1;
            out.push(P2pOp {
                comm,
                send: true,
                peer: m.to,
                addr: mem.ptr(),
                bytes: m.bytes,
                stream,
            });
        }
        if m.to == r {
            let (_, mem) = &s.recvs[ri];
            ri += 1;
            out.push(P2pOp {
                comm,
                send: false,
                peer: m.from,
                addr: mem.ptr(),
                bytes: m.bytes,
                stream,
            });
        }
    }
    out
}

/// Checks every receive of the side (after its stream was synchronised).
fn verify(s: &Side) -> Result<(), String> {
    for (m, mem) in &s.recvs {
        let got = download(mem, m.bytes + GUARD)?;
        let want = pattern(m);
        if let Some(i) = (0..m.bytes).find(|&i| got[i] != want[i]) {
            return Err(format!(
                "{} bytes from rank {} to rank {}: byte {i} is {:#04x}, sent {:#04x}",
                m.bytes, m.from, m.to, got[i], want[i]
            ));
        }
        if got[m.bytes..].iter().any(|&b| b != FILL) {
            return Err(format!(
                "{} bytes from rank {} to rank {}: written past the receive buffer",
                m.bytes, m.from, m.to
            ));
        }
    }
    Ok(())
}

/// One exchange among the ranks of `r` (all in this process) as one group; `shared`
/// puts every rank on rank 0's stream.
fn exchange(r: &Ranks, msgs: &[Msg], kind: Kind, shared: bool) -> Result<(), String> {
    let stream = |i: usize| if shared { &r.streams[0] } else { &r.streams[i] };
    let sides = r
        .comms
        .iter()
        .enumerate()
        .map(|(i, c)| side(c, stream(i), msgs, kind))
        .collect::<Result<Vec<_>, _>>()?;
    let all: Vec<P2pOp> = r
        .comms
        .iter()
        .zip(&sides)
        .enumerate()
        .flat_map(|(i, (c, s))| ops(c, stream(i), s, msgs))
        .collect();
    // SAFETY: every address is a live allocation of its rank's GPU holding the message,
    // kept until the streams are synchronised below.
    unsafe { braid_cuda::p2p::enqueue(&all) }.map_err(|e| e.to_string())?;
    for s in &r.streams {
        s.synchronize().map_err(|e| e.to_string())?;
    }
    for c in &r.comms {
        if let Some(e) = c.async_error() {
            return Err(e);
        }
    }
    sides.iter().try_for_each(verify)
}

/// The in-process section: 2 and 4 ranks (rank r on GPU r % GPUs).
pub fn section(gpus: usize, quick: bool) -> Result<Cases, String> {
    section_with(gpus, quick, &opts(20))
}

/// [`section`] with communicators made with `o`.
pub fn section_with(gpus: usize, quick: bool, o: &Options) -> Result<Cases, String> {
    let mut cases = Cases::new();
    for n in [2u32, 4] {
        let r = open(n, gpus, o)?;
        let sizes: Vec<usize> = if quick {
            vec![0, 7, (64 << 10) + 1, (3 << 20) + 5]
        } else {
            SIZES.to_vec()
        };
        for (i, &bytes) in sizes.iter().enumerate() {
            for rep in 0..2u64 {
                let kind = KINDS[(i + rep as usize) % KINDS.len()];
                cases.push((
                    format!("n={n} ring {bytes} bytes, call {rep} ({kind:?} memory)"),
                    exchange(&r, &ring(n, bytes, i as u64 * 10 + rep), kind, false),
                ));
            }
        }
        for (scale, kind) in [
            (1usize, Kind::Plain),
            (4099, Kind::Vmm),
            (70_001, Kind::Pool),
        ] {
            cases.push((
                format!("n={n} uneven all-to-all, scale {scale} ({kind:?} memory)"),
                exchange(&r, &all_to_all(n, scale, scale as u64), kind, false),
            ));
        }
        cases.push((
            format!("n={n} all ranks on one stream"),
            exchange(&r, &all_to_all(n, 3001, 7), Kind::Plain, true),
        ));
        // One capture covers one GPU's streams.
        if gpus == 1 {
            cases.push((format!("n={n} CUDA graph, 3 replays"), graph(&r)));
        } else {
            println!("p2p graph case: only with every rank on one GPU (this machine has {gpus})");
        }
    }
    cases.push(("a receive nobody sends fails, named".into(), orphan(gpus)));
    Ok(cases)
}

/// A ring exchange captured once in a graph and replayed three times; each replay
/// delivers the buffers' current contents.
fn graph(r: &Ranks) -> Result<(), String> {
    let n = r.comms.len() as u32;
    let msgs = ring(n, (1 << 20) + 9, 77);
    let sides = r
        .comms
        .iter()
        .enumerate()
        .map(|(i, c)| side(c, &r.streams[i], &msgs, Kind::Plain))
        .collect::<Result<Vec<_>, _>>()?;
    for s in &r.streams {
        s.synchronize().map_err(|e| e.to_string())?;
    }
    let all: Vec<P2pOp> = r
        .comms
        .iter()
        .zip(&sides)
        .enumerate()
        .flat_map(|(i, (c, s))| ops(c, &r.streams[i], s, &msgs))
        .collect();
    let g = braid_cuda::graph::Graph::capture(&r.streams, || {
        // SAFETY: as in `exchange`; the buffers outlive the replays.
        unsafe { braid_cuda::p2p::enqueue(&all) }
    })
    .map_err(|e| e.to_string())?;
    for _ in 0..3 {
        for s in &sides {
            for (_, mem) in &s.recvs {
                mem.fill_async(FILL, &r.streams[0])?;
            }
        }
        r.streams[0].synchronize().map_err(|e| e.to_string())?;
        // SAFETY: everything captured is alive until the synchronisation below.
        unsafe { g.launch(&r.streams[0]) }.map_err(|e| e.to_string())?;
        r.streams[0].synchronize().map_err(|e| e.to_string())?;
        sides.iter().try_for_each(verify)?;
    }
    Ok(())
}

/// Rank 0 receives from rank 1, which sends nothing: the kernel gives up after
/// BRAID_TIMEOUT (2 s) and the communicator names the wait.
fn orphan(gpus: usize) -> Result<(), String> {
    let r = open(2, gpus, &opts(2))?;
    let mem = Mem::new(r.comms[0].context(), Kind::Plain, 4096, &r.streams[0])?;
    let op = P2pOp {
        comm: &r.comms[0],
        send: false,
        peer: 1,
        addr: mem.ptr(),
        bytes: 4096,
        stream: &r.streams[0],
    };
    let t = Instant::now();
    // SAFETY: a live allocation of 4096 bytes, kept until the synchronisation.
    unsafe { braid_cuda::p2p::enqueue(std::slice::from_ref(&op)) }.map_err(|e| e.to_string())?;
    r.streams[0].synchronize().map_err(|e| e.to_string())?;
    let took = t.elapsed();
    match r.comms[0].async_error() {
        Some(e) if e.contains("rank 0") && e.contains("receive peer") => {
            println!("orphan receive: {e} ({took:.1?})");
            if took.as_secs_f64() > 10.0 {
                return Err(format!("reported after {took:.1?}, BRAID_TIMEOUT was 2 s"));
            }
            Ok(())
        }
        Some(e) => Err(format!("the failure does not name the wait: {e}")),
        None => Err("a receive from a rank that never sent succeeded".into()),
    }
}

/// One process's side of the two-process exchanges (ranks of `comm`'s group).
pub fn proc_rank(comm: &CudaComm, stream: &Stream) -> Result<usize, String> {
    let n = comm.n_ranks();
    let mut k = 0;
    let mut run = |msgs: Vec<Msg>, kind: Kind| -> Result<(), String> {
        let s = side(comm, stream, &msgs, kind)?;
        let mine = ops(comm, stream, &s, &msgs);
        // SAFETY: live allocations of this rank's GPU, kept until the synchronisation.
        unsafe { braid_cuda::p2p::enqueue(&mine) }.map_err(|e| e.to_string())?;
        stream.synchronize().map_err(|e| e.to_string())?;
        if let Some(e) = comm.async_error() {
            return Err(e);
        }
        verify(&s)?;
        k += 1;
        Ok(())
    };
    for (i, &bytes) in SIZES.iter().enumerate() {
        run(ring(n, bytes, i as u64), KINDS[i % KINDS.len()])
            .map_err(|e| format!("ring {bytes} bytes: {e}"))?;
    }
    for (i, scale) in [1usize, 4099, 70_001].into_iter().enumerate() {
        run(all_to_all(n, scale, 5 + i as u64), KINDS[i % KINDS.len()])
            .map_err(|e| format!("all-to-all scale {scale}: {e}"))?;
    }
    Ok(k)
}
