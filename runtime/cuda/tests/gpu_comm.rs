//! The device communicator on real GPUs, as applications use it: every collective, dtype,
//! reduction and call mode, on buffers the application allocated (plain, stream-ordered
//! pool, virtual-memory mapping), enqueued on the application's streams between its own
//! kernels, with 1, 2, 4 and 8 ranks in one process (several per GPU when the machine has
//! fewer GPUs: rank `r` on GPU `r % GPUs`) and 2 ranks as 2 processes (this program
//! starts itself twice, as torchrun would, both on GPU 0 when there is one). Also: CUDA
//! graph capture and replay, two communicators in flight at once, sends and receives
//! (`gpu_comm/p2p.rs`), PreMulSum (`gpu_comm/premul.rs`), synthesized schedules
//! (`gpu_comm/synth.rs`), direct reads between ranks of one launch (`gpu_comm/direct.rs`),
//! nothing set up per call (counters), abort, and a dead peer. Every result is compared with the host reference
//! bit for bit (the reference inputs make every floating-point reduction exact in any
//! order, so there is no tolerance to state).
//!
//! Without a CUDA driver it prints why it skips and passes. `BRAID_CUDA_QUICK=1` runs a
//! reduced matrix; `BRAID_GPU_SECTIONS=matrix,graph,...` runs only the named sections;
//! `BRAID_GPU_BENCH=FILE` also measures the per-call cost and writes JSON lines to FILE;
//! the soak of two processes runs only when `BRAID_GPU_SECTIONS` names `soak`.

#[path = "gpu_comm/direct.rs"]
mod direct;
#[path = "gpu_comm/ll128.rs"]
mod ll128;
#[path = "gpu_comm/p2p.rs"]
mod p2p;
#[path = "gpu_comm/premul.rs"]
mod premul;
mod support;
#[path = "gpu_comm/synth.rs"]
mod synth;

use braid_cuda::check::compare;
use braid_cuda::{
    driver_present, group, Bufs, CudaComm, GroupItem, Options, RawDeviceMemory, Stream,
};
use braid_ir::{Collective, Mode};
use braid_library::Library;
use braid_runtime::call::CallSpec;
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::reference::{inputs, reference};
use braid_runtime::registry::Registry;
use braid_topo::Topology;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{AppKernels, Graph, Kind, Mem, Timer, KINDS};

const CHILD: &str = "BRAID_GPU_COMM_CHILD";

fn main() -> ExitCode {
    if let Ok(role) = std::env::var(CHILD) {
        return child(&role);
    }
    if !driver_present() {
        println!("skipping gpu_comm: no CUDA driver on this machine");
        return ExitCode::SUCCESS;
    }
    let gpus = braid_cuda::device_count();
    if gpus == 0 {
        println!("skipping gpu_comm: no GPU on this machine");
        return ExitCode::SUCCESS;
    }
    let quick = std::env::var("BRAID_CUDA_QUICK").is_ok();
    let sections = std::env::var("BRAID_GPU_SECTIONS").ok();
    let want = |s: &str| {
        sections
            .as_deref()
            .is_none_or(|l| l.split(',').any(|x| x == s))
    };
    println!(
        "gpu_comm: {gpus} GPU(s), {} matrix",
        if quick { "quick" } else { "full" }
    );
    let mut t = Tally::default();
    let start = Instant::now();
    if want("matrix") {
        let ns: Vec<u32> = match std::env::var("BRAID_GPU_N") {
            Ok(v) => v.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
            Err(_) => vec![1, 2, 4, 8],
        };
        for n in ns {
            section(&mut t, &format!("matrix n={n}"), || matrix(n, gpus, quick));
        }
    }
    if want("graph") {
        for n in [2u32, 8] {
            section(&mut t, &format!("graph n={n}"), || graph(n, gpus));
        }
    }
    if want("two") {
        section(&mut t, "two communicators in flight", || {
            two_in_flight(gpus)
        });
    }
    if want("p2p") {
        section(&mut t, "point to point", || p2p::section(gpus, quick));
    }
    if want("ll128") {
        section(&mut t, "LL128", || ll128::section(gpus, quick));
    }
    if want("premul") {
        section(&mut t, "PreMulSum", || premul::section(gpus, quick));
    }
    if want("synth") {
        section(&mut t, "synthesized schedules", || {
            synth::section(gpus, quick)
        });
    }
    if want("direct") {
        // Ranks of one launch read each other's input (one GPU: one launch).
        section(&mut t, "direct reads", direct::section);
    }
    if want("trace") {
        section(&mut t, "step times (BRAID_TRACE)", || trace(gpus));
    }
    if want("counters") {
        section(&mut t, "nothing set up per call", || counters(gpus));
    }
    if want("abort") {
        section(&mut t, "abort", abort);
    }
    if want("net") {
        // The network transport (BRAID_NET_FORCE): every connection through the proxies
        // over loopback TCP, in one process and across two.
        let net = Options {
            net_force: true,
            ..opts(20)
        };
        for n in [2u32, 4] {
            section(&mut t, &format!("network transport, matrix n={n}"), || {
                matrix_with(n, gpus, true, &net)
            });
        }
        section(&mut t, "network transport, point to point", || {
            p2p::section_with(gpus, true, &net)
        });
        // Each connection over three TCP streams (BRAID_NET_STREAMS): slices spread over
        // them, announced to the kernel in order.
        let striped = Options {
            net_streams: 3,
            ..net.clone()
        };
        section(&mut t, "network transport, 3 streams, matrix n=2", || {
            matrix_with(2, gpus, true, &striped)
        });
        // The queue-pair transport (RDMA writes with immediates) on the software device.
        let rdma = Options {
            net_transport: braid_cuda::net::NetTransport::SoftRdma,
            ..net.clone()
        };
        for n in [2u32, 4] {
            section(
                &mut t,
                &format!("network over RDMA (software device), matrix n={n}"),
                || matrix_with(n, gpus, true, &rdma),
            );
        }
        section(
            &mut t,
            "network over RDMA (software device), point to point",
            || p2p::section_with(gpus, true, &rdma),
        );
        // Each connection over three queue pairs, slices dealt over them.
        let rdma3 = Options {
            net_qps: 3,
            ..rdma.clone()
        };
        section(
            &mut t,
            "network over RDMA (software device), 3 queue pairs, matrix n=2",
            || matrix_with(2, gpus, true, &rdma3),
        );
        section(&mut t, "network transport, 2 processes", || {
            let env = [
                ("BRAID_TIMEOUT", "20"),
                ("BRAID_NET_FORCE", "1"),
                ("BRAID_CUDA_QUICK", "1"),
            ];
            let ranks = spawn_pair("matrix", gpus, &env, Duration::from_secs(240))?;
            Ok(rank_cases(ranks, "rank done"))
        });
        section(
            &mut t,
            "network transport, 2 processes, point to point",
            || {
                let env = [("BRAID_TIMEOUT", "20"), ("BRAID_NET_FORCE", "1")];
                let ranks = spawn_pair("p2p", gpus, &env, Duration::from_secs(120))?;
                Ok(rank_cases(ranks, "p2p done"))
            },
        );
        section(
            &mut t,
            "network transport, 2 processes, 3 streams, point to point",
            || {
                let env = [
                    ("BRAID_TIMEOUT", "20"),
                    ("BRAID_NET_FORCE", "1"),
                    ("BRAID_NET_STREAMS", "3"),
                ];
                let ranks = spawn_pair("p2p", gpus, &env, Duration::from_secs(120))?;
                Ok(rank_cases(ranks, "p2p done"))
            },
        );
        section(&mut t, "network transport, 2 processes, dead peer", || {
            dead_peer_with(&[("BRAID_NET_FORCE", "1")])
        });
    }
    if want("procs") {
        section(&mut t, "2 processes", || procs(gpus, quick, false));
        section(&mut t, "2 processes, host-staged", || {
            procs(gpus, true, true)
        });
        section(&mut t, "2 processes, dead peer", dead_peer);
        section(&mut t, "2 processes, point to point", || {
            let ranks = spawn_pair(
                "p2p",
                gpus,
                &[("BRAID_TIMEOUT", "20")],
                Duration::from_secs(120),
            )?;
            Ok(rank_cases(ranks, "p2p done"))
        });
    }
    // Only when named: minutes of calls.
    if sections
        .as_deref()
        .is_some_and(|l| l.split(',').any(|x| x == "soak"))
    {
        section(&mut t, "soak, 2 processes", || soak(gpus));
    }
    if let Ok(path) = std::env::var("BRAID_GPU_BENCH") {
        section(&mut t, "bench", || bench(&path));
    }
    println!(
        "gpu_comm: {} passed, {} failed in {:.1?}",
        t.pass,
        t.fail.len(),
        start.elapsed()
    );
    if t.fail.is_empty() {
        ExitCode::SUCCESS
    } else {
        for f in &t.fail {
            println!("FAILED: {f}");
        }
        ExitCode::FAILURE
    }
}

