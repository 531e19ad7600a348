//! Path classes, bandwidths and routes.

use super::{file, topo};
use crate::PathClass::{self, *};
use crate::{Topology, LOCAL_BANDWIDTH_GBPS};

/// The names of the vertices on the route from `a` to `b`.
fn route(t: &Topology, a: u32, b: u32) -> Vec<String> {
    t.path(a, b)
        .route
        .iter()
        .map(|&v| t.vertex(v).name.clone())
        .collect()
}

#[track_caller]
fn class(t: &Topology, a: u32, b: u32, expected: PathClass) {
    assert_eq!(t.path(a, b).class, expected, "{} ranks {a}-{b}", t.name());
    assert_eq!(t.path(b, a).class, expected, "{} ranks {b}-{a}", t.name());
}

#[test]
fn nvswitch_pairs_are_nvl_at_full_nvlink_bandwidth() {
    let t = topo("nvswitch:8");
    for a in 0..8 {
        for b in (0..8).filter(|&b| b != a) {
            let p = t.path(a, b);
            assert_eq!((p.class, p.bandwidth_gbps, p.hops()), (Nvl, 478.125, 2));
            assert!(t.p2p_direct(a, b));
        }
    }
    assert_eq!(route(&t, 0, 5), ["n0.gpu0", "n0.nvswitch", "n0.gpu5"]);
    assert_eq!(t.path(0, 5).latency_us, 0.7);
}

#[test]
fn pcie_classes_follow_switches_and_sockets() {
    let t = topo("pcie:8");
    class(&t, 0, 1, Pix); // one switch
    class(&t, 6, 7, Pix);
    class(&t, 0, 2, Phb); // two switches under CPU 0
    class(&t, 5, 7, Phb); // two switches under CPU 1
    class(&t, 0, 4, Sys); // across the sockets
    class(&t, 3, 7, Sys);
    assert!(t.p2p_direct(0, 1));
    assert!(!t.p2p_direct(0, 2));
    assert!(!t.p2p_direct(0, 7));
    assert_eq!(route(&t, 0, 1), ["n0.gpu0", "n0.pcisw0", "n0.gpu1"]);
    assert_eq!(
        route(&t, 1, 6),
        [
            "n0.gpu1",
            "n0.pcisw0",
            "n0.cpu0",
            "n0.cpu1",
            "n0.pcisw3",
            "n0.gpu6"
        ]
    );
    assert_eq!(t.path(0, 1).bandwidth_gbps, 63.008);
    // pcie:4 has one socket: nothing is SYS.
    let t = topo("pcie:4");
    class(&t, 0, 3, Phb);
}

#[test]
fn cluster_is_nvl_inside_a_node_and_net_across() {
    let t = topo("cluster:2x8");
    class(&t, 0, 7, Nvl);
    class(&t, 8, 15, Nvl);
    class(&t, 0, 8, Net);
    class(&t, 7, 9, Net);
    let p = t.path(0, 8);
    assert_eq!(p.bandwidth_gbps, 50.0);
    assert!(!t.p2p_direct(0, 8));
    // Out through the GPU's own PCIe switch and a NIC on it, in the same way.
    let r = route(&t, 0, 8);
    assert_eq!(r.len(), 7, "{r:?}");
    assert_eq!(r[..2], ["n0.gpu0", "n0.pcisw0"]);
    assert_eq!(r[3], "net");
    assert_eq!(r[5..], ["n1.pcisw0", "n1.gpu0"]);
    // Inside a node the NVSwitch wins over the PCIe/NIC detour.
    assert_eq!(route(&t, 8, 9), ["n1.gpu0", "n1.nvswitch", "n1.gpu1"]);
}

#[test]
fn a_rank_to_itself_is_local() {
    let t = topo("pcie:2");
    let p = t.path(1, 1);
    assert_eq!(
        (p.class, p.bandwidth_gbps, p.latency_us),
        (Nvl, LOCAL_BANDWIDTH_GBPS, 0.0)
    );
    assert_eq!(p.route, vec![t.gpu_vertex(1)]);
}

#[test]
fn paths_are_symmetric() {
    for arg in ["pcie:8", "nvswitch:3", "cluster:3x2"] {
        let t = topo(arg);
        for a in 0..t.n_ranks() {
            for b in 0..t.n_ranks() {
                let (p, q) = (t.path(a, b), t.path(b, a));
                assert_eq!(
                    (p.class, p.bandwidth_gbps, p.hops()),
                    (q.class, q.bandwidth_gbps, q.hops())
                );
            }
        }
    }
}

const CASCADE: &str = "# braid topology v1
node 0
cpu cpu0 node=0 numa=0
host-bridge hb0 node=0
pcie-switch top node=0
pcie-switch left node=0
pcie-switch right node=0
gpu g0 node=0 rank=0
gpu g1 node=0 rank=1
gpu g2 node=0 rank=2
link hb0 cpu0 kind=pcie gen=4 width=16
link top hb0 kind=pcie gen=4 width=16
link left top kind=pcie gen=4 width=16
link right top kind=pcie gen=4 width=16
link g0 left kind=pcie gen=4 width=16
link g1 right kind=pcie gen=4 width=16
link g2 hb0 kind=pcie gen=4 width=16
";

