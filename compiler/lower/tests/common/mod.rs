//! Shared helpers: compile the shipped algorithms through the library API, exactly as
//! `braid compile` does (instantiate, verify, dataflow, lower), and verify the plans.

#![allow(dead_code)]

use braid_ir::{ModeSet, OpProgram, Shape};
use braid_lang::{ast, SourceFile};
use braid_lower::{flow_mode, lower, LowerOptions, SourcePos};
use braid_passes::dataflow::Dataflow;
use braid_passes::{failed_conditions, instantiate, verify};
use braid_plan::{render_diagnostics, Plan};
use braid_topo::Topology;
use std::path::PathBuf;

/// The topologies every algorithm is compiled for (where its `where` holds).
pub const TOPOLOGIES: &[&str] = &[
    "nvswitch:1",
    "nvswitch:2",
    "nvswitch:3",
    "nvswitch:4",
    "nvswitch:5",
    "nvswitch:6",
    "nvswitch:7",
    "nvswitch:8",
    "pcie:4",
    "pcie:8",
    "cluster:2x8",
    "cluster:4x8",
];

pub fn algorithms_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../algorithms")
}

/// Every shipped `.braid` file, parsed and checked.
pub fn library() -> Vec<(String, SourceFile, ast::File)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(algorithms_dir())
        .expect("algorithms/ exists")
        .map(|e| e.expect("readable").path())
        .filter(|p| p.extension().is_some_and(|e| e == "braid"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&p).expect("readable");
            let source = SourceFile::new(name.clone(), text);
            let (file, diags) = braid_lang::parse_and_check(&source.text);
            assert!(diags.is_empty(), "{name} has diagnostics");
            (name, source, file)
        })
        .collect()
}

/// The algorithm `name` of the library.
pub fn algorithm(name: &str) -> (SourceFile, ast::Algorithm) {
    for (_, source, file) in library() {
        if let Some(a) = file.algorithms.iter().find(|a| a.name.name == name) {
            return (source, a.clone());
        }
    }
    panic!("no algorithm {name}");
}

pub fn shape(topo: &Topology) -> Shape {
    Shape {
        n: topo.n_ranks(),
        nodes: topo.n_nodes(),
        g: topo.uniform_g(),
    }
}

/// The instantiated program, or `None` when a `where` condition fails.
pub fn program(alg: &ast::Algorithm, topo: &Topology, root: Option<u32>) -> Option<OpProgram> {
    let shape = shape(topo);
    let failed = failed_conditions(alg, &shape, root).expect("conditions evaluate");
    if !failed.is_empty() {
        return None;
    }
    let prog = instantiate(alg, &shape, root).expect("instantiates");
    verify(&prog, prog.modes).expect("the program verifies");
    Some(prog)
}

/// Lowers `prog` for all its declared modes, with origins from `source`.
pub fn compile_with(
    prog: &OpProgram,
    topo: &Topology,
    source: &SourceFile,
    modes: Option<ModeSet>,
    fuse: bool,
) -> Plan {
    let wanted = modes.unwrap_or(prog.modes);
    let flow = Dataflow::build(prog, flow_mode(wanted));
    let locate = |span: braid_ir::Span| {
        let (line, col) = source.line_col(span.start);
        Some(SourcePos {
            line: line as u32,
            col: col as u32,
            text: source.snippet(span).to_string(),
        })
    };
    let opts = LowerOptions {
        modes,
        fuse,
        locate: Some(&locate),
        ..LowerOptions::default()
    };
    lower(prog, &flow, topo, &opts).expect("lowers")
}

pub fn compile(prog: &OpProgram, topo: &Topology, source: &SourceFile) -> Plan {
    compile_with(prog, topo, source, None, true)
}

/// Panics with the rendered diagnostics if `plan` fails the plan verifier.
pub fn assert_verifies(plan: &Plan, what: &str) {
    if let Err(d) = braid_plan::verify(plan) {
        panic!(
            "{what}: the compiled plan fails verification:\n{}",
            render_diagnostics(&d)
        );
    }
}

/// One compiled plan of the library and what it was compiled from.
pub struct Compiled {
    /// `file: algorithm on topo (root)`, for messages.
    pub what: String,
    pub algorithm: String,
    pub topo: String,
    pub prog: OpProgram,
    pub plan: Plan,
}

/// Every algorithm of the library on every topology of [`TOPOLOGIES`] where it applies
/// (rooted ones for a few roots), lowered for the modes it declares. Computed once per
/// test binary.
pub fn all_plans() -> &'static [Compiled] {
    static ALL: std::sync::OnceLock<Vec<Compiled>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        let mut out = Vec::new();
        for (file, source, parsed) in library() {
            for alg in &parsed.algorithms {
                for &t in TOPOLOGIES {
                    let topo = Topology::from_arg(t).expect("preset");
                    let roots: Vec<Option<u32>> = if alg.collective.is_rooted() {
                        roots(topo.n_ranks()).into_iter().map(Some).collect()
                    } else {
                        vec![None]
                    };
                    for root in roots {
                        let Some(prog) = program(alg, &topo, root) else {
                            continue;
                        };
                        let plan = compile(&prog, &topo, &source);
                        out.push(Compiled {
                            what: format!("{file}: {} on {t} (root {root:?})", alg.name.name),
                            algorithm: alg.name.name.clone(),
                            topo: t.to_string(),
                            prog,
                            plan,
                        });
                    }
                }
            }
        }
        out
    })
}

/// Roots to try for a rooted collective on `n` ranks: first, second and last.
pub fn roots(n: u32) -> Vec<u32> {
    let mut r = vec![0, 1.min(n - 1), n - 1];
    r.dedup();
    r
}