#[derive(Default)]
struct Tally {
    pass: usize,
    fail: Vec<String>,
}

impl Tally {
    fn record(&mut self, what: &str, r: Result<(), String>) {
        match r {
            Ok(()) => self.pass += 1,
            Err(e) => {
                println!("FAIL {what}: {e}");
                self.fail.push(what.to_string());
            }
        }
    }
}

/// Runs a section that returns its own cases' results.
fn section(
    t: &mut Tally,
    name: &str,
    f: impl FnOnce() -> Result<Vec<(String, Result<(), String>)>, String>,
) {
    let start = Instant::now();
    match f() {
        Ok(cases) => {
            let n = cases.len();
            let mut failed = 0;
            for (what, r) in cases {
                failed += usize::from(r.is_err());
                t.record(&format!("{name}: {what}"), r);
            }
            println!(
                "{name}: {} of {n} passed in {:.1?}",
                n - failed,
                start.elapsed()
            );
        }
        Err(e) => t.record(name, Err(e)),
    }
}

fn registry(n: u32) -> Arc<Registry> {
    let lib = Library::new(Topology::from_arg(&format!("nvswitch:{n}")).unwrap());
    Arc::new(Registry::new().with_provider(Box::new(Lib(lib))))
}

struct Lib(Library);

impl braid_runtime::registry::PlanProvider for Lib {
    fn plans(&self, c: Collective, root: Option<u32>) -> Vec<Arc<braid_plan::Verified>> {
        self.0.plans(c, root)
    }
}

fn opts(timeout_s: u64) -> Options {
    Options {
        timeout: Duration::from_secs(timeout_s),
        ..Options::from_env().expect("valid BRAID_* settings")
    }
}

/// `n` ranks of one communicator in this process, rank `r` on GPU `r % gpus`, one
/// stream each, and the application's kernels on each GPU.
struct Ranks {
    comms: Vec<CudaComm>,
    streams: Vec<Stream>,
    apps: Vec<Arc<AppKernels>>,
}

fn open(n: u32, gpus: usize, opts: &Options) -> Result<Ranks, String> {
    open_with(n, gpus, opts, registry(n))
}

/// As [`open`], with the plans of `registry` only.
fn open_with(
    n: u32,
    gpus: usize,
    opts: &Options,
    registry: Arc<Registry>,
) -> Result<Ranks, String> {
    let devices: Vec<usize> = (0..n as usize).map(|r| r % gpus).collect();
    let comms = CudaComm::init_all(&devices, registry, opts).map_err(|e| e.to_string())?;
    let streams = comms
        .iter()
        .map(|c| Stream::new(c.context()).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut per_gpu: Vec<Option<Arc<AppKernels>>> = vec![None; gpus];
    let mut apps = Vec::new();
    for c in &comms {
        let d = c.device();
        if per_gpu[d].is_none() {
            per_gpu[d] = Some(Arc::new(AppKernels::load(c.context())?));
        }
        apps.push(per_gpu[d].clone().unwrap());
    }
    Ok(Ranks {
        comms,
        streams,
        apps,
    })
}

fn roots(c: Collective, n: u32) -> Vec<Option<u32>> {
    if !c.is_rooted() {
        vec![None]
    } else if n == 1 {
        vec![Some(0)]
    } else {
        vec![Some(0), Some(n - 1)]
    }
}

fn modes(c: Collective) -> Vec<Mode> {
    if c == Collective::Alltoall {
        vec![Mode::OutOfPlace]
    } else {
        vec![Mode::OutOfPlace, Mode::InPlace]
    }
}

/// One call's buffers on one rank, as the application holds them: its input in a
/// buffer of its own (copied in by its kernel, so the collective must wait for it), the
/// call's send/receive buffers of some allocation kind, and a result buffer its kernel
/// copies the output into (so the collective must finish first).
struct RankCall {
    staged: Mem,
    send: Mem,
    recv: Option<Mem>,
    result: Mem,
    input_at: usize,
    output_at: usize,
    input_len: usize,
    output_len: usize,
}

impl RankCall {
    fn new(
        comm: &CudaComm,
        s: &Stream,
        spec: &CallSpec,
        mode: Mode,
        kind: Kind,
        input: &[u8],
    ) -> Result<RankCall, String> {
        let (rank, n) = (comm.rank(), comm.n_ranks());
        let sizes = spec.sizes(rank, n);
        let ctx = comm.context();
        let staged = Mem::new(ctx, Kind::Plain, input.len(), s)?;
        upload(&staged, input, s)?;
        let (send, recv, input_at, output_at) = match mode {
            Mode::OutOfPlace => (
                Mem::new(ctx, kind, sizes.send.unwrap_or(0), s)?,
                Some(Mem::new(ctx, kind, sizes.recv.unwrap_or(0), s)?),
                0,
                0,
            ),
            Mode::InPlace => {
                let (i, o) = spec.in_place_buffers(rank, 0);
                (
                    Mem::new(ctx, kind, sizes.larger, s)?,
                    None,
                    i as usize,
                    o as usize,
                )
            }
        };
        Ok(RankCall {
            staged,
            result: Mem::new(ctx, Kind::Plain, sizes.recv.unwrap_or(0), s)?,
            send,
            recv,
            input_at,
            output_at,
            input_len: sizes.send.map_or(0, |_| input.len()),
            output_len: sizes.recv.unwrap_or(0),
        })
    }

    fn views(&self) -> (RawDeviceMemory, Option<RawDeviceMemory>) {
        (self.send.view(), self.recv.as_ref().map(|r| r.view()))
    }

    /// Before the collective: poison the outputs, copy the input in (application kernels).
    fn before(&self, app: &AppKernels, s: &Stream) -> Result<(), String> {
        if let Some(r) = &self.recv {
            r.fill_async(0xAA, s)?;
        }
        self.send.fill_async(0xAA, s)?;
        app.spin(20_000, s)?;
        app.copy(
            self.send.ptr() + self.input_at as u64,
            self.staged.ptr(),
            self.input_len,
            s,
        )
    }

    /// After the collective: copy the output out (an application kernel).
    fn after(&self, app: &AppKernels, s: &Stream) -> Result<(), String> {
        let out = self.recv.as_ref().unwrap_or(&self.send);
        app.copy(
            self.result.ptr(),
            out.ptr() + self.output_at as u64,
            self.output_len,
            s,
        )
    }

    fn output(&self) -> Result<Option<Vec<u8>>, String> {
        if self.output_len == 0 {
            return Ok(None);
        }
        download(&self.result, self.output_len).map(Some)
    }
}

/// Enqueues copying `data` into `m` on `s` (ordered before the kernels that read it; the
/// caller keeps `data` until the stream is synchronised).
fn upload(m: &Mem, data: &[u8], s: &Stream) -> Result<(), String> {
    if data.is_empty() {
        return Ok(());
    }
    // SAFETY: `data` fits the allocation (sized from it) and outlives the copy.
    unsafe { cudarc::driver::result::memcpy_htod_async(m.ptr(), data, s.raw()) }
        .map_err(|e| e.to_string())
}

fn download(m: &Mem, n: usize) -> Result<Vec<u8>, String> {
    let mut v = vec![0u8; n];
    // SAFETY: `n` bytes lie in the allocation.
    unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut v, m.ptr()) }
        .map_err(|e| e.to_string())?;
    Ok(v)
}

