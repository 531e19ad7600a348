//! The sysfs and NVML parsers, on strings as the kernel and NVML write them.

use std::path::Path;

use crate::sysfs::*;
use crate::NicKind;

#[test]
fn numa_nodes() {
    assert_eq!(parse_numa("1\n"), Some(1));
    assert_eq!(parse_numa("-1\n"), None);
    assert_eq!(parse_numa(""), None);
    assert_eq!(parse_node_list("0-1\n"), vec![0, 1]);
    assert_eq!(parse_node_list("0,2-4,7\n"), vec![0, 2, 3, 4, 7]);
    assert_eq!(parse_node_list("0\n"), vec![0]);
    assert_eq!(parse_node_list("\n"), Vec::<u32>::new());
}

#[test]
fn pcie_links() {
    assert_eq!(parse_link_speed("32.0 GT/s PCIe\n"), Some(5));
    assert_eq!(parse_link_speed("16.0 GT/s PCIe\n"), Some(4));
    assert_eq!(parse_link_speed("8.0 GT/s\n"), Some(3));
    assert_eq!(parse_link_speed("2.5 GT/s\n"), Some(1));
    assert_eq!(parse_link_speed("64.0 GT/s PCIe\n"), Some(6));
    assert_eq!(parse_link_speed("Unknown\n"), None);
    assert_eq!(parse_link_speed("12.0 GT/s\n"), None);
    assert_eq!(parse_link_width("16\n"), Some(16));
    assert_eq!(parse_link_width("0\n"), None);
    assert_eq!(parse_link_width("x16"), None);
}

#[test]
fn network_rates() {
    assert_eq!(parse_ib_rate("400 Gb/sec (4X NDR)\n"), Some(400));
    assert_eq!(parse_ib_rate("200 Gb/sec (2X NDR)\n"), Some(200));
    assert_eq!(parse_ib_rate("2.5 Gb/sec (1X SDR)\n"), Some(3));
    assert_eq!(parse_ib_rate("0 Gb/sec\n"), None);
    assert_eq!(parse_net_speed("100000\n"), Some(100));
    assert_eq!(parse_net_speed("25000\n"), Some(25));
    assert_eq!(parse_net_speed("100\n"), Some(1));
    assert_eq!(parse_net_speed("-1\n"), None);
    assert_eq!(parse_link_layer("InfiniBand\n"), NicKind::InfiniBand);
    assert_eq!(parse_link_layer("Ethernet\n"), NicKind::Roce);
}

#[test]
fn bus_ids() {
    assert_eq!(
        normalize_bus_id("00000000:19:00.0").as_deref(),
        Some("0000:19:00.0")
    );
    assert_eq!(
        normalize_bus_id("0000:9A:00.0\0").as_deref(),
        Some("0000:9a:00.0")
    );
    assert_eq!(
        normalize_bus_id("0001:01:00.1").as_deref(),
        Some("0001:01:00.1")
    );
    // What NVML reports for an NVSwitch hidden from a VM (seen on the 2xH200 machine).
    assert_eq!(normalize_bus_id("FFFFFFFF:FF:FF.0"), None);
    assert_eq!(normalize_bus_id("19:00.0"), None);
    assert_eq!(normalize_bus_id("garbage"), None);
    assert!(is_pci_addr("0000:19:00.0"));
    assert!(!is_pci_addr("pci0000:15"));
    assert!(!is_pci_addr("virtio1"));
}

#[test]
fn pci_chains_start_at_the_root_complex() {
    let path =
        Path::new("/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0");
    let chain: Vec<String> = pci_chain(path).into_iter().map(|(a, _)| a).collect();
    assert_eq!(
        chain,
        [
            "pci0000:15",
            "0000:15:01.0",
            "0000:16:00.0",
            "0000:17:00.0",
            "0000:18:00.0"
        ]
    );
    let (_, dir) = &pci_chain(path)[2];
    assert_eq!(
        dir,
        Path::new("/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0")
    );
    // Not under a root complex: no chain.
    assert!(pci_chain(Path::new("/sys/devices/virtual/net/lo")).is_empty());
    // A prefix (a fake tree's root) does not matter.
    let fake = Path::new("/tmp/x/sys/devices/pci0000:00/0000:00:01.0");
    assert_eq!(pci_chain(fake).len(), 2);
}