#[test]
fn cascaded_switches_are_pxb_and_host_bridges_phb() {
    let t = file(CASCADE);
    class(&t, 0, 1, Pxb); // left, top, right: three switches, no host bridge
    assert!(t.p2p_direct(0, 1));
    class(&t, 0, 2, Phb); // through the host bridge
    assert_eq!(t.path(0, 1).bandwidth_gbps, 16.0 * 1.969);
}

const MESH: &str = "# braid topology v1
node 0
cpu cpu0 node=0 numa=0
gpu g0 node=0 rank=0
gpu g1 node=0 rank=1
gpu g2 node=0 rank=2
link g0 g1 kind=nvlink count=4 gen=3
link g1 g2 kind=nvlink count=4 gen=3
link g0 cpu0 kind=pcie gen=4 width=16
link g1 cpu0 kind=pcie gen=4 width=16
link g2 cpu0 kind=pcie gen=4 width=16
";

#[test]
fn routes_never_pass_through_a_gpu() {
    let t = file(MESH);
    class(&t, 0, 1, Nvl);
    assert_eq!(t.path(0, 1).bandwidth_gbps, 100.0);
    // g0-g1-g2 would be 100 GB/s of NVLink, but GPUs do not forward.
    class(&t, 0, 2, Phb);
    assert_eq!(route(&t, 0, 2), ["g0", "cpu0", "g2"]);
}

const WIDE_OR_SHORT: &str = "# braid topology v1
node 0
cpu cpu0 node=0 numa=0
pcie-switch s0 node=0
pcie-switch s1 node=0
gpu g0 node=0 rank=0
gpu g1 node=0 rank=1
link g0 g1 kind=pcie gen=3 width=4
link g0 s0 kind=pcie gen=5 width=16
link s0 s1 kind=pcie gen=5 width=16
link s1 g1 kind=pcie gen=5 width=16
link s1 cpu0 kind=pcie gen=5 width=16 bw=63.008
link s0 cpu0 kind=pcie gen=5 width=16 lat=0
";

#[test]
fn the_widest_route_wins_then_the_shortest() {
    let t = file(WIDE_OR_SHORT);
    let p = t.path(0, 1);
    // The direct Gen3 x4 link is one hop but ~4 GB/s; the switches give 63.
    assert_eq!(p.bandwidth_gbps, 63.008);
    assert_eq!(route(&t, 0, 1), ["g0", "s0", "s1", "g1"]);
    assert_eq!(p.class, Pxb);
}

const TWO_RAILS: &str = "# braid topology v1
node 0
gpu a0 node=0 rank=0
gpu a1 node=0 rank=1
nvswitch nvs0 node=0
nic x0 node=0
nic x1 node=0
link a0 nvs0 kind=nvlink count=18 gen=4
link a1 nvs0 kind=nvlink count=18 gen=4
link a0 x0 kind=pcie gen=5 width=16
link a1 x1 kind=pcie gen=5 width=16
node 1
gpu b0 node=1 rank=2
nic y0 node=1
link b0 y0 kind=pcie gen=5 width=16
network rail0
network rail1
link x0 rail0 kind=ib rate=400
link x1 rail1 kind=ib rate=200
link y0 rail0 kind=ib rate=400
link y0 rail1 kind=ib rate=400
";

#[test]
fn cross_node_routes_leave_through_their_own_nic() {
    let t = file(TWO_RAILS);
    assert_eq!(t.uniform_g(), None);
    assert_eq!(route(&t, 0, 2), ["a0", "x0", "rail0", "y0", "b0"]);
    assert_eq!(route(&t, 1, 2), ["a1", "x1", "rail1", "y0", "b0"]);
    assert_eq!(t.path(1, 2).bandwidth_gbps, 25.0);
    // Inside node 0 the NICs and rails are never a shortcut.
    assert_eq!(route(&t, 0, 1), ["a0", "nvs0", "a1"]);
    class(&t, 0, 2, Net);
}

#[test]
fn a_gpu_without_a_route_is_refused() {
    let text = "# braid topology v1
node 0
gpu g0 node=0 rank=0
gpu g1 node=0 rank=1
gpu g2 node=0 rank=2
link g0 g1 kind=nvlink count=1 gen=4
link g1 g2 kind=nvlink count=1 gen=4
";
    let e = Topology::parse_text("chain.topo", text)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("chain.topo:3:5: rank 0 (`g0`) has no route to rank 2"),
        "{e}"
    );
}

#[test]
fn a_node_without_a_way_out_is_refused() {
    let text = "# braid topology v1
node 0
gpu a node=0 rank=0
nic x node=0
link a x kind=pcie gen=4 width=16
node 1
gpu b node=1 rank=1
network n
link x n kind=ib rate=100
";
    let e = Topology::parse_text("island.topo", text)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("island.topo:3:5: rank 0 (`a`) has no route to rank 1 (`b`)"),
        "{e}"
    );
}

#[test]
fn classes_across_nodes_need_no_search() {
    let t = topo("cluster:128x8");
    assert_eq!(t.class(5, 1000), Net);
    assert!(!t.p2p_direct(5, 1000));
    assert_eq!(t.class(1000, 1001), Nvl);
    // Same answers as the searched paths.
    assert_eq!(t.path(5, 1000).class, Net);
}
