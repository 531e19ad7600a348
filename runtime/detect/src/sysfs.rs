//! Reading the PCI tree, NUMA nodes and NICs from sysfs.
//!
//! The reader takes a root directory (`/` on a real machine) so tests can
//! point it at a fake tree; the parsers are pure functions over file contents.

use std::fs;
use std::path::{Component, Path, PathBuf};

use crate::facts::{NicFacts, NicKind, PciHop, PciPlacement, PcieLink};

/// A view of sysfs under `root`.
#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
}

impl Sysfs {
    /// The machine's own sysfs.
    pub fn system() -> Self {
        Sysfs::at("/")
    }

    /// A sysfs tree under `root` (its `sys/` directory holds what `/sys` would).
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Sysfs { root: root.into() }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// The online NUMA nodes, empty when unknown.
    pub fn numa_nodes(&self) -> Vec<u32> {
        read(&self.path("sys/devices/system/node/online"))
            .map(|s| parse_node_list(&s))
            .unwrap_or_default()
    }

    /// Where the PCI device `bus` (`0000:19:00.0`) sits; empty when sysfs does not
    /// show it (a container without `/sys/bus/pci`, say).
    pub fn placement(&self, bus: &str) -> PciPlacement {
        let dev = self.path(&format!("sys/bus/pci/devices/{bus}"));
        match fs::canonicalize(&dev) {
            Ok(real) => placement_of(&real),
            Err(_) => PciPlacement::default(),
        }
    }

    /// The RDMA devices (InfiniBand or RoCE) and the physical network
    /// interfaces that are not RDMA devices, with a known rate.
    pub fn nics(&self) -> Vec<NicFacts> {
        let mut nics = Vec::new();
        for (name, dir) in entries(&self.path("sys/class/infiniband")) {
            let Some(pci) = pci_device(&dir.join("device")) else {
                continue;
            };
            let Some(port) = best_port(&dir.join("ports")) else {
                continue;
            };
            let rate = read(&port.join("rate")).and_then(|s| parse_ib_rate(&s));
            let layer = read(&port.join("link_layer")).unwrap_or_default();
            if let Some(rate_gbps) = rate {
                nics.push(NicFacts {
                    device: name,
                    bus: pci.0,
                    pci: pci.1,
                    kind: parse_link_layer(&layer),
                    rate_gbps,
                });
            }
        }
        for (name, dir) in entries(&self.path("sys/class/net")) {
            let Some((bus, pci)) = pci_device(&dir.join("device")) else {
                continue; // virtual: lo, veth, bridges
            };
            if nics.iter().any(|n| n.bus == bus) {
                continue; // the Ethernet face of an RDMA device
            }
            if let Some(rate_gbps) = read(&dir.join("speed")).and_then(|s| parse_net_speed(&s)) {
                nics.push(NicFacts {
                    device: name,
                    bus,
                    pci,
                    kind: NicKind::Ethernet,
                    rate_gbps,
                });
            }
        }
        nics
    }
}

/// The bus id and placement of the PCI device a `device` symlink points to.
fn pci_device(link: &Path) -> Option<(String, PciPlacement)> {
    let real = fs::canonicalize(link).ok()?;
    let bus = real.file_name()?.to_str()?.to_string();
    is_pci_addr(&bus).then(|| (bus, placement_of(&real)))
}

/// The placement of the device whose sysfs directory is `real`.
fn placement_of(real: &Path) -> PciPlacement {
    let chain = pci_chain(real)
        .into_iter()
        .map(|(addr, dir)| {
            let link = if addr.starts_with("pci") {
                None
            } else {
                let speed = read(&dir.join("max_link_speed")).and_then(|s| parse_link_speed(&s));
                let width = read(&dir.join("max_link_width")).and_then(|s| parse_link_width(&s));
                speed.zip(width).map(|(gen, width)| PcieLink { gen, width })
            };
            PciHop { addr, link }
        })
        .collect();
    let numa = read(&real.join("numa_node")).and_then(|s| parse_numa(&s));
    PciPlacement { numa, chain }
}

