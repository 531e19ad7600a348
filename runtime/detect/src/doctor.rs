//! `braid doctor`: the troubleshooting checklist as code. A [`Survey`] is what the doctor
//! looks at, as plain data: gathered from this machine ([`Survey::gather_with`]) or read
//! from a JSON description (a user's report, the tests). [`examine`] turns it into
//! findings, each with the concrete fix, and notes that are not problems.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The size of `/dev/shm` below which shared-memory rings of a node's ranks may not fit
/// (Docker's default is 64 MiB; NCCL's guide asks for `--shm-size=1g`).
pub const MIN_SHM_BYTES: u64 = 1 << 30;

/// Locked memory below which RDMA registrations fail (NCCL's guide: unlimited).
pub const MIN_MEMLOCK_BYTES: u64 = 64 << 20;

/// The environment variables the doctor reads.
pub const VARIABLES: [&str; 19] = [
    "NCCL_P2P_DISABLE",
    "BRAID_P2P_DISABLE",
    "NCCL_P2P_LEVEL",
    "NCCL_SHM_DISABLE",
    "BRAID_SHM_DISABLE",
    "NCCL_SOCKET_IFNAME",
    "BRAID_SOCKET_IFNAME",
    "NCCL_IB_DISABLE",
    "BRAID_IB_DISABLE",
    "NCCL_IB_HCA",
    "BRAID_IB_HCA",
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "RANK",
    "BRAID_BOOTSTRAP_ADDR",
    "BRAID_SECRET",
    "CUDA_VISIBLE_DEVICES",
];

/// A machine description; fields left out of a JSON file take their defaults.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Survey {
    /// The GPUs (`None`: none to look at, `no_gpu` says why).
    pub gpus: Option<GpuSurvey>,
    pub no_gpu: Option<String>,
    /// Bytes `/dev/shm` may hold, if it is mounted.
    pub shm_bytes: Option<u64>,
    /// The IOMMU: groups the kernel made, and whether it passes DMA through.
    pub iommu: Option<Iommu>,
    pub interfaces: Vec<Interface>,
    /// RDMA devices (`/sys/class/infiniband`).
    pub rdma_devices: Vec<String>,
    /// The locked-memory limit in bytes (`None`: unlimited).
    pub memlock_bytes: Option<u64>,
    /// The variables of [`VARIABLES`] that are set (BRAID_SECRET's value is not kept).
    pub env: BTreeMap<String, String>,
    /// Whether MASTER_ADDR resolves, when it is set.
    pub master_resolves: Option<bool>,
    /// Host memory copy rate measured now, GB/s.
    pub host_copy_gbps: Option<f64>,
    /// Copy rates measured on the GPUs' paths (the caller that can drive GPUs measures
    /// them: `braid doctor`), each beside what the topology says the path allows.
    pub rates: Vec<Rate>,
    /// Where a group this process started would listen for its ranks (the bootstrap's
    /// rule; the caller that links the runtime fills it: `braid doctor`).
    pub bootstrap: Option<Listen>,
    /// The job's ranks probed, where a launcher started this process as one of several
    /// (every rank runs the doctor): `braid doctor` fills it.
    pub peers: Option<Peers>,
}

/// Where the bootstrap would listen, and why there.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Listen {
    /// The address (`None`: the settings name none; `why` says what is wrong).
    pub addr: Option<String>,
    pub why: String,
}

/// What this rank found when it joined the job's other ranks and opened a link to each.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Peers {
    pub rank: u32,
    pub world: u32,
    /// Where rank 0 listens (`MASTER_ADDR:port`).
    pub root: String,
    /// Why the join failed (then nothing below was measured).
    pub error: Option<String>,
    /// Each rank's host, by rank.
    pub hosts: Vec<String>,
    /// Where each rank accepts links, by rank.
    pub addrs: Vec<String>,
    /// The links that could not be opened.
    pub failed: Vec<LinkFailure>,
    /// A barrier through rank 0, µs.
    pub barrier_us: Option<f64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkFailure {
    pub from: u32,
    pub to: u32,
    pub why: String,
}

/// One path's measured copy rate.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Rate {
    /// Which path: `GPU 0 -> GPU 1`, `host -> GPU 0`, `GPU 0 (device to device)`.
    pub what: String,
    /// Its kind: a path class (`NVL`, `PIX`, `PXB`, `PHB`, `SYS`), `host` (the GPU's
    /// PCIe link from pinned host memory) or `device` (within one GPU's memory).
    pub class: String,
    pub measured_gbps: f64,
    /// What the topology model says the path moves per direction (`None`: it does not
    /// say, as for a copy within one GPU).
    pub expected_gbps: Option<f64>,
}

