//! `braid tune --backend cuda`: the cost model's constants measured on this machine's
//! GPUs, per protocol, with micro-benchmarks only: chain broadcasts (the shipped
//! `chain_broadcast`, one replica unless said) timed back to back between CUDA events
//! as `braid perf` times (in up to 7 groups of runs a tenth of a second of untimed calls
//! apart: the quietest group's median), each checked right, with the step times the GPU
//! records (`BRAID_TRACE`'s record) read back.
//!
//! | constant | micro-benchmark | how |
//! |---|---|---|
//! | `slice_us` | 1 element on 8 ranks | the root's steps after its first, timed on the GPU (median): in LL and LL128 their period (a step's start to the next's), in Simple their duration |
//! | `recv_slice_us` | the same | LL and LL128: the receiving ranks' steps' period after their first (median); Simple: none |
//! | `hop_us` | the same | a step ending on one rank, then on the next (median; in LL and LL128 between receivers only) |
//! | `wait_us` | [`WAIT_PROBE`]: 8 chunks of 1 element on 2 ranks, a local copy of each waiting for its receive in another block | the copies' end beyond the receives', less a copy that waits for nothing (medians) |
//! | `launch_block_us` | 1 element on 8 ranks, 1 and 12 replicas | the model reproduces the difference |
//! | `call_us` | 1 element on 2 ranks | the model reproduces the time |
//! | `block_gbps` | 2 ranks, a large message, 1 replica | the model reproduces the time |
//! | `shared_gbps` | 2 ranks, a large message, every replica the budget allows | the same, where ranks share a GPU |
//! | `shared_knee` | 2 ranks, the same message, the replicas (1 to 16) whose blocks alone would take about as long as the memory allows | the same (then `shared_gbps` again with it); 0 (sharp) where no replica count comes within 2x |
//! | `flat_gpu_us` | `direct_broadcast` of 1 element on 2 ranks sharing a GPU, direct reads on (a flat launch), replayed from CUDA graphs | the model reproduces the time with no host share |
//! | `flat_block_gbps` | the same broadcast of 384 KiB (6 parts of a block each), replayed likewise | the model reproduces the time with no host share; 0 where even the fastest block does not |
//! | `flat_pass_us` | the shipped `chain_broadcast` of 1 KiB on 2 ranks as a flat launch (four passes in a row per block), replayed likewise | the same |
//! | `flat_call_us` | the same, back to back, here and by `braid perf` in 6 further processes | the model reproduces the median of the 7 times |
//! | `rank_us` | the same on the topology's ranks (at most a launch's), likewise | the difference of the medians, per rank beyond two |
//! | `flat_arg_us` | the flat kernel's three entry points launched empty, back to back (`braid_cuda::arg_cost`) | each one's time beyond the smallest's |
//!
//! Step and hop come from the GPU's own clock because calls of many ranks in one process
//! may be issued slower than the GPU runs them: their back-to-back time measures the host.
//! "The model reproduces the time": the constant is the value for which the model's
//! prediction of that micro-benchmark equals its measured time (bisection; the model is
//! monotone in each constant), so what the profile says and what the model does with it
//! agree by construction. No plan the model is later scored on is timed. The hop latency
//! is measured on the paths this machine's ranks use (NVLink between GPUs, or within one
//! GPU); the other path kinds keep their defaults. LL's payload share stays 0.5 (its
//! lines are half flags: a property of the protocol, not of the machine).

use crate::error::CliError;
use braid_cost::profile::{ArgCost, PerProtocol, Profile};
use braid_cost::{predict, Call};
use braid_ir::{Collective, Mode, Protocol};
use braid_plan::Verified;
use braid_runtime::registry::{Origin, Registry};
use braid_topo::Topology;
use std::sync::Arc;

/// One micro-benchmark: a chain broadcast of `count` f32 on `n` ranks with `replicas`
/// and `protocol`, and its median time per call (µs).
struct Bench {
    count: usize,
    replicas: u32,
    protocol: Protocol,
    plan: Arc<Verified>,
    us: f64,
    /// The last call's step times as the GPU recorded them (`BRAID_TRACE`'s record):
    /// per rank, per block of the plan, each step's (start, end) in ns.
    steps: Vec<Vec<Vec<(u64, u64)>>>,
}

impl Bench {
    /// The median time a step of the root's sending block takes after its first, µs:
    /// what interpreting a step costs its block, the move to the next step aside.
    fn step_us(&self) -> Option<f64> {
        let root = self.steps.first()?.first()?;
        let d: Vec<f64> = root
            .iter()
            .skip(1)
            .map(|&(a, b)| b.saturating_sub(a) as f64 / 1e3)
            .collect();
        median(d)
    }

    /// The median period of the root's sending steps after its first (one step's start
    /// to the next's), µs: what a step that sends costs its block, its move to the next
    /// step included (the chain's later steps find their slot free).
    fn step_period_us(&self) -> Option<f64> {
        median(periods(self.steps.first()?.first()?))
    }

    /// The median period of the receiving ranks' steps after their first, µs: what a step
    /// that receives (polls its message's flags, then forwards it) costs its block. The
    /// root feeds the chain faster than its receivers take it, so their steps follow
    /// their own pace.
    fn recv_step_us(&self) -> Option<f64> {
        let d: Vec<f64> = self
            .steps
            .iter()
            .skip(1)
            .filter_map(|r| r.first())
            .flat_map(|b| periods(b))
            .collect();
        median(d)
    }

    /// The median delay between one rank's step ending and the same step ending on the
    /// next rank of the chain, µs: what a message costs a hop, end to end. Between
    /// receivers only (`receivers`), which keep one pace, it is the message's alone; the
    /// root's steps are quicker, so the first receiver falls behind it step by step.
    fn hop_us(&self, receivers: bool) -> Option<f64> {
        let ends = |r: usize, k: usize| self.steps.get(r)?.first()?.get(k).map(|s| s.1);
        let mut d = Vec::new();
        let first = usize::from(receivers && self.steps.len() > 2);
        for r in first..self.steps.len().saturating_sub(1) {
            for k in 1.. {
                match (ends(r, k), ends(r + 1, k)) {
                    (Some(a), Some(b)) if b >= a => d.push((b - a) as f64 / 1e3),
                    (Some(_), Some(_)) => {}
                    _ => break,
                }
            }
        }
        median(d)
    }

    /// What a local copy that waited for another block's step took beyond that step's
    /// end, less what a copy that waits for nothing takes, µs (medians): the wait's own
    /// cost. A copy counts as waiting where the step it waits for ended after its own
    /// block was ready for it (its previous step's end, or the block's start).
    fn wait_us(&self) -> Option<f64> {
        let at = |r: usize, b: usize, s: usize| self.steps.get(r)?.get(b)?.get(s).copied();
        let us = |ns: u64| ns as f64 / 1e3;
        let (mut alone, mut waited) = (Vec::new(), Vec::new());
        for (r, rank) in self.plan.ranks.iter().enumerate() {
            for (b, block) in rank.blocks.iter().enumerate() {
                for (s, step) in block.steps.iter().enumerate() {
                    if step.kind != braid_plan::StepKind::Copy {
                        continue;
                    }
                    let Some((start, end)) = at(r, b, s) else {
                        continue;
                    };
                    if step.deps.is_empty() {
                        // (A block's first step pays its block's start too.)
                        if s > 0 {
                            alone.push(us(end.saturating_sub(start)));
                        }
                        continue;
                    }
                    let other = step
                        .deps
                        .iter()
                        .filter_map(|d| at(r, d.block as usize, d.step as usize).map(|x| x.1))
                        .max();
                    let ready = if s == 0 {
                        Some(start)
                    } else {
                        at(r, b, s - 1).map(|x| x.1)
                    };
                    if let (Some(other), Some(ready)) = (other, ready) {
                        if other > ready && end >= other {
                            waited.push(us(end - other));
                        }
                    }
                }
            }
        }
        Some((median(waited)? - median(alone)?).max(0.0))
    }
}

