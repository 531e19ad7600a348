//! Every connection is routed over the topology's best path, and the transport follows
//! the path class: NVLink inside an NVSwitch node, PCIe where P2P works, host memory where
//! it does not (across sockets), the network across nodes.

mod common;

use braid_lower::{connection_routes, Transport};
use braid_topo::{PathClass, Topology};
use common::*;

fn routes_of(alg: &str, topo: &str) -> Vec<braid_lower::ConnectionRoute> {
    let (source, a) = algorithm(alg);
    let topo = Topology::from_arg(topo).unwrap();
    let prog = program(&a, &topo, None).unwrap();
    let plan = compile(&prog, &topo, &source);
    connection_routes(&plan, &topo)
}

fn find(routes: &[braid_lower::ConnectionRoute], from: u32, to: u32) -> braid_lower::Route {
    routes
        .iter()
        .find(|c| c.sender == from && c.receiver == to)
        .unwrap_or_else(|| panic!("no connection {from} -> {to}"))
        .route
}

#[test]
fn cross_node_transfers_use_the_network_and_intra_node_ones_nvlink() {
    let routes = routes_of("ring_allreduce", "cluster:2x8");
    let net = find(&routes, 7, 8);
    assert_eq!((net.class, net.transport), (PathClass::Net, Transport::Net));
    let back = find(&routes, 15, 0);
    assert_eq!(back.transport, Transport::Net);
    let nvl = find(&routes, 0, 1);
    assert_eq!(
        (nvl.class, nvl.transport),
        (PathClass::Nvl, Transport::P2pNvlink)
    );
}

#[test]
fn nvswitch_connections_are_all_nvlink() {
    for c in routes_of("direct_alltoall", "nvswitch:8") {
        assert_eq!(c.route.class, PathClass::Nvl, "{c:?}");
        assert_eq!(c.route.transport, Transport::P2pNvlink, "{c:?}");
    }
}

#[test]
fn pcie_cross_socket_transfers_are_host_staged() {
    let routes = routes_of("direct_alltoall", "pcie:8");
    // Same PCIe switch: direct P2P.
    let pix = find(&routes, 0, 1);
    assert_eq!(
        (pix.class, pix.transport),
        (PathClass::Pix, Transport::P2pPcie)
    );
    // Across the CPU sockets: SYS, no P2P.
    let sys = find(&routes, 3, 4);
    assert_eq!(
        (sys.class, sys.transport),
        (PathClass::Sys, Transport::HostStaged)
    );
    // Through the host bridge of one socket: PHB, which NCCL's default level refuses.
    let phb = find(&routes, 0, 2);
    assert_eq!(
        (phb.class, phb.transport),
        (PathClass::Phb, Transport::HostStaged)
    );
}