fn bufs<'a>(v: &'a (RawDeviceMemory, Option<RawDeviceMemory>)) -> Bufs<'a> {
    match &v.1 {
        Some(r) => Bufs::OutOfPlace {
            send: &v.0,
            recv: r,
        },
        None => Bufs::InPlace(&v.0),
    }
}

/// Enqueues `spec` on every rank as one group (rank `r` on `streams[r]`, with `views[r]`).
fn group_call(
    comms: &[CudaComm],
    streams: &[Stream],
    views: &[(RawDeviceMemory, Option<RawDeviceMemory>)],
    spec: &CallSpec,
) -> Result<(), String> {
    let items: Vec<GroupItem> = comms
        .iter()
        .zip(streams)
        .zip(views)
        .map(|((comm, stream), v)| GroupItem {
            comm,
            collective: spec.collective,
            bufs: bufs(v),
            count: spec.count,
            dtype: spec.dtype,
            op: spec.op,
            root: spec.root,
            stream,
        })
        .collect();
    group(&items).map_err(|e| e.to_string())
}

/// Every rank's call of `spec` in `mode`, enqueued as one group between the
/// application's kernels, checked against the reference.
fn run_case(r: &Ranks, spec: &CallSpec, mode: Mode, kind: Kind, seed: u64) -> Result<(), String> {
    let n = r.comms.len() as u32;
    let ins = inputs(spec.collective, spec.dtype, spec.op, n, spec.count, seed);
    let calls = run_between_app_kernels(r, spec, mode, kind, &ins, |calls| {
        let views: Vec<_> = calls.iter().map(RankCall::views).collect();
        group_call(&r.comms, &r.streams, &views, spec)
    })?;
    if spec.count == 0 {
        return Ok(());
    }
    let expected = reference(spec.collective, spec.dtype, spec.op, spec.root, &ins);
    check_outputs(spec, &calls, &expected)
}

/// Every rank's buffers for `spec` in `mode` holding `ins`, the application's kernels
/// before and after `enqueue` (which enqueues the collective on them), every stream
/// waited for and every rank's asynchronous error checked; the calls, for their outputs.
fn run_between_app_kernels(
    r: &Ranks,
    spec: &CallSpec,
    mode: Mode,
    kind: Kind,
    ins: &[Vec<u8>],
    enqueue: impl FnOnce(&[RankCall]) -> Result<(), String>,
) -> Result<Vec<RankCall>, String> {
    let calls = r
        .comms
        .iter()
        .zip(&r.streams)
        .zip(ins)
        .map(|((c, s), i)| RankCall::new(c, s, spec, mode, kind, i))
        .collect::<Result<Vec<_>, _>>()?;
    for ((c, app), s) in calls.iter().zip(&r.apps).zip(&r.streams) {
        c.before(app, s)?;
    }
    enqueue(&calls)?;
    for ((c, app), s) in calls.iter().zip(&r.apps).zip(&r.streams) {
        c.after(app, s)?;
    }
    for s in &r.streams {
        s.synchronize().map_err(|e| e.to_string())?;
    }
    for c in &r.comms {
        if let Some(e) = c.async_error() {
            return Err(e);
        }
    }
    Ok(calls)
}

/// Every rank's output against `expected` (the reference's), exactly.
fn check_outputs(
    spec: &CallSpec,
    calls: &[RankCall],
    expected: &[Option<Vec<u8>>],
) -> Result<(), String> {
    for (rank, (c, want)) in calls.iter().zip(expected).enumerate() {
        let got = c.output()?;
        if let Some((_, bad, i, w, g)) =
            compare(spec.dtype, rank as u32, want.as_deref(), got.as_deref())
        {
            return Err(format!(
                "rank {rank}: {bad} wrong, first at element {i}: expected {w}, got {g}"
            ));
        }
    }
    Ok(())
}

fn dtype_ops(c: Collective, quick: bool) -> Vec<(DType, RedOp)> {
    if !c.reduces() {
        let d: &[DType] = if quick {
            &[DType::F32, DType::U8]
        } else {
            &DType::ALL
        };
        return d.iter().map(|&d| (d, RedOp::Sum)).collect();
    }
    if quick {
        return vec![
            (DType::F32, RedOp::Sum),
            (DType::Bf16, RedOp::Max),
            (DType::I32, RedOp::Avg),
            (DType::F16, RedOp::Avg),
            (DType::U8, RedOp::Min),
            (DType::F64, RedOp::Prod),
        ];
    }
    DType::ALL
        .iter()
        .flat_map(|&d| RedOp::ALL.iter().map(move |&o| (d, o)))
        .collect()
}

