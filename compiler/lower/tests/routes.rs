//! Every connection is routed over the topology's best path, and the plan records the
//! transport that path calls for: NVLink inside an NVSwitch node, PCIe where P2P works,
//! host memory where it does not (across sockets), the network across nodes.

mod common;

use braid_plan::{Connection, Plan, Transport};
use braid_topo::Topology;
use common::*;

fn plan_of(alg: &str, topo: &str) -> Plan {
    let (source, a) = algorithm(alg);
    let topo = Topology::from_arg(topo).unwrap();
    let prog = program(&a, &topo, None).unwrap();
    compile(&prog, &topo, &source)
}

fn find(plan: &Plan, from: u32, to: u32) -> &Connection {
    plan.connection(from, to, 0)
        .unwrap_or_else(|| panic!("no connection {from} -> {to}"))
}

fn is(c: &Connection, path: &str, transport: Transport) -> bool {
    c.path == path && c.transport == transport
}

#[test]
fn cross_node_transfers_use_the_network_and_intra_node_ones_nvlink() {
    let plan = plan_of("ring_allreduce", "cluster:2x8");
    assert!(is(find(&plan, 7, 8), "NET", Transport::Net));
    assert!(is(find(&plan, 15, 0), "NET", Transport::Net));
    assert!(is(find(&plan, 0, 1), "NVL", Transport::P2pNvlink));
    // Every connection the plan uses is recorded, once.
    let used: usize = plan
        .ranks
        .iter()
        .flat_map(|r| &r.blocks)
        .filter(|b| b.send_peer.is_some())
        .count();
    assert_eq!(plan.connections.len(), used);
}

#[test]
fn nvswitch_connections_are_all_nvlink() {
    let plan = plan_of("direct_alltoall", "nvswitch:8");
    assert_eq!(plan.connections.len(), 8 * 7);
    for c in &plan.connections {
        assert!(is(c, "NVL", Transport::P2pNvlink), "{c:?}");
    }
}

#[test]
fn pcie_cross_socket_transfers_are_host_staged() {
    let plan = plan_of("direct_alltoall", "pcie:8");
    // Same PCIe switch: direct P2P.
    assert!(is(find(&plan, 0, 1), "PIX", Transport::P2pPcie));
    // Across the CPU sockets: SYS, no P2P.
    assert!(is(find(&plan, 3, 4), "SYS", Transport::HostStaged));
    // Through the host bridge of one socket: PHB, which NCCL's default level refuses.
    assert!(is(find(&plan, 0, 2), "PHB", Transport::HostStaged));
}

#[test]
fn explain_shows_the_transport_of_each_send_connection() {
    let text = braid_plan::explain(&plan_of("ring_allgather", "cluster:2x8"));
    assert!(text.contains("send -> 8 (NET net)"), "{text}");
    assert!(text.contains("send -> 1 (NVL p2p-nvlink)"), "{text}");
}
