//! `braid`: compile, verify and run collective algorithms (cli.md).

mod cmd_check;
mod cmd_compile;
mod cmd_doctor;
mod cmd_explain;
mod cmd_msccl;
mod cmd_perf;
mod cmd_rank;
mod cmd_run;
mod cmd_synth;
mod cmd_topo;
mod cmd_tune;
mod cmd_verify;
mod doctor_rates;
mod error;
mod logging;
mod output;
mod perf_child;
mod perf_plot;
mod perf_procs;
mod perf_report;
mod plans;
mod sizes;
mod source;
mod topo_arg;
mod tune_cuda;

use clap::{Parser, Subcommand};
use error::CliError;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "braid",
    version,
    about = "Collective-communication algorithm compiler and runtime"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Parse and verify a program against its collective's postcondition.
    Check(cmd_check::CheckArgs),
    /// Check a program, then lower it to a verified execution plan for a topology.
    Compile(cmd_compile::CompileArgs),
    /// Load a plan and prove it: bounds, matching, deadlock and race freedom, postcondition.
    Verify {
        /// The plan (`.json`) or MSCCL algorithm (`.xml`).
        plan: std::path::PathBuf,
    },
    /// Import an MSCCL XML algorithm (either dialect) as a verified plan.
    ImportMsccl(cmd_msccl::ImportArgs),
    /// Export a verified plan as MSCCL XML (executor dialect).
    ExportMsccl(cmd_msccl::ExportArgs),
    /// Execute a program or plan with real data on every rank and check the result.
    Run(cmd_run::RunArgs),
    /// Run one rank of a multi-process job started by a launcher (torchrun, mpirun,
    /// srun: RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT and BRAID_SECRET), checking the
    /// collective's result.
    Rank(cmd_rank::RankArgs),
    /// nccl-tests style sweep over message sizes: time, algbw, busbw, #wrong.
    Perf(cmd_perf::PerfArgs),
    /// Which plan the cost model picks for a call, and every candidate's predicted time.
    Explain(cmd_explain::ExplainArgs),
    /// Check this machine as the troubleshooting guide does: findings with their fixes
    /// (exit 0 healthy, 1 with findings).
    Doctor(cmd_doctor::DoctorArgs),
    /// Write a verified program for a topology (rings ordered for it, hierarchical ones
    /// across nodes, direct ones for latency), measured against the cut lower bound.
    Synth(cmd_synth::SynthArgs),
    /// Measure the cost model's constants on this machine (host backend) and write a
    /// profile for `braid explain --profile`.
    Tune(cmd_tune::TuneArgs),
    /// Print a topology (ranks, nodes, links, path classes) in the topology file format.
    Topo {
        /// nvswitch:N, pcie:N, cluster:MxG, detect, or a topology file (default: detect).
        topo: Option<String>,
        /// Detect this machine.
        #[arg(long)]
        detect: bool,
    },
}

fn main() -> ExitCode {
    logging::init();
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Check(a) => cmd_check::run(a),
        Command::Run(a) => cmd_run::run(a),
        Command::Perf(a) => cmd_perf::run(a),
        Command::Explain(a) => cmd_explain::run(a),
        Command::Doctor(a) => cmd_doctor::run(a),
        Command::Synth(a) => cmd_synth::run(a),
        Command::Tune(a) => cmd_tune::run(a),
        Command::Rank(a) => cmd_rank::run(a),
        Command::Compile(a) => cmd_compile::run(a),
        Command::ImportMsccl(a) => cmd_msccl::run_import(a),
        Command::ExportMsccl(a) => cmd_msccl::run_export(a),
        Command::Verify { plan } if cmd_msccl::is_xml(plan) => {
            cmd_msccl::verify_xml(plan).map_err(CliError::from)
        }
        Command::Verify { plan } => cmd_verify::run(plan).map_err(CliError::from),
        Command::Topo { topo, detect } => {
            cmd_topo::run(topo.as_deref(), *detect).map_err(CliError::from)
        }
    };
    finish(result)
}

fn finish(result: Result<String, CliError>) -> ExitCode {
    match result {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(CliError::Findings(report)) => {
            print!("{report}");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(e.exit_code() as u8)
        }
    }
}