/// Counts per case: 0, 1, 7 and 1 Mi + 3 for every (dtype, op); 64 Mi + 5 for f32 sum
/// (and u8 min on two ranks), where the buffers stay within a few GiB.
fn counts(c: Collective, n: u32, d: DType, o: RedOp, quick: bool) -> Vec<usize> {
    let mut v = vec![0, 1, 7, (1 << 20) + 3];
    let big_ok = n <= 2 || (!c.has_k() && n <= 8);
    let big = (d == DType::F32 && o == RedOp::Sum) || (n == 2 && d == DType::U8 && o == RedOp::Min);
    if !quick && big_ok && big {
        v.push((64 << 20) + 5);
    }
    v
}

type Cases = Vec<(String, Result<(), String>)>;

/// Whether a case runs: `BRAID_GPU_FILTER` (a substring of its description) or all.
fn selected(what: &str) -> bool {
    std::env::var("BRAID_GPU_FILTER").map_or(true, |f| what.contains(f.as_str()))
}

fn matrix(n: u32, gpus: usize, quick: bool) -> Result<Cases, String> {
    matrix_with(n, gpus, quick, &opts(10))
}

fn matrix_with(n: u32, gpus: usize, quick: bool, opts: &Options) -> Result<Cases, String> {
    let r = open(n, gpus, opts)?;
    let mut cases = Vec::new();
    let mut k = 0usize;
    for c in Collective::ALL {
        if quick && n == 4 && c == Collective::Reduce {
            continue;
        }
        for root in roots(c, n) {
            for (d, o) in dtype_ops(c, quick) {
                for mode in modes(c) {
                    for count in counts(c, n, d, o, quick) {
                        let kind = KINDS[k % KINDS.len()];
                        k += 1;
                        let spec = CallSpec {
                            collective: c,
                            count,
                            dtype: d,
                            op: o,
                            root,
                        };
                        let what = format!(
                            "{c} root {root:?} {} {} {mode} count {count} ({kind:?} memory)",
                            d.name(),
                            o.name()
                        );
                        run_selected(&mut cases, &r, &spec, (mode, kind, k as u64), what);
                        if cases.iter().filter(|(_, x)| x.is_err()).count() >= 3 {
                            return Ok(cases);
                        }
                    }
                }
            }
        }
    }
    Ok(cases)
}

/// Runs and records the case `what` (`mode`, memory `kind`, input `seed`) unless
/// `BRAID_GPU_FILTER` leaves it out; a failure is printed as it happens.
fn run_selected(
    cases: &mut Cases,
    r: &Ranks,
    spec: &CallSpec,
    (mode, kind, seed): (Mode, Kind, u64),
    what: String,
) {
    if !selected(&what) {
        return;
    }
    let res = run_case(r, spec, mode, kind, seed);
    if let Err(e) = &res {
        println!("FAIL {what}: {e}");
    }
    cases.push((what, res));
}

/// Captures each collective (between the application's kernels, in place restoring its
/// input first) into one CUDA graph per collective, replays it 100 times, and checks.
fn graph(n: u32, gpus: usize) -> Result<Cases, String> {
    let r = open(n, gpus, &opts(10))?;
    // Every rank's work goes on rank 0's stream: the ranks sharing a GPU are launched
    // together, so one stream serves them all.
    let shared: Vec<Stream> = if gpus == 1 {
        vec![r.streams[0].clone(); n as usize]
    } else {
        r.streams.clone()
    };
    let one = Ranks {
        comms: Vec::new(),
        streams: shared.clone(),
        apps: r.apps.clone(),
    };
    let mut cases = Vec::new();
    for (i, c) in Collective::ALL.into_iter().enumerate() {
        let mode = if c == Collective::Alltoall {
            Mode::OutOfPlace
        } else {
            Mode::InPlace
        };
        let spec = CallSpec {
            collective: c,
            count: 1000 + 3 * i,
            dtype: DType::F32,
            op: if c.reduces() { RedOp::Avg } else { RedOp::Sum },
            root: c.is_rooted().then_some(n - 1),
        };
        let res = graph_case(&r, &one, &spec, mode);
        cases.push((format!("{c} {mode}, 100 replays"), res));
    }
    drop(one);
    Ok(cases)
}

fn graph_case(r: &Ranks, one: &Ranks, spec: &CallSpec, mode: Mode) -> Result<(), String> {
    let n = r.comms.len() as u32;
    let streams = &one.streams;
    let ins = inputs(spec.collective, spec.dtype, spec.op, n, spec.count, 99);
    let calls = r
        .comms
        .iter()
        .zip(streams)
        .zip(&ins)
        .map(|((c, s), i)| RankCall::new(c, s, spec, mode, Kind::Plain, i))
        .collect::<Result<Vec<_>, _>>()?;
    let views: Vec<_> = calls.iter().map(RankCall::views).collect();
    let enqueue = || -> Result<(), String> {
        for ((c, app), s) in calls.iter().zip(&r.apps).zip(streams) {
            c.before(app, s)?;
        }
        group_call(&r.comms, streams, &views, spec)?;
        for ((c, app), s) in calls.iter().zip(&r.apps).zip(streams) {
            c.after(app, s)?;
        }
        Ok(())
    };
    // One eager call first: the plan is prepared (and connected) outside the capture.
    enqueue()?;
    for s in streams {
        s.synchronize().map_err(|e| e.to_string())?;
    }
    let before = r.comms[0].stats().setup();
    let g = Graph::capture(&streams[0], enqueue)?;
    for _ in 0..100 {
        g.launch(&streams[0])?;
    }
    streams[0].synchronize().map_err(|e| e.to_string())?;
    if r.comms[0].stats().setup() != before {
        return Err("capturing set something up".into());
    }
    for c in &r.comms {
        if let Some(e) = c.async_error() {
            return Err(e);
        }
    }
    let expected = reference(spec.collective, spec.dtype, spec.op, spec.root, &ins);
    for (rank, (c, want)) in calls.iter().zip(&expected).enumerate() {
        if let Some((_, bad, i, w, g)) = compare(
            spec.dtype,
            rank as u32,
            want.as_deref(),
            c.output()?.as_deref(),
        ) {
            return Err(format!(
                "rank {rank}: {bad} wrong, first at {i}: expected {w}, got {g}"
            ));
        }
    }
    Ok(())
}

