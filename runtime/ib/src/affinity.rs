//! Which of several RDMA ports a device's connections use (the device whose memory they
//! carry, a GPU): the one nearest it on the PCI tree (behind the same switch before one behind the root complex, before one on
//! another socket), as NCCL pairs each GPU with its closest NIC; among equally near ports
//! the GPU's ordinal deals them out, so that the GPUs of a node spread over their NICs
//! instead of all taking the first.
//!
//! Distances come from sysfs: a PCI device's canonical path lists the bridges above it
//! (`/sys/devices/pci0000:17/0000:17:00.0/0000:18:00.0/0000:1b:00.0`), so two devices are
//! as far apart as the components of their paths below their common prefix. A device
//! whose path is unknown is farther than every known one.

use crate::devices::Port;
use std::path::{Path, PathBuf};

/// Where sysfs is mounted (tests give a tree of their own).
pub const SYSFS: &str = "/sys";

/// The bridges and device, from the root complex down, of the PCI device at `addr`
/// (`0000:1B:00.0`, as CUDA writes it; any case).
pub fn pci_path(sysfs: &Path, addr: &str) -> Option<Vec<String>> {
    components(
        &sysfs
            .join("bus/pci/devices")
            .join(addr.trim().to_ascii_lowercase()),
    )
}

/// The same for the PCI function behind RDMA device `device` (`mlx5_0`).
pub fn rdma_path(sysfs: &Path, device: &str) -> Option<Vec<String>> {
    components(&sysfs.join("class/infiniband").join(device).join("device"))
}

fn components(link: &Path) -> Option<Vec<String>> {
    let real: PathBuf = std::fs::canonicalize(link).ok()?;
    let parts: Vec<String> = real
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    // From the root complex (`devices/pci0000:17`) down.
    let from = parts
        .windows(2)
        .position(|w| w[0] == "devices" && w[1].starts_with("pci"))?;
    Some(parts[from + 1..].to_vec())
}

/// Hops between two devices through their nearest common bridge.
pub fn distance(a: &[String], b: &[String]) -> usize {
    let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    (a.len() - common) + (b.len() - common)
}

/// The index in `ports` that the device (a GPU) at PCI address `gpu` (`None`: unknown)
/// with ordinal `ordinal` uses: the nearest port, ties dealt out by the ordinal. `ports`
/// must not be empty.
pub fn nearest(sysfs: &Path, ports: &[Port], gpu: Option<&str>, ordinal: usize) -> usize {
    const FAR: usize = usize::MAX;
    let gpu_path = gpu.and_then(|g| pci_path(sysfs, g));
    let far: Vec<usize> = ports
        .iter()
        .map(|p| match (&gpu_path, rdma_path(sysfs, &p.device)) {
            (Some(g), Some(n)) => distance(g, &n),
            _ => FAR,
        })
        .collect();
    let best = far.iter().copied().min().unwrap_or(FAR);
    let ties: Vec<usize> = (0..ports.len()).filter(|&i| far[i] == best).collect();
    ties[ordinal % ties.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::PortState;
    use std::os::unix::fs::symlink;

    /// A sysfs tree: two root complexes, each with a switch holding a GPU and a NIC, and a
    /// third NIC straight under the first root complex.
    fn tree() -> PathBuf {
        let root = std::env::temp_dir().join(format!(
            "braid-sysfs-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&root);
        let devs = [
            (
                "0000:1b:00.0",
                "pci0000:17/0000:17:00.0/0000:18:00.0/0000:1b:00.0",
            ),
            (
                "0000:1c:00.0",
                "pci0000:17/0000:17:00.0/0000:18:00.0/0000:1c:00.0",
            ),
            ("0000:20:00.0", "pci0000:17/0000:17:02.0/0000:20:00.0"),
            (
                "0000:9b:00.0",
                "pci0000:97/0000:97:00.0/0000:98:00.0/0000:9b:00.0",
            ),
            (
                "0000:9c:00.0",
                "pci0000:97/0000:97:00.0/0000:98:00.0/0000:9c:00.0",
            ),
        ];
        for (addr, path) in devs {
            let real = root.join("devices").join(path);
            std::fs::create_dir_all(&real).unwrap();
            std::fs::create_dir_all(root.join("bus/pci/devices")).unwrap();
            symlink(&real, root.join("bus/pci/devices").join(addr)).unwrap();
        }
        for (nic, addr) in [
            ("mlx5_0", "0000:1c:00.0"),
            ("mlx5_1", "0000:9c:00.0"),
            ("mlx5_2", "0000:20:00.0"),
        ] {
            let dir = root.join("class/infiniband").join(nic);
            std::fs::create_dir_all(&dir).unwrap();
            symlink(root.join("bus/pci/devices").join(addr), dir.join("device")).unwrap();
        }
        root
    }

    fn ports(names: &[&str]) -> Vec<Port> {
        names
            .iter()
            .map(|n| Port {
                device: n.to_string(),
                port: 1,
                state: PortState::Active,
                gids: 1,
            })
            .collect()
    }

    #[test]
    fn each_gpu_takes_the_nic_behind_its_own_switch() {
        let root = tree();
        let all = ports(&["mlx5_0", "mlx5_1", "mlx5_2"]);
        // GPU 0 shares a switch with mlx5_0; GPU 1 (other socket) with mlx5_1, whatever
        // the ordinal and the case of the address.
        assert_eq!(nearest(&root, &all, Some("0000:1B:00.0"), 0), 0);
        assert_eq!(nearest(&root, &all, Some("0000:1b:00.0"), 5), 0);
        assert_eq!(nearest(&root, &all, Some("0000:9B:00.0"), 0), 1);
        // Without mlx5_0, GPU 0's next nearest is mlx5_2 (same root complex), not
        // mlx5_1 (another socket).
        let two = ports(&["mlx5_1", "mlx5_2"]);
        assert_eq!(nearest(&root, &two, Some("0000:1b:00.0"), 0), 1);
        let g = pci_path(&root, "0000:1b:00.0").unwrap();
        assert_eq!(g[0], "pci0000:17");
        assert_eq!(distance(&g, &rdma_path(&root, "mlx5_0").unwrap()), 2);
        assert_eq!(distance(&g, &rdma_path(&root, "mlx5_2").unwrap()), 5);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn equally_near_or_unknown_ports_are_dealt_out_by_the_gpu_ordinal() {
        let root = tree();
        // Ports sysfs does not know (or a GPU it does not know): all equally far.
        let all = ports(&["ib_a", "ib_b", "ib_c"]);
        let chosen: Vec<usize> = (0..6)
            .map(|o| nearest(&root, &all, Some("0000:1b:00.0"), o))
            .collect();
        assert_eq!(chosen, [0, 1, 2, 0, 1, 2]);
        let known = ports(&["mlx5_0", "mlx5_1"]);
        assert_eq!(nearest(&root, &known, None, 1), 1);
        assert_eq!(nearest(&root, &known, Some("0000:ff:00.0"), 0), 0);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
