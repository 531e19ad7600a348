//! A human-readable account of a topology (what `braid topo` shows as comments).

use std::fmt::Write as _;

use crate::{LinkKind, PathClass, Topology};

/// Up to this many ranks the summary prints the rank-by-rank class matrix.
const MATRIX_MAX_RANKS: u32 = 16;
/// Up to this many ranks the path statistics cover all pairs; above, only the
/// pairs from the first rank of each node (enough to see every class a
/// preset-like machine has, without computing a million paths).
const ALL_PAIRS_MAX_RANKS: u32 = 64;

impl Topology {
    /// Ranks and nodes, vertex and link counts (link kinds with bandwidth and
    /// latency), path statistics per class, the class matrix for up to 16
    /// ranks, and the fingerprint. Several lines, no trailing newline.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        let (n, m) = (self.n_ranks(), self.n_nodes());
        let per_node = match self.uniform_g() {
            Some(g) => format!("{g} GPU{} per node", plural(g)),
            None => "nodes of different sizes".into(),
        };
        writeln!(
            out,
            "topology {}: {n} rank{} on {m} node{}, {per_node}",
            self.name(),
            plural(n),
            plural(m)
        )
        .unwrap();
        self.write_nodes(&mut out);
        self.write_vertices(&mut out);
        self.write_links(&mut out);
        self.write_paths(&mut out);
        if n <= MATRIX_MAX_RANKS {
            self.write_matrix(&mut out);
        }
        write!(out, "fingerprint {}", self.fingerprint()).unwrap();
        out
    }

    fn write_nodes(&self, out: &mut String) {
        // Runs of consecutive nodes of one size, so a 128-node cluster is one line.
        let sizes = self.node_sizes();
        let mut start = 0;
        while start < sizes.len() {
            let end = (start..sizes.len())
                .find(|&k| sizes[k] != sizes[start])
                .unwrap_or(sizes.len());
            let first = self.ranks_of_node(start as u32).start;
            let last = self.ranks_of_node(end as u32 - 1).end - 1;
            if end - start == 1 {
                writeln!(out, "node {start}: ranks {}", range(first, last)).unwrap();
            } else {
                let g = sizes[start];
                writeln!(
                    out,
                    "nodes {start}-{}: {g} GPU{} each, ranks {}",
                    end - 1,
                    plural(g),
                    range(first, last)
                )
                .unwrap();
            }
            start = end;
        }
    }

    fn write_vertices(&self, out: &mut String) {
        let mut counts: Vec<(&str, u32)> = Vec::new();
        for (_, v) in self.vertices() {
            let k = v.kind.keyword();
            match counts.iter_mut().find(|(name, _)| *name == k) {
                Some((_, c)) => *c += 1,
                None => counts.push((k, 1)),
            }
        }
        let list: Vec<String> = counts.iter().map(|(k, c)| format!("{c} {k}")).collect();
        writeln!(out, "vertices: {}", list.join(", ")).unwrap();
    }

    fn write_links(&self, out: &mut String) {
        let mut groups: Vec<(LinkKind, f64, f64, u32)> = Vec::new();
        for (_, _, l) in self.links() {
            let same = |g: &&mut (LinkKind, f64, f64, u32)| {
                g.0 == l.kind && g.1 == l.bandwidth_gbps && g.2 == l.latency_us
            };
            match groups.iter_mut().find(same) {
                Some(g) => g.3 += 1,
                None => groups.push((l.kind, l.bandwidth_gbps, l.latency_us, 1)),
            }
        }
        writeln!(out, "links:").unwrap();
        for (kind, bw, lat, count) in groups {
            writeln!(
                out,
                "  {count:>5} x {:<22} {:>9} GB/s {:>6} us",
                describe(kind),
                num(bw),
                num(lat)
            )
            .unwrap();
        }
    }

    fn write_paths(&self, out: &mut String) {
        let n = self.n_ranks();
        let sources: Vec<u32> = if n <= ALL_PAIRS_MAX_RANKS {
            (0..n).collect()
        } else {
            (0..self.n_nodes())
                .map(|k| self.ranks_of_node(k).start)
                .collect()
        };
        let scope = if n <= ALL_PAIRS_MAX_RANKS {
            "all pairs"
        } else {
            "from the first rank of each node"
        };
        let mut stats: Vec<Option<ClassStats>> = vec![None; PathClass::ALL.len()];
        for &a in &sources {
            for b in (0..n).filter(|&b| b != a) {
                let p = self.path(a, b);
                let s = stats[p.class as usize].get_or_insert(ClassStats {
                    pairs: 0,
                    bw: (f64::MAX, 0.0),
                    lat: (f64::MAX, 0.0),
                });
                s.pairs += 1;
                s.bw = (s.bw.0.min(p.bandwidth_gbps), s.bw.1.max(p.bandwidth_gbps));
                s.lat = (s.lat.0.min(p.latency_us), s.lat.1.max(p.latency_us));
            }
        }
        writeln!(out, "paths between ranks ({scope}):").unwrap();
        if n == 1 {
            writeln!(out, "  none: a single rank").unwrap();
        }
        for (class, s) in PathClass::ALL.iter().zip(stats) {
            if let Some(ClassStats { pairs, bw, lat }) = s {
                let p2p = if class.is_p2p_direct() {
                    "direct"
                } else {
                    "not direct"
                };
                writeln!(
                    out,
                    "  {class} {pairs:>7} pair{} {:>17} GB/s {:>11} us  ({p2p})",
                    if pairs == 1 { " " } else { "s" },
                    span(bw.0, bw.1),
                    span(lat.0, lat.1)
                )
                .unwrap();
            }
        }
    }

    fn write_matrix(&self, out: &mut String) {
        let n = self.n_ranks();
        writeln!(out, "path classes:").unwrap();
        let mut header = String::from("      ");
        for b in 0..n {
            write!(header, "{b:>4}").unwrap();
        }
        writeln!(out, "{header}").unwrap();
        for a in 0..n {
            let mut row = format!("  {a:>4}");
            for b in 0..n {
                let cell = if a == b {
                    "-".to_string()
                } else {
                    self.path(a, b).class.to_string()
                };
                write!(row, "{cell:>4}").unwrap();
            }
            writeln!(out, "{row}").unwrap();
        }
    }
}