/// Two communicators of two ranks each on the same GPU(s), with ten calls of each in
/// flight before anything is synchronised.
fn two_in_flight(gpus: usize) -> Result<Cases, String> {
    let a = open(2, gpus, &opts(10))?;
    let b = open(2, gpus, &opts(10))?;
    let spec = |c: Collective, count| CallSpec {
        collective: c,
        count,
        dtype: DType::F32,
        op: RedOp::Sum,
        root: None,
    };
    let sa = spec(Collective::Allreduce, (1 << 18) + 1);
    let sb = spec(Collective::Allgather, 77_777);
    let prep = |r: &Ranks, s: &CallSpec, seed| -> Result<(Vec<RankCall>, Vec<Vec<u8>>), String> {
        let ins = inputs(s.collective, s.dtype, s.op, 2, s.count, seed);
        let calls = r
            .comms
            .iter()
            .zip(&r.streams)
            .zip(&ins)
            .map(|((c, st), i)| RankCall::new(c, st, s, Mode::OutOfPlace, Kind::Pool, i))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((calls, ins))
    };
    let (ca, ia) = prep(&a, &sa, 1)?;
    let (cb, ib) = prep(&b, &sb, 2)?;
    let va: Vec<_> = ca.iter().map(RankCall::views).collect();
    let vb: Vec<_> = cb.iter().map(RankCall::views).collect();
    for (calls, r) in [(&ca, &a), (&cb, &b)] {
        for ((c, app), s) in calls.iter().zip(&r.apps).zip(&r.streams) {
            c.before(app, s)?;
        }
    }
    for _ in 0..10 {
        for (r, v, s) in [(&a, &va, &sa), (&b, &vb, &sb)] {
            group_call(&r.comms, &r.streams, v, s)?;
        }
    }
    for (calls, r) in [(&ca, &a), (&cb, &b)] {
        for ((c, app), s) in calls.iter().zip(&r.apps).zip(&r.streams) {
            c.after(app, s)?;
        }
        for s in &r.streams {
            s.synchronize().map_err(|e| e.to_string())?;
        }
    }
    let mut cases = Vec::new();
    for (name, calls, ins, s, r) in [
        ("allreduce", &ca, &ia, &sa, &a),
        ("allgather", &cb, &ib, &sb, &b),
    ] {
        let exp = reference(s.collective, s.dtype, s.op, None, ins);
        let mut res = Ok(());
        if let Some(e) = r.comms[0].async_error() {
            res = Err(e);
        }
        for (rank, (c, want)) in calls.iter().zip(&exp).enumerate() {
            if res.is_ok() {
                if let Some(w) = compare(
                    s.dtype,
                    rank as u32,
                    want.as_deref(),
                    c.output()?.as_deref(),
                ) {
                    res = Err(format!(
                        "rank {rank}: {} wrong, first at {}: expected {}, got {}",
                        w.1, w.2, w.3, w.4
                    ));
                }
            }
        }
        cases.push((format!("{name}, 10 calls in flight"), res));
    }
    Ok(cases)
}

/// `BRAID_TRACE`: every step of the plan's first replica records when it started and
/// ended, on every rank, all within the call's time; without it nothing is recorded.
fn trace(gpus: usize) -> Result<Cases, String> {
    let mut cases = Vec::new();
    let traced = Options {
        trace: true,
        ..opts(10)
    };
    for (c, n, count) in [
        (Collective::Allreduce, 4u32, (1usize << 20) + 3),
        (Collective::Allgather, 2, 1000),
        (Collective::Broadcast, 4, 7),
    ] {
        let res = (|| -> Result<(), String> {
            let r = open(n, gpus, &traced)?;
            let spec = CallSpec {
                collective: c,
                count,
                dtype: DType::F32,
                op: RedOp::Sum,
                root: c.is_rooted().then_some(0),
            };
            let started = Instant::now();
            run_case(&r, &spec, Mode::OutOfPlace, Kind::Plain, 9)?;
            let wall_ns = started.elapsed().as_nanos() as u64;
            let mut all = Vec::new();
            for (rank, comm) in r.comms.iter().enumerate() {
                let (plan, times) = comm
                    .step_times(&spec, Mode::OutOfPlace)
                    .map_err(|e| e.to_string())?
                    .ok_or(format!("rank {rank}: no step times"))?;
                let recorded: Vec<usize> = times.iter().map(Vec::len).collect();
                let steps: Vec<usize> = plan.ranks[rank]
                    .blocks
                    .iter()
                    .map(|b| b.steps.len())
                    .collect();
                if recorded != steps {
                    return Err(format!(
                        "rank {rank}: {recorded:?} times per block for {steps:?} steps"
                    ));
                }
                for (i, &(a, b)) in times.iter().flatten().enumerate() {
                    if a == 0 || b < a {
                        return Err(format!("rank {rank} step {i}: start {a}, end {b}"));
                    }
                }
                all.extend(times.into_iter().flatten());
            }
            let first = all.iter().map(|t| t.0).min().unwrap_or(0);
            let last = all.iter().map(|t| t.1).max().unwrap_or(0);
            if last - first > wall_ns {
                return Err(format!(
                    "steps span {} ns, longer than the call's {wall_ns} ns",
                    last - first
                ));
            }
            let plain = open(n, gpus, &opts(10))?;
            run_case(&plain, &spec, Mode::OutOfPlace, Kind::Plain, 9)?;
            if plain.comms[0]
                .step_times(&spec, Mode::OutOfPlace)
                .map_err(|e| e.to_string())?
                .is_some()
            {
                return Err("step times recorded without BRAID_TRACE".into());
            }
            Ok(())
        })();
        cases.push((format!("{c} on {n} ranks"), res));
    }
    Ok(cases)
}

/// After a call's first time, 1000 more calls allocate, exchange, compile, load and
/// verify nothing: only launches grow.
fn counters(gpus: usize) -> Result<Cases, String> {
    let r = open(2, gpus, &opts(10))?;
    let mut cases = Vec::new();
    for (c, count) in [
        (Collective::Allreduce, 2usize),
        (Collective::Allreduce, 1 << 20),
        (Collective::Allgather, 1000),
    ] {
        let spec = CallSpec {
            collective: c,
            count,
            dtype: DType::F32,
            op: RedOp::Sum,
            root: None,
        };
        let res = (|| -> Result<(), String> {
            let ins = inputs(c, spec.dtype, spec.op, 2, count, 5);
            let calls = r
                .comms
                .iter()
                .zip(&r.streams)
                .zip(&ins)
                .map(|((cm, s), i)| RankCall::new(cm, s, &spec, Mode::OutOfPlace, Kind::Plain, i))
                .collect::<Result<Vec<_>, _>>()?;
            let views: Vec<_> = calls.iter().map(RankCall::views).collect();
            let call = || group_call(&r.comms, &r.streams, &views, &spec);
            call()?;
            let before: Vec<_> = r.comms.iter().map(|c| c.stats()).collect();
            for i in 0..1000 {
                call()?;
                if i % 100 == 99 {
                    for s in &r.streams {
                        s.synchronize().map_err(|e| e.to_string())?;
                    }
                }
            }
            for s in &r.streams {
                s.synchronize().map_err(|e| e.to_string())?;
            }
            for (rank, (c, b)) in r.comms.iter().zip(&before).enumerate() {
                let now = c.stats();
                if now.setup() != b.setup() {
                    return Err(format!(
                        "rank {rank} set up something per call: {b:?} -> {now:?}"
                    ));
                }
                if now.launches != b.launches + 1000 {
                    return Err(format!(
                        "rank {rank}: {} launches for 1000 calls",
                        now.launches - b.launches
                    ));
                }
            }
            Ok(())
        })();
        cases.push((format!("{c} count {count}"), res));
    }
    Ok(cases)
}

