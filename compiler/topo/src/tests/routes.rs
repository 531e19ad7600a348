//! The linear route check agrees with one search per GPU on random machines, and is
//! fast on large ones.

use proptest::prelude::*;

use crate::routes::{check_routes, check_routes_by_search};
use crate::{Cpu, Gpu, Link, LinkKind, Nic, TopologyBuilder, Vertex, VertexKind};

/// Vertex kinds by number: 0 GPU, 1 NVSwitch, 2 PCIe switch, 3 host bridge, 4 CPU, 5 NIC.
fn kind(k: u8, rank: u32) -> VertexKind {
    match k {
        0 => VertexKind::Gpu(Gpu {
            rank,
            numa: None,
            bus: None,
            model: None,
        }),
        1 => VertexKind::NvSwitch,
        2 => VertexKind::PcieSwitch { bus: None },
        3 => VertexKind::HostBridge { bus: None },
        4 => VertexKind::Cpu(Cpu {
            numa: 0,
            model: None,
        }),
        _ => VertexKind::Nic(Nic {
            device: None,
            numa: None,
            bus: None,
        }),
    }
}

/// A link kind that fits both ends, if any (the builder refuses the rest).
fn link_between(a: &VertexKind, b: &VertexKind) -> Link {
    let nv = |k: &VertexKind| matches!(k, VertexKind::Gpu(_) | VertexKind::NvSwitch);
    let net = |k: &VertexKind| matches!(k, VertexKind::Nic(_) | VertexKind::Network);
    let kind = if nv(a) && nv(b) {
        LinkKind::NvLink { count: 1, gen: 4 }
    } else if matches!((a, b), (VertexKind::Cpu(_), VertexKind::Cpu(_))) {
        LinkKind::Smp
    } else if net(a) && net(b) {
        LinkKind::InfiniBand { rate_gbps: 400 }
    } else {
        LinkKind::Pcie { gen: 5, width: 16 }
    };
    Link {
        bandwidth_gbps: kind.nominal_bandwidth_gbps().unwrap(),
        latency_us: kind.nominal_latency_us(),
        kind,
    }
}

/// Vertex kinds per node, network vertices, links by vertex number, and `wired`.
type Machine = (Vec<Vec<u8>>, u8, Vec<(usize, usize)>, bool);

/// Nodes of random vertices (GPUs first, so ranks are node-major), network vertices,
/// and random links, of which the builder keeps those that are legal.
/// Each node gets a GPU and some random vertices. With `wired`, every vertex of a node is
/// also linked to the node's first vertex (a PCIe switch, when it has one), and every NIC
/// to the first network vertex: mostly connected machines, which random links then vary.
fn machine() -> impl Strategy<Value = Machine> {
    (
        prop::collection::vec(prop::collection::vec(0u8..6, 0..6), 1..4),
        0u8..3,
        prop::collection::vec((0usize..64, 0usize..64), 0..30),
        any::<bool>(),
    )
}

fn build(
    nodes: &[Vec<u8>],
    networks: u8,
    links: &[(usize, usize)],
    wired: bool,
) -> Option<crate::Topology> {
    let mut b = TopologyBuilder::new();
    let mut ids = Vec::new();
    let mut kinds_of = Vec::new();
    let mut rank = 0;
    for kinds in nodes {
        let node = b.add_node();
        let mut kinds = kinds.clone();
        kinds.push(0);
        if wired {
            kinds.push(2);
        }
        kinds.sort(); // GPUs first
        let first = ids.len();
        let hub = kinds.iter().position(|&k| k == 2).map(|i| first + i);
        for k in kinds {
            let kind = kind(k, rank);
            rank += u32::from(k == 0);
            let name = format!("v{}", ids.len());
            kinds_of.push(kind.clone());
            ids.push(
                b.add_vertex(Vertex {
                    name,
                    node: Some(node),
                    kind,
                })
                .unwrap(),
            );
        }
        if let (true, Some(hub)) = (wired, hub) {
            for v in first..ids.len() {
                if v != hub {
                    let link = link_between(&kinds_of[v], &kinds_of[hub]);
                    let _ = b.add_link(ids[v], ids[hub], link);
                }
            }
        }
    }
    let first_net = ids.len();
    for _ in 0..networks {
        let name = format!("v{}", ids.len());
        let kind = VertexKind::Network;
        kinds_of.push(kind.clone());
        ids.push(
            b.add_vertex(Vertex {
                name,
                node: None,
                kind,
            })
            .unwrap(),
        );
    }
    if wired && networks > 0 {
        for v in 0..first_net {
            if matches!(kinds_of[v], VertexKind::Nic(_)) {
                let link = link_between(&kinds_of[v], &VertexKind::Network);
                let _ = b.add_link(ids[v], ids[first_net], link);
            }
        }
    }
    for &(x, y) in links {
        let (x, y) = (x % ids.len(), y % ids.len());
        let link = link_between(&kinds_of[x], &kinds_of[y]);
        let _ = b.add_link(ids[x], ids[y], link);
    }
    b.build_without_routes("random")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn the_linear_check_agrees_with_a_search_per_gpu(
        (nodes, networks, links, wired) in machine()
    ) {
        if let Some(t) = build(&nodes, networks, &links, wired) {
            let fast = check_routes(&t).map_err(|e| e.message);
            let slow = check_routes_by_search(&t).map_err(|e| e.message);
            prop_assert_eq!(fast, slow);
        }
    }
}

#[test]
fn random_machines_are_often_connected() {
    // Guard against the generator making only machines that fail at once.
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut ok, mut multi) = (0, 0);
    for _ in 0..2000 {
        let (nodes, networks, links, wired) = machine().new_tree(&mut runner).unwrap().current();
        if let Some(t) = build(&nodes, networks, &links, wired) {
            if check_routes_by_search(&t).is_ok() && t.n_ranks() > 1 {
                ok += 1;
                multi += usize::from(t.n_nodes() > 1);
            }
        }
    }
    assert!(
        ok > 100 && multi > 20,
        "{ok} connected, {multi} of several nodes"
    );
}
