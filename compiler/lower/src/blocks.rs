//! Blocks and channels: which block of its rank runs each step.
//!
//! MSCCL's rule: per rank and channel, each send peer and each receive peer belongs to
//! exactly one block, and a block has at most one send peer and one receive peer. Within
//! that rule the choice is which send connection shares a block with which receive
//! connection. A block runs its steps one after another, so sharing only serialises two
//! connections (a send to `p` and a receive from `p` in one block cannot overlap, and a
//! ring rank that must finish receiving one chunk before sending the next loses all
//! overlap between rounds). Sharing pays only where the rank forwards data from one peer
//! to the other and the receive and the forwarding send become one fused step. So:
//!
//! * a receive connection from `u` and a send connection to `d` may share a block when
//!   some received slice is sent on unchanged (a move edge from the receive to a send of
//!   the very slice it stored); pairs are chosen greedily by how many slices are forwarded
//!   that way (ties: the smaller peers first), among the pairs the caller allows
//!   ([`crate::schedule`] withdraws those whose block ends up mostly unfused);
//! * every other connection gets a block of its own;
//! * local steps (`cpy`, `re`) of a rank and channel share one block with no peers, so
//!   that they never wait behind communication they do not depend on.
//!
//! The channel of a step is its operation's `@ch` hint, channel 0 without one. Blocks are
//! numbered per rank by (channel, send peer, receive peer), blocks without a peer last.

use crate::graph::MoveGraph;
use crate::moves::{MoveKind, Moves};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A block's identity: its rank, channel and peers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockKey {
    pub rank: u32,
    pub channel: u32,
    pub send_peer: Option<u32>,
    pub recv_peer: Option<u32>,
}

impl BlockKey {
    /// The numbering order within a rank: channel, then peers, peerless blocks last.
    fn sort_key(&self) -> (u32, u32, u32) {
        (
            self.channel,
            self.send_peer.unwrap_or(u32::MAX),
            self.recv_peer.unwrap_or(u32::MAX),
        )
    }
}

/// Every block of every rank, and which block each step goes to.
#[derive(Clone, Debug, Default)]
pub struct Blocks {
    /// Per rank, its blocks in numbering order.
    pub keys: Vec<Vec<BlockKey>>,
    /// `(rank, channel, peer)` of a send connection -> block index on `rank`.
    send: HashMap<(u32, u32, u32), u32>,
    /// `(rank, channel, peer)` of a receive connection -> block index on `rank`.
    recv: HashMap<(u32, u32, u32), u32>,
    /// `(rank, channel)` -> index of the peerless block for local steps.
    local: HashMap<(u32, u32), u32>,
}

impl Blocks {
    /// The block that runs move `m`'s step on `rank`.
    pub fn block_of(&self, moves: &Moves, m: u32, rank: u32) -> u32 {
        let mv = moves.get(m);
        let ch = mv.channel;
        let found = match mv.kind {
            MoveKind::Local { .. } => self.local.get(&(rank, ch)),
            MoveKind::Transfer(t) if t.from == rank => self.send.get(&(rank, ch, t.to)),
            MoveKind::Transfer(t) => self.recv.get(&(rank, ch, t.from)),
        };
        *found.expect("every step's connection has a block")
    }
}

/// Connections and local work of one rank and channel.
#[derive(Default)]
struct Ends {
    sends: BTreeSet<u32>,
    recvs: BTreeSet<u32>,
    local: bool,
    /// `(from, to)` -> slices received from `from` and sent on unchanged to `to`.
    forwards: BTreeMap<(u32, u32), u32>,
}

