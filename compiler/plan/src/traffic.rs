//! What a plan moves over its links: chunks sent per rank, per connection. Multiplied by
//! a call's chunk size it gives the bytes each link carries, which bounds the call's time
//! from below at the link's rate (a roofline). Replicas split every chunk among
//! themselves, so they change how the bytes travel, not how many.

use crate::plan::Plan;
use std::collections::BTreeMap;

/// Chunks sent by each rank of a plan over one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Traffic {
    /// For every rank, chunks it sends to each peer (`peer -> chunks`).
    pub sent: Vec<BTreeMap<u32, u64>>,
    /// For every rank, chunks its local copies move (`cpy` steps: an out-of-place
    /// alltoall's own block, a ring all-reduce's first copy of its input to its output). They cross
    /// no link, but where ranks share a GPU they take that GPU's memory like a transfer.
    pub copied: Vec<u64>,
}

impl Traffic {
    /// Chunks sent by all ranks together.
    pub fn total(&self) -> u64 {
        self.sent.iter().flat_map(|m| m.values()).sum()
    }

    /// Chunks sent by the rank that sends most.
    pub fn busiest_rank(&self) -> u64 {
        self.sent
            .iter()
            .map(|m| m.values().sum::<u64>())
            .max()
            .unwrap_or(0)
    }

    /// Chunks on the busiest connection (one sender, one receiver).
    pub fn busiest_link(&self) -> u64 {
        self.sent
            .iter()
            .flat_map(|m| m.values().copied())
            .max()
            .unwrap_or(0)
    }
}

/// The chunks every rank of `plan` sends in one call.
pub fn traffic(plan: &Plan) -> Traffic {
    let copied = plan
        .ranks
        .iter()
        .map(|r| {
            r.blocks
                .iter()
                .flat_map(|b| &b.steps)
                .filter(|s| s.kind == crate::plan::StepKind::Copy)
                .map(|s| s.dst.or(s.src).map_or(0, |x| u64::from(x.count)))
                .sum()
        })
        .collect();
    let sent = plan
        .ranks
        .iter()
        .map(|r| {
            let mut m = BTreeMap::new();
            for b in &r.blocks {
                let Some(peer) = b.send_peer else { continue };
                for s in b.steps.iter().filter(|s| s.kind.sends()) {
                    let chunks = s.src.or(s.dst).map_or(0, |x| u64::from(x.count));
                    *m.entry(peer).or_insert(0) += chunks;
                }
            }
            m
        })
        .collect();
    Traffic { sent, copied }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Plan {
        let path = format!(
            "{}/../../tests/plans/good/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        Plan::from_json(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[test]
    fn a_ring_allreduce_sends_two_n_minus_one_chunks_per_rank_to_its_successor() {
        let t = traffic(&fixture("ring_allreduce_4.json"));
        for (r, m) in t.sent.iter().enumerate() {
            assert_eq!(m.len(), 1, "rank {r} talks to one peer: {m:?}");
            assert_eq!(m.values().sum::<u64>(), 2 * 3, "rank {r}: {m:?}");
        }
        assert_eq!((t.total(), t.busiest_rank(), t.busiest_link()), (24, 6, 6));
        // Its first step copies the rank's whole input (4 chunks) to its output.
        assert_eq!(t.copied, vec![4; 4]);
    }

    #[test]
    fn a_chain_broadcast_sends_nothing_from_its_last_rank() {
        let p = fixture("chain_broadcast_3.json");
        let t = traffic(&p);
        let per_rank: Vec<u64> = t.sent.iter().map(|m| m.values().sum()).collect();
        assert_eq!(
            per_rank.iter().filter(|&&c| c == 0).count(),
            1,
            "{per_rank:?}"
        );
        assert!(
            per_rank.iter().all(|&c| c <= u64::from(p.chunks)),
            "{per_rank:?}"
        );
    }
}
