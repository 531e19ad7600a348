//! `braid compile`: check a program, lower it to a plan for a topology, prove the plan with
//! the independent plan verifier, and write it (cli.md).
//!
//! Where things go:
//!
//! * without `-o`, the plan's JSON goes to stdout (so it can be piped), unless `--explain`
//!   is given: then stdout gets the explanation instead;
//! * with `-o PLAN.json`, the plan is written there atomically and stdout gets one summary
//!   line, followed by the explanation with `--explain`;
//! * `--dot FILE` writes the plan as a Graphviz graph.
//!
//! Exit codes: 1 for a wrong program (with file:line:col), 2 for usage errors, 3 when the
//! compiled plan fails the plan verifier. That last case is a compiler bug, reported as an
//! internal error; nothing is written then.

use crate::cmd_check::ModeArg;
use crate::error::CliError;
use crate::source::Program;
use crate::{output, topo_arg};
use braid_ir::{Mode, ModeSet, OpProgram, Shape};
use braid_lang::ast::Algorithm;
use braid_lang::Diagnostic;
use braid_lower::{flow_mode, lower, LowerError, LowerOptions};
use braid_passes::dataflow::Dataflow;
use braid_passes::instantiate::conditions_diagnostic;
use braid_passes::{failed_conditions, instantiate, verify};
use braid_plan::{render_diagnostics, Plan, StepKind};
use std::path::PathBuf;

#[derive(Debug, Clone, clap::Args)]
pub struct CompileArgs {
    /// The program (`.braid`).
    pub file: PathBuf,
    /// The algorithm to compile; may be omitted when the file defines only one.
    #[arg(long)]
    pub algorithm: Option<String>,
    /// Topology: nvswitch:N, pcie:N, cluster:MxG, detect, or a topology file.
    #[arg(long)]
    pub topo: String,
    /// Root rank for broadcast and reduce (ignored by the other collectives).
    #[arg(long, default_value_t = 0)]
    pub root: u32,
    /// Write the plan here (atomically) instead of printing its JSON on stdout.
    #[arg(short = 'o', long = "output", value_name = "PLAN.json")]
    pub output: Option<PathBuf>,
    /// Print the plan as readable text, one line per step (instead of the JSON when no
    /// -o is given).
    #[arg(long)]
    pub explain: bool,
    /// Also write the plan as a Graphviz graph to this file.
    #[arg(long, value_name = "FILE")]
    pub dot: Option<PathBuf>,
    /// Call modes the plan is for (default: the modes the algorithm declares).
    #[arg(long, value_enum)]
    pub mode: Option<ModeArg>,
}

fn requested_modes(m: ModeArg) -> ModeSet {
    match m {
        ModeArg::Inplace => ModeSet::IN_PLACE,
        ModeArg::Outofplace => ModeSet::OUT_OF_PLACE,
        ModeArg::Both => ModeSet::BOTH,
    }
}

/// Runs the command; on success returns what goes to stdout.
pub fn run(args: &CompileArgs) -> Result<String, CliError> {
    let program = Program::load(&args.file)?;
    let topo = topo_arg::load(&args.topo)?;
    let shape = topo_arg::shape(&topo);
    let alg = pick_algorithm(&program, args.algorithm.as_deref())?;
    let root = if alg.collective.is_rooted() {
        if args.root >= shape.n {
            return Err(CliError::Usage(format!(
                "error: --root {} is not a rank of {} (ranks 0 .. {})",
                args.root, args.topo, shape.n
            )));
        }
        Some(args.root)
    } else {
        None
    };
    let prog = checked_program(&program, alg, &shape, root, args)?;
    let plan = compile(&program, &prog, &topo)?;
    let report = braid_plan::verify(&plan).map_err(|d| {
        CliError::Runtime(format!(
            "internal error: the plan compiled for `{}` fails the plan verifier; this is a bug in braid's compiler, please report it\n{}",
            prog.algorithm,
            render_diagnostics(&d)
        ))
    })?;
    tracing::info!(summary = %report.summary(), "plan verified");

    let json = plan.to_json_pretty();
    let mut stdout = String::new();
    match &args.output {
        Some(path) => {
            output::write_atomically(path, &json)?;
            stdout.push_str(&summary(&plan, &shape, &args.topo, path));
        }
        None if !args.explain => stdout.push_str(&json),
        None => {}
    }
    if args.explain {
        stdout.push_str(&braid_plan::explain(&plan));
    }
    if let Some(path) = &args.dot {
        output::write_atomically(path, &braid_plan::to_dot(&plan))?;
    }
    Ok(stdout)
}

