//! `braid check`: parse, instantiate and verify every algorithm of a file for a topology.

use crate::error::CliError;
use crate::source::Program;
use crate::{output, topo_arg};
use braid_ir::{Mode, ModeSet, OpProgram};
use braid_lang::ast::Algorithm;
use braid_lang::Diagnostic;
use braid_passes::dataflow::Dataflow;
use braid_passes::instantiate::conditions_diagnostic;
use braid_passes::{failed_conditions, instantiate, verify};
use std::path::PathBuf;

#[derive(Debug, Clone, clap::Args)]
pub struct CheckArgs {
    /// The program (`.braid`).
    pub file: PathBuf,
    /// Check only this algorithm of the file.
    #[arg(long)]
    pub algorithm: Option<String>,
    /// Topology: nvswitch:N, pcie:N, cluster:MxG, detect, or a topology file.
    #[arg(long)]
    pub topo: String,
    /// Root rank for broadcast and reduce (default: check every root).
    #[arg(long)]
    pub root: Option<u32>,
    /// Call modes to check (default: the modes each algorithm declares).
    #[arg(long, value_enum)]
    pub mode: Option<ModeArg>,
    /// Also print operations, transfers, critical path and parallel width.
    #[arg(long)]
    pub stats: bool,
    /// Write the dataflow graph(s) as Graphviz to this file.
    #[arg(long, value_name = "FILE")]
    pub dot: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    Inplace,
    Outofplace,
    Both,
}

impl ModeArg {
    pub fn modes(self) -> ModeSet {
        match self {
            ModeArg::Inplace => ModeSet::IN_PLACE,
            ModeArg::Outofplace => ModeSet::OUT_OF_PLACE,
            ModeArg::Both => ModeSet::BOTH,
        }
    }
}

/// What one algorithm came to.
enum Outcome {
    Ok(String),
    Skipped(String),
    Failed(Vec<Diagnostic>),
}

/// Runs the check; on success returns what goes to stdout. Ok lines of algorithms that
/// passed are printed even when another fails.
pub fn run(args: &CheckArgs) -> Result<String, CliError> {
    let program = Program::load(&args.file)?;
    let topo = topo_arg::load(&args.topo)?;
    let shape = topo_arg::shape(&topo);
    if let Some(r) = args.root {
        if r >= shape.n {
            return Err(CliError::Usage(format!(
                "error: --root {r} is not a rank of {} (ranks 0 .. {})",
                args.topo, shape.n
            )));
        }
    }
    let algorithms = program.select(args.algorithm.as_deref())?;
    let explicit = args.algorithm.is_some();
    let mut stdout = String::new();
    let mut diags = Vec::new();
    let mut skipped_diags = Vec::new();
    let mut checked = 0;
    let mut dot = String::new();
    for alg in algorithms {
        let outcome = check_one(&program, alg, &shape, args, &mut dot);
        match outcome {
            Outcome::Ok(line) => {
                checked += 1;
                stdout.push_str(&line);
            }
            Outcome::Skipped(line) if !explicit => {
                stdout.push_str(&line);
                skipped_diags.push(line);
            }
            Outcome::Skipped(line) => {
                return Err(CliError::Input(format!("{stdout}error: {line}")));
            }
            Outcome::Failed(d) => diags.extend(d),
        }
    }
    if !diags.is_empty() {
        eprint!("{stdout}");
        return Err(CliError::Input(program.render(&diags)));
    }
    if checked == 0 {
        return Err(CliError::Input(format!(
            "{stdout}error: {}: no algorithm applies to {} ({shape})",
            program.source.name, args.topo
        )));
    }
    if let Some(path) = &args.dot {
        output::write_atomically(path, &dot)?;
    }
    Ok(stdout)
}

