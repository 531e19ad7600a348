//! Reading the file format, with `file:line:col` errors.

use std::collections::HashMap;

use super::lex::{self, Token};
use super::{HEADER, HEADER_PREFIX};
use crate::builder::Blame;
use crate::{
    Cpu, Gpu, Link, LinkKind, Nic, TopoError, Topology, TopologyBuilder, Vertex, VertexKind,
    MAX_BANDWIDTH_GBPS, MAX_LATENCY_US, MAX_RANKS,
};

/// `key=value` pairs one statement may have; `gpu`, with five keys, has the most.
const MAX_PAIRS: usize = 8;

impl Topology {
    /// Reads a topology in the file format (see [`crate::text`]). `name` names
    /// the source in errors (`name:line:col: message`) and becomes
    /// [`Topology::name`].
    pub fn parse_text(name: &str, text: &str) -> Result<Topology, TopoError> {
        let mut p = Parser {
            file: name,
            builder: TopologyBuilder::new(),
            vertex_pos: HashMap::new(),
            node_lines: Vec::new(),
            header_line: None,
        };
        for (i, line) in text.lines().enumerate() {
            p.line(i + 1, line)?;
        }
        let header_line = p.header_line.ok_or_else(|| p.err(1, 1, missing_header()))?;
        let Parser {
            file,
            builder,
            vertex_pos,
            node_lines,
            ..
        } = p;
        builder.build_located(name.to_string()).map_err(|e| {
            let (line, col) = match e.at {
                Blame::Vertex(v) => vertex_pos.get(&v).copied().unwrap_or((header_line, 1)),
                Blame::Node(k) => (node_lines[k as usize], 1),
                Blame::Nothing => (header_line, 1),
            };
            TopoError::Parse {
                file: file.to_string(),
                line,
                col,
                message: e.message,
            }
        })
    }
}

struct Parser<'a> {
    file: &'a str,
    builder: TopologyBuilder,
    /// Where each vertex name was declared (line, column of the name).
    vertex_pos: HashMap<String, (usize, usize)>,
    /// The line of each `node` statement.
    node_lines: Vec<usize>,
    header_line: Option<usize>,
}

/// One statement's tokens: leading words, then `key=value` pairs.
struct Statement {
    line: usize,
    words: Vec<(String, usize)>,
    pairs: Vec<(String, usize, String, usize)>,
    /// Column just past the last token, for "missing …" errors.
    end_col: usize,
}

impl<'a> Parser<'a> {
    fn err(&self, line: usize, col: usize, message: impl Into<String>) -> TopoError {
        TopoError::Parse {
            file: self.file.to_string(),
            line,
            col,
            message: message.into(),
        }
    }

    fn line(&mut self, n: usize, line: &str) -> Result<(), TopoError> {
        let trimmed = line.trim_start();
        if self.header_line.is_none() {
            if let Some(version) = trimmed.strip_prefix(HEADER_PREFIX) {
                let col = line.chars().count() - trimmed.chars().count() + HEADER_PREFIX.len() + 1;
                if version.trim_end() != "v1" {
                    return Err(self.err(
                        n,
                        col,
                        format!(
                            "unsupported topology format `{}`: this build reads `{HEADER}`",
                            version.trim_end()
                        ),
                    ));
                }
                self.header_line = Some(n);
                return Ok(());
            }
        }
        let tokens = lex::tokens(line).map_err(|(col, m)| self.err(n, col, m))?;
        if tokens.is_empty() {
            return Ok(());
        }
        if self.header_line.is_none() {
            return Err(self.err(n, tokens[0].col(), missing_header()));
        }
        let st = self.statement(n, line, tokens)?;
        let keyword = st.words[0].0.clone();
        match keyword.as_str() {
            "node" => self.node(st),
            "link" => self.link(st),
            "gpu" | "nvswitch" | "pcie-switch" | "host-bridge" | "cpu" | "nic" | "network" => {
                self.vertex(&keyword, st)
            }
            _ => Err(self.err(
                n,
                st.words[0].1,
                format!(
                    "unknown statement `{keyword}` (expected node, gpu, nvswitch, pcie-switch, \
                     host-bridge, cpu, nic, network or link)"
                ),
            )),
        }
    }

    fn statement(&self, n: usize, line: &str, tokens: Vec<Token>) -> Result<Statement, TopoError> {
        let mut st = Statement {
            line: n,
            words: Vec::new(),
            pairs: Vec::new(),
            end_col: line.trim_end().chars().count() + 1,
        };
        for t in tokens {
            match t {
                Token::Word { text, col } => {
                    if !st.pairs.is_empty() {
                        return Err(self.err(
                            n,
                            col,
                            format!("`{text}`: names come before key=value pairs"),
                        ));
                    }
                    st.words.push((text, col));
                }
                Token::Pair {
                    key,
                    key_col,
                    value,
                    value_col,
                } => {
                    if st.words.is_empty() {
                        return Err(self.err(
                            n,
                            key_col,
                            "a line starts with a statement keyword, not key=value",
                        ));
                    }
                    if st.pairs.iter().any(|p| p.0 == key) {
                        return Err(self.err(n, key_col, format!("`{key}` is given twice")));
                    }
                    // Bounds the duplicate check above, which compares with every pair.
                    if st.pairs.len() == MAX_PAIRS {
                        return Err(self.err(
                            n,
                            key_col,
                            format!("more than {MAX_PAIRS} key=value pairs; no statement takes that many"),
                        ));
                    }
                    st.pairs.push((key, key_col, value, value_col));
                }
            }
        }
        Ok(st)
    }