/// A block's step periods after its first (one step's start to the next's), µs.
fn periods(steps: &[(u64, u64)]) -> Vec<f64> {
    steps
        .windows(2)
        .skip(1)
        .map(|w| w[1].0.saturating_sub(w[0].0) as f64 / 1e3)
        .collect()
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

fn rt(e: braid_cuda::CudaError) -> CliError {
    CliError::Runtime(format!("error: braid tune: {e}"))
}

/// The shipped chain broadcast from rank 0 on `nvswitch:n`.
fn chain(n: u32) -> Result<Arc<Verified>, CliError> {
    broadcast(n, "chain_broadcast")
}

/// The shipped broadcast `name` for `n` ranks, root 0.
fn broadcast(n: u32, name: &str) -> Result<Arc<Verified>, CliError> {
    let topo = Topology::from_arg(&format!("nvswitch:{n}")).expect("a preset");
    braid_library::Library::new(topo)
        .plans(Collective::Broadcast, Some(0))
        .into_iter()
        .find(|p| p.name == name)
        .ok_or_else(|| CliError::Runtime(format!("error: braid tune: no {name}")))
}

/// The program a wait for another block's step is timed on (2 ranks, root 0): the root
/// sends its chunks one by one and copies each into its own output, one step each,
/// waiting for nothing; rank 1 receives each into scratch, and a block of its own copies
/// each into the output once it has arrived (a local copy waiting for a receive in
/// another block). No shipped plan: written here for the measurement.
const WAIT_PROBE: &str = "\
algorithm tune_wait_probe : broadcast where N == 2 {
    chunks 8;
    scratch C;
    for i in 0 .. C {
        copy scratch[ROOT + 1][i .. i + 1] <- in[ROOT][i .. i + 1];
        copy out[ROOT + 1][i .. i + 1] <- scratch[ROOT + 1][i .. i + 1];
        copy out[ROOT][i .. i + 1] <- in[ROOT][i .. i + 1];
    }
}
";

/// Elements of [`WAIT_PROBE`]'s call: one a chunk.
const WAIT_PROBE_CHUNKS: usize = 8;

/// [`WAIT_PROBE`] compiled and verified for 2 ranks, root 0.
fn wait_probe() -> Result<Arc<Verified>, CliError> {
    let topo = Topology::from_arg("nvswitch:2").expect("a preset");
    braid_library::compile_file("braid tune's wait probe", WAIT_PROBE, &topo)
        .map_err(|e| CliError::Runtime(format!("error: braid tune: {e}")))?
        .into_iter()
        .find(|p| p.root == Some(0))
        .map(Arc::new)
        .ok_or_else(|| CliError::Runtime("error: braid tune: no wait probe for root 0".into()))
}

/// Times one micro-benchmark on this machine's GPUs (rank `r` on GPU `r % GPUs`).
fn measure(
    ll128: &[braid_cost::Ll128Verdict],
    n: u32,
    count: usize,
    replicas: u32,
    protocol: Protocol,
    iters: u32,
) -> Result<Bench, CliError> {
    measure_plan(
        ll128,
        chain(n)?,
        n,
        count,
        replicas,
        protocol,
        iters,
        false,
        false,
    )
}

/// [`measure`] with `plan`; `direct`: ranks of one launch read each other's inputs
/// (then no step times are recorded: recording them takes the interpreter); `graph`: the
/// calls replayed from CUDA graphs (the GPU's time, without the host's issuing).
#[allow(clippy::too_many_arguments)]
fn measure_plan(
    ll128: &[braid_cost::Ll128Verdict],
    plan: Arc<Verified>,
    n: u32,
    count: usize,
    replicas: u32,
    protocol: Protocol,
    iters: u32,
    direct: bool,
    graph: bool,
) -> Result<Bench, CliError> {
    let registry = Registry::new();
    registry.add_verified(plan.clone(), Origin::User("braid tune".into()));
    let mut opts = crate::cmd_run::cuda_options(None)?;
    opts.policy.replicas = Some(replicas);
    opts.policy.protocol = Some(protocol);
    opts.ll128 = ll128.to_vec();
    opts.trace = !direct;
    // The constants describe the FIFO path; direct reads are priced from them (a local
    // copy or reduction), so the micro-benchmarks take that path only to time a flat
    // launch.
    opts.direct = direct;
    let (comms, streams) = crate::cmd_run::open_cuda_with(n, Arc::new(registry), &opts)?;
    let case = braid_cuda::check::Case {
        collective: Collective::Broadcast,
        dtype: braid_runtime::dtype::DType::F32,
        op: braid_runtime::dtype::RedOp::Sum,
        count,
        mode: Mode::OutOfPlace,
        root: Some(0),
        seed: 1,
    };
    let p = braid_cuda::check::Prepared::new(&comms, &streams, &case).map_err(rt)?;
    p.run().map_err(rt)?;
    if p.wrong().map_err(rt)?.iter().any(|w| w.1 > 0) {
        return Err(CliError::Runtime(
            "error: braid tune: a calibration call gave a wrong result".into(),
        ));
    }
    let flat_before = comms[0].stats().flat_launches;
    let groups = time_groups(
        Pace::TUNE,
        || p.time_runs(3, iters, 5, graph),
        || p.time_runs(0, iters, 1, graph).map(drop),
    )
    .map_err(rt)?;
    let us = quietest(&groups).as_secs_f64() * 1e6;
    tracing::debug!(
        plan = %plan.name,
        ranks = n,
        count,
        replicas,
        ?protocol,
        direct,
        graph,
        groups_us = ?groups
            .iter()
            .map(|g| (braid_runtime::bench::median(g).as_secs_f64() * 1e7).round() / 10.0)
            .collect::<Vec<_>>(),
        "braid tune: each group's median"
    );
    // A flat launch's time must be one: a call that fell back to the interpreter would
    // price flat launches at the interpreter's cost.
    if direct && comms[0].stats().flat_launches == flat_before {
        return Err(CliError::Runtime(format!(
            "error: braid tune: `{}` on {n} ranks did not run as a flat launch",
            plan.name
        )));
    }
    let (ran, proto_ran) = braid_cuda::check::selection(&comms[0], &case)
        .map_err(rt)?
        .expect("a positive count has a plan");
    if proto_ran != protocol {
        return Err(CliError::Runtime(format!(
            "error: braid tune: `{}` ran {proto_ran:?} where {protocol:?} was to be timed",
            plan.name
        )));
    }
    let mut steps = Vec::new();
    for comm in &comms {
        let times = comm
            .step_times(&case.spec(), Mode::OutOfPlace)
            .map_err(|e| CliError::Runtime(format!("error: braid tune: {e}")))?;
        steps.push(times.map_or(Vec::new(), |(_, t)| t));
    }
    Ok(Bench {
        count,
        replicas: ran.channels,
        protocol,
        plan,
        us,
        steps,
    })
}