/// Two ranks in one process; rank 0 calls, rank 1 never does. `abort()` from another
/// thread must return rank 0's stream to idle within 100 ms, and the next call must
/// report the error.
fn abort() -> Result<Cases, String> {
    let r = open(2, 1, &opts(300))?;
    let spec = CallSpec {
        collective: Collective::Allreduce,
        count: 1 << 16,
        dtype: DType::F32,
        op: RedOp::Sum,
        root: None,
    };
    let ins = inputs(spec.collective, spec.dtype, spec.op, 2, spec.count, 3);
    let call = RankCall::new(
        &r.comms[0],
        &r.streams[0],
        &spec,
        Mode::OutOfPlace,
        Kind::Plain,
        &ins[0],
    )?;
    let v = call.views();
    r.comms[0]
        .call(
            spec.collective,
            bufs(&v),
            spec.count,
            spec.dtype,
            spec.op,
            None,
            &r.streams[0],
        )
        .map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_millis(300));
    let mut cases = Vec::new();
    let busy = !r.streams[0].is_idle().map_err(|e| e.to_string())?;
    cases.push((
        "the lonely rank's kernel waits".to_string(),
        if busy {
            Ok(())
        } else {
            Err("its stream is idle already".into())
        },
    ));
    let comm0 = &r.comms[0];
    let aborted_at = std::thread::scope(|s| {
        s.spawn(|| {
            let t = Instant::now();
            comm0.abort("aborted by the test");
            t
        })
        .join()
        .unwrap()
    });
    let mut idle_after = None;
    while aborted_at.elapsed() < Duration::from_secs(5) {
        if r.streams[0].is_idle().map_err(|e| e.to_string())? {
            idle_after = Some(aborted_at.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    cases.push((
        "the stream is idle within 100 ms of abort()".to_string(),
        match idle_after {
            Some(t) if t <= Duration::from_millis(100) => {
                println!("abort: stream idle {t:?} after abort()");
                Ok(())
            }
            Some(t) => Err(format!("idle only after {t:?}")),
            None => Err("still busy 5 s after abort()".into()),
        },
    ));
    let next = r.comms[0].call(
        spec.collective,
        bufs(&v),
        spec.count,
        spec.dtype,
        spec.op,
        None,
        &r.streams[0],
    );
    cases.push((
        "the next call reports the error".to_string(),
        match next {
            Err(e) if e.to_string().contains("aborted") => Ok(()),
            other => Err(format!("{other:?}")),
        },
    ));
    // Nothing left running: the whole GPU drains.
    let drained = r.comms[0]
        .context()
        .synchronize()
        .map_err(|e| e.to_string());
    cases.push(("nothing is left running on the GPU".to_string(), drained));
    Ok(cases)
}

/// Starts this program twice as ranks 0 and 1 of a launcher-style job (`role` says what
/// the children do), both on GPU 0 when there is one GPU, and collects their verdicts.
fn spawn_pair(
    role: &str,
    gpus: usize,
    env: &[(&str, &str)],
    limit: Duration,
) -> Result<Vec<(i32, String)>, String> {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        l.local_addr().unwrap().port() - 1
    };
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut children = Vec::new();
    for r in 0..2 {
        let mut cmd = Command::new(&exe);
        cmd.env(CHILD, role)
            .env("RANK", r.to_string())
            .env("LOCAL_RANK", (r % gpus).to_string())
            .env("WORLD_SIZE", "2")
            .env("LOCAL_WORLD_SIZE", "2")
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            .env("BRAID_SECRET", "5eed".repeat(8))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        children.push(cmd.spawn().map_err(|e| e.to_string())?);
    }
    let start = Instant::now();
    let mut out = vec![None; 2];
    while out.iter().any(Option::is_none) {
        for (i, c) in children.iter_mut().enumerate() {
            if out[i].is_none() {
                if let Some(st) = c.try_wait().map_err(|e| e.to_string())? {
                    let mut text = String::new();
                    if let Some(mut o) = c.stdout.take() {
                        use std::io::Read;
                        let _ = o.read_to_string(&mut text);
                    }
                    out[i] = Some((st.code().unwrap_or(-1), text));
                }
            }
        }
        if start.elapsed() > limit {
            for c in &mut children {
                let _ = c.kill();
            }
            return Err(format!("the ranks did not finish within {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(out.into_iter().map(Option::unwrap).collect())
}

fn procs(gpus: usize, quick: bool, staged: bool) -> Result<Cases, String> {
    let mut env = vec![("BRAID_TIMEOUT", "20")];
    if staged {
        env.push(("BRAID_P2P_DISABLE", "1"));
    }
    if quick {
        env.push(("BRAID_CUDA_QUICK", "1"));
    }
    let ranks = spawn_pair("matrix", gpus, &env, Duration::from_secs(240))?;
    Ok(rank_cases(ranks, "rank done"))
}

/// Each rank process's outcome as a case: exit 0 and `done` in its output.
fn rank_cases(ranks: Vec<(i32, String)>, done: &str) -> Cases {
    ranks
        .into_iter()
        .enumerate()
        .map(|(r, (code, text))| {
            print!("{text}");
            let res = if code == 0 && text.contains(done) {
                Ok(())
            } else {
                Err(format!("exit code {code}"))
            };
            (format!("rank {r}"), res)
        })
        .collect()
}

/// Rank 1 exits right after joining; rank 0's call must fail (kernel timeout) instead of
/// hanging.
fn dead_peer() -> Result<Cases, String> {
    dead_peer_with(&[])
}

fn dead_peer_with(extra: &[(&str, &str)]) -> Result<Cases, String> {
    let t = Instant::now();
    let mut env = vec![("BRAID_TIMEOUT", "3")];
    env.extend_from_slice(extra);
    let ranks = spawn_pair("dead", 1, &env, Duration::from_secs(60))?;
    let (code, text) = &ranks[0];
    print!("{text}");
    let ok = *code == 0 && text.contains("peer failure reported");
    Ok(vec![(
        format!("the survivor reports the dead peer ({:.1?})", t.elapsed()),
        if ok {
            Ok(())
        } else {
            Err(format!("exit code {code}"))
        },
    )])
}

/// The soak (`BRAID_GPU_SECTIONS=soak`; `BRAID_SOAK_CALLS`, default 2,000): 2 ranks as
/// processes on the GPU(s), a deterministic mix of collectives, dtypes, ops, modes,
/// memory kinds and counts, every result checked; from call 1,000 (or half the run) to
/// the last, resident memory grows less than 5 % and open files and `/dev/shm` entries
/// do not grow.
fn soak(gpus: usize) -> Result<Cases, String> {
    let limit = Duration::from_secs(60 + soak_calls() as u64 / 4);
    let ranks = spawn_pair("soak", gpus, &[("BRAID_TIMEOUT", "30")], limit)?;
    Ok(rank_cases(ranks, "soak done"))
}

fn soak_calls() -> usize {
    std::env::var("BRAID_SOAK_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

/// What the soak watches in this process: resident KiB, open files, `/dev/shm` entries.
fn footprint() -> (u64, usize, usize) {
    let rss = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|t| {
            t.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4);
    let count = |d: &str| std::fs::read_dir(d).map_or(0, |e| e.count());
    (rss, count("/proc/self/fd"), count("/dev/shm"))
}

fn soak_rank(comm: &CudaComm, stream: &Stream, app: &AppKernels) -> Result<(), String> {
    let calls = soak_calls();
    let mark = 1000.min(calls / 2);
    let mix = [
        (DType::F32, RedOp::Sum),
        (DType::Bf16, RedOp::Avg),
        (DType::I32, RedOp::Max),
        (DType::U8, RedOp::Min),
        (DType::F64, RedOp::Prod),
    ];
    let counts = [1usize, 7, 1000, 4099, 65_537, 1 << 18];
    let mut at_mark = None;
    let t = Instant::now();
    for i in 0..calls {
        let c = Collective::ALL[i % Collective::ALL.len()];
        let (d, o) = mix[(i / 6) % mix.len()];
        let (d, o) = if c.reduces() { (d, o) } else { (d, RedOp::Sum) };
        let root = c.is_rooted().then_some((i / 30 % 2) as u32);
        let mode = modes(c)[(i / 7) % modes(c).len()];
        let spec = CallSpec {
            collective: c,
            count: counts[(i / 11) % counts.len()],
            dtype: d,
            op: o,
            root,
        };
        let kind = KINDS[(i / 13) % KINDS.len()];
        proc_case(comm, stream, app, &spec, mode, kind, i as u64)
            .map_err(|e| format!("call {i}: {c} {} {} {mode}: {e}", d.name(), o.name()))?;
        if i + 1 == mark {
            at_mark = Some(footprint());
        }
    }
    let (rss0, fd0, shm0) = at_mark.unwrap_or_default();
    let (rss1, fd1, shm1) = footprint();
    println!(
        "rank {}: {calls} calls right in {:.1?}; from call {mark}: RSS {rss0} -> {rss1} KiB, \
         open files {fd0} -> {fd1}, /dev/shm entries {shm0} -> {shm1}",
        comm.rank(),
        t.elapsed()
    );
    if rss1 as f64 > rss0 as f64 * 1.05 || fd1 > fd0 || shm1 > shm0 {
        return Err("the footprint grew".into());
    }
    println!("rank {}: soak done", comm.rank());
    Ok(())
}

/// A child process: one rank of a two-process job.
fn child(role: &str) -> ExitCode {
    let code = match child_run(role) {
        Ok(()) => 0,
        Err(e) => {
            println!("child error: {e}");
            1
        }
    };
    ExitCode::from(code)
}

fn child_run(role: &str) -> Result<(), String> {
    let quick = std::env::var("BRAID_CUDA_QUICK").is_ok();
    let opts = Options::from_env().map_err(|e| e.to_string())?;
    let comm = CudaComm::from_launch_env(registry(2), &opts).map_err(|e| e.to_string())?;
    let rank = comm.rank();
    let stream = Stream::new(comm.context()).map_err(|e| e.to_string())?;
    let app = AppKernels::load(comm.context())?;
    match role {
        "soak" => soak_rank(&comm, &stream, &app),
        "p2p" => {
            let k = p2p::proc_rank(&comm, &stream)?;
            println!("rank {rank}: {k} exchanges right; p2p done");
            Ok(())
        }
        "dead" => {
            // Both ranks make one call together; then rank 1 dies and rank 0 calls again:
            // its kernel waits for a peer that will never send, until BRAID_TIMEOUT.
            let spec = CallSpec {
                collective: Collective::Allreduce,
                count: 4096,
                dtype: DType::F32,
                op: RedOp::Sum,
                root: None,
            };
            let ins = inputs(spec.collective, spec.dtype, spec.op, 2, spec.count, 1);
            proc_case(
                &comm,
                &stream,
                &app,
                &spec,
                Mode::OutOfPlace,
                Kind::Plain,
                1,
            )?;
            if rank == 1 {
                println!("rank 1 dies");
                std::process::exit(0);
            }
            let c = RankCall::new(
                &comm,
                &stream,
                &spec,
                Mode::OutOfPlace,
                Kind::Plain,
                &ins[0],
            )?;
            let v = c.views();
            let t = Instant::now();
            comm.call(
                spec.collective,
                bufs(&v),
                spec.count,
                spec.dtype,
                spec.op,
                None,
                &stream,
            )
            .map_err(|e| e.to_string())?;
            stream.synchronize().map_err(|e| e.to_string())?;
            match comm.async_error() {
                Some(e) => {
                    println!(
                        "rank 0: peer failure reported after {:.1?}: {e}",
                        t.elapsed()
                    );
                    Ok(())
                }
                None => Err("the call against a dead peer succeeded".into()),
            }
        }
        _ => {
            let mut failed = 0;
            let mut k = 0usize;
            for c in Collective::ALL {
                for root in roots(c, 2) {
                    let ops = if quick || c != Collective::Allreduce {
                        vec![
                            (DType::F32, RedOp::Sum),
                            (DType::Bf16, RedOp::Avg),
                            (DType::I64, RedOp::Min),
                            (DType::U8, RedOp::Prod),
                        ]
                    } else {
                        dtype_ops(c, false)
                    };
                    for (d, o) in ops {
                        let (d, o) = if c.reduces() { (d, o) } else { (d, RedOp::Sum) };
                        for mode in modes(c) {
                            for count in [0usize, 1, 7, (1 << 20) + 3] {
                                let spec = CallSpec {
                                    collective: c,
                                    count,
                                    dtype: d,
                                    op: o,
                                    root,
                                };
                                let kind = KINDS[k % 3];
                                k += 1;
                                let what = format!("{c} root {root:?} {} {} {mode} count {count} ({kind:?} memory)", d.name(), o.name());
                                if !selected(&what) {
                                    continue;
                                }
                                if let Err(e) =
                                    proc_case(&comm, &stream, &app, &spec, mode, kind, k as u64)
                                {
                                    failed += 1;
                                    println!("FAIL rank {rank}: {c} {root:?} {} {} {mode} {count} {kind:?}: {e}", d.name(), o.name());
                                    if failed >= 3 {
                                        return Err("too many failures".into());
                                    }
                                }
                            }
                        }
                    }
                }
            }
            if failed > 0 {
                return Err(format!("{failed} of {k} cases failed"));
            }
            println!(
                "rank {rank}: {k} cases right (p2p {}); rank done",
                comm.p2p()
            );
            Ok(())
        }
    }
}

fn proc_case(
    comm: &CudaComm,
    stream: &Stream,
    app: &AppKernels,
    spec: &CallSpec,
    mode: Mode,
    kind: Kind,
    seed: u64,
) -> Result<(), String> {
    let rank = comm.rank();
    let ins = inputs(spec.collective, spec.dtype, spec.op, 2, spec.count, seed);
    let c = RankCall::new(comm, stream, spec, mode, kind, &ins[rank as usize])?;
    c.before(app, stream)?;
    let v = c.views();
    comm.call(
        spec.collective,
        bufs(&v),
        spec.count,
        spec.dtype,
        spec.op,
        spec.root,
        stream,
    )
    .map_err(|e| e.to_string())?;
    c.after(app, stream)?;
    stream.synchronize().map_err(|e| e.to_string())?;
    if let Some(e) = comm.async_error() {
        return Err(e);
    }
    if spec.count == 0 {
        return Ok(());
    }
    let want =
        reference(spec.collective, spec.dtype, spec.op, spec.root, &ins).swap_remove(rank as usize);
    match compare(spec.dtype, rank, want.as_deref(), c.output()?.as_deref()) {
        None => Ok(()),
        Some((_, bad, i, w, g)) => Err(format!("{bad} wrong, first at {i}: expected {w}, got {g}")),
    }
}

/// The per-call cost of an 8-byte allreduce, 2 ranks sharing GPU 0 in one process:
/// host time from call to return (median of 10,000), and GPU time per call for 1,000
/// calls back to back between CUDA events, eager and replayed from one CUDA graph,
/// beside the roofline (the hand-written 2-block kernel) measured the same way.
fn bench(path: &str) -> Result<Cases, String> {
    let r = open(2, 1, &opts(60))?;
    let s = &r.streams[0];
    let spec = CallSpec {
        collective: Collective::Allreduce,
        count: 2,
        dtype: DType::F32,
        op: RedOp::Sum,
        root: None,
    };
    let ins = inputs(spec.collective, spec.dtype, spec.op, 2, spec.count, 1);
    let calls = r
        .comms
        .iter()
        .zip(&ins)
        .map(|(c, i)| RankCall::new(c, s, &spec, Mode::OutOfPlace, Kind::Plain, i))
        .collect::<Result<Vec<_>, _>>()?;
    let views: Vec<_> = calls.iter().map(RankCall::views).collect();
    for c in &calls {
        c.before(&r.apps[0], s)?;
    }
    s.synchronize().map_err(|e| e.to_string())?;
    // Separate launches per rank first, each on its own stream (what two unrelated
    // threads do), then both ranks as one group on one stream: the timed shape.
    let s1 = &r.streams[1];
    for _ in 0..10 {
        r.comms[0]
            .call(
                spec.collective,
                bufs(&views[0]),
                2,
                spec.dtype,
                spec.op,
                None,
                s,
            )
            .map_err(|e| e.to_string())?;
        r.comms[1]
            .call(
                spec.collective,
                bufs(&views[1]),
                2,
                spec.dtype,
                spec.op,
                None,
                s1,
            )
            .map_err(|e| e.to_string())?;
    }
    let same = [s.clone(), s.clone()];
    let call = |_: [&Stream; 2]| group_call(&r.comms, &same, &views, &spec);
    for _ in 0..100 {
        call([s, s])?;
    }
    s.synchronize().map_err(|e| e.to_string())?;
    let mut host = Vec::with_capacity(10_000);
    for i in 0..10_000 {
        let t = Instant::now();
        call([s, s])?;
        host.push(t.elapsed().as_secs_f64() * 1e6);
        if i % 500 == 499 {
            s.synchronize().map_err(|e| e.to_string())?;
        }
    }
    s.synchronize().map_err(|e| e.to_string())?;
    host.sort_by(f64::total_cmp);
    let median = host[host.len() / 2];
    let timer = Timer::new(r.comms[0].context())?;
    let per_call = |f: &dyn Fn() -> Result<(), String>, calls: usize| -> Result<f64, String> {
        timer.start(s)?;
        f()?;
        timer.stop(s)?;
        Ok(timer.elapsed_ms()? * 1e3 / calls as f64)
    };
    let eager = per_call(&|| (0..1000).try_for_each(|_| call([s, s])), 1000)?;
    let g = Graph::capture(s, || (0..1000).try_for_each(|_| call([s, s])))?;
    g.launch(s)?;
    let graphed = per_call(&|| g.launch(s), 1000)?;
    // The roofline: 2 ranks as 2 blocks of one hand-written launch.
    let ctx = r.comms[0].context();
    let scratch = Mem::new(ctx, Kind::Plain, 4096, s)?;
    scratch.fill_async(0, s)?;
    let (f, v, o) = (scratch.ptr(), scratch.ptr() + 1024, scratch.ptr() + 2048);
    let app = &r.apps[0];
    // The bare launch of one kernel, as the host sees it: the floor of any per-call cost.
    let mut bare = Vec::with_capacity(10_000);
    for i in 0..10_000 {
        let t = Instant::now();
        app.roof(f, v, o, 2, s)?;
        bare.push(t.elapsed().as_secs_f64() * 1e6);
        if i % 500 == 499 {
            s.synchronize().map_err(|e| e.to_string())?;
        }
    }
    bare.sort_by(f64::total_cmp);
    let launch_median = bare[bare.len() / 2];
    let roof_eager = per_call(
        &|| (0..1000).try_for_each(|_| app.roof(f, v, o, 2, s)),
        1000,
    )?;
    let rg = Graph::capture(s, || (0..1000).try_for_each(|_| app.roof(f, v, o, 2, s)))?;
    rg.launch(s)?;
    let roof_graph = per_call(&|| rg.launch(s), 1000)?;
    s.synchronize().map_err(|e| e.to_string())?;
    for c in &r.comms {
        if let Some(e) = c.async_error() {
            return Err(e);
        }
    }
    let line = format!(
        "{{\"what\": \"allreduce 8 B, 2 ranks on one GPU, one process\", \"host_us_median\": {median:.3}, \"bare_launch_us_median\": {launch_median:.3}, \"host_us_p90\": {:.3}, \"eager_us\": {eager:.3}, \"graph_us\": {graphed:.3}, \"roofline_eager_us\": {roof_eager:.3}, \"roofline_graph_us\": {roof_graph:.3}, \"ratio_eager\": {:.3}, \"ratio_graph\": {:.3}}}\n",
        host[host.len() * 9 / 10],
        roof_eager / eager,
        roof_graph / graphed
    );
    print!("bench: {line}");
    std::fs::write(path, &line).map_err(|e| e.to_string())?;
    let host_ok = if median <= 5.0 {
        Ok(())
    } else {
        Err(format!(
            "median host cost {median:.2} us is over the 5 us target"
        ))
    };
    Ok(vec![("per-call host cost <= 5 us".to_string(), host_ok)])
}
