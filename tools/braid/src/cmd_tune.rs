//! `braid tune`: measures the cost model's constants on this machine with
//! micro-benchmarks and writes a profile (docs/costmodel.md). The constants come from the
//! micro-benchmarks alone: a chain broadcast of one element (one chunk) over 2 and 8
//! ranks and a direct broadcast over 8, alone and replicated 2, 4 and 8 times (the fixed
//! cost of a call, of each message and of starting a block, and what a block's start
//! costs the cores where blocks outnumber them; each the median of [`REPEATS`]
//! interleaved measurements), and a 2-rank chain broadcast of a large message (what one
//! block moves).
//! No plan the model is later scored on is timed.
//!
//! This file calibrates the host backend, its ranks as threads of one process or, with
//! `--procs`, one process per rank (`braid perf --procs` times the micro-benchmarks, over
//! shared memory or, with `BRAID_SHM_DISABLE=1`, TCP); `--backend cuda` measures the GPUs instead
//! (`tune_cuda.rs`), for the topology `--topo` names (the profile is keyed by its
//! fingerprint, which the runtime checks).

use crate::error::CliError;
use braid_cost::profile::{
    BlockWork, CopyScale, HopLatency, PerProtocol, Profile, PROFILE_VERSION,
};
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
    /// Host backend: one process per rank, as `braid perf --procs` runs them (over shared
    /// memory, or TCP with `BRAID_SHM_DISABLE=1`), instead of threads of one process.
    #[arg(long)]
    pub procs: bool,
}

/// How the micro-benchmarks' ranks run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ranks {
    Threads,
    Procs,
}

/// Replicas of the direct broadcast timed beside it for what a block's start costs the
/// cores (up to 120 blocks on 8 ranks).
const REPLICATED: [u32; 3] = [2, 4, 8];

/// The footprints (MiB) `braid tune` times a thread's copies through for `copy_scale`; the
/// last is the reference.
const COPY_SCALE_MIB: [u32; 5] = [4, 16, 64, 128, 256];

/// Times each small calibration call is measured, interleaved with the others, for the
/// median: on two cores one run of a 2-rank chain reads anywhere from 70 to 170 µs.
const REPEATS: usize = 7;

/// A chain broadcast on `n` ranks of one chunk: each link carries one message, as the
/// closed form below counts them (the shipped chain cuts the message into max(n, 4)
/// chunks, so its 8-rank chain carried 8 messages a link and its 2-rank one 4).
fn chain_plan(n: u32) -> Result<Arc<braid_plan::Verified>, CliError> {
    let topo = braid_topo::Topology::from_arg(&format!("nvswitch:{n}")).expect("a preset");
    let text = "algorithm chain1_broadcast : broadcast {
    chunks 1;
    copy out[ROOT][0 .. C] <- in[ROOT][0 .. C];
    if N > 1 { copy out[ROOT + 1][0 .. C] <- in[ROOT][0 .. C]; }
    for i in 2 .. N { copy out[ROOT + i][0 .. C] <- out[ROOT + i - 1][0 .. C]; }
}
";
    compile(&topo, "chain1_broadcast.braid", text)
}

/// The one plan of the program `text` on `topo`.
fn compile(
    topo: &braid_topo::Topology,
    name: &str,
    text: &str,
) -> Result<Arc<braid_plan::Verified>, CliError> {
    let mut plans = braid_library::compile_file(name, text, topo)
        .map_err(|e| CliError::Runtime(format!("error: {e}")))?;
    Ok(Arc::new(plans.remove(0)))
}

/// A direct broadcast on `n` ranks (the root sends to every rank at once: one message
/// deep, 2(n-1) blocks), the program `braid synth broadcast --objective latency` writes,
/// replicated `replicas` times (each replica its own blocks).
fn direct_plan(n: u32, replicas: u32) -> Result<Arc<braid_plan::Verified>, CliError> {
    let topo = braid_topo::Topology::from_arg(&format!("nvswitch:{n}")).expect("a preset");
    let program = braid_synth::synthesize(
        Collective::Broadcast,
        &topo,
        braid_synth::Objective::Latency,
    )
    .map_err(|e| CliError::Runtime(format!("error: {e}")))?;
    // The `channels` header goes first in the algorithm's body.
    let text = match program.text.split_once("{\n") {
        Some((head, body)) if replicas > 1 => format!("{head}{{\n    channels {replicas};\n{body}"),
        _ => program.text.clone(),
    };
    compile(&topo, "direct_broadcast.braid", &text)
}

