//! Facts to topology: the 2xH200 machine, a fake sysfs machine, and a
//! machine whose NVML and sysfs said nothing.

use braid_topo::{LinkKind, PathClass, Topology};

use super::tree::fake_machine;
use crate::assemble;
use crate::facts::*;
use crate::sysfs::Sysfs;

fn gpu(bus: &str, nvlinks: Vec<NvLinkFacts>, pci: PciPlacement) -> GpuFacts {
    GpuFacts {
        model: "NVIDIA H200".into(),
        bus: bus.into(),
        pci,
        nvlinks,
    }
}

/// `n` active NVLink 4.0 links (NVML version 6) to `remote`.
fn links(n: usize, remote: Option<&str>) -> Vec<NvLinkFacts> {
    let remote_bus = remote.map(String::from);
    vec![NvLinkFacts { remote_bus, gen: 6 }; n]
}

#[track_caller]
fn build(facts: &MachineFacts) -> (Topology, Vec<String>) {
    assemble("test", facts).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn two_gpus_on_an_nvswitch_are_nvl_at_478() {
    // As on the GPU machine: 18 links each, to NVSwitches (not to each other).
    let facts = MachineFacts {
        gpus: vec![
            gpu(
                "0000:19:00.0",
                links(18, Some("0000:05:00.0")),
                PciPlacement::default(),
            ),
            gpu("0000:3b:00.0", links(18, None), PciPlacement::default()),
        ],
        ..Default::default()
    };
    let (t, notes) = build(&facts);
    assert_eq!((t.n_ranks(), t.n_nodes()), (2, 1));
    let p = t.path(0, 1);
    assert_eq!((p.class, p.bandwidth_gbps), (PathClass::Nvl, 478.125));
    assert_eq!(t.vertex(p.route[1]).name, "n0.nvswitch");
    assert_eq!(t.gpu(1).bus.as_deref(), Some("0000:3b:00.0"));
    assert_eq!(t.gpu(0).model.as_deref(), Some("NVIDIA H200"));
    assert!(
        notes.iter().any(|n| n.contains("assumed Gen4 x16")),
        "{notes:?}"
    );
    // What detection prints reads back.
    assert_eq!(Topology::parse_text("back", &t.to_text()).unwrap(), t);
}

#[test]
fn direct_nvlinks_join_the_two_gpus() {
    let facts = MachineFacts {
        gpus: vec![
            gpu(
                "0000:19:00.0",
                links(4, Some("0000:3b:00.0")),
                PciPlacement::default(),
            ),
            gpu(
                "0000:3b:00.0",
                links(4, Some("0000:19:00.0")),
                PciPlacement::default(),
            ),
        ],
        ..Default::default()
    };
    let (t, _) = build(&facts);
    let nvlinks: Vec<_> = t
        .links()
        .filter(|(_, _, l)| matches!(l.kind, LinkKind::NvLink { .. }))
        .collect();
    assert_eq!(nvlinks.len(), 1);
    assert_eq!(nvlinks[0].2.kind, LinkKind::NvLink { count: 4, gen: 4 });
    assert_eq!(t.path(0, 1).route.len(), 2);
}

#[test]
fn without_nvml_or_sysfs_gpus_meet_at_the_cpu() {
    let facts = MachineFacts {
        gpus: vec![
            gpu("0000:19:00.0", vec![], PciPlacement::default()),
            gpu("0000:3b:00.0", vec![], PciPlacement::default()),
        ],
        ..Default::default()
    };
    let (t, _) = build(&facts);
    assert_eq!(t.path(0, 1).class, PathClass::Phb);
    assert!(!t.p2p_direct(0, 1));
}

#[test]
fn the_fake_machine_has_a_switch_a_second_socket_and_nics() {
    let root = fake_machine("assemble");
    let sys = Sysfs::at(&root);
    let gpus = vec![
        gpu("0000:18:00.0", vec![], sys.placement("0000:18:00.0")),
        gpu("0000:98:00.0", vec![], sys.placement("0000:98:00.0")),
    ];
    let facts = MachineFacts {
        gpus,
        nics: sys.nics(),
        numa_nodes: sys.numa_nodes(),
    };
    let (t, notes) = build(&facts);
    assert!(notes.is_empty(), "{notes:?}");
    let p = t.path(0, 1);
    assert_eq!(p.class, PathClass::Sys);
    let route: Vec<&str> = p.route.iter().map(|&v| t.vertex(v).name.as_str()).collect();
    assert_eq!(
        route,
        ["n0.gpu0", "n0.pcisw0", "n0.cpu0", "n0.cpu1", "n0.gpu1"]
    );
    // GPU 1's link is capped by its Gen4 root port.
    let last = t
        .links()
        .find(|(a, _, _)| t.vertex(*a).name == "n0.gpu1")
        .unwrap()
        .2;
    assert_eq!(last.kind, LinkKind::Pcie { gen: 4, width: 16 });
    let text = t.to_text();
    assert!(
        text.contains("nic n0.nic0 node=0 numa=0 bus=0000:19:00.0 dev=mlx5_0\n"),
        "{text}"
    );
    assert!(
        text.contains("link n0.nic0 net kind=ib rate=400 bw=50 lat=1\n"),
        "{text}"
    );
    assert!(text.contains("link n0.nic1 net kind=eth rate=10"), "{text}");
    assert!(
        text.contains("pcie-switch n0.pcisw0 node=0 bus=0000:16:00.0\n"),
        "{text}"
    );
    std::fs::remove_dir_all(root).unwrap();
}
