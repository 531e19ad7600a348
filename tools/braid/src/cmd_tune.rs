//! `braid tune`: measures the cost model's constants on this machine with
//! micro-benchmarks and writes a profile (docs/costmodel.md). The constants come from the
//! micro-benchmarks alone: a chain broadcast of one element over 2 and 8 ranks and a
//! direct broadcast over 8 (the fixed cost of a call, of each message and of starting a
//! block, with the cores the blocks share), and a 2-rank chain broadcast of a large
//! message (what one block moves). No plan the model is later scored on is timed.
//!
//! This file calibrates the host backend; `--backend cuda` measures the GPUs instead
//! (`tune_cuda.rs`), for the topology `--topo` names (the profile is keyed by its
//! fingerprint, which the runtime checks).

use crate::error::CliError;
use braid_cost::profile::{HopLatency, PerProtocol, Profile, PROFILE_VERSION};
use braid_ir::{Collective, Mode};
use braid_runtime::bench::{measure, Case};
use braid_runtime::call::CallSpec;
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::registry::Registry;
use braid_runtime::Communicator;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, clap::Args)]
pub struct TuneArgs {
    /// Write the profile to this file (default: stdout).
    #[arg(short = 'o', long = "output", value_name = "PROFILE")]
    pub output: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "host")]
    pub backend: crate::cmd_run::Backend,
    /// The topology the profile is for: the runtime refuses it on another (`--backend
    /// cuda`: default `nvswitch:N` for the machine's N GPUs, at least 2; host: any
    /// topology unless named).
    #[arg(long)]
    pub topo: Option<String>,
    /// Calls per timed run (the median of 5 runs is used).
    #[arg(short = 'n', long = "iters", default_value_t = 20, value_parser = crate::sizes::parse_positive)]
    pub iters: u32,
}

/// The median time per call of a chain broadcast of `count` f32 on `n` ranks.
fn chain_time(n: u32, count: usize, iters: u32) -> Result<Duration, CliError> {
    let topo = braid_topo::Topology::from_arg(&format!("nvswitch:{n}")).expect("a preset");
    let library = braid_library::Library::new(topo);
    let registry = Registry::new();
    crate::plans::register_shipped(
        &registry,
        &library,
        Collective::Broadcast,
        Some(0),
        "chain_broadcast",
        &format!("nvswitch:{n}"),
    )?;
    broadcast_time(registry, n, count, iters)
}

/// The same for a direct broadcast (the root sends to every rank at once: one message
/// deep, 2(n-1) blocks), the program `braid synth broadcast --objective latency` writes.
fn direct_time(n: u32, iters: u32) -> Result<Duration, CliError> {
    let topo = braid_topo::Topology::from_arg(&format!("nvswitch:{n}")).expect("a preset");
    let program = braid_synth::synthesize(
        Collective::Broadcast,
        &topo,
        braid_synth::Objective::Latency,
    )
    .map_err(|e| CliError::Runtime(format!("error: {e}")))?;
    let mut plans = braid_library::compile_file("direct_broadcast.braid", &program.text, &topo)
        .map_err(|e| CliError::Runtime(format!("error: {e}")))?;
    let registry = Registry::new();
    registry.add_verified(
        Arc::new(plans.remove(0)),
        braid_runtime::registry::Origin::User("braid tune".into()),
    );
    broadcast_time(registry, n, 1, iters)
}

/// The median time per call of a broadcast of `count` f32 from rank 0 on `n` ranks with
/// the one plan of `registry`.
fn broadcast_time(
    registry: Registry,
    n: u32,
    count: usize,
    iters: u32,
) -> Result<Duration, CliError> {
    let comms = Communicator::create_local(
        n,
        Arc::new(registry),
        braid_runtime::comm::timeout_from_env(),
    );
    let case = Case {
        spec: CallSpec {
            collective: Collective::Broadcast,
            count,
            dtype: DType::F32,
            op: RedOp::Sum,
            root: Some(0),
        },
        mode: Mode::OutOfPlace,
        warmup: 3,
        iters,
        runs: 5,
        sync: false,
        seed: 1,
    };
    let m = measure(&comms, &case).map_err(|e| CliError::Runtime(format!("error: {e}")))?;
    if m.wrong > 0 {
        return Err(CliError::Runtime(
            "error: braid tune: a calibration call gave a wrong result".into(),
        ));
    }
    Ok(m.time())
}

