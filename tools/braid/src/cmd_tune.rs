//! `braid tune`: measures the cost model's constants on this machine with
//! micro-benchmarks and writes a profile (docs/costmodel.md). The constants come from the
//! micro-benchmarks alone: a chain broadcast of one element over 2 and 8 ranks (the
//! fixed cost of a call and the cost of each message), and a 2-rank chain broadcast of a
//! large message (what one block moves). No plan the model is later scored on is timed.
//!
//! The host backend is what it calibrates; on GPUs (`--backend cuda`) it says that
//! calibration there is not done yet.

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
        return Err(CliError::Usage(
            "error: braid tune --backend cuda: calibration on GPUs is not done yet; the model uses its documented defaults there".into(),
        ));
    }
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    // Fixed costs: one element along chains of 2 and 8 ranks. A chain broadcast of one
    // element sends one message per hop, one after the other.
    let t2 = us(chain_time(2, 1, args.iters)?);
    let t8 = us(chain_time(8, 1, args.iters)?);
    let hop = ((t8 - t2) / 6.0).max(0.0);
    let call = (t2 - hop).max(0.0);
    // What one block moves: 2 ranks, 64 MiB, one hop; the chain pipelines its chunks, so
    // the time is the bytes over one block's rate plus the fixed costs.
    let big = 16 << 20; // f32 elements: 64 MiB
    let tb = us(chain_time(2, big, args.iters.min(5))?);
    let gbps = (big as f64 * 4.0) / ((tb - call - hop).max(1.0) * 1e3);
    let profile = Profile {
        version: PROFILE_VERSION,
        source: format!(
            "braid tune, host backend, {} cores",
            std::thread::available_parallelism().map_or(1, |p| p.get())
        ),
        fingerprint: None,
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
    };
    profile.check().map_err(|e| CliError::Runtime(format!("error: braid tune measured something impossible ({e}); run it again on a quieter machine")))?;
    eprintln!(
        "note: host backend: a call costs {call:.1} us, a message {hop:.1} us, a block moves {gbps:.2} GB/s (chain broadcasts: 1 element on 2 ranks {t2:.1} us, on 8 ranks {t8:.1} us; 64 MiB on 2 ranks {tb:.0} us)"
    );
    let text = profile.to_json();
    match &args.output {
        Some(p) => {
            crate::output::write_atomically(p, &text)?;
            Ok(String::new())
        }
        None => Ok(text),
    }
}
