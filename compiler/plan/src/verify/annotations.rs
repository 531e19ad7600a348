//! Part of phase a: the connection annotations (`connections`) describe connections the
//! plan really has.
//!
//! Annotations are optional and never change what a plan computes, but a runtime opens the
//! transport they name, so an entry for a connection no block uses, a duplicate (which of
//! the two would apply?) or an unknown path class is an error rather than noise.

use crate::diag::{Check, PlanDiagnostic, Site};
use crate::plan::{Plan, PATH_CLASSES};
use std::collections::HashSet;

pub(crate) fn check(plan: &Plan, out: &mut Vec<PlanDiagnostic>) {
    let used: HashSet<(u32, u32, u32)> = plan
        .ranks
        .iter()
        .flat_map(|r| {
            r.blocks
                .iter()
                .filter_map(move |b| b.send_peer.map(|p| (r.rank, p, b.channel)))
        })
        .collect();
    let mut seen = HashSet::new();
    for (i, c) in plan.connections.iter().enumerate() {
        let key = (c.sender, c.receiver, c.channel);
        let name = format!(
            "connections[{i}] ({} -> {}, channel {})",
            c.sender, c.receiver, c.channel
        );
        let mut report = |m: String| {
            out.push(PlanDiagnostic::new(
                Check::Structure,
                Site::Plan,
                format!("{name}: {m}"),
            ))
        };
        if !PATH_CLASSES.contains(&c.path.as_str()) {
            report(format!(
                "unknown path class `{}` (expected one of {})",
                c.path,
                PATH_CLASSES.join(", ")
            ));
        }
        if !seen.insert(key) {
            report("is listed more than once".to_string());
        } else if !used.contains(&key) {
            report(format!(
                "no block of rank {} sends to rank {} on channel {}; annotate only connections the plan uses",
                c.sender, c.receiver, c.channel
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Block, Connection, RankPlan, Topology, Transport};
    use braid_ir::{Collective, ModeSet, Protocol};

    fn plan(connections: Vec<Connection>) -> Plan {
        let block = |send_peer| Block {
            id: 0,
            channel: 0,
            send_peer,
            recv_peer: None,
            steps: Vec::new(),
        };
        Plan {
            format_version: 1,
            name: "t".into(),
            collective: Collective::Allgather,
            n_ranks: 2,
            root: None,
            topology: Topology {
                name: "nvswitch:2".into(),
                fingerprint: "x".into(),
            },
            chunks: 2,
            in_chunks: 1,
            out_chunks: 2,
            scratch_chunks: 0,
            protocol: Protocol::Simple,
            channels: 1,
            modes: ModeSet::OUT_OF_PLACE,
            slots: 8,
            connections,
            execution: Default::default(),
            bytes: None,
            ranks: vec![
                RankPlan {
                    rank: 0,
                    blocks: vec![block(Some(1))],
                },
                RankPlan {
                    rank: 1,
                    blocks: vec![block(None)],
                },
            ],
        }
    }

    fn conn(sender: u32, receiver: u32, path: &str) -> Connection {
        Connection {
            sender,
            receiver,
            channel: 0,
            path: path.into(),
            transport: Transport::P2pNvlink,
        }
    }

    fn messages(p: &Plan) -> Vec<String> {
        let mut out = Vec::new();
        check(p, &mut out);
        out.into_iter().map(|d| d.message).collect()
    }

    #[test]
    fn annotations_of_real_connections_pass() {
        assert!(messages(&plan(vec![conn(0, 1, "NVL")])).is_empty());
        assert!(messages(&plan(Vec::new())).is_empty());
    }

    #[test]
    fn unknown_duplicate_and_unused_annotations_are_errors() {
        let m = messages(&plan(vec![
            conn(0, 1, "NVL"),
            conn(0, 1, "NVL"),
            conn(1, 0, "XYZ"),
        ]));
        assert_eq!(m.len(), 3, "{m:?}");
        assert!(m[0].contains("more than once"), "{m:?}");
        assert!(m[1].contains("unknown path class `XYZ`"), "{m:?}");
        assert!(m[2].contains("no block of rank 1 sends to rank 0"), "{m:?}");
    }
}
