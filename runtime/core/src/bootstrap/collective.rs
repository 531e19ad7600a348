//! Control operations (allgather, barrier, broadcast) over the star of control streams
//! the join left behind: every rank sends its part to rank 0 in an `OP` frame
//! (`op u8 | root u32 | data`), rank 0 checks that all ranks called the same operation
//! (same sequence number, kind and root), combines, and answers each with `RESULT`.
//!
//! Bootstrap traffic is small and rare (addresses, topology, plan hashes), so a star
//! through the root is simpler than a ring and just as good. Any failure is fatal to the
//! control channel: rank 0 reports it to every other rank in an `ERROR` frame (so all
//! name the same dead peer or mismatch) and closes the streams; later calls return the
//! same error.

use super::io::Wait;
use super::liveness::{report, Health};
use super::peer::Peer;
use super::wire::{decode_error, kind, u32_at, Frame};
use crate::error::{Result, RuntimeError};
use std::net::Shutdown;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One rank's end of the control star.
pub(crate) enum Role {
    /// Rank 0: each other rank's end (index = rank; index 0 is `None`).
    Root(Vec<Option<Arc<Peer>>>),
    Member(Arc<Peer>),
}

pub(crate) struct Control {
    pub role: Role,
    pub seq: u64,
    /// The error that broke the control channel, returned by every later call.
    pub broken: Option<RuntimeError>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Allgather = 1,
    Barrier = 2,
    Broadcast = 3,
}

impl Op {
    fn from_u8(b: u8) -> Option<Op> {
        [Op::Allgather, Op::Barrier, Op::Broadcast]
            .into_iter()
            .find(|o| *o as u8 == b)
    }
}

/// Encodes an allgather result: `count u32 | (len u32 | bytes)*`.
fn encode_table(parts: &[Vec<u8>]) -> Vec<u8> {
    let mut out = (parts.len() as u32).to_le_bytes().to_vec();
    for p in parts {
        out.extend_from_slice(&(p.len() as u32).to_le_bytes());
        out.extend_from_slice(p);
    }
    out
}

pub(crate) fn decode_table(b: &[u8], n: u32) -> Result<Vec<Vec<u8>>> {
    let bad = || RuntimeError::Bootstrap("malformed allgather result from rank 0".into());
    if b.len() < 4 || u32_at(b, 0) != n {
        return Err(bad());
    }
    let mut at = 4;
    let mut out = Vec::with_capacity(n as usize);
    for _ in 0..n {
        if b.len() < at + 4 {
            return Err(bad());
        }
        let len = u32_at(b, at) as usize;
        at += 4;
        let part = b.get(at..at + len).ok_or_else(bad)?;
        out.push(part.to_vec());
        at += len;
    }
    Ok(out)
}

/// Runs one control operation on this rank; returns the result payload (allgather: an
/// encoded table; barrier: empty; broadcast: the root's bytes). A failure breaks the
/// star for good and aborts the group (`health` keeps the reason).
pub(crate) fn run(
    ctl: &mut Control,
    op: Op,
    root: u32,
    mine: &[u8],
    timeout: Duration,
    abort: &AtomicBool,
    health: &Health,
) -> Result<Vec<u8>> {
    if let Some(e) = &ctl.broken {
        return Err(health
            .reason()
            .map_or_else(|| e.clone(), RuntimeError::Aborted));
    }
    ctl.seq += 1;
    let seq = ctl.seq;
    let deadline = Instant::now() + timeout;
    let result = match &ctl.role {
        Role::Root(members) => run_root(members, op, root, mine, seq, deadline, abort),
        Role::Member(stream) => run_member(stream, op, root, mine, seq, deadline, abort),
    };
    if let Err(e) = &result {
        ctl.broken = Some(e.clone());
        if !matches!(e, RuntimeError::Aborted(_)) {
            health.fail(e.to_string(), abort);
        }
        // An abort says only where it was seen; what the group knows names the rank.
        let told = match (e, health.reason()) {
            (RuntimeError::Aborted(_), Some(why)) => RuntimeError::Aborted(why),
            _ => e.clone(),
        };
        match &ctl.role {
            Role::Root(members) => report(members.iter().flatten().map(|m| m.as_ref()), &told),
            // Closing tells the root at once (it sees the connection end) instead of it
            // waiting out its own deadline.
            Role::Member(p) => {
                let _ = p.stream.shutdown(Shutdown::Both);
            }
        }
        if let (RuntimeError::Aborted(_), Some(why)) = (e, health.reason()) {
            return Err(RuntimeError::Aborted(why));
        }
    }
    result
}