/// A path measured below this share of what the topology expects is reported slow.
pub const SLOW_SHARE: f64 = 0.5;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuSurvey {
    pub models: Vec<String>,
    /// `peer_access[i][j]`: GPU `i` can access GPU `j`'s memory.
    pub peer_access: Vec<Vec<bool>>,
    /// `classes[i][j]`: the path class between GPUs `i` and `j` (`NVL`, `PIX`, ...).
    pub classes: Vec<Vec<String>>,
    /// Active NVLinks per GPU.
    pub nvlinks: Vec<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Iommu {
    pub groups: u32,
    pub passthrough: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Interface {
    pub name: String,
    pub up: bool,
    pub loopback: bool,
    /// Mb/s, when the driver says.
    pub speed_mbps: Option<u32>,
}

/// A problem and what to do about it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// A short stable name (`shm`, `p2p-disabled`, ...).
    pub check: String,
    pub what: String,
    pub fix: String,
}

/// What the doctor concluded.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    pub findings: Vec<Finding>,
    /// Facts worth knowing that are not problems.
    pub notes: Vec<String>,
}

fn finding(check: &str, what: String, fix: &str) -> Finding {
    Finding {
        check: check.into(),
        what,
        fix: fix.into(),
    }
}

fn gib(b: u64) -> String {
    if b >= 1 << 30 {
        format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
    } else {
        format!("{} MiB", b >> 20)
    }
}