pub fn run(args: &TuneArgs) -> Result<String, CliError> {
    if args.backend == crate::cmd_run::Backend::Cuda {
        let spec = match &args.topo {
            Some(t) => t.clone(),
            None if braid_cuda::driver_present() => {
                format!("nvswitch:{}", braid_cuda::device_count().max(2))
            }
            None => "nvswitch:2".into(),
        };
        let topo = crate::topo_arg::load(&spec)?;
        let profile = crate::tune_cuda::tune(&topo, args.iters, &|what| {
            eprintln!("braid tune: measuring {what}")
        })?;
        return emit(args, &profile);
    }
    let fingerprint = match &args.topo {
        Some(t) => Some(crate::topo_arg::load(t)?.fingerprint()),
        None => None,
    };
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    // Three small calls separate the fixed costs: a chain of 2 ranks (one message, 2
    // blocks), of 8 (seven messages one after another, 8 blocks), and a direct broadcast
    // on 8 (one message deep, 14 blocks, more than the cores run at once). With c cores:
    //   t2 = call + hop + block, t8 = call + 7 hop + block, td = call + 14 block / c.
    let cores = std::thread::available_parallelism().map_or(1, |p| p.get()) as u32;
    let t2 = us(chain_time(2, 1, args.iters)?);
    let t8 = us(chain_time(8, 1, args.iters)?);
    let td = us(direct_time(8, args.iters)?);
    let hop = ((t8 - t2) / 6.0).max(0.0);
    // td - t2 = 14 block / c - hop - block.
    let block = ((td - t2 + hop) / (14.0 / f64::from(cores) - 1.0).max(0.5)).max(0.0);
    let call = (t2 - hop - block).max(0.0);
    // What one block moves: 2 ranks, 64 MiB, one hop; the chain pipelines its chunks, so
    // the time is the bytes over one block's rate plus the fixed costs.
    let big = 16 << 20; // f32 elements: 64 MiB
    let tb = us(chain_time(2, big, args.iters.min(5))?);
    let gbps = (big as f64 * 4.0) / ((tb - call - hop).max(1.0) * 1e3);
    // What one thread copies locally (a block's copies and reductions that cross no link).
    let copy = braid_runtime::bench::copy_rate(big * 4, 1) / 1e9;
    let profile = Profile {
        version: PROFILE_VERSION,
        source: format!(
            "braid tune, host backend, {} cores",
            std::thread::available_parallelism().map_or(1, |p| p.get())
        ),
        // Keyed to a topology only when one is named (the host's constants are the
        // machine's, whatever the ranks are taken to be).
        fingerprint,
        call_us: PerProtocol {
            simple: call,
            ll: call,
        },
        hop_us: HopLatency {
            nvlink: PerProtocol {
                simple: hop,
                ll: hop,
            },
            pci: PerProtocol {
                simple: hop,
                ll: hop,
            },
            net: PerProtocol {
                simple: hop,
                ll: hop,
            },
        },
        block_gbps: PerProtocol {
            simple: gbps,
            ll: gbps,
        },
        efficiency: PerProtocol {
            simple: 1.0,
            ll: 1.0,
        },
        slice_bytes: PerProtocol {
            simple: braid_runtime::exec::SLICE_BYTES as f64,
            ll: braid_runtime::exec::SLICE_BYTES as f64,
        },
        slice_us: PerProtocol {
            simple: 0.0,
            ll: 0.0,
        },
        net_post_us: PerProtocol {
            simple: 0.0,
            ll: 0.0,
        },
        block_us: PerProtocol {
            simple: block,
            ll: block,
        },
        cores,
        copy_gbps: PerProtocol {
            simple: copy,
            ll: copy,
        },
        shared_gbps: PerProtocol::default(),
    };
    profile.check().map_err(|e| CliError::Runtime(format!("error: braid tune measured something impossible ({e}); run it again on a quieter machine")))?;
    eprintln!(
        "note: host backend: a call costs {call:.1} us, a message {hop:.1} us, starting a block {block:.1} us on {cores} cores, a block moves {gbps:.2} GB/s and copies {copy:.2} GB/s (chain broadcasts of 1 element on 2 ranks {t2:.1} us, on 8 ranks {t8:.1} us; direct broadcast on 8 ranks {td:.1} us; 64 MiB on 2 ranks {tb:.0} us)"
    );
    emit(args, &profile)
}

/// Writes the profile to `-o` (atomically), or returns it for stdout.
fn emit(args: &TuneArgs, profile: &Profile) -> Result<String, CliError> {
    let text = profile.to_json();
    match &args.output {
        Some(p) => {
            crate::output::write_atomically(p, &text)?;
            Ok(String::new())
        }
        None => Ok(text),
    }
}