    /// Checks the statement has exactly `names` words after its keyword (`usage`
    /// shows them) and only keys from `allowed`.
    fn shape(
        &self,
        st: &Statement,
        names: usize,
        usage: &str,
        allowed: &[&str],
    ) -> Result<(), TopoError> {
        let keyword = &st.words[0].0;
        if st.words.len() - 1 < names {
            return Err(self.err(
                st.line,
                st.end_col,
                format!("incomplete statement: expected `{usage}`"),
            ));
        }
        if let Some((extra, col)) = st.words.get(names + 1) {
            return Err(self.err(
                st.line,
                *col,
                format!("unexpected `{extra}`: expected `{usage}`"),
            ));
        }
        for (key, col, _, _) in &st.pairs {
            if !allowed.contains(&key.as_str()) {
                let expected = if allowed.is_empty() {
                    "it takes none".to_string()
                } else {
                    format!("expected {}", allowed.join(", "))
                };
                return Err(self.err(
                    st.line,
                    *col,
                    format!("unknown key `{key}` for `{keyword}` ({expected})"),
                ));
            }
        }
        Ok(())
    }

    fn node(&mut self, st: Statement) -> Result<(), TopoError> {
        self.shape(&st, 1, "node <index>", &[])?;
        let (text, col) = &st.words[1];
        let k = self.uint(st.line, *col, text)?;
        let expected = self.builder.n_nodes();
        if k >= MAX_RANKS {
            return Err(self.err(
                st.line,
                *col,
                format!("node {k}: every node needs a GPU, and a topology has at most {MAX_RANKS}"),
            ));
        }
        if k != expected {
            return Err(self.err(
                st.line,
                *col,
                format!("node {k} is out of order: the next node is {expected}"),
            ));
        }
        self.builder.add_node();
        self.node_lines.push(st.line);
        Ok(())
    }

    fn vertex(&mut self, keyword: &str, st: Statement) -> Result<(), TopoError> {
        let allowed: &[&str] = match keyword {
            "gpu" => &["node", "rank", "numa", "bus", "model"],
            "cpu" => &["node", "numa", "model"],
            "nic" => &["node", "numa", "bus", "dev"],
            "pcie-switch" | "host-bridge" => &["node", "bus"],
            "nvswitch" => &["node"],
            _ => &[],
        };
        self.shape(&st, 1, &format!("{keyword} <name> key=value…"), allowed)?;
        let (name, name_col) = st.words[1].clone();
        let node = match keyword {
            "network" => None,
            _ => {
                let (value, col) = self.required(&st, "node")?;
                let k = self.uint(st.line, col, &value)?;
                if k >= self.builder.n_nodes() {
                    return Err(self.err(
                        st.line,
                        col,
                        format!("node {k} is not declared (declare it with `node {k}`)"),
                    ));
                }
                Some(k)
            }
        };
        let numa = self.optional_uint(&st, "numa")?;
        let text = |key: &str| st.pairs.iter().find(|p| p.0 == key).map(|p| p.2.clone());
        let kind = match keyword {
            "gpu" => {
                let (value, col) = self.required(&st, "rank")?;
                VertexKind::Gpu(Gpu {
                    rank: self.uint(st.line, col, &value)?,
                    numa,
                    bus: text("bus"),
                    model: text("model"),
                })
            }
            "cpu" => {
                let (value, col) = self.required(&st, "numa")?;
                VertexKind::Cpu(Cpu {
                    numa: self.uint(st.line, col, &value)?,
                    model: text("model"),
                })
            }
            "nic" => VertexKind::Nic(Nic {
                device: text("dev"),
                numa,
                bus: text("bus"),
            }),
            "pcie-switch" => VertexKind::PcieSwitch { bus: text("bus") },
            "host-bridge" => VertexKind::HostBridge { bus: text("bus") },
            "nvswitch" => VertexKind::NvSwitch,
            _ => VertexKind::Network,
        };
        self.builder
            .add_vertex(Vertex {
                name: name.clone(),
                node,
                kind,
            })
            .map_err(|e| self.err(st.line, name_col, message(e)))?;
        self.vertex_pos.insert(name, (st.line, name_col));
        Ok(())
    }

