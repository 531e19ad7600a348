//! The preset shapes of cli.md.

use super::topo;
use crate::{LinkKind, Preset, VertexKind};

/// Counts of (gpu, nvswitch, pcie-switch, cpu, nic, network) vertices.
fn census(arg: &str) -> [usize; 6] {
    let t = topo(arg);
    let mut c = [0; 6];
    for (_, v) in t.vertices() {
        let i = match v.kind {
            VertexKind::Gpu(_) => 0,
            VertexKind::NvSwitch => 1,
            VertexKind::PcieSwitch { .. } => 2,
            VertexKind::Cpu(_) => 3,
            VertexKind::Nic(_) => 4,
            VertexKind::Network => 5,
            VertexKind::HostBridge { .. } => unreachable!("presets have no host bridges"),
        };
        c[i] += 1;
    }
    c
}

#[test]
fn nvswitch_is_one_node_with_an_nvswitch_fabric() {
    let t = topo("nvswitch:8");
    assert_eq!((t.n_ranks(), t.n_nodes(), t.uniform_g()), (8, 1, Some(8)));
    assert_eq!(t.ranks_of_node(0), 0..8);
    assert_eq!(census("nvswitch:8"), [8, 1, 4, 2, 0, 0]);
    let nvlinks: Vec<_> = t
        .links()
        .filter(|(_, _, l)| matches!(l.kind, LinkKind::NvLink { .. }))
        .collect();
    assert_eq!(nvlinks.len(), 8);
    for (_, _, l) in nvlinks {
        assert_eq!(l.kind, LinkKind::NvLink { count: 18, gen: 4 });
        assert_eq!(l.bandwidth_gbps, 478.125);
    }
}

#[test]
fn small_boards_have_one_socket_and_large_ones_two() {
    assert_eq!(census("nvswitch:4"), [4, 1, 2, 1, 0, 0]);
    assert_eq!(census("pcie:1"), [1, 0, 1, 1, 0, 0]);
    assert_eq!(census("pcie:5"), [5, 0, 3, 2, 0, 0]);
    assert_eq!(census("pcie:8"), [8, 0, 4, 2, 0, 0]);
    let t = topo("pcie:8");
    let smp = t
        .links()
        .filter(|(_, _, l)| l.kind == LinkKind::Smp)
        .count();
    assert_eq!(smp, 1);
    assert!(t
        .links()
        .all(|(_, _, l)| !matches!(l.kind, LinkKind::NvLink { .. })));
}

#[test]
fn cluster_has_a_nic_per_gpu_and_one_network() {
    let t = topo("cluster:3x8");
    assert_eq!((t.n_ranks(), t.n_nodes(), t.uniform_g()), (24, 3, Some(8)));
    assert_eq!(census("cluster:3x8"), [24, 3, 12, 6, 24, 1]);
    let ib: Vec<_> = t
        .links()
        .filter(|(_, _, l)| matches!(l.kind, LinkKind::InfiniBand { .. }))
        .collect();
    assert_eq!(ib.len(), 24);
    assert!(ib.iter().all(
        |(_, _, l)| l.kind == LinkKind::InfiniBand { rate_gbps: 400 } && l.bandwidth_gbps == 50.0
    ));
}

#[test]
fn ranks_are_node_major() {
    let t = topo("cluster:4x8");
    for rank in 0..32 {
        assert_eq!(t.node_of(rank), rank / 8);
        assert_eq!(t.local_of(rank), rank % 8);
        assert_eq!(t.gpu(rank).rank, rank);
        assert_eq!(t.vertex(t.gpu_vertex(rank)).node, Some(rank / 8));
    }
    assert_eq!(t.ranks_of_node(2), 16..24);
    assert_eq!(t.node_sizes(), vec![8; 4]);
}

#[test]
fn a_thousand_ranks_build_and_answer() {
    let t = topo("cluster:128x8");
    assert_eq!((t.n_ranks(), t.n_nodes()), (1024, 128));
    assert_eq!(t.node_of(1023), 127);
    assert_eq!(t.path(0, 1023).class, crate::PathClass::Net);
    assert_eq!(t.path(1020, 1023).class, crate::PathClass::Nvl);
}

#[test]
fn presets_print_as_they_parse() {
    for arg in ["nvswitch:8", "pcie:3", "cluster:2x4"] {
        let p: Preset = arg.parse().unwrap();
        assert_eq!(p.to_string(), arg);
        assert_eq!(topo(arg).name(), arg);
    }
    assert_eq!(
        Preset::parse("cluster:2x4").unwrap(),
        Some(Preset::Cluster {
            nodes: 2,
            gpus_per_node: 4
        })
    );
    assert_eq!(Preset::parse("./my.topo").unwrap(), None);
}