/// The paths of one class: how many, and the (min, max) bandwidth and latency.
#[derive(Clone, Copy)]
struct ClassStats {
    pairs: u64,
    bw: (f64, f64),
    lat: (f64, f64),
}

/// A link kind in words.
fn describe(kind: LinkKind) -> String {
    match kind {
        LinkKind::NvLink { count, gen } => format!("NVLink{gen} x{count}"),
        LinkKind::Pcie { gen, width } => format!("PCIe Gen{gen} x{width}"),
        LinkKind::Smp => "SMP (CPU-CPU)".into(),
        LinkKind::InfiniBand { rate_gbps } => format!("InfiniBand {rate_gbps} Gb/s"),
        LinkKind::Roce { rate_gbps } => format!("RoCE {rate_gbps} Gb/s"),
        LinkKind::Ethernet { rate_gbps } => format!("Ethernet {rate_gbps} Gb/s"),
    }
}

fn span(lo: f64, hi: f64) -> String {
    if num(lo) == num(hi) {
        num(lo)
    } else {
        format!("{}-{}", num(lo), num(hi))
    }
}

/// `x` to at most three decimals, without trailing zeros: sums of latencies
/// like 1.2999999999999998 read as 1.3.
fn num(x: f64) -> String {
    let s = format!("{x:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn range(first: u32, last: u32) -> String {
    if first == last {
        first.to_string()
    } else {
        format!("{first}-{last}")
    }
}

fn plural(n: u32) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