/// The median time per call of a broadcast of `count` f32 from rank 0 on `n` ranks with
/// `bench`'s plan.
fn broadcast_time(
    ranks: Ranks,
    bench: &Arc<braid_plan::Verified>,
    n: u32,
    count: usize,
    iters: u32,
    mode: Mode,
) -> Result<Duration, CliError> {
    if ranks == Ranks::Procs {
        return broadcast_time_procs(bench, n, count, iters, mode);
    }
    let registry = Registry::new();
    registry.add_verified(
        bench.clone(),
        braid_runtime::registry::Origin::User("braid tune".into()),
    );
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
        mode,
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

/// [`broadcast_time`] with one process per rank: `braid perf --procs` (this executable)
/// runs the calls and reports their median time.
fn broadcast_time_procs(
    bench: &Arc<braid_plan::Verified>,
    n: u32,
    count: usize,
    iters: u32,
    mode: Mode,
) -> Result<Duration, CliError> {
    let child = crate::perf_child::Child {
        plan: bench,
        ranks: n,
        bytes: count * 4,
        mode,
        iters,
        args: &["--procs"],
        env: &[],
    };
    let t = crate::perf_child::time(&child, "braid tune --procs")?;
    Ok(Duration::from_secs_f64(t.us / 1e6))
}

pub fn run(args: &TuneArgs) -> Result<String, CliError> {
    if args.backend == crate::cmd_run::Backend::Cuda {
        if args.procs {
            return Err(CliError::Usage(
                "error: braid tune --procs measures the host backend's processes; the GPU \
                 calibration runs its ranks in one process"
                    .into(),
            ));
        }
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
    // Three small calls separate the fixed costs: a chain of 2 ranks (one message, one
    // block a rank), of 8 (seven messages one after another, one block a rank), and a
    // direct broadcast on 8 (one message deep; the root's 7 blocks start one after
    // another, as its call wakes their threads in turn):
    //   t2 = call + block + hop, t8 = call + block + 7 hop, td = call + 7 block + hop.
    // (Where the cores are fewer than the blocks, the 14 wake-ups of the direct broadcast
    // take at least 14 block / cores, which is 7 block on two cores: the same.)
    let cores = std::thread::available_parallelism().map_or(1, |p| p.get()) as u32;
    let ranks = if args.procs {
        Ranks::Procs
    } else {
        Ranks::Threads
    };
    // Each small call is measured REPEATS times, interleaved, and its median kept: every
    // constant comes from differences of these, so one disturbed measurement (a busy
    // scheduler, say) would otherwise move them all.
    //
    // The same direct broadcast replicated (2, 4, 8 times: 30 to 120 blocks) prices what
    // a block's start costs the cores by the blocks a call starts (`block_work_us`): each
    // call's time beyond its call and message, per block, times the cores.
    let (mut t2s, mut t8s, mut tds) = (Vec::new(), Vec::new(), Vec::new());
    let direct = direct_plan(8, 1)?;
    let many = REPLICATED
        .iter()
        .map(|&r| direct_plan(8, r))
        .collect::<Result<Vec<_>, _>>()?;
    let mut tms = vec![Vec::new(); many.len()];
    let (chain2, chain8) = (chain_plan(2)?, chain_plan(8)?);
    for _ in 0..REPEATS {
        t2s.push(broadcast_time(
            ranks,
            &chain2,
            2,
            1,
            args.iters,
            Mode::OutOfPlace,
        )?);
        t8s.push(broadcast_time(
            ranks,
            &chain8,
            8,
            1,
            args.iters,
            Mode::OutOfPlace,
        )?);
        tds.push(broadcast_time(
            ranks,
            &direct,
            8,
            1,
            args.iters,
            Mode::OutOfPlace,
        )?);
        for (t, plan) in tms.iter_mut().zip(&many) {
            t.push(broadcast_time(
                ranks,
                plan,
                8,
                1,
                args.iters,
                Mode::OutOfPlace,
            )?);
        }
    }
    let median = |v: &[Duration]| us(braid_runtime::bench::median(v));
    let (t2, t8, td) = (median(&t2s), median(&t8s), median(&tds));
    let hop = ((t8 - t2) / 6.0).max(0.0);
    let block = ((td - t2) / 6.0).max(0.0);
    let call = (t2 - hop - block).max(0.0);
    let block_work: Vec<BlockWork> = std::iter::once((&direct, td))
        .chain(many.iter().zip(tms.iter().map(|t| median(t))))
        .map(|(p, t)| {
            // Every rank's blocks, every replica's.
            let blocks = braid_cost::sim::launched_blocks(p, p.channels, true);
            BlockWork {
                blocks: blocks as u32,
                us: (f64::from(cores) * (t - call - hop) / blocks as f64).max(0.0),
            }
        })
        .collect();
    // What one block moves: the chain of one chunk on 2 ranks, 128 MiB, one hop, in place;
    // the chain pipelines the chunk slice by slice, so the time is the bytes over one
    // block's rate plus the fixed costs. In place, because out of place the root first
    // copies its input to its output and its sends wait for that copy (the plan orders
    // them so for both modes): a block's rate would then include a local copy of every
    // byte. Its buffers (one a rank) take 256 MiB, the copy table's reference below,
    // against which the model prices a step over a link at every other size.
    let big = 32 << 20; // f32 elements: 128 MiB
    let tb = us(broadcast_time(
        ranks,
        &chain2,
        2,
        big,
        args.iters.min(5),
        Mode::InPlace,
    )?);
    let gbps = (big as f64 * 4.0) / ((tb - call - block - hop).max(1.0) * 1e3);
    // What one thread copies locally (a block's copies and reductions that cross no link),
    // through 4 to 256 MiB of memory: the rate through the largest is `copy_gbps` (from
    // memory, past every cache), the others are its scale where a call's buffers fit the
    // caches. One measurement serves both, so a call is never priced against two
    // references.
    let rates: Vec<f64> = COPY_SCALE_MIB
        .iter()
        .map(|&mib| braid_runtime::bench::footprint_copy_rate((mib as usize) << 20))
        .collect();
    let reference = rates[rates.len() - 1];
    let copy = reference / 1e9;
    let copy_scale: Vec<CopyScale> = COPY_SCALE_MIB
        .iter()
        .zip(&rates)
        .map(|(&mib, r)| CopyScale {
            mib,
            scale: r / reference,
        })
        .collect();
    let mut profile = Profile {
        version: PROFILE_VERSION,
        source: format!(
            "braid tune, host backend{}, {} cores{}",
            match (
                args.procs,
                std::env::var("BRAID_SHM_DISABLE").is_ok_and(|v| v == "1"),
            ) {
                (false, _) => "",
                (true, false) => " (a process per rank, shared memory)",
                (true, true) => " (a process per rank, TCP)",
            },
            std::thread::available_parallelism().map_or(1, |p| p.get()),
            // Bound ranks run small calls faster and large ones slower: a profile says
            // which it describes.
            if braid_runtime::binds_threads() {
                ", threads bound to CPUs (BRAID_CPU_AFFINITY=1)"
            } else {
                ""
            }
        ),
        // Keyed to a topology only when one is named (the host's constants are the
        // machine's, whatever the ranks are taken to be).
        fingerprint,
        call_us: PerProtocol::both(call),
        hop_us: HopLatency {
            nvlink: PerProtocol::both(hop),
            pci: PerProtocol::both(hop),
            net: PerProtocol::both(hop),
        },
        block_gbps: PerProtocol::both(gbps),
        efficiency: PerProtocol::both(1.0),
        slice_bytes: PerProtocol::both(braid_runtime::exec::SLICE_BYTES as f64),
        slice_us: PerProtocol::both(0.0),
        // A receiving step's cost is in the hop and the block's start here.
        recv_slice_us: PerProtocol::default(),
        net_post_us: PerProtocol::both(0.0),
        block_us: PerProtocol::both(block),
        // A wait for another block's step is a thread's wake-up here: `block_us`.
        wait_us: PerProtocol::default(),
        cores,
        block_work_us: block_work,
        copy_gbps: PerProtocol::both(copy),
        // Found below, once the rest prices the broadcast that measures it.
        link_work_gbps: PerProtocol::default(),
        shared_gbps: PerProtocol::default(),
        shared_knee: PerProtocol::default(),
        launch_block_us: PerProtocol::default(),
        // The host backend has no flat launches, nor ranks sharing a launch.
        flat_call_us: 0.0,
        flat_gpu_us: 0.0,
        flat_block_gbps: 0.0,
        flat_pass_us: 0.0,
        rank_us: 0.0,
        flat_arg_us: Vec::new(),
        copy_scale,
        // The host executor copies each message into its link and out of it, through a
        // temporary where it reduces or forwards.
        staged_steps: true,
        ll128: Vec::new(),
    };
    profile.check().map_err(|e| CliError::Runtime(format!("error: braid tune measured something impossible ({e}); run it again on a quieter machine")))?;
    // What a byte over a link costs the cores beyond its copies (TCP's socket path): the
    // root of a direct broadcast on 8 ranks sends 16 MiB to each of 7 ranks at once, in
    // place (no local copy), so the cores are busy with the links' work; the rate is the
    // one at which the model prices that call at its measured time (none where the model
    // already prices it at least that high: shared memory).
    // Measurable only where the broadcast's blocks outnumber the cores (else they do not
    // compete for them, and the fit would lay whatever else slows the call on the cores).
    let direct_blocks = braid_cost::sim::launched_blocks(&direct, 1, true);
    let contended = u64::from(cores) < direct_blocks;
    let (tw, link_work) = if contended {
        let wide = BIG_BROADCAST_BYTES / 4;
        let tw = us(broadcast_time(
            ranks,
            &direct,
            8,
            wide,
            args.iters.min(5),
            Mode::InPlace,
        )?);
        let topo8 = braid_topo::Topology::from_arg("nvswitch:8").expect("a preset");
        let wide_call = braid_cost::Call {
            bytes: BIG_BROADCAST_BYTES as u64,
            elem: 4,
            protocol: braid_ir::Protocol::Simple,
            replicas: 1,
            direct: false,
            together: false,
            in_place: true,
        };
        let rate = fit_link_work(tw, |gbps| {
            let mut p = profile.clone();
            p.link_work_gbps = PerProtocol::both(gbps);
            braid_cost::predict(&direct, &topo8, &p, &wide_call)
                .map_or(f64::INFINITY, |x| x.total_us)
        });
        (tw, rate)
    } else {
        (0.0, 0.0)
    };
    profile.link_work_gbps = PerProtocol::both(link_work);
    eprintln!(
        "note: host backend: a call costs {call:.1} us, a message {hop:.1} us, starting a block {block:.1} us on {cores} cores (of the cores' time: {}), a block moves {gbps:.2} GB/s and copies {copy:.2} GB/s through 256 MiB ({}); beyond its copies, a byte over a link costs the cores {} (chain broadcasts of 1 element on 2 ranks {t2:.1} us, on 8 ranks {t8:.1} us; direct broadcast on 8 ranks {td:.1} us; 128 MiB on 2 ranks, in place, {tb:.0} us)",
        profile
            .block_work_us
            .iter()
            .map(|w| format!("{:.1} us in a call of {} blocks", w.us, w.blocks))
            .collect::<Vec<_>>()
            .join(", "),
        profile
            .copy_scale
            .iter()
            .map(|c| format!("x{:.2} through {} MiB", c.scale, c.mib))
            .collect::<Vec<_>>()
            .join(", "),
        match (contended, link_work > 0.0) {
            (false, _) => format!(
                "nothing measured (the cores outnumber the {direct_blocks} blocks of a broadcast on 8 ranks)"
            ),
            (true, true) => format!(
                "as much as copying it at {link_work:.2} GB/s (a broadcast of 16 MiB on 8 ranks, in place, {tw:.0} us)"
            ),
            (true, false) => format!("nothing (a broadcast of 16 MiB on 8 ranks, in place, {tw:.0} us)"),
        }
    );
    emit(args, &profile)
}

/// Bytes of the direct broadcast that times a link's work on the cores.
const BIG_BROADCAST_BYTES: usize = 16 << 20;

/// The rate (GB/s) at which `price` (µs, falling as the rate rises; 0 meaning none)
/// meets `measured` µs, by the tunes' bisection; 0 (none) where it does so with none.
fn fit_link_work(measured: f64, price: impl Fn(f64) -> f64) -> f64 {
    if !measured.is_finite() || price(0.0) >= measured {
        return 0.0;
    }
    crate::tune_cuda::solve(1e-3, 1e4, true, measured, price)
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

#[cfg(test)]
mod tests {
    use super::fit_link_work;

    /// A price of 1000 µs plus 2 cores' share of 100 MB at the rate: the fit finds the
    /// rate that meets the measured time, none where the price without it already does.
    #[test]
    fn the_link_work_is_the_rate_that_prices_the_broadcast_at_its_time() {
        let price = |gbps: f64| {
            1000.0
                + if gbps > 0.0 {
                    100e6 / (gbps * 1e3) / 2.0
                } else {
                    0.0
                }
        };
        // 25000 µs beyond: 100 MB over 2 cores in 25 ms is 2 GB/s.
        let r = fit_link_work(26000.0, price);
        assert!((r - 2.0).abs() < 1e-6, "{r}");
        // A slow socket path: well below 1 GB/s.
        let r = fit_link_work(251000.0, price);
        assert!((r - 0.2).abs() < 1e-6, "{r}");
        assert_eq!(fit_link_work(900.0, price), 0.0);
        assert_eq!(fit_link_work(1000.0, price), 0.0);
        assert_eq!(fit_link_work(f64::NAN, price), 0.0);
    }
}