/// Further processes a flat launch is timed in ([`typical`]); even, so that with this
/// process the count is odd and its median one of the times.
const PACE_PROCESSES: usize = 6;

/// The flat launch `b` (timed in this process) as a process typically runs it: timed
/// again by `braid perf` in [`PACE_PROCESSES`] processes of their own, the median of all.
/// A flat launch's time is mostly the host's issuing it, and that differs from process
/// to process and stays for the process's life: on an H100 machine the same launch ran
/// 4.9-5.4 us in some processes and 6.6-7.1 in others, whatever cores or addresses they
/// had, while a CUDA graph's replay of it took 2.8-2.9 in every one. A tune in one
/// process would price every flat launch at that process's pace. Also the note's
/// account of the times.
fn typical(b: &Bench, iters: u32) -> Result<(f64, String), CliError> {
    let child = crate::perf_child::Child {
        plan: &b.plan,
        ranks: b.plan.n_ranks,
        bytes: b.count * 4,
        mode: Mode::OutOfPlace,
        iters,
        args: &["--backend", "cuda"],
        env: &[("BRAID_PROTO", "simple"), ("BRAID_CHANNELS", "1")],
    };
    let mut others = Vec::with_capacity(PACE_PROCESSES);
    for _ in 0..PACE_PROCESSES {
        match crate::perf_child::time(&child, "braid tune") {
            Ok(t) => others.push(ran_as_timed(&t, &b.plan.name)?),
            // A GPU that lets one process at a time in (exclusive-process mode), or no
            // second process for another reason: this process's time is all there is.
            Err(crate::perf_child::ChildError::Failed(e)) => {
                return Ok((b.us, alone(b.us, &e.to_string())));
            }
            Err(e) => return Err(e.into()),
        }
    }
    // This process and the others: an odd count, whose median is its middle time.
    let us = median(others.iter().copied().chain([b.us]).collect()).unwrap_or(b.us);
    let seen = format!(
        "{:.1} us in this process, {} in {} others: their median {us:.1}",
        b.us,
        others
            .iter()
            .map(|t| format!("{t:.1}"))
            .collect::<Vec<_>>()
            .join(" "),
        others.len()
    );
    Ok((us, seen))
}

/// The note's account of a flat launch timed in this process only, because a process of
/// its own could not run it (`why`: the child's error, its first line kept).
fn alone(us: f64, why: &str) -> String {
    let why = why.lines().next().unwrap_or_default();
    let why = why.strip_prefix("error: braid tune: ").unwrap_or(why);
    format!(
        "{us:.1} us in this process only: another process could not time it ({why}), so \
         flat launches are priced at this process's pace"
    )
}

/// The child's time, where it ran `plan` as the tune times it (1 replica, Simple).
fn ran_as_timed(t: &crate::perf_child::Timed, plan: &str) -> Result<f64, CliError> {
    if t.plan != plan || t.replicas != 1 || t.protocol != "simple" {
        return Err(CliError::Runtime(format!(
            "error: braid tune: a process timing `{plan}` x1 simple ran `{}` x{} {}",
            t.plan, t.replicas, t.protocol
        )));
    }
    Ok(t.us)
}

/// How a micro-benchmark's groups of timed runs are spread ([`time_groups`]).
#[derive(Clone, Copy)]
struct Pace {
    /// Groups at most.
    groups: u32,
    /// Untimed calls between two groups, for this long.
    gap: std::time::Duration,
    /// No further group once the timed runs have taken this long together: runs that
    /// long each span any moment that slows the host, which their median then leaves out.
    span: std::time::Duration,
}

impl Pace {
    const TUNE: Pace = Pace {
        groups: 7,
        gap: std::time::Duration::from_millis(100),
        span: std::time::Duration::from_millis(500),
    };
}

/// Groups of timed runs (`group`), for [`quietest`]: up to `pace.groups`, each after a
/// tenth of a second of untimed calls (`busy`). The gap is filled, not slept: a host
/// left idle for a tenth of a second slows its next calls (its cores clock down), and a
/// flat launch, mostly the host's issuing, was timed 5.9 and 7.4 us after slept gaps
/// where the sweeps of the same runs, which never idle, timed it 5.2-6.5 us.
fn time_groups<E>(
    pace: Pace,
    mut group: impl FnMut() -> Result<Vec<std::time::Duration>, E>,
    mut busy: impl FnMut() -> Result<(), E>,
) -> Result<Vec<Vec<std::time::Duration>>, E> {
    let mut groups = Vec::with_capacity(pace.groups as usize);
    let mut timed = std::time::Duration::ZERO;
    for g in 0..pace.groups {
        if g > 0 && timed >= pace.span {
            break;
        }
        let gap = std::time::Instant::now();
        while gap.elapsed() < pace.gap {
            busy()?;
        }
        let t = std::time::Instant::now();
        groups.push(group()?);
        timed += t.elapsed();
    }
    Ok(groups)
}

/// A micro-benchmark's time from its groups of runs: each group's median, and the least
/// of those. A call of a few microseconds is timed in well under a millisecond, so one
/// group falls wholly inside whatever slows the host for a moment (on an H100 machine a
/// flat launch timed once at 8.4 us against 5.2 us a minute before and after, and the
/// selection on 2 ranks took a plan twice as slow at five sizes); groups spread over
/// most of a second, and what slows a host only adds time, so the quietest group's
/// median is the machine's.
fn quietest(groups: &[Vec<std::time::Duration>]) -> std::time::Duration {
    groups
        .iter()
        .map(|runs| braid_runtime::bench::median(runs))
        .min()
        .unwrap_or_default()
}

/// The model's time for `b` with `profile` on `topo`.
fn model(b: &Bench, topo: &Topology, profile: &Profile) -> f64 {
    model_with(b, topo, profile, false)
}

/// [`model`], with direct reads priced where `direct`.
fn model_with(b: &Bench, topo: &Topology, profile: &Profile, direct: bool) -> f64 {
    let call = Call {
        bytes: b.count as u64 * 4,
        elem: 4,
        protocol: b.protocol,
        replicas: b.replicas,
        direct,
        together: direct,
        in_place: false,
    };
    predict(&b.plan, topo, profile, &call).map_or(f64::INFINITY, |p| p.total_us)
}

/// The value in `[lo, hi]` for which `f` (monotone) equals `target`, by bisection
/// (geometric for rates spanning decades). `f` rising with the value or falling alike.
pub(crate) fn solve(lo: f64, hi: f64, geometric: bool, target: f64, f: impl Fn(f64) -> f64) -> f64 {
    let rising = f(hi) > f(lo);
    let (mut a, mut b) = (lo, hi);
    for _ in 0..80 {
        let m = if geometric {
            (a * b).sqrt()
        } else {
            (a + b) / 2.0
        };
        if (f(m) < target) == rising {
            a = m;
        } else {
            b = m;
        }
    }
    (a + b) / 2.0
}