fn check_one(
    program: &Program,
    alg: &Algorithm,
    shape: &braid_ir::Shape,
    args: &CheckArgs,
    dot: &mut String,
) -> Outcome {
    let name = &alg.name.name;
    let roots: Vec<Option<u32>> = match (alg.collective.is_rooted(), args.root) {
        (false, _) => vec![None],
        (true, Some(r)) => vec![Some(r)],
        (true, None) => (0..shape.n).map(Some).collect(),
    };
    // Conditions may mention ROOT: the algorithm applies if they hold for some root.
    let mut applicable = Vec::new();
    let mut first_failure = None;
    for &root in &roots {
        match failed_conditions(alg, shape, root) {
            Err(d) => return Outcome::Failed(d),
            Ok(f) if f.is_empty() => applicable.push(root),
            Ok(f) => {
                first_failure.get_or_insert((root, f));
            }
        }
    }
    if applicable.is_empty() {
        let (root, failed) = first_failure.expect("some root was tried");
        let conds: Vec<&str> = failed
            .iter()
            .map(|f| program.source.snippet(f.span))
            .collect();
        if args.algorithm.is_some() {
            return Outcome::Failed(vec![conditions_diagnostic(alg, shape, root, &failed)]);
        }
        return Outcome::Skipped(format!(
            "skipped {name}: `where {}` does not hold for {shape}\n",
            conds.join(", ")
        ));
    }
    let mut instantiated = Vec::new();
    for root in applicable.iter().copied() {
        match instantiate(alg, shape, root) {
            Ok(p) => instantiated.push(p),
            Err(d) => return Outcome::Failed(with_root(d, root)),
        }
    }
    let declared = instantiated[0].modes;
    let requested = args.mode.map_or(declared, ModeArg::modes);
    let modes = ModeSet {
        out_of_place: declared.out_of_place && requested.out_of_place,
        in_place: declared.in_place && requested.in_place,
    };
    if modes.iter().next().is_none() {
        let want: Vec<&str> = requested.iter().map(Mode::name).collect();
        let has: Vec<&str> = declared.iter().map(Mode::name).collect();
        let line = format!(
            "skipped {name}: declared for {} only, not {}\n",
            has.join(" and "),
            want.join(" and ")
        );
        return if args.algorithm.is_some() {
            Outcome::Failed(vec![Diagnostic::new(
                "mode",
                line.trim_end().replace("skipped ", ""),
            )
            .with_label(alg.decl_span, "")])
        } else {
            Outcome::Skipped(line)
        };
    }
    for prog in &instantiated {
        if let Err(d) = verify(prog, modes) {
            return Outcome::Failed(with_root(d, prog.root));
        }
    }
    let first = &instantiated[0];
    let mode_names: Vec<&str> = modes.iter().map(Mode::name).collect();
    let mut line = format!(
        "ok {name} ({}) on {} [{shape}]: {}; {} ops",
        alg.collective,
        args.topo,
        mode_names.join(" + "),
        first.ops.len()
    );
    if alg.collective.is_rooted() {
        line.push_str(&format!("; roots {}", describe_roots(&applicable)));
    }
    line.push('\n');
    if args.stats || args.dot.is_some() {
        let mode = modes.iter().next().expect("a mode");
        let flow = Dataflow::build(first, mode);
        if args.stats {
            line.push_str(&stats_line(first, &flow));
        }
        dot.push_str(&flow.to_dot(first, |off| program.line_of(off)));
    }
    Outcome::Ok(line)
}

fn stats_line(prog: &OpProgram, flow: &Dataflow) -> String {
    let s = flow.stats(prog);
    let root = prog.root.map(|r| format!(", ROOT={r}")).unwrap_or_default();
    format!(
        "  stats ({}{root}): operations {}, transfers {}, dependencies {}, critical path {}, max parallel width {}\n",
        flow.mode, s.ops, s.transfers, s.edges, s.critical_path, s.max_width
    )
}

fn describe_roots(roots: &[Option<u32>]) -> String {
    let r: Vec<u32> = roots.iter().flatten().copied().collect();
    match r.as_slice() {
        [one] => one.to_string(),
        [first, .., last] if (*last - *first) as usize + 1 == r.len() => format!("{first}-{last}"),
        _ => r.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
    }
}

fn with_root(diags: Vec<Diagnostic>, root: Option<u32>) -> Vec<Diagnostic> {
    match root {
        None => diags,
        Some(r) => diags
            .into_iter()
            .map(|d| d.with_note(format!("checked with ROOT = {r}")))
            .collect(),
    }
}