fn run_member(
    peer: &Peer,
    op: Op,
    root: u32,
    mine: &[u8],
    seq: u64,
    deadline: Instant,
    abort: &AtomicBool,
) -> Result<Vec<u8>> {
    let what = format!("{op:?} #{seq} through rank 0");
    let w = Wait::new(deadline, abort, 0, &what);
    let mut payload = Vec::with_capacity(5 + mine.len());
    payload.push(op as u8);
    payload.extend_from_slice(&root.to_le_bytes());
    payload.extend_from_slice(mine);
    peer.send(&Frame::new(kind::OP, seq, payload), &w)?;
    let reply = peer.recv(&w)?;
    match reply.kind {
        kind::RESULT if reply.seq == seq => Ok(reply.payload),
        kind::ERROR => Err(decode_error(&reply.payload)),
        k => Err(RuntimeError::Bootstrap(format!(
            "unexpected frame kind {k} (seq {}) during {what}",
            reply.seq
        ))),
    }
}

fn run_root(
    members: &[Option<Arc<Peer>>],
    op: Op,
    root: u32,
    mine: &[u8],
    seq: u64,
    deadline: Instant,
    abort: &AtomicBool,
) -> Result<Vec<u8>> {
    let mut parts = vec![mine.to_vec()];
    for (rank, stream) in members.iter().enumerate().skip(1) {
        let peer = stream.as_ref().expect("every rank joined");
        let what = format!("waiting for rank {rank} to join {op:?} #{seq}");
        let frame = peer.recv(&Wait::new(deadline, abort, rank as u32, &what))?;
        let (their_op, their_root) = match frame.payload.get(..5) {
            Some(h) if frame.kind == kind::OP => (Op::from_u8(h[0]), u32_at(h, 1)),
            _ => {
                return Err(RuntimeError::Bootstrap(format!(
                    "unexpected frame kind {} from rank {rank}",
                    frame.kind
                )))
            }
        };
        if frame.seq != seq || their_op != Some(op) || (op == Op::Broadcast && their_root != root) {
            let theirs = match their_op {
                Some(Op::Broadcast) => format!("Broadcast from rank {their_root}"),
                Some(o) => format!("{o:?}"),
                None => format!("unknown operation {}", frame.payload[0]),
            };
            let ours = if op == Op::Broadcast {
                format!("Broadcast from rank {root}")
            } else {
                format!("{op:?}")
            };
            return Err(RuntimeError::Mismatch(format!(
                "bootstrap call #{seq}: rank 0 called {ours}, rank {rank} called {theirs} (its call #{})",
                frame.seq
            )));
        }
        parts.push(frame.payload[5..].to_vec());
    }
    let result = match op {
        Op::Allgather => encode_table(&parts),
        Op::Barrier => Vec::new(),
        Op::Broadcast => parts[root as usize].clone(),
    };
    let reply = Frame::new(kind::RESULT, seq, result);
    for (rank, stream) in members.iter().enumerate().skip(1) {
        let what = format!("sending the result of {op:?} #{seq} to rank {rank}");
        stream
            .as_ref()
            .expect("joined")
            .send(&reply, &Wait::new(deadline, abort, rank as u32, &what))?;
    }
    Ok(reply.payload)
}
