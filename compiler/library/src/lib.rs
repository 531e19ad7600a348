//! The shipped algorithms (`algorithms/`, embedded at build time), compiled on demand for
//! one topology into verified plans, and cached. This is what a communicator's plan
//! registry draws on: the runtime itself never parses source.

use braid_ir::{Collective, Shape};
use braid_lang::{ast, SourceFile};
use braid_lower::{flow_mode, lower, LowerOptions, SourcePos};
use braid_passes::dataflow::Dataflow;
use braid_passes::{failed_conditions, instantiate, verify};
use braid_plan::Verified;
use braid_topo::Topology;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

include!(concat!(env!("OUT_DIR"), "/sources.rs"));

/// Compiled plans per (collective, root).
type PlanCache = HashMap<(Collective, Option<u32>), Vec<Arc<Verified>>>;

/// The library for one topology.
pub struct Library {
    topo: Topology,
    shape: Shape,
    files: Vec<(SourceFile, ast::File)>,
    cache: Mutex<PlanCache>,
}

impl Library {
    /// Parses the embedded sources (they are checked by the test suite, so a parse
    /// failure here is a build defect and is logged, not fatal).
    pub fn new(topo: Topology) -> Library {
        let shape = Shape {
            n: topo.n_ranks(),
            nodes: topo.n_nodes(),
            g: topo.uniform_g(),
        };
        let files = SOURCES
            .iter()
            .filter_map(|(name, text)| {
                let (file, diags) = braid_lang::parse_and_check(text);
                if !diags.is_empty() {
                    tracing::warn!("shipped algorithm {name} does not parse; skipped");
                    return None;
                }
                Some((SourceFile::new(format!("algorithms/{name}"), *text), file))
            })
            .collect();
        Library {
            topo,
            shape,
            files,
            cache: Mutex::new(HashMap::new()),
        }
    }

    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// The names of all shipped algorithms.
    pub fn names(&self) -> Vec<String> {
        self.files
            .iter()
            .flat_map(|(_, f)| f.algorithms.iter().map(|a| a.name.name.clone()))
            .collect()
    }

    /// Verified plans of every shipped algorithm for `collective` that applies to this
    /// topology (and root); compiled once, then cached.
    pub fn plans(&self, collective: Collective, root: Option<u32>) -> Vec<Arc<Verified>> {
        if let Some(p) = self.cache.lock().unwrap().get(&(collective, root)) {
            return p.clone();
        }
        let mut plans = Vec::new();
        for (source, file) in &self.files {
            for alg in file
                .algorithms
                .iter()
                .filter(|a| a.collective == collective)
            {
                match compile(source, alg, &self.shape, root, &self.topo) {
                    Ok(Some(p)) => plans.push(Arc::new(p)),
                    Ok(None) => {
                        tracing::info!(algorithm = %alg.name.name, "does not apply to this topology")
                    }
                    Err(e) => tracing::warn!(algorithm = %alg.name.name, "not compiled: {e}"),
                }
            }
        }
        self.cache
            .lock()
            .unwrap()
            .insert((collective, root), plans.clone());
        plans
    }
}

/// The plans of one user file for `topo`, each proved: a plan (`.json`), an MSCCL
/// algorithm (`.xml`), or a program (`.braid`, every algorithm in it that applies to the
/// topology, rooted ones for every root). What `BRAID_PLANS` names; errors are rendered.
pub fn user_plans(path: &std::path::Path, topo: &Topology) -> Result<Vec<Verified>, String> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{shown}: error: cannot read the file: {e}"))?;
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let plan = match ext {
        "json" => braid_plan::Plan::from_json(&text).map_err(|e| format!("{shown}: {e}"))?,
        "xml" => {
            let stem = path
                .file_stem()
                .map_or("msccl".into(), |s| s.to_string_lossy().into_owned());
            let (plan, lines) = braid_msccl::import_with_lines(&text, &stem)
                .map_err(|errs| braid_msccl::render_errors(&errs, &shown))?;
            return Verified::new(plan)
                .map(|v| vec![v])
                .map_err(|d| braid_msccl::render_for_xml(&d, &lines, &shown));
        }
        _ => return compile_file(&shown, &text, topo),
    };
    Verified::new(plan)
        .map(|v| vec![v])
        .map_err(|d| format!("{shown}:\n{}", braid_plan::render_diagnostics(&d)))
}

/// Every algorithm of a program that applies to `topo`, compiled and proved.
pub fn compile_file(name: &str, text: &str, topo: &Topology) -> Result<Vec<Verified>, String> {
    let source = SourceFile::new(name.to_string(), text);
    let (file, diags) = braid_lang::parse_and_check(text);
    if !diags.is_empty() {
        return Err(braid_lang::render(&diags, &source));
    }
    let shape = Shape {
        n: topo.n_ranks(),
        nodes: topo.n_nodes(),
        g: topo.uniform_g(),
    };
    let mut plans = Vec::new();
    for alg in &file.algorithms {
        let roots: Vec<Option<u32>> = if alg.collective.is_rooted() {
            (0..shape.n).map(Some).collect()
        } else {
            vec![None]
        };
        for root in roots {
            if let Some(p) = compile(&source, alg, &shape, root, topo)? {
                plans.push(p);
            }
        }
    }
    if plans.is_empty() {
        return Err(format!(
            "{name}: error: no algorithm in it applies to this topology"
        ));
    }
    Ok(plans)
}

/// Maps a span of `source` to the position and text plans record as a step's origin.
pub fn locator(source: &SourceFile) -> impl Fn(braid_ir::Span) -> Option<SourcePos> + '_ {
    move |span| {
        let (line, col) = source.line_col(span.start);
        Some(SourcePos {
            line: line as u32,
            col: col as u32,
            text: source.snippet(span).to_string(),
        })
    }
}

/// Compiles one algorithm into a plan and proves it with the plan verifier; `Ok(None)` when its `where` conditions do
/// not hold for the shape.
pub fn compile(
    source: &SourceFile,
    alg: &ast::Algorithm,
    shape: &Shape,
    root: Option<u32>,
    topo: &Topology,
) -> Result<Option<Verified>, String> {
    let render = |d: Vec<braid_lang::Diagnostic>| braid_lang::render(&d, source);
    let failed = failed_conditions(alg, shape, root).map_err(render)?;
    if !failed.is_empty() {
        return Ok(None);
    }
    let prog = instantiate(alg, shape, root).map_err(render)?;
    verify(&prog, prog.modes).map_err(render)?;
    let flow = Dataflow::build(&prog, flow_mode(prog.modes));
    let locate = locator(source);
    let opts = LowerOptions {
        locate: Some(&locate),
        ..LowerOptions::default()
    };
    let plan = lower(&prog, &flow, topo, &opts).map_err(|e| e.to_string())?;
    let plan = Verified::new(plan).map_err(|d| braid_plan::render_diagnostics(&d))?;
    Ok(Some(plan))
}
