//! Printing a topology in the file format (canonical order, exact numbers).

use std::fmt::Write as _;

use super::HEADER;
use crate::{Link, LinkKind, Topology, Vertex, VertexKind};

impl Topology {
    /// The topology in the file format (see [`crate::text`]); parsing it with
    /// [`Topology::parse_text`] gives back an equal topology, and printing that
    /// gives back the same text.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        out.push_str(HEADER);
        out.push('\n');
        let sections = (0..self.n_nodes()).map(Some).chain([None]);
        for node in sections {
            let mut section = String::new();
            if let Some(k) = node {
                writeln!(section, "node {k}").unwrap();
            }
            for (_, v) in self.vertices().filter(|(_, v)| v.node == node) {
                write_vertex(&mut section, v);
            }
            for (a, b, link) in self.links() {
                let (va, vb) = (self.vertex(a), self.vertex(b));
                let link_node = if va.node == vb.node { va.node } else { None };
                if link_node == node {
                    write_link(&mut section, &va.name, &vb.name, link);
                }
            }
            if !section.is_empty() {
                out.push('\n');
                out.push_str(&section);
            }
        }
        out
    }

    /// [`Topology::to_text`] with [`Topology::summary`] as comments after the
    /// header: what `braid topo` prints, and still a valid topology file.
    pub fn to_annotated_text(&self) -> String {
        let text = self.to_text();
        let body = text
            .strip_prefix(HEADER)
            .and_then(|rest| rest.strip_prefix('\n'))
            .expect("to_text starts with the header line");
        let mut out = String::from(HEADER);
        out.push('\n');
        for line in self.summary().lines() {
            if line.is_empty() {
                out.push_str("#\n");
            } else {
                writeln!(out, "# {line}").unwrap();
            }
        }
        out.push_str(body);
        out
    }
}

fn write_vertex(out: &mut String, v: &Vertex) {
    let mut line = format!("{} {}", v.kind.keyword(), v.name);
    if let Some(node) = v.node {
        write!(line, " node={node}").unwrap();
    }
    let mut opt = |key: &str, value: Option<String>| {
        if let Some(value) = value {
            write!(line, " {key}={}", quote(&value)).unwrap();
        }
    };
    match &v.kind {
        VertexKind::Gpu(g) => {
            opt("rank", Some(g.rank.to_string()));
            opt("numa", g.numa.map(|n| n.to_string()));
            opt("bus", g.bus.clone());
            opt("model", g.model.clone());
        }
        VertexKind::Cpu(c) => {
            opt("numa", Some(c.numa.to_string()));
            opt("model", c.model.clone());
        }
        VertexKind::Nic(n) => {
            opt("numa", n.numa.map(|n| n.to_string()));
            opt("bus", n.bus.clone());
            opt("dev", n.device.clone());
        }
        VertexKind::PcieSwitch { bus } | VertexKind::HostBridge { bus } => opt("bus", bus.clone()),
        VertexKind::NvSwitch | VertexKind::Network => {}
    }
    out.push_str(&line);
    out.push('\n');
}

fn write_link(out: &mut String, a: &str, b: &str, link: &Link) {
    write!(out, "link {a} {b} kind={}", link.kind.keyword()).unwrap();
    match link.kind {
        LinkKind::NvLink { count, gen } => write!(out, " count={count} gen={gen}").unwrap(),
        LinkKind::Pcie { gen, width } => write!(out, " gen={gen} width={width}").unwrap(),
        LinkKind::Smp => {}
        LinkKind::InfiniBand { rate_gbps }
        | LinkKind::Roce { rate_gbps }
        | LinkKind::Ethernet { rate_gbps } => write!(out, " rate={rate_gbps}").unwrap(),
    }
    // `{}` on f64 prints the shortest text that parses back to the same value.
    writeln!(out, " bw={} lat={}", link.bandwidth_gbps, link.latency_us).unwrap();
}

/// `value` as one token: bare when it can be, else quoted and escaped.
pub(super) fn quote(value: &str) -> String {
    let bare = !value.is_empty()
        && !value
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '"' | '\\' | '#'));
    if bare {
        return value.to_string();
    }
    let mut out = String::from("\"");
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