/// The profile of this machine's GPUs for `topo` (its fingerprint is the key the
/// runtime checks). `progress` is told each micro-benchmark as it starts.
pub fn tune(topo: &Topology, iters: u32, progress: &dyn Fn(&str)) -> Result<Profile, CliError> {
    if !braid_cuda::driver_present() {
        return Err(CliError::Runtime(
            "error: braid tune --backend cuda: no CUDA driver on this machine".into(),
        ));
    }
    let gpus = braid_cuda::device_count();
    if gpus == 0 {
        return Err(CliError::Runtime("error: this machine has no GPU".into()));
    }
    let mut p = Profile::default();
    let mut notes = Vec::new();
    let shared = topo.n_ranks() as usize > gpus;
    let c2 = Topology::from_arg("nvswitch:2").expect("a preset");
    // LL128's stress test on each kind of link the micro-benchmarks' ranks use (rank r on
    // GPU r % GPUs): the verdicts go into the profile, and LL128 is measured only where
    // they let the runtime run it.
    progress("LL128: stress test of 128-byte lines on each kind of link");
    p.ll128 = braid_cuda::ll128::stress_all(Default::default(), 2).map_err(rt)?;
    for v in &p.ll128 {
        notes.push(format!(
            "LL128 on {}: {}",
            v.describe(),
            if v.passed() {
                "passed"
            } else {
                "failed, LL128 stays off"
            }
        ));
    }
    // (The micro-benchmarks run up to 8 ranks: they share GPUs on fewer.)
    let ll128 = braid_cuda::ll128::allowed(
        &p.ll128,
        braid_cuda::ll128::uses(gpus < 8, gpus > 1, true, false),
    );
    let verdicts = p.ll128.clone();
    let protocols: &[Protocol] = if ll128 {
        &[Protocol::Simple, Protocol::Ll, Protocol::Ll128]
    } else {
        &[Protocol::Simple, Protocol::Ll]
    };
    let probe = wait_probe()?;
    for &proto in protocols {
        let pname = proto.name();
        progress(&format!("{pname}: 1 element on 2 and 8 ranks"));
        let t2 = measure(&verdicts, 2, 1, 1, proto, iters)?;
        let t8 = measure(&verdicts, 8, 1, 1, proto, iters)?;
        // From the steps the GPU timed in the chain of 8 (calls of 8 ranks in one process
        // may be issued slower than the GPU runs them, so their back-to-back time says
        // more about the host): what a step costs, and a hop.
        // LL and LL128 receives take up lines as they land: their steps' periods (the
        // sending root's, the receivers') and the hop between receivers are what the model
        // prices them with. Simple's receive waits for its whole slice, so a message's
        // latency shows at every step that waits for one, which a chain's receivers,
        // keeping their own pace, do not separate from their work: Simple keeps a step's
        // duration, no receive of its own, and the hop over every pair, on top of the
        // path's latency (docs/costmodel.md, "A receive's own period").
        let measured = if proto.flags_each_line() {
            [t8.step_period_us(), t8.recv_step_us(), t8.hop_us(true)]
        } else {
            [t8.step_us(), None, t8.hop_us(false)]
        };
        let [step, recv_step, hop] = measured.map(|x| x.unwrap_or(0.0));
        set(&mut p.slice_us, proto, step);
        set(&mut p.recv_slice_us, proto, recv_step);
        set(&mut p.hop_us.nvlink, proto, hop);
        // A local copy's wait for a receive in another block of its rank, from the steps
        // the GPU timed (one element a chunk).
        progress(&format!(
            "{pname}: a wait for another block's step, on 2 ranks"
        ));
        let tw = measure_plan(
            &verdicts,
            probe.clone(),
            2,
            WAIT_PROBE_CHUNKS,
            1,
            proto,
            iters,
            false,
            false,
        )?;
        let wait = tw.wait_us().unwrap_or(0.0);
        set(&mut p.wait_us, proto, wait);
        set(&mut p.slice_bytes, proto, slice_bytes(proto));
        // What each block of a launch adds: the same chain with more replicas runs more
        // blocks doing the same steps (on empty ranges), and the difference of the two
        // times is theirs (the host's cost of issuing a call, alike in both, cancels).
        // Where ranks share a GPU their blocks all run on it, which the model counts
        // only once it knows (the memory rate below): the blocks are counted that way
        // here already.
        progress(&format!(
            "{pname}: 1 element on 8 ranks, {LAUNCH_REPLICAS} replicas"
        ));
        let tr = measure(&verdicts, 8, 1, LAUNCH_REPLICAS, proto, iters)?;
        let c8 = Topology::from_arg("nvswitch:8").expect("a preset");
        let per_block = if tr.replicas > t8.replicas {
            let blocks =
                |b: &Bench| braid_cost::sim::launched_blocks(&b.plan, b.replicas, shared) as f64;
            let mut q = p.clone();
            if shared {
                // Any memory rate marks the ranks as sharing a GPU; one this large
                // never binds a call of 1 element.
                set(&mut q.shared_gbps, proto, 1e6);
            }
            let measured = tr.us - t8.us;
            let v = solve(0.0, 10.0, false, measured, |v| {
                let mut q = q.clone();
                set(&mut q.launch_block_us, proto, v);
                model(&tr, &c8, &q) - model(&t8, &c8, &q)
            });
            notes.push(format!(
                "{pname}: {:.0} blocks {:.1} us, {:.0} blocks {:.1} us",
                blocks(&t8),
                t8.us,
                blocks(&tr),
                tr.us
            ));
            v
        } else {
            0.0
        };
        set(&mut p.launch_block_us, proto, per_block);
        // The call's fixed cost: what the 2-rank chain's time leaves over its steps.
        let call = solve(0.0, t2.us, false, t2.us, |v| {
            let mut q = p.clone();
            set(&mut q.call_us, proto, v);
            model(&t2, &c2, &q)
        });
        set(&mut p.call_us, proto, call);
        // A large message through one block: what a block moves beyond the per-slice
        // cost above.
        let big = match proto {
            Protocol::Ll => 4usize << 20,
            _ => 64 << 20,
        };
        progress(&format!("{pname}: {} MiB on 2 ranks", big >> 20));
        let tb = measure(&verdicts, 2, big / 4, 1, proto, iters.min(10))?;
        let g = solve(0.1, 1e5, true, tb.us, |v| {
            let mut q = p.clone();
            set(&mut q.block_gbps, proto, v);
            model(&tb, &c2, &q)
        });
        set(&mut p.block_gbps, proto, g);
        // Ranks sharing a GPU share its memory: every replica the block budget allows
        // on 2 ranks, a message large enough to fill them.
        let mut ts = None;
        if shared {
            let r = 32;
            let bytes = if proto == Protocol::Ll {
                64usize << 20
            } else {
                512 << 20
            };
            progress(&format!(
                "{pname}: {} MiB on 2 ranks, {r} replicas",
                bytes >> 20
            ));
            let b = measure(&verdicts, 2, bytes / 4, r, proto, iters.min(5))?;
            // A rate at which the model reproduces the time; where the blocks alone
            // explain it, the largest tried (1e6 GB/s: never binding, but the ranks are
            // still known to share one memory, not the topology's links).
            let rate = shared_rate(&b, &c2, &p);
            set(&mut p.shared_gbps, proto, rate);
            notes.push(measure_knee(&verdicts, &b, &c2, &mut p, iters, progress)?);
            ts = Some(b);
        }
        notes.push(format!(
            "{pname}: a call {call:.1} us, a step {step:.2} us{}, a message {hop:.2} us, a wait for another block's step {wait:.2} us, a launched block {per_block:.3} us, a block {:.1} GB/s{} (chains of 1 element: {:.1} us on 2 ranks, {:.1} on 8; {} MiB on 2 ranks {:.0} us{})",
            if recv_step > 0.0 {
                format!(" (its period; a receiving step's {recv_step:.2} us)")
            } else {
                String::new()
            },
            p.block_gbps.get(proto),
            if shared {
                format!(", the GPU's memory {:.0} GB/s for all ranks", p.shared_gbps.get(proto))
            } else {
                String::new()
            },
            t2.us,
            t8.us,
            big >> 20,
            tb.us,
            ts.map_or(String::new(), |b| format!(
                "; {} MiB on 2 ranks x{} {:.0} us",
                (b.count * 4) >> 20,
                b.replicas,
                b.us
            )),
        ));
    }
    if shared {
        // A flat launch: a broadcast every rank reads from the root's input directly, on
        // 2 ranks as `call_us` is measured (back to back, what a call costs is mostly the
        // host's issuing it, which grows with the ranks of a launch; timed on 8 ranks
        // alone, the flat launch looked dearer than the interpreter's launch, which is
        // measured on 2, and the selection on 8 ranks took slower plans: docs/costmodel.md).
        progress("a flat launch: 1 element on 2 ranks, from a CUDA graph");
        // A 2-rank broadcast `name` of `bytes` as a flat launch, back to back or replayed.
        let flat_on_2 = |name: &str, bytes: usize, graph| {
            measure_plan(
                &verdicts,
                broadcast(2, name)?,
                2,
                (bytes / 4).max(1),
                1,
                Protocol::Simple,
                iters,
                true,
                graph,
            )
        };
        let flat = |graph| flat_on_2("direct_broadcast", 4, graph);
        // The GPU's share first (replayed, the host issues nothing: the model's time with
        // no host share), then the host's, with the GPU's known.
        let g = flat(true)?;
        p.flat_gpu_us = solve(1e-3, g.us, false, g.us, |v| {
            let mut q = p.clone();
            q.flat_call_us = 1e-6;
            q.flat_gpu_us = v;
            model_with(&g, &c2, &q, true)
        });
        notes.push(format!(
            "a flat launch's GPU share {:.2} us (replayed from a CUDA graph {:.2} us)",
            p.flat_gpu_us, g.us
        ));
        // A flat block's rate: the same broadcast of FLAT_BODY_BYTES, replayed, each of
        // its parts a block's full share (the flat kernel's short passes, which the
        // interpreter's block, timed on a long stream, does not show).
        progress(&format!(
            "a flat launch: {} KiB on 2 ranks, from a CUDA graph",
            FLAT_BODY_BYTES >> 10
        ));
        let gb = flat_on_2("direct_broadcast", FLAT_BODY_BYTES, true)?;
        let (rate, note) = flat_block_rate(&gb, &c2, &p);
        p.flat_block_gbps = rate;
        notes.push(note);
        // A pass's own cost: the 2-rank chain broadcast's flat launch of FLAT_PASSES_BYTES,
        // replayed, whose blocks each run four passes in a row (one chunk each, a load
        // round apiece) where the direct broadcast's run one.
        progress(&format!(
            "a flat launch's passes: a chain of {} KiB on 2 ranks, from a CUDA graph",
            FLAT_PASSES_BYTES >> 10
        ));
        let gp = flat_on_2("chain_broadcast", FLAT_PASSES_BYTES, true)?;
        let (pass, note) = flat_pass_cost(&gp, &c2, &p);
        p.flat_pass_us = pass;
        notes.push(note);
        progress("a flat launch: 1 element on 2 ranks");
        let mut b = flat(false)?;
        progress(&format!(
            "a flat launch: 1 element on 2 ranks, in {PACE_PROCESSES} further processes"
        ));
        let (us, seen) = typical(&b, iters)?;
        b.us = us;
        p.flat_call_us = solve(1e-3, b.us, false, b.us, |v| {
            let mut q = p.clone();
            q.flat_call_us = v;
            model_with(&b, &c2, &q, true)
        });
        notes.push(format!(
            "a flat launch {:.1} us (a direct broadcast of 1 element on 2 ranks {seen})",
            p.flat_call_us
        ));
        // What each further rank of a launch adds (the host's work per rank, back to
        // back): the same flat broadcast on the topology's ranks, at most a launch's.
        let n = topo
            .n_ranks()
            .clamp(2, braid_cuda::kernel::MAX_LOCAL as u32);
        if n > 2 {
            progress(&format!("a flat launch: 1 element on {n} ranks"));
            let mut bn = measure_plan(
                &verdicts,
                broadcast(n, "direct_broadcast")?,
                n,
                1,
                1,
                Protocol::Simple,
                iters,
                true,
                false,
            )?;
            progress(&format!(
                "a flat launch: 1 element on {n} ranks, in {PACE_PROCESSES} further processes"
            ));
            let (us, seen) = typical(&bn, iters)?;
            bn.us = us;
            p.rank_us = ((bn.us - b.us) / f64::from(n - 2)).max(0.0);
            notes.push(format!(
                "a rank of a launch {:.2} us (the flat broadcast on {n} ranks {seen})",
                p.rank_us
            ));
        }
        // What the flat kernel's larger arguments cost a launch beyond the smallest (the
        // launches above take the smallest): each launched empty, back to back.
        progress("the flat kernel's arguments: empty launches of each size");
        let t = braid_cuda::arg_cost::flat_arg_times(0, 400, 5).map_err(rt)?;
        p.flat_arg_us = t
            .iter()
            .map(|a| ArgCost {
                bytes: a.bytes as u32,
                us: (a.us - t[0].us).max(0.0),
            })
            .collect();
        notes.push(format!(
            "the flat kernel's argument: {}",
            t.iter()
                .map(|a| format!("{} B {:.2} us", a.bytes, a.us))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    p.source = format!(
        "braid tune, cuda backend, {gpus} GPU(s), {} ranks{}",
        topo.n_ranks(),
        if shared { " sharing them" } else { "" }
    );
    p.fingerprint = Some(topo.fingerprint());
    p.check().map_err(|e| {
        CliError::Runtime(format!(
            "error: braid tune measured something impossible ({e}); run it again on a quieter machine"
        ))
    })?;
    for n in notes {
        eprintln!("note: {n}");
    }
    Ok(p)
}

/// Bytes of the flat broadcast whose replay times a flat launch's blocks: a size the
/// model's checks do not time (their sweeps step by 8 from 8 B), cut into 6 parts of a
/// block each on 2 ranks, whose memory traffic (1.1 MiB) binds far less than the
/// blocks do.
const FLAT_BODY_BYTES: usize = 384 << 10;

/// A flat launch's block rate (`flat_block_gbps`) at which the model, with no host
/// share, reproduces the replayed time of `b` (a flat broadcast of [`FLAT_BODY_BYTES`]),
/// and the tune's note; 0 (the interpreter's block rate stays) where no rate does: the
/// launch ran faster than its share of the launch and its memory traffic allow.
fn flat_block_rate(b: &Bench, topo: &Topology, p: &Profile) -> (f64, String) {
    let size = format!("a flat broadcast of {} KiB on 2 ranks", (b.count * 4) >> 10);
    match fit_replay(b, topo, p, |q, v| q.flat_block_gbps = v, (1e5, 0.1), true) {
        Ok(v) => (
            v,
            format!(
                "a flat launch's block {v:.1} GB/s ({size} replayed from a CUDA graph {:.2} us)",
                b.us
            ),
        ),
        Err(floor) => (
            0.0,
            format!(
                "a flat launch's block not measured: {size} replayed in {:.2} us, below its share of the launch and its memory traffic ({floor:.2}); its blocks take the interpreter's rate",
                b.us
            ),
        ),
    }
}

/// The value of the constant `set` writes, between `free` (where it costs nothing) and
/// `dear`, at which the model, with no host share, reproduces the replayed time of the
/// flat launch `b` (bisection, geometric where asked); `Err` with the model's time at
/// `free` where the replay took no longer than that.
fn fit_replay(
    b: &Bench,
    topo: &Topology,
    p: &Profile,
    set: impl Fn(&mut Profile, f64),
    (free, dear): (f64, f64),
    geometric: bool,
) -> Result<f64, f64> {
    let price = |v: f64| {
        let mut q = p.clone();
        q.flat_call_us = 1e-6;
        set(&mut q, v);
        model_with(b, topo, &q, true)
    };
    let floor = price(free);
    if b.us <= floor {
        return Err(floor);
    }
    let (lo, hi) = if free < dear {
        (free, dear)
    } else {
        (dear, free)
    };
    Ok(solve(lo, hi, geometric, b.us, price))
}

/// Bytes of the flat chain broadcast whose replay times a flat launch's passes: a size
/// the model's checks do not time, four chunks of 256 bytes on 2 ranks (a load round
/// each, the bytes themselves next to nothing).
const FLAT_PASSES_BYTES: usize = 1 << 10;

/// What a flat launch's pass beyond a block's first costs (`flat_pass_us`): the value
/// at which the model, with no host share, reproduces the replayed time of `b` (the
/// chain broadcast's flat launch of [`FLAT_PASSES_BYTES`]), and the tune's note; 0
/// where the replay took no longer than a launch of one pass each.
fn flat_pass_cost(b: &Bench, topo: &Topology, p: &Profile) -> (f64, String) {
    let size = format!(
        "a flat chain broadcast of {} KiB on 2 ranks",
        (b.count * 4) >> 10
    );
    match fit_replay(b, topo, p, |q, v| q.flat_pass_us = v, (0.0, 10.0), false) {
        Ok(v) => (
            v,
            format!(
                "a flat launch's pass {v:.2} us beyond a block's first ({size} replayed from a CUDA graph {:.2} us)",
                b.us
            ),
        ),
        Err(floor) => (
            0.0,
            format!(
                "a flat launch's pass costs nothing measurable: {size} replayed in {:.2} us, no longer than its passes in parallel ({floor:.2})",
                b.us
            ),
        ),
    }
}

/// The shared memory's rate (`shared_gbps`) at which the model reproduces `b`'s time
/// with the rest of `p` (bisection; 1e6 GB/s, never binding, where the blocks alone
/// explain it).
fn shared_rate(b: &Bench, topo: &Topology, p: &Profile) -> f64 {
    solve(1.0, 1e6, true, b.us, |v| {
        let mut q = p.clone();
        set(&mut q.shared_gbps, b.protocol, v);
        model(b, topo, &q)
    })
}

/// How sharply the memory's rate binds (`shared_knee`), measured on the chain `b` (the
/// one that gave `shared_gbps`, on `topo`'s 2 ranks) with the replicas whose blocks alone
/// would take about as long as the memory allows all of them, where the two bounds meet
/// and a sharp model is most wrong; then `shared_gbps` again with the knee (the many
/// replicas' call feels it a little), and the knee once more. Sets both in `p`; returns
/// the tune's note.
fn measure_knee(
    verdicts: &[braid_cost::Ll128Verdict],
    b: &Bench,
    topo: &Topology,
    p: &mut Profile,
    iters: u32,
    progress: &dyn Fn(&str),
) -> Result<String, CliError> {
    let proto = b.protocol;
    let pname = proto.name();
    let mib = (b.count * 4) >> 20;
    let memory = model(b, topo, p);
    let alone = |r: u32| {
        let mut q = p.clone();
        set(&mut q.shared_gbps, proto, 1e6);
        let at = Bench {
            count: b.count,
            replicas: r,
            protocol: proto,
            plan: b.plan.clone(),
            us: 0.0,
            steps: Vec::new(),
        };
        model(&at, topo, &q)
    };
    let r_knee = knee_replicas(&KNEE_REPLICAS, memory, alone);
    // Measured only where the two bounds lie within a factor of 2 of each other: far
    // from the knee a call hardly feels it, and the fit would lay the model's other
    // errors on the knee.
    if (alone(r_knee) / memory).ln().abs() > 2f64.ln() {
        return Ok(format!(
            "{pname}: the memory's rate binds sharply (no replica count of the chain asks about its rate: not measured)"
        ));
    }
    progress(&format!("{pname}: {mib} MiB on 2 ranks, {r_knee} replicas"));
    let k = measure(verdicts, 2, b.count, r_knee, proto, iters.min(5))?;
    let sharp_rate = p.shared_gbps.get(proto);
    let mut knee = Some(0.0);
    for _ in 0..2 {
        knee = fit_knee(k.us, |v| {
            let mut q = p.clone();
            set(&mut q.shared_knee, proto, v);
            model(&k, topo, &q)
        });
        let Some(fitted) = knee else {
            set(&mut p.shared_knee, proto, 0.0);
            set(&mut p.shared_gbps, proto, sharp_rate);
            break;
        };
        set(&mut p.shared_knee, proto, fitted);
        let rate = shared_rate(b, topo, p);
        set(&mut p.shared_gbps, proto, rate);
    }
    let shown = match knee {
        Some(k) if k > 0.0 => format!("{k:.2}"),
        Some(_) => "0 (sharply)".into(),
        None => "0 (sharply: even the softest knee prices the call below its time, \
                 so what slows it is not the memory's knee)"
            .into(),
    };
    Ok(format!(
        "{pname}: the memory's rate binds with a knee of {shown} ({mib} MiB on 2 ranks x{} {:.0} us)",
        k.replicas, k.us
    ))
}

/// Replicas the knee of the memory's rate may be measured with (a chain of 2 ranks).
const KNEE_REPLICAS: [u32; 5] = [1, 2, 4, 8, 16];

/// Of `candidates`, the replicas whose call the blocks alone (`blocks_alone(r)`, µs: the
/// model with a memory that never binds) would take closest to `memory` µs (the call
/// where the memory binds), on a logarithmic scale: where the two bounds meet.
fn knee_replicas(candidates: &[u32], memory: f64, blocks_alone: impl Fn(u32) -> f64) -> u32 {
    let off = |r: u32| (blocks_alone(r) / memory).ln().abs();
    candidates
        .iter()
        .copied()
        .min_by(|&a, &b| off(a).total_cmp(&off(b)))
        .unwrap_or(1)
}

/// The knee (`Profile::shared_knee`) for which `model(knee)` (falling as the knee grows:
/// a larger knee binds more sharply) equals `measured` µs: 0 (sharp) where even a sharp
/// rate prices it at or above the measurement, and `None` where even the softest knee (1)
/// prices it below: then the call is slower for some other reason than the memory's
/// knee (the blocks' own rate), which a knee must not be made to absorb.
fn fit_knee(measured: f64, model: impl Fn(f64) -> f64) -> Option<f64> {
    const SOFTEST: f64 = 1.0;
    const SHARPEST: f64 = 1e3;
    if model(0.0) >= measured {
        return Some(0.0);
    }
    if model(SOFTEST) < measured {
        return None;
    }
    Some(solve(SOFTEST, SHARPEST, true, measured, model))
}

/// Replicas of the chain that measures what a launched block costs: 8 ranks x 12 = 96
/// blocks where they share a GPU, within the 132 an H200 runs at once.
const LAUNCH_REPLICAS: u32 = 12;

fn set(v: &mut PerProtocol, p: Protocol, x: f64) {
    v.set(p, x);
}

/// Data bytes of one FIFO slot of the kernels, per protocol: the model's slice.
fn slice_bytes(p: Protocol) -> f64 {
    braid_cuda::kernel::Lane::of(p).piece_bytes() as f64
}

#[cfg(test)]
mod tests {
    use super::{
        alone, broadcast, fit_knee, flat_block_rate, flat_pass_cost, knee_replicas, median,
        model_with, quietest, ran_as_timed, solve, time_groups, Bench, Pace, FLAT_BODY_BYTES,
        FLAT_PASSES_BYTES,
    };
    use braid_cost::profile::Profile;
    use braid_ir::Protocol;
    use braid_topo::Topology;
    use std::time::Duration;

    /// A chain of 4 ranks whose steps the GPU timed: the root's steps start 2.2 µs
    /// apart (2 each), the receivers' 2.7 apart (2.5 each; the first of each rank longer,
    /// waiting), a step ends 0.5 µs later on each next receiver; the first receiver
    /// falls behind the root step by step, which is no hop.
    #[test]
    fn step_periods_and_hop_come_from_the_recorded_step_times() {
        let plan = super::chain(4).unwrap();
        let rank = |r: u64| -> Vec<Vec<(u64, u64)>> {
            let steps = (0..5).map(|k| {
                if r == 0 {
                    (2_200 * k, 2_200 * k + 2_000)
                } else {
                    let end = 9_000 + 2_700 * k + 500 * r;
                    (if k == 0 { 0 } else { end - 2_500 }, end)
                }
            });
            vec![steps.collect()]
        };
        let b = Bench {
            count: 1,
            replicas: 1,
            protocol: braid_ir::Protocol::Ll,
            plan,
            us: 20.0,
            steps: (0..4).map(rank).collect(),
        };
        let near = |x: Option<f64>, want: f64| (x.unwrap() - want).abs() < 1e-9;
        assert!(near(b.step_us(), 2.0), "{:?}", b.step_us());
        assert!(near(b.step_period_us(), 2.2), "{:?}", b.step_period_us());
        assert!(near(b.recv_step_us(), 2.7), "{:?}", b.recv_step_us());
        assert!(near(b.hop_us(true), 0.5), "{:?}", b.hop_us(true));
        // Over every pair, the root's growing lead (8-9.5 us) is 4 of 12 delays.
        assert!(near(b.hop_us(false), 0.5), "{:?}", b.hop_us(false));
        let none = Bench { steps: vec![], ..b };
        assert_eq!(none.step_us(), None);
        assert_eq!(none.step_period_us(), None);
        assert_eq!(none.recv_step_us(), None);
        assert_eq!(none.hop_us(true), None);
    }

    /// The wait probe's steps as the GPU might record them: the root's copies 1 µs each;
    /// rank 1's receives end 3 µs apart and each copy ends 2.5 µs after its receive, so
    /// 1.5 µs of it is the wait. Copies that were still busy when their receive ended
    /// did not wait and say nothing of it.
    #[test]
    fn the_wait_is_what_a_waiting_copy_takes_beyond_its_receive_and_a_copy() {
        let plan = super::wait_probe().unwrap();
        let k = super::WAIT_PROBE_CHUNKS as u64;
        let us = |x: f64| (x * 1e3) as u64;
        let sends: Vec<(u64, u64)> = (0..k).map(|i| (us(i as f64), us(i as f64 + 1.0))).collect();
        let copies: Vec<(u64, u64)> = (0..k).map(|i| (us(i as f64), us(i as f64 + 1.0))).collect();
        let recvs: Vec<(u64, u64)> = (0..k).map(|i| (0, us(10.0 + 3.0 * i as f64))).collect();
        let waiting: Vec<(u64, u64)> = (0..k).map(|i| (0, us(12.5 + 3.0 * i as f64))).collect();
        let b = Bench {
            count: k as usize,
            replicas: 1,
            protocol: braid_ir::Protocol::Simple,
            plan: plan.clone(),
            us: 50.0,
            steps: vec![
                vec![sends.clone(), copies.clone()],
                vec![recvs.clone(), waiting],
            ],
        };
        assert!(
            (b.wait_us().unwrap() - 1.5).abs() < 1e-9,
            "{:?}",
            b.wait_us()
        );
        // Copies 4 µs after their receive: from the second on each is still busy with the
        // one before when its receive ends; only the first waited (3 µs beyond a copy).
        let late: Vec<(u64, u64)> = (0..k).map(|i| (0, us(14.0 + 4.0 * i as f64))).collect();
        let b = Bench {
            steps: vec![vec![sends, copies], vec![recvs, late]],
            ..b
        };
        assert!(
            (b.wait_us().unwrap() - 3.0).abs() < 1e-9,
            "{:?}",
            b.wait_us()
        );
        let none = Bench { steps: vec![], ..b };
        assert_eq!(none.wait_us(), None);
    }

    #[test]
    fn a_flat_launch_timed_here_alone_says_why() {
        let note = alone(
            4.04,
            "error: braid tune: braid perf failed: error: no CUDA context: the GPU is in \
             exclusive-process mode\nmore",
        );
        assert!(note.starts_with("4.0 us in this process only"), "{note}");
        assert!(
            note.contains("(braid perf failed: error: no CUDA context"),
            "{note}"
        );
        assert!(!note.contains("more"), "{note}");
    }

    /// A flat block's rate and a pass's cost are the values at which the model
    /// reproduces the replayed broadcast of 384 KiB and chain of 1 KiB (its blocks' four
    /// passes in a row: three beyond the first); a replay no slower than the launch's GPU
    /// share leaves each unmeasured (0), and the note says why.
    #[test]
    fn flat_replays_fit_a_blocks_rate_and_a_passs_cost_or_leave_them_unmeasured() {
        let c2 = Topology::from_arg("nvswitch:2").unwrap();
        let p = Profile::shared_gpu();
        type Fit = fn(&Bench, &Topology, &Profile) -> (f64, String);
        type Case = (
            &'static str,
            usize,
            fn(&mut Profile, f64),
            f64,
            Fit,
            &'static str,
            &'static str,
        );
        let cases: [Case; 2] = [
            (
                "direct_broadcast",
                FLAT_BODY_BYTES,
                |q, v| q.flat_block_gbps = v,
                25.0,
                flat_block_rate,
                "a flat launch's block 25.0 GB/s",
                "not measured",
            ),
            (
                "chain_broadcast",
                FLAT_PASSES_BYTES,
                |q, v| q.flat_pass_us = v,
                0.47,
                flat_pass_cost,
                "a flat launch's pass 0.47 us",
                "nothing measurable",
            ),
        ];
        for (plan, bytes, set, value, fit, said, unmeasured) in cases {
            let mut b = Bench {
                count: bytes / 4,
                replicas: 1,
                protocol: Protocol::Simple,
                plan: broadcast(2, plan).unwrap(),
                us: 0.0,
                steps: vec![],
            };
            let mut at = p.clone();
            at.flat_call_us = 1e-6;
            set(&mut at, value);
            b.us = model_with(&b, &c2, &at, true);
            assert!(b.us > p.flat_gpu_us + 1.0, "{plan}: {}", b.us);
            if plan == "chain_broadcast" {
                // The chain's replay is its launch's GPU share and three passes.
                let passes = b.us - p.flat_gpu_us;
                assert!((passes - 3.0 * value).abs() < 0.05, "{}", b.us);
            }
            let (v, note) = fit(&b, &c2, &p);
            assert!((v - value).abs() < value * 2e-3, "{plan}: {v}");
            assert!(note.starts_with(said), "{note}");
            b.us = p.flat_gpu_us;
            let (v, note) = fit(&b, &c2, &p);
            assert_eq!(v, 0.0, "{plan}");
            assert!(note.contains(unmeasured), "{note}");
        }
    }

    #[test]
    fn the_typical_pace_is_the_median_of_every_process() {
        assert_eq!(median(vec![7.0, 5.1, 6.6]), Some(6.6));
        assert_eq!(median(vec![7.0, 5.2, 5.1, 6.6, 6.9, 7.1, 5.3]), Some(6.6));
        assert_eq!(median(vec![]), None);
    }

    #[test]
    fn a_process_that_ran_another_plan_replicas_or_protocol_is_an_error() {
        let t = |plan: &str, replicas, protocol: &str| crate::perf_child::Timed {
            us: 6.5,
            plan: plan.into(),
            replicas,
            protocol: protocol.into(),
        };
        let ok = ran_as_timed(&t("direct_broadcast", 1, "simple"), "direct_broadcast");
        assert_eq!(ok.unwrap(), 6.5);
        for bad in [
            t("chain_broadcast", 1, "simple"),
            t("direct_broadcast", 2, "simple"),
            t("direct_broadcast", 1, "ll"),
        ] {
            let e = ran_as_timed(&bad, "direct_broadcast")
                .unwrap_err()
                .to_string();
            assert!(e.contains("ran `"), "{e}");
        }
    }

    #[test]
    fn the_quietest_group_of_runs_sets_the_time_and_a_lone_fast_run_does_not() {
        let us = |v: &[u64]| {
            v.iter()
                .map(|&x| Duration::from_micros(x))
                .collect::<Vec<_>>()
        };
        // A slow moment of the host over one group, a lucky run inside another.
        let groups = [
            us(&[8, 9, 8, 8, 9]),
            us(&[5, 5, 6, 1, 5]),
            us(&[6, 5, 6, 6, 5]),
        ];
        assert_eq!(quietest(&groups), Duration::from_micros(5));
        assert_eq!(quietest(&groups[..1]), Duration::from_micros(8));
    }

    #[test]
    fn groups_are_kept_apart_by_calls_not_sleep_and_long_runs_take_one_group() {
        let pace = Pace {
            groups: 4,
            gap: Duration::from_millis(20),
            span: Duration::from_millis(50),
        };
        let busy_calls = std::cell::Cell::new(0u32);
        let busy = || -> Result<(), ()> {
            busy_calls.set(busy_calls.get() + 1);
            std::thread::sleep(Duration::from_millis(1));
            Ok(())
        };
        // Short groups: all of them, each after calls filling the gap.
        let t = std::time::Instant::now();
        let short = time_groups(pace, || Ok(vec![Duration::from_micros(5)]), busy).unwrap();
        assert_eq!(short.len(), 4);
        assert!(t.elapsed() >= 4 * pace.gap);
        // Calls of 1 ms (or a few, on a loaded machine) fill each gap of 20.
        assert!(busy_calls.get() >= 4 * 5, "{} calls", busy_calls.get());
        // A group that alone takes longer than the span: no other, one gap before it.
        busy_calls.set(0);
        let long = time_groups(
            pace,
            || {
                std::thread::sleep(Duration::from_millis(60));
                Ok(vec![Duration::from_millis(12)])
            },
            busy,
        )
        .unwrap();
        assert_eq!(long.len(), 1);
        assert!(
            (1..=25).contains(&busy_calls.get()),
            "{} calls",
            busy_calls.get()
        );
        // An error in the gap's calls ends the measurement with it.
        let failed = time_groups(pace, || Ok(vec![Duration::from_micros(5)]), || Err(7));
        assert_eq!(failed, Err(7));
    }

    #[test]
    fn solve_finds_the_value_of_a_monotone_function_either_way() {
        // Falling (a time against a rate): 100 / v = 4 at v = 25.
        let v = solve(0.1, 1e5, true, 4.0, |v| 100.0 / v);
        assert!((v - 25.0).abs() < 1e-6, "{v}");
        // Rising (a time against a cost): 3 + 2 v = 10 at v = 3.5.
        let v = solve(0.0, 100.0, false, 10.0, |v| 3.0 + 2.0 * v);
        assert!((v - 3.5).abs() < 1e-9, "{v}");
    }

    #[test]
    fn the_knee_is_measured_where_the_blocks_alone_would_ask_the_memorys_rate() {
        // Blocks alone: 800 us at 1 replica, halving with each doubling; the memory
        // allows 120 us: 8 replicas (100 us) lie closest on a logarithmic scale.
        let alone = |r: u32| 800.0 / f64::from(r);
        assert_eq!(knee_replicas(&super::KNEE_REPLICAS, 120.0, alone), 8);
        // A memory slower than any replica count's blocks: the most replicas.
        assert_eq!(knee_replicas(&super::KNEE_REPLICAS, 10.0, alone), 16);
    }

    #[test]
    fn the_knee_reproduces_the_measurement_and_stays_in_its_range() {
        // A call of two equal bounds (100 us each) under the model's combination.
        let model = |k: f64| braid_cost::memory::combine(100.0, 100.0, k);
        // Measured 120 us: the knee at which the model says 120.
        let k = fit_knee(120.0, model).unwrap();
        assert!((model(k) - 120.0).abs() < 1e-6, "{k}");
        assert!(k > 3.0 && k < 4.0, "{k}");
        // At or below the sharp price: sharp (0); above even the softest knee's price
        // (200 us): none, the knee does not explain it.
        assert_eq!(fit_knee(100.0, model), Some(0.0));
        assert_eq!(fit_knee(95.0, model), Some(0.0));
        assert_eq!(fit_knee(500.0, model), None);
        assert_eq!(fit_knee(200.0, model), Some(1.0));
    }
}
