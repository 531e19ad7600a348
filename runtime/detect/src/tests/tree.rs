//! The sysfs reader on a fake tree: a root complex, one PCIe switch holding a
//! GPU and an InfiniBand NIC, a second GPU on a root port of NUMA node 1,
//! and an Ethernet interface.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use crate::facts::{NicKind, PcieLink};
use crate::sysfs::Sysfs;

/// A fresh directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("braid-detect-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

/// A PCI device directory `rel` under `sys/devices`, with its link and NUMA
/// files, listed in `sys/bus/pci/devices`.
fn device(root: &Path, rel: &str, speed: &str, width: &str, numa: &str) -> PathBuf {
    let dir = root.join("sys/devices").join(rel);
    write(&dir.join("max_link_speed"), speed);
    write(&dir.join("max_link_width"), width);
    write(&dir.join("numa_node"), numa);
    let bus = dir.file_name().unwrap().to_owned();
    let listed = root.join("sys/bus/pci/devices");
    fs::create_dir_all(&listed).unwrap();
    symlink(&dir, listed.join(bus)).unwrap();
    dir
}

pub(super) fn fake_machine(name: &str) -> PathBuf {
    let root = scratch(name);
    write(&root.join("sys/devices/system/node/online"), "0-1\n");
    let port = "pci0000:15/0000:15:01.0";
    device(&root, port, "32.0 GT/s PCIe\n", "16\n", "0\n");
    device(
        &root,
        &format!("{port}/0000:16:00.0"),
        "32.0 GT/s PCIe\n",
        "16\n",
        "0\n",
    );
    device(
        &root,
        &format!("{port}/0000:16:00.0/0000:17:00.0"),
        "32.0 GT/s PCIe\n",
        "16\n",
        "0\n",
    );
    device(
        &root,
        &format!("{port}/0000:16:00.0/0000:17:01.0"),
        "32.0 GT/s PCIe\n",
        "16\n",
        "0\n",
    );
    device(
        &root,
        &format!("{port}/0000:16:00.0/0000:17:00.0/0000:18:00.0"),
        "32.0 GT/s PCIe\n",
        "16\n",
        "0\n",
    );
    let ib = device(
        &root,
        &format!("{port}/0000:16:00.0/0000:17:01.0/0000:19:00.0"),
        "32.0 GT/s PCIe\n",
        "16\n",
        "0\n",
    );
    device(
        &root,
        "pci0000:97/0000:97:01.0",
        "16.0 GT/s PCIe\n",
        "16\n",
        "1\n",
    );
    device(
        &root,
        "pci0000:97/0000:97:01.0/0000:98:00.0",
        "32.0 GT/s PCIe\n",
        "16\n",
        "1\n",
    );
    let eth = device(
        &root,
        "pci0000:00/0000:00:1c.0/0000:01:00.0",
        "8.0 GT/s\n",
        "4\n",
        "-1\n",
    );

    let mlx = root.join("sys/class/infiniband/mlx5_0");
    fs::create_dir_all(&mlx).unwrap();
    symlink(&ib, mlx.join("device")).unwrap();
    write(&mlx.join("ports/1/rate"), "400 Gb/sec (4X NDR)\n");
    write(&mlx.join("ports/1/link_layer"), "InfiniBand\n");
    write(&mlx.join("ports/1/state"), "4: ACTIVE\n");
    // The RDMA device's Ethernet face is not a second NIC.
    let ib_net = root.join("sys/class/net/ibp25s0");
    fs::create_dir_all(&ib_net).unwrap();
    symlink(&ib, ib_net.join("device")).unwrap();
    write(&ib_net.join("speed"), "400000\n");
    let eno = root.join("sys/class/net/eno1");
    fs::create_dir_all(&eno).unwrap();
    symlink(&eth, eno.join("device")).unwrap();
    write(&eno.join("speed"), "10000\n");
    // Virtual interfaces have no device.
    write(&root.join("sys/class/net/lo/speed"), "-1\n");
    root
}

#[test]
fn placements_follow_the_pci_tree() {
    let root = fake_machine("placement");
    let sys = Sysfs::at(&root);
    assert_eq!(sys.numa_nodes(), vec![0, 1]);
    let gpu = sys.placement("0000:18:00.0");
    assert_eq!(gpu.numa, Some(0));
    let addrs: Vec<&str> = gpu.chain.iter().map(|h| h.addr.as_str()).collect();
    assert_eq!(
        addrs,
        [
            "pci0000:15",
            "0000:15:01.0",
            "0000:16:00.0",
            "0000:17:00.0",
            "0000:18:00.0"
        ]
    );
    assert_eq!(gpu.chain[0].link, None);
    assert_eq!(gpu.chain[4].link, Some(PcieLink { gen: 5, width: 16 }));
    let other = sys.placement("0000:98:00.0");
    assert_eq!((other.numa, other.chain.len()), (Some(1), 3));
    // A device sysfs does not list has no placement.
    assert_eq!(sys.placement("0000:aa:00.0"), Default::default());
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn nics_are_rdma_devices_and_physical_interfaces() {
    let root = fake_machine("nics");
    let nics = Sysfs::at(&root).nics();
    let summary: Vec<(&str, &str, NicKind, u32)> = nics
        .iter()
        .map(|n| (n.device.as_str(), n.bus.as_str(), n.kind, n.rate_gbps))
        .collect();
    assert_eq!(
        summary,
        [
            ("mlx5_0", "0000:19:00.0", NicKind::InfiniBand, 400),
            ("eno1", "0000:01:00.0", NicKind::Ethernet, 10),
        ]
    );
    assert_eq!(nics[0].pci.chain.len(), 5);
    assert_eq!(nics[1].pci.numa, None);
    fs::remove_dir_all(root).unwrap();
}

#[test]
fn a_machine_without_sysfs_has_nothing_to_say() {
    let root = scratch("empty");
    let sys = Sysfs::at(&root);
    assert!(sys.numa_nodes().is_empty());
    assert!(sys.nics().is_empty());
    assert!(sys.placement("0000:18:00.0").chain.is_empty());
    fs::remove_dir_all(root).unwrap();
}