/// Assigns blocks for `moves` on `n` ranks (see the module doc); a receive and a send
/// connection share a block only where `may_pair` allows their block's key.
pub fn assign(
    moves: &Moves,
    graph: &MoveGraph,
    n: u32,
    may_pair: &dyn Fn(&BlockKey) -> bool,
) -> Blocks {
    let mut ends: BTreeMap<(u32, u32), Ends> = BTreeMap::new();
    for (i, m) in moves.moves.iter().enumerate() {
        match m.kind {
            MoveKind::Local { rank, .. } => ends.entry((rank, m.channel)).or_default().local = true,
            MoveKind::Transfer(t) => {
                ends.entry((t.from, m.channel))
                    .or_default()
                    .sends
                    .insert(t.to);
                let e = ends.entry((t.to, m.channel)).or_default();
                e.recvs.insert(t.from);
                for edge in graph.successors(i as u32) {
                    let next = moves.get(edge.to);
                    let Some(fwd) = next.transfer() else { continue };
                    if edge.rank == t.to
                        && fwd.from == t.to
                        && next.channel == m.channel
                        && fwd.src == t.dst
                    {
                        *e.forwards.entry((t.from, fwd.to)).or_default() += 1;
                    }
                }
            }
        }
    }
    let mut blocks = Blocks {
        keys: vec![Vec::new(); n as usize],
        ..Blocks::default()
    };
    for ((rank, channel), e) in ends {
        for key in pair(rank, channel, &e, may_pair) {
            blocks.keys[rank as usize].push(key);
        }
    }
    for (rank, keys) in blocks.keys.iter_mut().enumerate() {
        keys.sort_by_key(BlockKey::sort_key);
        let rank = rank as u32;
        for (i, k) in keys.iter().enumerate() {
            let i = i as u32;
            if let Some(p) = k.send_peer {
                blocks.send.insert((rank, k.channel, p), i);
            }
            if let Some(p) = k.recv_peer {
                blocks.recv.insert((rank, k.channel, p), i);
            }
            if k.send_peer.is_none() && k.recv_peer.is_none() {
                blocks.local.insert((rank, k.channel), i);
            }
        }
    }
    blocks
}

/// The blocks of one rank and channel: forwarding pairs first, greedily by weight.
fn pair(rank: u32, channel: u32, e: &Ends, may_pair: &dyn Fn(&BlockKey) -> bool) -> Vec<BlockKey> {
    let mut weighted: Vec<((u32, u32), u32)> = e.forwards.iter().map(|(k, w)| (*k, *w)).collect();
    weighted.sort_by_key(|&(k, w)| (std::cmp::Reverse(w), k));
    let (mut sends, mut recvs) = (e.sends.clone(), e.recvs.clone());
    let key = |send_peer, recv_peer| BlockKey {
        rank,
        channel,
        send_peer,
        recv_peer,
    };
    let mut out = Vec::new();
    for ((from, to), _) in weighted {
        if recvs.contains(&from) && sends.contains(&to) && may_pair(&key(Some(to), Some(from))) {
            recvs.remove(&from);
            sends.remove(&to);
            out.push(key(Some(to), Some(from)));
        }
    }
    out.extend(sends.into_iter().map(|p| key(Some(p), None)));
    out.extend(recvs.into_iter().map(|p| key(None, Some(p))));
    if e.local {
        out.push(key(None, None));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{analyse, at, copy, program};
    use braid_ir::Buf::{In, Out};

    #[test]
    fn a_forwarding_rank_pairs_its_receive_and_send_connections() {
        // A chain 0 -> 1 -> 2: rank 1 forwards what it receives.
        let prog = program(
            3,
            1,
            0,
            vec![
                copy(at(Out, 0, 0), at(In, 0, 0)),
                copy(at(Out, 1, 0), at(Out, 0, 0)),
                copy(at(Out, 2, 0), at(Out, 1, 0)),
            ],
        );
        let (moves, g) = analyse(&prog);
        let b = assign(&moves, &g, 3, &|_| true);
        let key = |rank, send_peer, recv_peer| BlockKey {
            rank,
            channel: 0,
            send_peer,
            recv_peer,
        };
        assert_eq!(b.keys[1], vec![key(1, Some(2), Some(0))]);
        assert_eq!(b.keys[0], vec![key(0, Some(1), None), key(0, None, None)]);
    }

    #[test]
    fn unrelated_connections_get_blocks_of_their_own() {
        // 0 and 1 swap chunks: no rank forwards anything, so send and receive stay apart
        // and the link is used in both directions at once.
        let prog = program(
            2,
            2,
            0,
            vec![
                copy(at(Out, 1, 0), at(In, 0, 0)),
                copy(at(Out, 0, 1), at(In, 1, 1)),
            ],
        );
        let (moves, g) = analyse(&prog);
        let b = assign(&moves, &g, 2, &|_| true);
        for rank in 0..2 {
            let peers: Vec<_> = b.keys[rank as usize]
                .iter()
                .map(|k| (k.send_peer, k.recv_peer))
                .collect();
            let other = 1 - rank;
            assert_eq!(peers, vec![(Some(other), None), (None, Some(other))]);
        }
    }
}