    fn link(&mut self, st: Statement) -> Result<(), TopoError> {
        let (kind_text, kind_col) = self.required(&st, "kind")?;
        let allowed: &[&str] = match kind_text.as_str() {
            "nvlink" => &["kind", "count", "gen", "bw", "lat"],
            "pcie" => &["kind", "gen", "width", "bw", "lat"],
            "smp" => &["kind", "bw", "lat"],
            "ib" | "roce" | "eth" => &["kind", "rate", "bw", "lat"],
            other => {
                return Err(self.err(
                    st.line,
                    kind_col,
                    format!(
                        "unknown link kind `{other}` (expected nvlink, pcie, smp, ib, roce or eth)"
                    ),
                ))
            }
        };
        self.shape(&st, 2, "link <a> <b> kind=… key=value…", allowed)?;
        let mut ends = Vec::new();
        for (name, col) in &st.words[1..3] {
            let id = self.builder.vertex_id(name).ok_or_else(|| {
                self.err(
                    st.line,
                    *col,
                    format!("no vertex `{name}` is declared before this line"),
                )
            })?;
            ends.push(id);
        }
        let num = |key: &str| -> Result<u32, TopoError> {
            let (value, col) = self.required(&st, key)?;
            self.uint(st.line, col, &value)
        };
        let kind = match kind_text.as_str() {
            "nvlink" => LinkKind::NvLink {
                count: num("count")?,
                gen: num("gen")?,
            },
            "pcie" => LinkKind::Pcie {
                gen: num("gen")?,
                width: num("width")?,
            },
            "smp" => LinkKind::Smp,
            "ib" => LinkKind::InfiniBand {
                rate_gbps: num("rate")?,
            },
            "roce" => LinkKind::Roce {
                rate_gbps: num("rate")?,
            },
            _ => LinkKind::Ethernet {
                rate_gbps: num("rate")?,
            },
        };
        kind.validate()
            .map_err(|m| self.err(st.line, kind_col, m))?;
        let bandwidth_gbps = match self.optional_float(&st, "bw")? {
            Some(bw) => bw,
            None => {
                let bw = kind.nominal_bandwidth_gbps().expect("validated");
                if bw > MAX_BANDWIDTH_GBPS {
                    return Err(self.err(
                        st.line,
                        kind_col,
                        format!(
                            "these numbers make a nominal bandwidth of {bw} GB/s, more than the {MAX_BANDWIDTH_GBPS} a link may have"
                        ),
                    ));
                }
                bw
            }
        };
        let latency_us = self
            .optional_float(&st, "lat")?
            .unwrap_or_else(|| kind.nominal_latency_us());
        let link = Link {
            kind,
            bandwidth_gbps,
            latency_us,
        };
        self.builder
            .add_link(ends[0], ends[1], link)
            .map_err(|e| self.err(st.line, st.words[1].1, message(e)))
    }

    fn required(&self, st: &Statement, key: &str) -> Result<(String, usize), TopoError> {
        st.pairs
            .iter()
            .find(|p| p.0 == key)
            .map(|p| (p.2.clone(), p.3))
            .ok_or_else(|| {
                self.err(
                    st.line,
                    st.end_col,
                    format!("`{}` needs `{key}=`", st.words[0].0),
                )
            })
    }

    fn optional_uint(&self, st: &Statement, key: &str) -> Result<Option<u32>, TopoError> {
        st.pairs
            .iter()
            .find(|p| p.0 == key)
            .map(|p| self.uint(st.line, p.3, &p.2))
            .transpose()
    }

    fn optional_float(&self, st: &Statement, key: &str) -> Result<Option<f64>, TopoError> {
        let Some(p) = st.pairs.iter().find(|p| p.0 == key) else {
            return Ok(None);
        };
        let bad = |what: &str| self.err(st.line, p.3, format!("`{key}={}` is {what}", p.2));
        let value: f64 = p.2.parse().map_err(|_| bad("not a number"))?;
        if !value.is_finite() {
            return Err(bad("not a number"));
        }
        let (ok, max) = if key == "bw" {
            (value > 0.0, MAX_BANDWIDTH_GBPS)
        } else {
            (value >= 0.0, MAX_LATENCY_US)
        };
        if !ok {
            let what = if key == "bw" {
                "positive"
            } else {
                "non-negative"
            };
            return Err(self.err(st.line, p.3, format!("`{key}` must be {what}, not {}", p.2)));
        }
        if value > max {
            return Err(self.err(
                st.line,
                p.3,
                format!("`{key}={}` is more than the {max} a link may have", p.2),
            ));
        }
        Ok(Some(value))
    }

    fn uint(&self, line: usize, col: usize, text: &str) -> Result<u32, TopoError> {
        if text.is_empty() || !text.bytes().all(|c| c.is_ascii_digit()) {
            return Err(self.err(line, col, format!("`{text}` is not a non-negative integer")));
        }
        text.parse()
            .map_err(|_| self.err(line, col, format!("`{text}` is too large")))
    }
}

fn missing_header() -> String {
    format!("missing header: a topology file starts with `{HEADER}`")
}

/// The message of a builder error, without its `invalid topology:` prefix.
fn message(e: TopoError) -> String {
    match e {
        TopoError::Invalid(m) => m,
        other => other.to_string(),
    }
}
