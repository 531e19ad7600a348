//! `braid doctor`'s bandwidth test: a short copy on each kind of GPU path this machine
//! has, timed as `braid perf`'s roofline is (the faster of a copy-engine copy and an SM
//! copy kernel, back to back between CUDA events), beside what the detected topology says
//! the path moves: within each GPU (device to device: a note, the topology has no figure
//! for it), from pinned host memory to each GPU (its PCIe link), and between each pair of
//! GPUs with peer access (their path's bottleneck link).

use braid_detect::doctor::Rate;
use braid_topo::{LinkKind, Topology};

/// Bytes each test copies: large enough for the link's rate, small enough to be quick.
const BYTES: usize = 256 << 20;

/// The rates of the GPU paths `d` detected, or why they could not be measured.
pub fn measure(d: &braid_detect::Detection) -> Result<Vec<Rate>, String> {
    let topo = &d.topology;
    let n = topo.n_ranks() as usize;
    let mut copier = braid_cuda::roofline::Copier::new(n).map_err(|e| e.to_string())?;
    let gbps = |t: std::time::Duration| BYTES as f64 / t.as_secs_f64().max(1e-12) / 1e9;
    let mut rates = Vec::new();
    for g in 0..n {
        let t = copier.time(g, g, BYTES, 10, 3).map_err(|e| e.to_string())?;
        rates.push(Rate {
            what: format!("GPU {g} (device to device)"),
            class: "device".into(),
            measured_gbps: gbps(t.best()),
            expected_gbps: None,
        });
        let t = copier
            .time_from_host(g, BYTES, 10, 3)
            .map_err(|e| e.to_string())?;
        rates.push(Rate {
            what: format!("host -> GPU {g}"),
            class: "host".into(),
            measured_gbps: gbps(t),
            expected_gbps: pcie_link_gbps(topo, g as u32),
        });
    }
    for a in 0..n {
        for b in 0..n {
            let peer = d.peer_access.get(a).and_then(|r| r.get(b)).copied();
            if a == b || peer != Some(true) {
                continue;
            }
            let t = copier.time(a, b, BYTES, 10, 3).map_err(|e| e.to_string())?;
            let path = topo.path(a as u32, b as u32);
            rates.push(Rate {
                what: format!("GPU {a} -> GPU {b}"),
                class: path.class.as_str().to_string(),
                measured_gbps: gbps(t.best()),
                expected_gbps: Some(path.bandwidth_gbps),
            });
        }
    }
    Ok(rates)
}

/// The bandwidth of GPU `rank`'s own PCIe link, from the topology.
fn pcie_link_gbps(topo: &Topology, rank: u32) -> Option<f64> {
    let v = topo.gpu_vertex(rank);
    topo.links()
        .filter(|(a, b, l)| (*a == v || *b == v) && matches!(l.kind, LinkKind::Pcie { .. }))
        .map(|(_, _, l)| l.bandwidth_gbps)
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
}