/// The algorithm `--algorithm` names, or the file's only one.
fn pick_algorithm<'p>(program: &'p Program, name: Option<&str>) -> Result<&'p Algorithm, CliError> {
    let all = program.select(name)?;
    match all.as_slice() {
        [one] => Ok(one),
        many => {
            let names: Vec<&str> = many.iter().map(|a| a.name.name.as_str()).collect();
            Err(CliError::Usage(format!(
                "error: {} defines {} algorithms ({}); choose one with --algorithm",
                program.source.name,
                many.len(),
                names.join(", ")
            )))
        }
    }
}

/// `braid check`'s work for one algorithm and root: conditions, instantiation, modes and
/// the sequential proof. Any failure is the program's fault (exit 1).
fn checked_program(
    program: &Program,
    alg: &Algorithm,
    shape: &Shape,
    root: Option<u32>,
    args: &CompileArgs,
) -> Result<OpProgram, CliError> {
    let fail = |d: Vec<Diagnostic>| CliError::Input(program.render(&with_root(d, root)));
    let failed = failed_conditions(alg, shape, root).map_err(fail)?;
    if !failed.is_empty() {
        return Err(fail(vec![conditions_diagnostic(alg, shape, root, &failed)]));
    }
    let mut prog = instantiate(alg, shape, root).map_err(fail)?;
    let declared = prog.modes;
    let requested = args.mode.map_or(declared, requested_modes);
    let modes = ModeSet {
        out_of_place: declared.out_of_place && requested.out_of_place,
        in_place: declared.in_place && requested.in_place,
    };
    if modes.iter().next().is_none() {
        let names = |m: ModeSet| m.iter().map(Mode::name).collect::<Vec<_>>().join(" and ");
        return Err(fail(vec![Diagnostic::new(
            "mode",
            format!(
                "`{}` is declared for {} only, not {}",
                alg.name.name,
                names(declared),
                names(requested)
            ),
        )
        .with_label(alg.decl_span, "")]));
    }
    verify(&prog, modes).map_err(fail)?;
    // The plan is for the checked modes only.
    prog.modes = modes;
    Ok(prog)
}

/// Lowers `prog`, with step origins taken from the program's source.
fn compile(
    program: &Program,
    prog: &OpProgram,
    topo: &braid_topo::Topology,
) -> Result<Plan, CliError> {
    let flow = Dataflow::build(prog, flow_mode(prog.modes));
    let locate = braid_library::locator(&program.source);
    let opts = LowerOptions {
        locate: Some(&locate),
        ..LowerOptions::default()
    };
    lower(prog, &flow, topo, &opts).map_err(|e| match e {
        LowerError::TooManyChannels { span, .. } => CliError::Input(program.render(&[
            Diagnostic::new("channels", e.to_string()).with_label(span, "this channel hint"),
        ])),
        other => CliError::Runtime(format!("internal error: lowering failed: {other}")),
    })
}

/// `ok: compiled ... -> PATH`, with the plan's size.
fn summary(plan: &Plan, shape: &Shape, topo: &str, path: &std::path::Path) -> String {
    let fused = plan
        .ranks
        .iter()
        .flat_map(|r| &r.blocks)
        .flat_map(|b| &b.steps)
        .filter(|s| {
            matches!(
                s.kind,
                StepKind::RecvCopySend | StepKind::RecvReduceSend | StepKind::RecvReduceCopySend
            )
        })
        .count();
    let modes: Vec<&str> = plan.modes.iter().map(Mode::name).collect();
    let root = plan.root.map(|r| format!(", root {r}")).unwrap_or_default();
    format!(
        "ok: compiled {} ({}{root}) for {topo} [{shape}]: {}; {} blocks, {} steps ({fused} fused) -> {}\n",
        plan.name,
        plan.collective,
        modes.join(" + "),
        plan.block_count(),
        plan.step_count(),
        path.display()
    )
}

fn with_root(diags: Vec<Diagnostic>, root: Option<u32>) -> Vec<Diagnostic> {
    match root {
        None => diags,
        Some(r) => diags
            .into_iter()
            .map(|d| d.with_note(format!("compiled with ROOT = {r}")))
            .collect(),
    }
}
