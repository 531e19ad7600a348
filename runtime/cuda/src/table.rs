//! The launch table: the one kernel argument (besides `chunk_elems`) that tells a rank's
//! kernel where everything is. The layout is shared with `braid::init` in
//! `kernels_templates/braid_prims.cuh`:
//!
//! | index | contents |
//! |---|---|
//! | 0, 1, 2 | device addresses of `in`, `out`, `scratch` (0 where absent) |
//! | 3 | progress counters: `u64` per (replica, block), steps completed over all calls |
//! | 4 | status word: `u32`, nonzero once the rank failed |
//! | 5 | state records: [`STATE`] `u64` per grid block (sent, received, calls, unused) |
//! | 6 + 6g .. | grid block `g = replica * blocks + block`: send slots, send head, send tail, receive slots, receive head, receive tail |
//!
//! Connections are identified as on the host backend: `(sender, receiver, channel)` with
//! `channel = replica * channels_per_replica + block.channel`. Each connection's FIFO is
//! one allocation in the receiver's memory: [`FIFO_HEADER`] bytes of counters (head and
//! tail on separate 128-byte lines), then `slots` slots of [`crate::SLICE_BYTES`].

use braid_plan::Plan;

pub const HEADER: usize = 6;
/// `u64` words of one grid block's state record.
pub const STATE: usize = 4;
pub const ENTRY: usize = 6;
/// Bytes before the first slot of a FIFO allocation.
pub const FIFO_HEADER: usize = 256;
/// Byte offset of the tail counter inside a FIFO allocation (head is at 0).
pub const TAIL_AT: usize = 128;

/// A connection `(sender, receiver, channel)` with the channel across replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Conn {
    pub sender: u32,
    pub receiver: u32,
    pub channel: u32,
}

/// Channels one replica uses (the largest block channel + 1 over all ranks).
pub fn channels_per_replica(plan: &Plan) -> u32 {
    plan.ranks
        .iter()
        .flat_map(|r| r.blocks.iter().map(|b| b.channel + 1))
        .max()
        .unwrap_or(1)
}

/// The connection ends of grid block `g` of a rank: indices into [`connections`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ends {
    pub send: Option<usize>,
    pub recv: Option<usize>,
}

/// Every connection the plan uses across its replicas, sorted.
pub fn connections(plan: &Plan) -> Vec<Conn> {
    let cpr = channels_per_replica(plan);
    let mut v = Vec::new();
    for k in 0..plan.channels {
        for r in &plan.ranks {
            for b in &r.blocks {
                if let Some(p) = b.send_peer {
                    v.push(Conn {
                        sender: r.rank,
                        receiver: p,
                        channel: k * cpr + b.channel,
                    });
                }
            }
        }
    }
    v.sort();
    v.dedup();
    v
}

/// The ends of every grid block of rank `rank`, indexed by `replica * blocks + block`.
pub fn ends(plan: &Plan, conns: &[Conn], rank: u32) -> Vec<Ends> {
    let cpr = channels_per_replica(plan);
    let blocks = &plan.ranks[rank as usize].blocks;
    let find = |c: Conn| conns.binary_search(&c).ok();
    (0..plan.channels)
        .flat_map(|k| blocks.iter().map(move |b| (k * cpr + b.channel, b)))
        .map(|(channel, b)| Ends {
            send: b.send_peer.and_then(|p| {
                find(Conn {
                    sender: rank,
                    receiver: p,
                    channel,
                })
            }),
            recv: b.recv_peer.and_then(|p| {
                find(Conn {
                    sender: p,
                    receiver: rank,
                    channel,
                })
            }),
        })
        .collect()
}

/// Builds a rank's table from its buffer addresses and the base address of each
/// connection's FIFO allocation.
/// `fifos[i]` is 0 for a connection this rank neither sends nor receives on.
pub fn build(
    bufs: [u64; 3],
    progress: u64,
    status: u64,
    state: u64,
    ends: &[Ends],
    fifos: &[u64],
) -> Vec<u64> {
    let mut t = Vec::with_capacity(HEADER + ENTRY * ends.len());
    t.extend_from_slice(&bufs);
    t.push(progress);
    t.push(status);
    t.push(state);
    let fifo = |i: Option<usize>| match i {
        Some(i) => {
            let base = fifos[i];
            [base + FIFO_HEADER as u64, base, base + TAIL_AT as u64]
        }
        None => [0; 3],
    };
    for e in ends {
        t.extend_from_slice(&fifo(e.send));
        t.extend_from_slice(&fifo(e.recv));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> Plan {
        Plan::from_json(include_str!(
            "../../../tests/plans/good/exchange_allgather_2.json"
        ))
        .unwrap()
    }

    #[test]
    fn replicas_get_their_own_connections() {
        let mut p = fixture();
        p.channels = 2;
        let c = connections(&p);
        assert_eq!(c.len(), 4);
        let e0 = ends(&p, &c, 0);
        assert_eq!(e0.len(), 4);
        // Rank 0's block 0 sends to 1 on channel 0 (replica 0) and 1 (replica 1).
        assert_eq!(
            c[e0[0].send.unwrap()],
            Conn {
                sender: 0,
                receiver: 1,
                channel: 0
            }
        );
        assert_eq!(
            c[e0[2].send.unwrap()],
            Conn {
                sender: 0,
                receiver: 1,
                channel: 1
            }
        );
        assert_eq!(
            c[e0[0].recv.unwrap()],
            Conn {
                sender: 1,
                receiver: 0,
                channel: 0
            }
        );
        assert_eq!(e0[1], Ends::default());
    }

    #[test]
    fn table_layout_matches_the_device_side() {
        let ends = [Ends {
            send: Some(1),
            recv: None,
        }];
        let t = build([1, 2, 3], 4, 5, 6, &ends, &[1000, 2000]);
        assert_eq!(t.len(), HEADER + ENTRY);
        assert_eq!(&t[..6], &[1, 2, 3, 4, 5, 6]);
        assert_eq!(&t[6..], &[2256, 2000, 2128, 0, 0, 0]);
    }
}
