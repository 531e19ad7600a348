//! Point-to-point send and receive, and groups (NCCL's `ncclGroupStart` / `ncclGroupEnd`).
//!
//! A group collects sends and receives and runs them all at once when it closes, so
//! that exchanges between ranks (both send, then both receive) cannot deadlock on the
//! bounded links. In Rust the group is a closure: `comm.group(|g| { g.send(..); g.recv(..) })`.

use crate::comm::Communicator;
use crate::dtype::DType;
use crate::error::{Result, RuntimeError};
use crate::exec::SLICE_BYTES;
use std::time::Instant;

/// The connection channel point-to-point traffic uses, apart from every plan's channels.
pub const P2P_CHANNEL: u32 = 1 << 20;

enum P2pOp<'a> {
    Send { buf: &'a [u8], peer: u32 },
    Recv { buf: &'a mut [u8], peer: u32 },
}

/// The operations of one group, run when the group closes.
pub struct Group<'a> {
    ops: Vec<P2pOp<'a>>,
    dtype_error: Option<RuntimeError>,
}

impl<'a> Group<'a> {
    /// Sends `count` elements of `buf` to `peer`.
    pub fn send(&mut self, buf: &'a [u8], count: usize, dtype: DType, peer: u32) {
        match buf.get(..count * dtype.size()) {
            Some(b) => self.ops.push(P2pOp::Send { buf: b, peer }),
            None => self.dtype_error = Some(short(buf.len(), count, dtype)),
        }
    }

    /// Receives `count` elements from `peer` into `buf`.
    pub fn recv(&mut self, buf: &'a mut [u8], count: usize, dtype: DType, peer: u32) {
        let need = count * dtype.size();
        if buf.len() < need {
            self.dtype_error = Some(short(buf.len(), count, dtype));
            return;
        }
        self.ops.push(P2pOp::Recv {
            buf: &mut buf[..need],
            peer,
        });
    }
}

fn short(len: usize, count: usize, dtype: DType) -> RuntimeError {
    RuntimeError::Invalid(format!(
        "a buffer of {len} bytes cannot hold {count} {} elements",
        dtype.name()
    ))
}

impl Communicator {
    /// Runs the sends and receives `f` adds, all concurrently, when `f` returns.
    pub fn group<'a>(&self, f: impl FnOnce(&mut Group<'a>)) -> Result<()> {
        let mut g = Group {
            ops: Vec::new(),
            dtype_error: None,
        };
        f(&mut g);
        if let Some(r) = self.fabric().aborted() {
            return Err(RuntimeError::Aborted(r));
        }
        if let Some(e) = g.dtype_error {
            return Err(e);
        }
        let n = self.n_ranks();
        for op in &g.ops {
            let peer = match op {
                P2pOp::Send { peer, .. } | P2pOp::Recv { peer, .. } => *peer,
            };
            if peer >= n || peer == self.rank() {
                return Err(RuntimeError::Invalid(format!(
                    "rank {} cannot exchange with rank {peer} in a group of {n}",
                    self.rank()
                )));
            }
        }
        // Operations on one (direction, peer) share a link, so they run in order on one
        // thread (NCCL matches sends and receives between two ranks in order); distinct
        // peers and directions run concurrently.
        let mut lanes: Vec<((bool, u32), Vec<P2pOp>)> = Vec::new();
        for op in g.ops {
            let key = match &op {
                P2pOp::Send { peer, .. } => (true, *peer),
                P2pOp::Recv { peer, .. } => (false, *peer),
            };
            match lanes.iter_mut().find(|(k, _)| *k == key) {
                Some((_, v)) => v.push(op),
                None => lanes.push((key, vec![op])),
            }
        }
        let results: Vec<Result<()>> = std::thread::scope(|s| {
            let handles: Vec<_> = lanes
                .into_iter()
                .map(|(_, ops)| {
                    s.spawn(move || ops.into_iter().try_for_each(|op| self.run_p2p(op)))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("p2p thread"))
                .collect()
        });
        results.into_iter().collect()
    }

    /// A lone send (a group of one).
    pub fn send(&self, buf: &[u8], count: usize, dtype: DType, peer: u32) -> Result<()> {
        self.group(|g| g.send(buf, count, dtype, peer))
    }

    /// A lone receive (a group of one).
    pub fn recv(&self, buf: &mut [u8], count: usize, dtype: DType, peer: u32) -> Result<()> {
        self.group(|g| g.recv(buf, count, dtype, peer))
    }

    fn run_p2p(&self, op: P2pOp) -> Result<()> {
        let fabric = self.fabric();
        let deadline = || Instant::now() + self.timeout();
        let result = match op {
            P2pOp::Send { buf, peer } => {
                let link = fabric.send_link(peer, P2P_CHANNEL, 8)?;
                // A length header first, so a mismatched receive is an error, not garbage.
                link.send(&(buf.len() as u64).to_le_bytes(), deadline())?;
                buf.chunks(SLICE_BYTES)
                    .try_for_each(|c| link.send(c, deadline()))
            }
            P2pOp::Recv { buf, peer } => {
                let link = fabric.recv_link(peer, P2P_CHANNEL, 8)?;
                let mut header = [0u8; 8];
                link.recv(&mut header, deadline())?;
                let len = u64::from_le_bytes(header) as usize;
                if len == buf.len() {
                    buf.chunks_mut(SLICE_BYTES)
                        .try_for_each(|c| link.recv(c, deadline()))
                } else {
                    Err(RuntimeError::Mismatch(format!(
                        "rank {peer} sends {len} bytes but rank {} receives {}",
                        self.rank(),
                        buf.len()
                    )))
                }
            }
        };
        if let Err(e) = &result {
            fabric.abort(&format!("rank {} failed: {e}", self.rank()));
        }
        result
    }
}