/// The findings and notes for `s`.
pub fn examine(s: &Survey) -> Diagnosis {
    let mut d = Diagnosis::default();
    let env = |k: &str| s.env.get(k).map(String::as_str);
    let on = |k: &str| env(k).is_some_and(|v| v.trim() == "1");

    match &s.gpus {
        None => d.notes.push(format!(
            "no GPU to check: {}; the rest of the machine is checked",
            s.no_gpu.as_deref().unwrap_or("none found")
        )),
        Some(g) => {
            d.notes.push(format!(
                "{} GPU(s): {}",
                g.models.len(),
                g.models.join(", ")
            ));
            let n = g.models.len();
            for i in 0..n {
                for j in 0..n {
                    let class = g
                        .classes
                        .get(i)
                        .and_then(|r| r.get(j))
                        .map_or("", String::as_str);
                    let can = g
                        .peer_access
                        .get(i)
                        .and_then(|r| r.get(j))
                        .copied()
                        .unwrap_or(true);
                    if i < j && !can && matches!(class, "NVL" | "PIX" | "PXB") {
                        d.findings.push(finding(
                            "p2p-blocked",
                            format!("GPUs {i} and {j} are connected by {class} but cannot access each other's memory: traffic between them is staged through the host"),
                            "PCIe ACS on the switches between them redirects peer traffic: disable ACS (setpci on each switch port, or in the BIOS), and if an IOMMU is on, boot with iommu=pt",
                        ));
                    }
                }
            }
            let most = g.nvlinks.iter().copied().max().unwrap_or(0);
            for (i, &k) in g.nvlinks.iter().enumerate() {
                if most > 0 && k < most {
                    d.findings.push(finding(
                        "nvlink-down",
                        format!("GPU {i} has {k} active NVLinks, others {most}: its traffic is slower or goes over PCIe"),
                        "check `nvidia-smi nvlink -s` and `nvidia-smi -q -d ERRORS`; reset the GPU or reseat it; on NVSwitch systems check the fabric manager is running",
                    ));
                }
            }
            if n > 1 {
                if let Some(io) = &s.iommu {
                    if io.groups > 0 && !io.passthrough {
                        d.findings.push(finding(
                            "iommu",
                            format!("the IOMMU is on ({} groups) without passthrough: peer-to-peer DMA between GPUs is translated or blocked", io.groups),
                            "boot with iommu=pt (intel_iommu=on iommu=pt, or amd_iommu=on iommu=pt), or turn the IOMMU off for bare-metal jobs",
                        ));
                    }
                }
            }
        }
    }
    for var in ["NCCL_P2P_DISABLE", "BRAID_P2P_DISABLE"] {
        if on(var) {
            d.findings.push(finding(
                "p2p-disabled",
                format!("{var}=1: every connection between GPUs is staged through host memory"),
                "unset it unless peer access is known to be broken here (then fix that: see p2p-blocked)",
            ));
        }
    }
    for var in ["NCCL_SHM_DISABLE", "BRAID_SHM_DISABLE"] {
        if on(var) {
            d.findings.push(finding(
                "shm-disabled",
                format!("{var}=1: ranks of one host talk over TCP instead of shared memory"),
                "unset it",
            ));
        }
    }
    match s.shm_bytes {
        None => d.findings.push(finding(
            "shm",
            "/dev/shm is not mounted: ranks of one host cannot share memory".into(),
            "mount a tmpfs on /dev/shm (in Docker: --ipc=host or --shm-size=1g)",
        )),
        Some(b) if b < MIN_SHM_BYTES => d.findings.push(finding(
            "shm",
            format!("/dev/shm holds {}: shared-memory rings of a node's ranks may not fit, and calls fail with bus errors or no space", gib(b)),
            "give it at least 1 GiB (in Docker: --shm-size=1g or --ipc=host; otherwise mount -o remount,size=1G /dev/shm)",
        )),
        Some(b) => d.notes.push(format!("/dev/shm holds {}", gib(b))),
    }
    let up: Vec<&Interface> = s.interfaces.iter().filter(|i| i.up).collect();
    for var in ["BRAID_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"] {
        if let Some(v) = env(var) {
            let spec = match braid_topo::ifname::IfSpec::parse(v) {
                Ok(s) => s,
                Err(e) => {
                    d.findings.push(finding(
                        "socket-ifname",
                        format!("{var}: {e}"),
                        "name interfaces by prefix (`eth`), exclude with `^`, exact with `=`",
                    ));
                    continue;
                }
            };
            let chosen = up.iter().filter(|i| spec.selects(&i.name)).count();
            if chosen == 0 {
                d.findings.push(finding(
                    "socket-ifname",
                    format!(
                        "{var}={v} selects no interface that is up (up: {})",
                        up.iter()
                            .map(|i| i.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    "name an interface that is up (`ip -br link`), or unset it",
                ));
            }
        }
    }
    let world: u32 = env("WORLD_SIZE")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(1);
    if world > 1 {
        if up.iter().all(|i| i.loopback) {
            d.notes.push(
                "only the loopback interface is up: ranks on other hosts cannot reach this one"
                    .into(),
            );
        }
        if !s.env.contains_key("BRAID_SECRET") {
            d.findings.push(finding(
                "secret",
                format!("WORLD_SIZE={world} and BRAID_SECRET is not set: anyone who can reach the rendezvous port can join the job"),
                "set BRAID_SECRET to the same random value on every rank (for example `openssl rand -hex 32`), as docs/security.md says",
            ));
        }
        if s.master_resolves == Some(false) {
            d.findings.push(finding(
                "master-addr",
                format!(
                    "MASTER_ADDR={} does not resolve: no rank can reach rank 0",
                    env("MASTER_ADDR").unwrap_or("")
                ),
                "set MASTER_ADDR to rank 0's address or a name every host resolves",
            ));
        }
    }
    let up_names: Vec<String> = up
        .iter()
        .map(|i| match i.speed_mbps {
            Some(m) => format!("{} ({m} Mb/s)", i.name),
            None => i.name.clone(),
        })
        .collect();
    if !up_names.is_empty() {
        d.notes
            .push(format!("network interfaces up: {}", up_names.join(", ")));
    }
    // Where rank 0 of a group listens when the program makes the group's id
    // (`ncclGetUniqueId`: PyTorch, MPI programs); `braid rank` and the probe below
    // listen where MASTER_ADDR says.
    match &s.bootstrap {
        Some(Listen { addr: Some(a), why }) => {
            d.notes.push(format!(
                "a group whose id is made here (ncclGetUniqueId) listens on {a}: {why}"
            ));
            let local = env("LOCAL_WORLD_SIZE")
                .and_then(|v| v.trim().parse::<u32>().ok())
                .filter(|&l| l < world);
            let loopback = a
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
            if let (true, Some(local)) = (loopback, local) {
                d.findings.push(finding(
                    "bootstrap-loopback",
                    format!("the launcher says the job spans hosts (LOCAL_WORLD_SIZE={local} of WORLD_SIZE={world}), but a group's id made here names {a}: ranks on the other hosts cannot reach it"),
                    "set BRAID_SOCKET_IFNAME (or NCCL_SOCKET_IFNAME) to the interface the hosts share, or BRAID_BOOTSTRAP_ADDR to this host's address on it",
                ));
            }
        }
        Some(Listen { addr: None, why }) => d.findings.push(finding(
            "bootstrap-addr",
            format!("no group can start here: {why}"),
            "set BRAID_BOOTSTRAP_ADDR to an IP address of this host (or IP:PORT), or unset it",
        )),
        None => {}
    }
    if let Some(p) = &s.peers {
        examine_peers(p, &mut d);
    }
    // The variables as the runtime reads them (braid-ib): the HCA list well formed, and
    // naming a device this machine has (any of its ports).
    let var = |k: &str| env(k).map(String::from);
    let ib_off = braid_ib::hca::ib_disabled_in(var);
    match braid_ib::HcaSpec::from_vars(var).map(|s| s.filter(|_| !ib_off)) {
        Err(e) => d.findings.push(finding(
            "ib-hca",
            e,
            "list devices by name prefix with an optional port (`mlx5_0:1,mlx5_1`), exclude with `^`, exact names with `=`",
        )),
        Ok(Some(spec)) if !s.rdma_devices.iter().any(|dev| spec.selects_device(dev)) => {
            d.findings.push(finding(
                "ib-hca",
                format!(
                    "the HCA list {spec} (BRAID_IB_HCA / NCCL_IB_HCA) names no RDMA device of this machine (it has: {})",
                    if s.rdma_devices.is_empty() {
                        "none".to_string()
                    } else {
                        s.rdma_devices.join(", ")
                    }
                ),
                "name a device of `ls /sys/class/infiniband`, or unset it (or NCCL_IB_DISABLE=1 for sockets)",
            ))
        }
        Ok(_) => {}
    }
    if !s.rdma_devices.is_empty() && !ib_off {
        if let Some(b) = s.memlock_bytes.filter(|&b| b < MIN_MEMLOCK_BYTES) {
            d.findings.push(finding(
                "memlock",
                format!("RDMA devices ({}) but locked memory is limited to {}: registering buffers fails", s.rdma_devices.join(", "), gib(b)),
                "raise the limit: `ulimit -l unlimited` (limits.conf memlock, or docker --ulimit memlock=-1)",
            ));
        }
    }
    if let Some(r) = s.host_copy_gbps {
        d.notes
            .push(format!("host memory copies at {r:.1} GB/s (one thread)"));
    }
    for r in &s.rates {
        let expected = r.expected_gbps.map_or(String::new(), |e| {
            format!(" (the topology expects {e:.0} GB/s)")
        });
        d.notes.push(format!(
            "{} copies at {:.1} GB/s{expected}",
            r.what, r.measured_gbps
        ));
        if let Some(e) = r
            .expected_gbps
            .filter(|&e| r.measured_gbps < SLOW_SHARE * e)
        {
            d.findings.push(finding(
                "bandwidth",
                format!(
                    "{} moves {:.1} GB/s, {:.0} % of the {e:.0} GB/s its {} path should",
                    r.what,
                    r.measured_gbps,
                    100.0 * r.measured_gbps / e,
                    r.class
                ),
                slow_fix(&r.class),
            ));
        }
    }
    d
}

/// What to do about a slow path, by its kind.
/// The probe of the job's ranks: a join that failed, links that did not open, or how
/// the ranks lie over the hosts.
fn examine_peers(p: &Peers, d: &mut Diagnosis) {
    if p.world == 0 {
        d.findings.push(finding(
            "launch-env",
            format!(
                "the launcher's variables do not describe a job: {}",
                p.error.as_deref().unwrap_or("no world size")
            ),
            "set RANK and WORLD_SIZE together (torchrun), or run outside the launcher",
        ));
        return;
    }
    if let Some(e) = &p.error {
        d.findings.push(finding(
            "peers",
            format!(
                "rank {} of {} could not join the job's other ranks at {}: {e}",
                p.rank, p.world, p.root
            ),
            "run `braid doctor` on every rank under the same launcher; MASTER_ADDR must be rank 0's host, and MASTER_PORT + 1 (or BRAID_BOOTSTRAP_PORT) open to the other hosts (firewall)",
        ));
        return;
    }
    if !p.failed.is_empty() {
        const SHOWN: usize = 8;
        let mut what: Vec<String> = p
            .failed
            .iter()
            .take(SHOWN)
            .map(|f| {
                format!(
                    "rank {} ({}) to rank {} at {} ({}): {}",
                    f.from,
                    p.hosts.get(f.from as usize).map_or("?", String::as_str),
                    f.to,
                    p.addrs.get(f.to as usize).map_or("?", String::as_str),
                    p.hosts.get(f.to as usize).map_or("?", String::as_str),
                    f.why
                )
            })
            .collect();
        if p.failed.len() > SHOWN {
            what.push(format!("and {} more", p.failed.len() - SHOWN));
        }
        d.findings.push(finding(
            "peer-links",
            format!(
                "{} of the {} links between the job's ranks could not be opened: {}",
                p.failed.len(),
                u64::from(p.world) * u64::from(p.world.saturating_sub(1)) / 2,
                what.join("; ")
            ),
            "each rank accepts links on the interface it reached rank 0 through (or BRAID_SOCKET_IFNAME's): name an interface every host can reach with BRAID_SOCKET_IFNAME (the same on every rank), and open its ports between the hosts",
        ));
        return;
    }
    d.notes.push(format!(
        "this rank ({} of {}) joined the job at {} and every pair of its ranks opened a link: {}; a barrier through rank 0 takes {:.0} us; this rank accepts links on {}",
        p.rank,
        p.world,
        p.root,
        hosts_by_rank(&p.hosts),
        p.barrier_us.unwrap_or(0.0),
        p.addrs.get(p.rank as usize).map_or("?", String::as_str)
    ));
}

/// `a (ranks 0-7), b (ranks 8-15)`: each run of consecutive ranks on one host.
fn hosts_by_rank(hosts: &[String]) -> String {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for i in 0..hosts.len() {
        match runs.last_mut() {
            Some(r) if hosts[r.0] == hosts[i] => r.1 = i,
            _ => runs.push((i, i)),
        }
    }
    runs.iter()
        .map(|&(a, b)| {
            if a == b {
                format!("{} (rank {a})", hosts[a])
            } else {
                format!("{} (ranks {a}-{b})", hosts[a])
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn slow_fix(class: &str) -> &'static str {
    match class {
        "NVL" => "check the NVLinks (`nvidia-smi nvlink --status`: links down or degraded need a GPU reset or a reboot) and that NCCL_P2P_DISABLE / BRAID_P2P_DISABLE are unset; another job on these GPUs also takes bandwidth",
        "host" => "the GPU's PCIe link runs below its capability: compare current and maximum link generation and width (`nvidia-smi -q -d PCIE`); reseat the card or move it to a full-width slot, and check the BIOS's PCIe settings",
        "device" => "the GPU's own memory copies slowly: another process may be using the GPU (`nvidia-smi`), or its clocks are throttled (`nvidia-smi -q -d PERFORMANCE`)",
        _ => "peer traffic over PCIe is slow: ACS on the PCIe switches sends it through the root complex (disable ACS for the GPUs' switch ports, or set NCCL_P2P_LEVEL to avoid P2P there), and check each link's width (`nvidia-smi -q -d PCIE`)",
    }
}

/// This machine's GPUs as detection finds them, or why there are none to look at.
pub fn detect() -> Result<crate::Detection, String> {
    if !crate::cuda_driver_present() {
        return Err("no CUDA driver on this machine".into());
    }
    crate::detect_report().map_err(|e| e.to_string())
}

impl Survey {
    /// Looks at this machine, its GPUs as `detected` ([`detect`]; a caller that needs
    /// the detection too runs it once).
    pub fn gather_with(detected: Result<&crate::Detection, String>) -> Survey {
        let env: BTreeMap<String, String> = VARIABLES
            .iter()
            .filter_map(|&k| {
                std::env::var(k).ok().map(|v| {
                    (
                        k.to_string(),
                        if k == "BRAID_SECRET" {
                            "(set)".into()
                        } else {
                            v
                        },
                    )
                })
            })
            .collect();
        let master_resolves = env.get("MASTER_ADDR").map(|a| {
            use std::net::ToSocketAddrs;
            (a.as_str(), 0u16)
                .to_socket_addrs()
                .is_ok_and(|mut x| x.next().is_some())
        });
        let (gpus, no_gpu) = match detected {
            Ok(d) => (Some(gpus(d)), None),
            Err(why) => (None, Some(why)),
        };
        Survey {
            gpus,
            no_gpu,
            shm_bytes: shm_bytes(
                &std::fs::read_to_string("/proc/mounts").unwrap_or_default(),
                &std::fs::read_to_string("/proc/meminfo").unwrap_or_default(),
            ),
            iommu: iommu(
                Path::new("/sys/kernel/iommu_groups"),
                &std::fs::read_to_string("/proc/cmdline").unwrap_or_default(),
            ),
            interfaces: interfaces(Path::new("/sys/class/net")),
            rdma_devices: names(Path::new("/sys/class/infiniband")),
            memlock_bytes: memlock(
                &std::fs::read_to_string("/proc/self/limits").unwrap_or_default(),
            ),
            env,
            master_resolves,
            host_copy_gbps: Some(host_copy_gbps()),
            rates: Vec::new(),
            bootstrap: None,
            peers: None,
        }
    }
}

fn gpus(d: &crate::Detection) -> GpuSurvey {
    let t = &d.topology;
    let n = t.n_ranks();
    let nvlinks = (0..n)
        .map(|r| {
            let v = t.gpu_vertex(r);
            t.links()
                .filter(|(a, b, l)| {
                    (*a == v || *b == v) && matches!(l.kind, braid_topo::LinkKind::NvLink { .. })
                })
                .map(|(_, _, l)| match l.kind {
                    braid_topo::LinkKind::NvLink { count, .. } => count,
                    _ => 0,
                })
                .sum()
        })
        .collect();
    GpuSurvey {
        models: (0..n)
            .map(|r| t.gpu(r).model.clone().unwrap_or_else(|| "GPU".into()))
            .collect(),
        peer_access: d.peer_access.clone(),
        classes: (0..n)
            .map(|a| (0..n).map(|b| t.class(a, b).as_str().to_string()).collect())
            .collect(),
        nvlinks,
    }
}

/// The size of the tmpfs on `/dev/shm` from `/proc/mounts` (`size=` option, else the
/// tmpfs default of half the memory).
pub fn shm_bytes(mounts: &str, meminfo: &str) -> Option<u64> {
    let line = mounts
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("/dev/shm"))?;
    let opts = line.split_whitespace().nth(3).unwrap_or("");
    if let Some(size) = opts.split(',').find_map(|o| o.strip_prefix("size=")) {
        return parse_size(size);
    }
    let total_kib: u64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())?;
    Some(total_kib * 1024 / 2)
}

/// A tmpfs size: bytes, or with a `k`, `m`, `g` suffix.
fn parse_size(s: &str) -> Option<u64> {
    let (num, mult) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 1u64 << 10),
        'm' | 'M' => (&s[..s.len() - 1], 1 << 20),
        'g' | 'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

/// The locked-memory limit from `/proc/self/limits` (`None`: unlimited or unknown).
pub fn memlock(limits: &str) -> Option<u64> {
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

fn iommu(groups: &Path, cmdline: &str) -> Option<Iommu> {
    let n = std::fs::read_dir(groups).ok()?.count() as u32;
    let passthrough = cmdline
        .split_whitespace()
        .any(|w| w == "iommu=pt" || w == "iommu.passthrough=1");
    Some(Iommu {
        groups: n,
        passthrough,
    })
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn interfaces(dir: &Path) -> Vec<Interface> {
    names(dir)
        .into_iter()
        .map(|name| {
            let read = |f: &str| {
                std::fs::read_to_string(dir.join(&name).join(f))
                    .unwrap_or_default()
                    .trim()
                    .to_string()
            };
            let loopback = read("type") == "772";
            let state = read("operstate");
            Interface {
                up: state == "up" || (loopback && state != "down") || state == "unknown",
                loopback,
                speed_mbps: read("speed")
                    .parse::<i64>()
                    .ok()
                    .filter(|&s| s > 0)
                    .map(|s| s as u32),
                name,
            }
        })
        .collect()
}

/// One thread copying 64 MiB a few times: the best rate, GB/s.
fn host_copy_gbps() -> f64 {
    let n = 64 << 20;
    let src = vec![1u8; n];
    let mut dst = vec![0u8; n];
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t = std::time::Instant::now();
        dst.copy_from_slice(&src);
        std::hint::black_box(&mut dst);
        best = best.min(t.elapsed().as_secs_f64());
    }
    n as f64 / best / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthy() -> Survey {
        Survey {
            gpus: Some(GpuSurvey {
                models: vec!["NVIDIA H200".into(); 2],
                peer_access: vec![vec![true; 2]; 2],
                classes: vec![vec!["NVL".into(); 2]; 2],
                nvlinks: vec![18, 18],
            }),
            no_gpu: None,
            shm_bytes: Some(64 << 30),
            iommu: Some(Iommu {
                groups: 0,
                passthrough: false,
            }),
            interfaces: vec![
                Interface {
                    name: "lo".into(),
                    up: true,
                    loopback: true,
                    speed_mbps: None,
                },
                Interface {
                    name: "eth0".into(),
                    up: true,
                    loopback: false,
                    speed_mbps: Some(100_000),
                },
            ],
            rdma_devices: vec![],
            memlock_bytes: None,
            env: BTreeMap::new(),
            master_resolves: None,
            host_copy_gbps: Some(10.0),
            rates: vec![
                Rate {
                    what: "GPU 0 -> GPU 1".into(),
                    class: "NVL".into(),
                    measured_gbps: 380.0,
                    expected_gbps: Some(478.0),
                },
                Rate {
                    what: "GPU 0 (device to device)".into(),
                    class: "device".into(),
                    measured_gbps: 2100.0,
                    expected_gbps: None,
                },
            ],
            bootstrap: Some(Listen {
                addr: Some("127.0.0.1".into()),
                why: "loopback".into(),
            }),
            peers: None,
        }
    }

    fn checks(s: &Survey) -> Vec<String> {
        examine(s).findings.into_iter().map(|f| f.check).collect()
    }

    #[test]
    fn a_healthy_machine_has_no_findings() {
        assert_eq!(checks(&healthy()), Vec::<String>::new());
    }

    #[test]
    fn a_path_below_half_its_expected_rate_is_found_with_the_fix_for_its_kind() {
        let mut s = healthy();
        s.rates[0].measured_gbps = 120.0;
        s.rates.push(Rate {
            what: "host -> GPU 1".into(),
            class: "host".into(),
            measured_gbps: 13.0,
            expected_gbps: Some(63.0),
        });
        let d = examine(&s);
        let slow: Vec<&Finding> = d
            .findings
            .iter()
            .filter(|f| f.check == "bandwidth")
            .collect();
        assert_eq!(slow.len(), 2, "{d:?}");
        assert!(slow[0].what.contains("GPU 0 -> GPU 1") && slow[0].fix.contains("nvlink"));
        assert!(slow[1].what.contains("host -> GPU 1") && slow[1].fix.contains("PCIE"));
        // Measured rates are notes either way; a path without an expectation is never slow.
        assert!(d
            .notes
            .iter()
            .any(|n| n.contains("GPU 0 (device to device) copies at 2100.0")));
        s.rates[0].measured_gbps = 250.0;
        s.rates[1].measured_gbps = 1.0;
        s.rates.pop();
        assert_eq!(checks(&s), Vec::<String>::new());
    }

    #[test]
    fn p2p_disabled_and_a_tiny_shm_are_both_found() {
        let mut s = healthy();
        s.env.insert("NCCL_P2P_DISABLE".into(), "1".into());
        s.shm_bytes = Some(64 << 20);
        let d = examine(&s);
        let names: Vec<&str> = d.findings.iter().map(|f| f.check.as_str()).collect();
        assert_eq!(names, ["p2p-disabled", "shm"]);
        assert!(
            d.findings[1].what.contains("64 MiB") && d.findings[1].fix.contains("--shm-size=1g")
        );
    }

    #[test]
    fn blocked_peers_down_links_and_an_iommu_are_found() {
        let mut s = healthy();
        let g = s.gpus.as_mut().unwrap();
        g.classes = vec![vec!["PIX".into(); 2]; 2];
        g.peer_access[0][1] = false;
        g.nvlinks = vec![18, 12];
        s.iommu = Some(Iommu {
            groups: 40,
            passthrough: false,
        });
        assert_eq!(checks(&s), ["p2p-blocked", "nvlink-down", "iommu"]);
        s.iommu = Some(Iommu {
            groups: 40,
            passthrough: true,
        });
        assert_eq!(checks(&s), ["p2p-blocked", "nvlink-down"]);
    }

    #[test]
    fn the_bootstrap_address_is_a_note_alone_and_a_finding_when_unusable() {
        let mut s = healthy();
        let d = examine(&s);
        assert!(d
            .notes
            .iter()
            .any(|n| n.contains("listens on 127.0.0.1: loopback")));
        assert!(d
            .notes
            .iter()
            .any(|n| n == "network interfaces up: lo, eth0 (100000 Mb/s)"));
        s.bootstrap = Some(Listen {
            addr: None,
            why: "BRAID_BOOTSTRAP_ADDR=\"x\" is neither an IP address nor IP:PORT".into(),
        });
        assert_eq!(checks(&s), ["bootstrap-addr"]);
        // A job across hosts whose group id would name loopback.
        let mut across = healthy();
        across.env.insert("WORLD_SIZE".into(), "16".into());
        across.env.insert("LOCAL_WORLD_SIZE".into(), "8".into());
        across.env.insert("BRAID_SECRET".into(), "(set)".into());
        assert_eq!(checks(&across), ["bootstrap-loopback"]);
        across.bootstrap = Some(Listen {
            addr: Some("10.0.0.7".into()),
            why: "interface eth0".into(),
        });
        assert!(checks(&across).is_empty());
        assert!(examine(&s).findings[0]
            .what
            .contains("BRAID_BOOTSTRAP_ADDR=\"x\""));
    }

    #[test]
    fn the_probe_of_the_ranks_reports_a_failed_join_and_links_that_did_not_open() {
        let mut s = healthy();
        s.env.insert("WORLD_SIZE".into(), "4".into());
        s.env.insert("BRAID_SECRET".into(), "(set)".into());
        let ok = Peers {
            rank: 1,
            world: 4,
            root: "10.0.0.1:29501".into(),
            error: None,
            hosts: ["a", "a", "b", "b"].map(String::from).to_vec(),
            addrs: [
                "10.0.0.1:40000",
                "10.0.0.1:40001",
                "10.0.1.2:40000",
                "10.0.1.2:40001",
            ]
            .map(String::from)
            .to_vec(),
            failed: vec![],
            barrier_us: Some(85.0),
        };
        s.peers = Some(ok.clone());
        let d = examine(&s);
        assert!(d.findings.is_empty(), "{:?}", d.findings);
        let note = d
            .notes
            .iter()
            .find(|n| n.contains("joined the job"))
            .unwrap();
        assert!(note.contains("a (ranks 0-1), b (ranks 2-3)"), "{note}");
        assert!(
            note.contains("85 us") && note.contains("on 10.0.0.1:40001"),
            "{note}"
        );

        s.peers = Some(Peers {
            failed: vec![LinkFailure {
                from: 0,
                to: 3,
                why: "connection timed out".into(),
            }],
            ..ok.clone()
        });
        let d = examine(&s);
        assert_eq!(checks(&s), ["peer-links"]);
        let f = &d.findings[0].what;
        assert!(f.starts_with("1 of the 6 links"), "{f}");
        assert!(
            f.contains("rank 0 (a) to rank 3 at 10.0.1.2:40001 (b): connection timed out"),
            "{f}"
        );
        assert!(d.findings[0].fix.contains("BRAID_SOCKET_IFNAME"));

        s.peers = Some(Peers {
            error: Some("timed out waiting for rank 0".into()),
            hosts: vec![],
            addrs: vec![],
            barrier_us: None,
            ..ok
        });
        let d = examine(&s);
        assert_eq!(checks(&s), ["peers"]);
        assert!(d.findings[0].what.contains("at 10.0.0.1:29501: timed out"));
    }

    #[test]
    fn job_settings_are_checked_under_a_launcher() {
        let mut s = healthy();
        s.env.insert("WORLD_SIZE".into(), "4".into());
        s.env.insert("MASTER_ADDR".into(), "nowhere.invalid".into());
        s.env.insert("NCCL_SOCKET_IFNAME".into(), "ib".into());
        s.master_resolves = Some(false);
        s.rdma_devices = vec!["mlx5_0".into()];
        s.memlock_bytes = Some(64 << 10);
        assert_eq!(
            checks(&s),
            ["socket-ifname", "secret", "master-addr", "memlock"]
        );
        s.env
            .insert("NCCL_SOCKET_IFNAME".into(), "^docker,lo".into());
        s.env.insert("BRAID_SECRET".into(), "(set)".into());
        assert_eq!(checks(&s), ["master-addr", "memlock"]);
    }

    #[test]
    fn the_hca_list_must_parse_and_name_a_device_here() {
        let mut s = healthy();
        s.rdma_devices = vec!["mlx5_0".into(), "mlx5_1".into()];
        s.env.insert("NCCL_IB_HCA".into(), "mlx5_1:1".into());
        assert!(checks(&s).is_empty(), "{:?}", examine(&s).findings);
        s.env.insert("NCCL_IB_HCA".into(), "=mlx5_2".into());
        let d = examine(&s);
        assert_eq!(checks(&s), ["ib-hca"]);
        assert!(
            d.findings[0].what.contains("it has: mlx5_0, mlx5_1"),
            "{:?}",
            d.findings
        );
        s.env.insert("NCCL_IB_HCA".into(), "mlx5_0:zero".into());
        assert_eq!(checks(&s), ["ib-hca"]);
        // BRAID_IB_HCA wins; NCCL_IB_DISABLE turns the check off.
        s.env.insert("BRAID_IB_HCA".into(), "^mlx5_0".into());
        assert!(checks(&s).is_empty());
        s.env.insert("BRAID_IB_HCA".into(), "mlx5_9".into());
        s.env.insert("NCCL_IB_DISABLE".into(), "1".into());
        assert!(checks(&s).is_empty());
    }

    #[test]
    fn no_gpu_is_a_note_and_the_rest_is_still_checked() {
        let mut s = healthy();
        s.gpus = None;
        s.no_gpu = Some("no CUDA driver on this machine".into());
        s.shm_bytes = None;
        let d = examine(&s);
        assert!(d.notes[0].contains("no CUDA driver"));
        assert_eq!(d.findings.len(), 1);
        assert_eq!(d.findings[0].check, "shm");
    }

    #[test]
    fn shm_and_memlock_are_read_from_proc() {
        let mounts = "proc /proc proc rw 0 0\nshm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=65536k,inode64 0 0\n";
        assert_eq!(shm_bytes(mounts, ""), Some(64 << 20));
        let default = "tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0\n";
        assert_eq!(
            shm_bytes(default, "MemTotal:       16384000 kB\n"),
            Some(16384000 * 1024 / 2)
        );
        assert_eq!(shm_bytes("proc /proc proc rw 0 0\n", ""), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax locked memory         8388608              8388608              bytes\n";
        assert_eq!(memlock(limits), Some(8 << 20));
        assert_eq!(memlock(&limits.replace("8388608 ", "unlimited ")), None);
    }
}
