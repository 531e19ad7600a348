//! Which blocks form each connection, and which steps make up its messages.
//!
//! A connection is `(sender rank, receiver rank, channel)`. Its two ends are the sender's
//! block with `send_peer = receiver` on that channel and the receiver's block with
//! `recv_peer = sender` on that channel; the k-th sending step of the first pairs with the
//! k-th receiving step of the second. This module computes that pairing tolerantly (it is
//! also used to draw plans that fail verification); the verifier's connection phase turns
//! what does not pair up into diagnostics.

use crate::plan::Plan;
use std::collections::{HashMap, HashSet};

/// One end of a connection: `(index into plan.ranks, index into that rank's blocks)`.
pub type End = (usize, usize);

/// A connection, or a block that claims one end of a connection nobody serves.
#[derive(Clone, Debug)]
pub struct Link {
    pub sender_rank: u32,
    pub receiver_rank: u32,
    pub channel: u32,
    pub sender: Option<End>,
    pub receiver: Option<End>,
    /// Step indices, in block order, of the sender block's sending steps.
    pub sends: Vec<usize>,
    /// Step indices, in block order, of the receiver block's receiving steps.
    pub recvs: Vec<usize>,
}

/// Every connection the blocks of `plan` declare. When two blocks claim the same end
/// (which the structure phase rejects) the first one wins.
pub fn links(plan: &Plan) -> Vec<Link> {
    // (receiver rank, sender rank, channel) -> receiving block.
    let mut receivers: HashMap<(u32, u32, u32), End> = HashMap::new();
    for (ri, r) in plan.ranks.iter().enumerate() {
        for (bi, b) in r.blocks.iter().enumerate() {
            if let Some(p) = b.recv_peer {
                receivers.entry((r.rank, p, b.channel)).or_insert((ri, bi));
            }
        }
    }
    let sending = |(ri, bi): End| -> Vec<usize> {
        let steps = &plan.ranks[ri].blocks[bi].steps;
        (0..steps.len())
            .filter(|&i| steps[i].kind.sends())
            .collect()
    };
    let receiving = |(ri, bi): End| -> Vec<usize> {
        let steps = &plan.ranks[ri].blocks[bi].steps;
        (0..steps.len())
            .filter(|&i| steps[i].kind.receives())
            .collect()
    };

    let mut out = Vec::new();
    let mut served: HashSet<End> = HashSet::new();
    let mut claimed_send: HashSet<(u32, u32, u32)> = HashSet::new();
    for (ri, r) in plan.ranks.iter().enumerate() {
        for (bi, b) in r.blocks.iter().enumerate() {
            let Some(p) = b.send_peer else { continue };
            if !claimed_send.insert((r.rank, p, b.channel)) {
                continue;
            }
            let receiver = receivers.get(&(p, r.rank, b.channel)).copied();
            if let Some(end) = receiver {
                served.insert(end);
            }
            out.push(Link {
                sender_rank: r.rank,
                receiver_rank: p,
                channel: b.channel,
                sender: Some((ri, bi)),
                receiver,
                sends: sending((ri, bi)),
                recvs: receiver.map(receiving).unwrap_or_default(),
            });
        }
    }
    let mut orphans: Vec<(&(u32, u32, u32), &End)> = receivers
        .iter()
        .filter(|(_, end)| !served.contains(end))
        .collect();
    orphans.sort_by_key(|(_, end)| **end);
    for (&(me, p, ch), &end) in orphans {
        out.push(Link {
            sender_rank: p,
            receiver_rank: me,
            channel: ch,
            sender: None,
            receiver: Some(end),
            sends: Vec::new(),
            recvs: receiving(end),
        });
    }
    out
}