/// The first active port of an RDMA device, else its first port.
fn best_port(ports: &Path) -> Option<PathBuf> {
    let all = entries(ports);
    let active = all
        .iter()
        .find(|(_, p)| read(&p.join("state")).is_some_and(|s| s.contains("ACTIVE")));
    active.or(all.first()).map(|(_, p)| p.clone())
}

/// The entries of a directory, sorted by name; empty when it cannot be read.
fn entries(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut out: Vec<(String, PathBuf)> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.to_string(), e.path())))
        .collect();
    out.sort();
    out
}

fn read(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok()
}

/// The PCI components of a canonical sysfs device path, with the directory
/// of each: from the root complex (`pci0000:15`) to the device.
pub fn pci_chain(real: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let mut dir = PathBuf::new();
    for c in real.components() {
        dir.push(c);
        let Component::Normal(name) = c else { continue };
        let Some(name) = name.to_str() else { continue };
        let root_complex = name.strip_prefix("pci").is_some_and(is_pci_root);
        if root_complex {
            out.clear(); // the tree starts here
            out.push((name.to_string(), dir.clone()));
        } else if !out.is_empty() && is_pci_addr(name) {
            out.push((name.to_string(), dir.clone()));
        } else if !out.is_empty() {
            break; // below the device (a driver directory, say)
        }
    }
    out
}

/// `DDDD:BB` (hex).
fn is_pci_root(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 7
        && b[4] == b':'
        && s.chars()
            .filter(|&c| c != ':')
            .all(|c| c.is_ascii_hexdigit())
}

/// `DDDD:BB:DD.F` (hex).
pub fn is_pci_addr(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && s.chars()
            .filter(|c| !matches!(c, ':' | '.'))
            .all(|c| c.is_ascii_hexdigit())
}

/// A bus id in sysfs form: NVML writes `00000000:19:00.0`, CUDA `0000:19:00.0`,
/// both possibly upper-case.
pub fn normalize_bus_id(s: &str) -> Option<String> {
    let s = s.trim().trim_end_matches('\0').to_ascii_lowercase();
    let (domain, rest) = s.split_once(':')?;
    let domain = u32::from_str_radix(domain, 16).ok()?;
    let out = format!("{domain:04x}:{rest}");
    is_pci_addr(&out).then_some(out)
}

/// `numa_node`: `-1` means "no NUMA information".
pub fn parse_numa(s: &str) -> Option<u32> {
    s.trim().parse().ok()
}

/// `max_link_speed` (`32.0 GT/s PCIe`, `8.0 GT/s`) to the PCIe generation.
pub fn parse_link_speed(s: &str) -> Option<u32> {
    let gts: f64 = s.split_whitespace().next()?.parse().ok()?;
    [2.5, 5.0, 8.0, 16.0, 32.0, 64.0]
        .iter()
        .position(|&g| (gts - g).abs() < 0.01)
        .map(|i| i as u32 + 1)
}

/// `max_link_width` (`16`); 0 means unknown.
pub fn parse_link_width(s: &str) -> Option<u32> {
    s.trim().parse().ok().filter(|&w| w > 0)
}

/// An InfiniBand port `rate` (`400 Gb/sec (4X NDR)`) in Gb/s, rounded up.
pub fn parse_ib_rate(s: &str) -> Option<u32> {
    let gbits: f64 = s.split_whitespace().next()?.parse().ok()?;
    (gbits > 0.0).then(|| gbits.ceil() as u32)
}

/// A network interface `speed` in Mb/s (`100000`; `-1` when down) to Gb/s,
/// rounded up.
pub fn parse_net_speed(s: &str) -> Option<u32> {
    let mbits: i64 = s.trim().parse().ok()?;
    (mbits > 0).then(|| (mbits as u64).div_ceil(1000) as u32)
}

/// An RDMA port `link_layer`: Ethernet means RoCE.
pub fn parse_link_layer(s: &str) -> NicKind {
    if s.trim().eq_ignore_ascii_case("ethernet") {
        NicKind::Roce
    } else {
        NicKind::InfiniBand
    }
}

/// A node list (`0-1,4`) as written in `/sys/devices/system/node/online`.
pub fn parse_node_list(s: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(lo), Ok(hi)) = (lo.trim().parse::<u32>(), hi.trim().parse::<u32>()) {
            out.extend(lo..=hi);
        }
    }
    out
}
