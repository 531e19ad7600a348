//! One rank per process, one GPU per rank: how PyTorch runs. The ranks of a group find
//! each other through the runtime's bootstrap ([`Bootstrap`]), and each rank's FIFOs
//! (in its own GPU's memory) reach the sending rank's process as CUDA IPC handles
//! (`cuIpcGetMemHandle` / `cuIpcOpenMemHandle`). Where some pair of GPUs cannot reach
//! each other peer to peer, or `BRAID_P2P_DISABLE=1`, every FIFO lives in host memory
//! shared between the processes ([`crate::shared_host`]) instead.
//!
//! Everything here is collective over the group: [`RankGpu::open`] and
//! [`RankGpu::prepare`] on every rank, in the same order, with the same plan and call.
//! `prepare` checks that they agree (plan, dtype, op, count, mode and wire protocol, by
//! digest) and fails on every rank otherwise, before anything is allocated. A rank that
//! dies mid-call leaves its peers' kernels waiting: they give up after the kernel
//! timeout and report it as an error.

use crate::codegen::Wire;
use crate::device::{DeviceAlloc, IpcImport, IPC_HANDLE_LEN};
use crate::error::{CudaError, Result};
use crate::exec::driver_present;
use crate::layout::CallShape;
use crate::rank_mem::{Fifo, RankMem};
use crate::settings::Settings;
use crate::shared_host::SharedHost;
use crate::table;
use crate::validate;
use braid_ir::Mode;
use braid_plan::Plan;
use braid_runtime::bootstrap::Bootstrap;
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::reduce::finish_avg;
use cudarc::driver::{sys, CudaContext, CudaFunction, CudaStream};
use cudarc::nvrtc::Ptx;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// This process's rank of a group, on one GPU.
pub struct RankGpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    boot: Arc<Bootstrap>,
    settings: Settings,
}

fn pci_bus_id(ctx: &CudaContext) -> Result<String> {
    let mut buf = [0 as std::ffi::c_char; 32];
    // SAFETY: `buf` has room for the id and its terminator (the driver needs 13 bytes).
    unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, ctx.cu_device()) }
        .result()?;
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Whether this process's GPU can reach the GPU with PCI bus id `bus` directly. Asks the
/// driver about the two devices; no context is created on the peer's GPU (every rank
/// process would otherwise hold one on every GPU).
fn reaches(ctx: &CudaContext, bus: &str) -> Result<bool> {
    if pci_bus_id(ctx)? == bus {
        return Ok(true);
    }
    let Ok(id) = std::ffi::CString::new(bus) else {
        return Ok(false);
    };
    let mut dev = 0;
    // SAFETY: out-parameter; `id` is a terminated string.
    let found = unsafe { sys::cuDeviceGetByPCIBusId(&mut dev, id.as_ptr()) };
    if found != sys::CUresult::CUDA_SUCCESS {
        // Not visible to this process (CUDA_VISIBLE_DEVICES): nothing says it is reachable.
        return Ok(false);
    }
    let mut can = 0;
    // SAFETY: out-parameter; both devices exist.
    unsafe { sys::cuDeviceCanAccessPeer(&mut can, ctx.cu_device(), dev) }.result()?;
    Ok(can != 0)
}

fn all_true(votes: &[Vec<u8>]) -> bool {
    votes.iter().all(|v| v.first() == Some(&1))
}

impl RankGpu {
    /// Opens GPU `device` for this process's rank of `boot`'s group. Collective: every
    /// rank calls it. Connections go peer to peer when every rank can reach every other
    /// rank's GPU and none asked otherwise (`p2p_disable`, normally from
    /// `BRAID_P2P_DISABLE`); else they are host-staged, on every rank alike.
    pub fn open(device: usize, boot: Arc<Bootstrap>, p2p_disable: bool) -> Result<RankGpu> {
        if !driver_present() {
            return Err(CudaError::NoDriver);
        }
        let have = CudaContext::device_count()? as usize;
        if device >= have {
            return Err(CudaError::Invalid(format!(
                "rank {} wants GPU {device}, this machine has {have}",
                boot.rank()
            )));
        }
        let ctx = CudaContext::new(device)?;
        let mut settings = Settings::new(std::slice::from_ref(&ctx), false)?;
        let arch = settings.arch.clone();
        let me = format!("{arch} {}", pci_bus_id(&ctx)?);
        let all = boot.allgather(me.as_bytes())?;
        let mut ok = !p2p_disable;
        for (r, info) in all.iter().enumerate() {
            let info = String::from_utf8_lossy(info);
            let (their_arch, bus) = info.split_once(' ').unwrap_or((&info, ""));
            if their_arch != arch {
                return Err(CudaError::Invalid(format!(
                    "rank {r} has a {their_arch} GPU, this rank {arch}: GPUs of different \
                     architectures are not supported yet"
                )));
            }
            if ok && r as u32 != boot.rank() && !reaches(&ctx, bus)? {
                tracing::warn!(
                    "rank {}: GPU {device} cannot reach rank {r}'s GPU ({bus}) peer to peer",
                    boot.rank()
                );
                ok = false;
            }
        }
        settings.p2p = all_true(&boot.allgather(&[u8::from(ok)])?);
        if !settings.p2p {
            tracing::info!(
                "rank {}: connections staged through shared host memory",
                boot.rank()
            );
        }
        ctx.bind_to_thread()?;
        let stream = ctx.new_stream()?;
        Ok(RankGpu {
            ctx,
            stream,
            boot,
            settings,
        })
    }

    pub fn rank(&self) -> u32 {
        self.boot.rank()
    }

    pub fn n_ranks(&self) -> u32 {
        self.boot.n_ranks()
    }

    /// Whether connections go peer to peer (`false`: host-staged).
    pub fn p2p(&self) -> bool {
        self.settings.p2p
    }

    /// Forces a protocol for every later call (`None`: the plan's, `auto` by size),
    /// overriding `BRAID_PROTO`.
    pub fn set_protocol(&mut self, protocol: Option<braid_ir::Protocol>) {
        self.settings.protocol = protocol;
    }

    /// How long a kernel of a later call may wait for a peer before the call fails,
    /// overriding `BRAID_TIMEOUT` (part of the generated source: a new value compiles
    /// anew).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.settings.timeout = timeout;
    }

    pub fn multiprocessors(&self) -> u32 {
        self.settings.multiprocessors
    }

    /// The stream [`RankResident::launch`] uses.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// One call of `plan` on this rank, start to finish: [`RankGpu::prepare`], one
    /// launch, this rank's result. A zero count does nothing (on every rank alike).
    pub fn run(
        &self,
        plan: &Plan,
        dtype: DType,
        op: RedOp,
        count: usize,
        mode: Mode,
        input: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        if count == 0 {
            validate::check_plan(plan, mode)?;
            let shape = CallShape {
                plan,
                elem: dtype.size(),
                count,
                mode,
            };
            return Ok(shape.unstage_out(self.rank(), &[]));
        }
        let r = self.prepare(plan, dtype, op, count, mode, input)?;
        r.launch()?;
        r.output()
    }

    /// Prepares one call of `plan` on this rank: `input` is this rank's send buffer
    /// (NCCL's size for `count`). Collective: every rank calls it with the same plan and
    /// call, which is checked. Refuses, before allocating anything, what
    /// [`crate::Gpus::prepare`] refuses; `count` must be positive.
    pub fn prepare<'a>(
        &'a self,
        plan: &'a Plan,
        dtype: DType,
        op: RedOp,
        count: usize,
        mode: Mode,
        input: &[u8],
    ) -> Result<RankResident<'a>> {
        let me = self.rank();
        if plan.n_ranks != self.n_ranks() {
            return Err(CudaError::Invalid(format!(
                "plan `{}` has {} ranks, the group {}",
                plan.name,
                plan.n_ranks,
                self.n_ranks()
            )));
        }
        let shape = CallShape {
            plan,
            elem: dtype.size(),
            count,
            mode,
        };
        if input.len() != shape.input_bytes() {
            return Err(CudaError::Invalid(format!(
                "expected an input of {} bytes, got {}",
                shape.input_bytes(),
                input.len()
            )));
        }
        let (wire, source) = self.settings.source(&shape, dtype, op)?;
        // Every rank must run the same call: compare digests before allocating.
        let digest = crate::cache::key(
            &format!("{}\n{count} {mode:?}", source.text),
            &self.settings.arch,
            0,
            (0, 0),
        );
        let all = self.boot.allgather(digest.as_bytes())?;
        if let Some(r) = all.iter().position(|d| d != digest.as_bytes()) {
            return Err(CudaError::Invalid(format!(
                "rank {r} prepares a different call than rank {me} (plan, dtype, op, count, \
                 mode or protocol differ)"
            )));
        }
        let name = &source.kernels[me as usize];
        let (mut funcs, cached) = self.settings.kernels(&source, |ptx| {
            let module = self.ctx.load_module(Ptx::from_src(ptx))?;
            Ok(vec![module.load_function(name)?])
        })?;
        let func = funcs.pop().expect("one function per process");

        // This rank's receive FIFOs, described for their senders.
        let conns = table::connections(plan);
        let mut fifos: Vec<(usize, Fifo)> = Vec::new();
        let mut offer = Vec::new();
        for (i, _) in conns.iter().enumerate().filter(|(_, c)| c.receiver == me) {
            let len = crate::rank_mem::fifo_len(plan.slots);
            let fifo = if self.settings.p2p {
                let d = DeviceAlloc::new(&self.ctx, len, 0)?;
                offer.push(Offer::Ipc(i as u32, d.ipc_handle()?));
                Fifo::Device(d)
            } else {
                let h = SharedHost::create(&self.ctx, len)?;
                let path = h.path().expect("created here").to_path_buf();
                offer.push(Offer::Shm(i as u32, path));
                Fifo::Shared(h)
            };
            fifos.push((i, fifo));
        }
        let offers = self.boot.allgather(&encode(&offer))?;
        let mut ptrs = vec![0u64; conns.len()];
        for (i, f) in &fifos {
            ptrs[*i] = f.ptr();
        }
        let mut imports = Vec::new();
        for (r, bytes) in offers.iter().enumerate() {
            for o in decode(bytes).map_err(|e| {
                CudaError::Invalid(format!("rank {r} sent a malformed FIFO description: {e}"))
            })? {
                let i = o.conn() as usize;
                let Some(c) = conns.get(i) else {
                    return Err(CudaError::Invalid(format!(
                        "rank {r} offered connection {i}, the plan has {}",
                        conns.len()
                    )));
                };
                if c.receiver != r as u32 || c.sender != me {
                    continue;
                }
                let import = match o {
                    Offer::Ipc(_, h) => Import::Ipc(IpcImport::open(&self.ctx, &h)?),
                    Offer::Shm(_, p) => Import::Shm(SharedHost::open(&self.ctx, &p)?),
                };
                ptrs[i] = import.ptr();
                imports.push(import);
            }
        }
        if let Some(i) = conns
            .iter()
            .enumerate()
            .position(|(i, c)| c.sender == me && ptrs[i] == 0)
        {
            return Err(CudaError::Invalid(format!(
                "rank {} did not offer the FIFO of connection {i}",
                conns[i].receiver
            )));
        }
        // Every sender has opened its FIFOs: shared files need no name any more.
        self.boot.barrier()?;
        for (_, f) in &mut fifos {
            if let Fifo::Shared(h) = f {
                h.unlink();
            }
        }
        let mem = RankMem::new(
            &self.ctx,
            &shape,
            me,
            input,
            &conns,
            &ptrs,
            self.settings.timeout,
        )?;
        Ok(RankResident {
            gpu: self,
            shape,
            dtype,
            op,
            wire,
            func,
            cached,
            mem: Some(mem),
            imports,
            fifos: fifos.into_iter().map(|(_, f)| f).collect(),
            failed: Mutex::new(false),
        })
    }
}

/// A receive FIFO as its sender's process can open it.
enum Offer {
    Ipc(u32, [u8; IPC_HANDLE_LEN]),
    Shm(u32, PathBuf),
}

impl Offer {
    fn conn(&self) -> u32 {
        match self {
            Offer::Ipc(i, _) | Offer::Shm(i, _) => *i,
        }
    }
}

/// `[kind u8][conn u32][len u32][payload]...`, little-endian.
fn encode(offers: &[Offer]) -> Vec<u8> {
    let mut v = Vec::new();
    for o in offers {
        let (kind, payload): (u8, Vec<u8>) = match o {
            Offer::Ipc(_, h) => (0, h.to_vec()),
            Offer::Shm(_, p) => (1, p.to_string_lossy().into_owned().into_bytes()),
        };
        v.push(kind);
        v.extend_from_slice(&o.conn().to_le_bytes());
        v.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        v.extend_from_slice(&payload);
    }
    v
}

fn decode(mut b: &[u8]) -> std::result::Result<Vec<Offer>, String> {
    let mut v = Vec::new();
    while !b.is_empty() {
        if b.len() < 9 {
            return Err("truncated entry".into());
        }
        let kind = b[0];
        let conn = u32::from_le_bytes(b[1..5].try_into().unwrap());
        let len = u32::from_le_bytes(b[5..9].try_into().unwrap()) as usize;
        let payload = b.get(9..9 + len).ok_or("truncated payload")?;
        v.push(match kind {
            0 => Offer::Ipc(
                conn,
                payload
                    .try_into()
                    .map_err(|_| format!("an IPC handle of {len} bytes"))?,
            ),
            1 => Offer::Shm(
                conn,
                PathBuf::from(String::from_utf8(payload.to_vec()).map_err(|e| e.to_string())?),
            ),
            k => return Err(format!("unknown kind {k}")),
        });
        b = &b[9 + len..];
    }
    Ok(v)
}

/// A peer's FIFO opened in this process.
enum Import {
    Ipc(IpcImport),
    Shm(SharedHost),
}

impl Import {
    fn ptr(&self) -> u64 {
        match self {
            Import::Ipc(i) => i.ptr(),
            Import::Shm(s) => s.ptr(),
        }
    }
}

/// One rank's call whose buffers stay on its GPU between launches (from
/// [`RankGpu::prepare`]). Dropping it is collective too: each rank closes what it
/// opened of its peers, waits for every rank to have done so, then frees its own.
pub struct RankResident<'a> {
    gpu: &'a RankGpu,
    shape: CallShape<'a>,
    dtype: DType,
    op: RedOp,
    wire: Wire,
    func: CudaFunction,
    /// Whether the kernel was already compiled (memory or disk cache).
    pub cached: bool,
    mem: Option<RankMem>,
    imports: Vec<Import>,
    fifos: Vec<Fifo>,
    /// A call failed: the FIFOs' counters disagree between ranks from then on.
    failed: Mutex<bool>,
}

impl RankResident<'_> {
    pub fn wire(&self) -> Wire {
        self.wire
    }

    fn mem(&self) -> &RankMem {
        self.mem.as_ref().expect("present until drop")
    }

    /// Enqueues this rank's part of the call on `stream` (a stream of this rank's GPU)
    /// and returns at once: one kernel launch, capturable in a CUDA graph. Every rank must
    /// enqueue the same number of calls.
    pub fn enqueue(&self, stream: &CudaStream) -> Result<()> {
        if *self.failed.lock().unwrap() {
            return Err(CudaError::Invalid(
                "an earlier call of this prepared collective failed; prepare it again".into(),
            ));
        }
        if stream.context().cu_device() != self.gpu.ctx.cu_device() {
            return Err(CudaError::Invalid(
                "the stream does not belong to this rank's GPU".into(),
            ));
        }
        let chunk_elems = self.shape.geometry().chunk_elems as u64;
        self.mem().launch(&self.func, chunk_elems, stream)
    }

    /// Whether this rank's kernels finished normally (after the stream was synchronised).
    pub fn status(&self) -> Result<()> {
        let s = self.mem().status();
        if s.is_err() {
            *self.failed.lock().unwrap() = true;
        }
        s
    }

    /// Runs the call once more on this rank's stream and waits for it: the time from
    /// launch to the end of the kernel, as seen by this process.
    pub fn launch(&self) -> Result<Duration> {
        let start = Instant::now();
        self.enqueue(&self.gpu.stream)?;
        self.gpu.stream.synchronize()?;
        let t = start.elapsed();
        self.status()?;
        Ok(t)
    }

    /// This rank's result (NCCL's receive buffer; `None` where it has none), `avg`
    /// finished as the host backend does.
    pub fn output(&self) -> Result<Option<Vec<u8>>> {
        let mut out = self.mem().output(&self.shape)?;
        let plan = self.shape.plan;
        if self.op == RedOp::Avg && plan.collective.reduces() {
            if let Some(o) = out.as_mut() {
                finish_avg(self.dtype, o, plan.n_ranks);
            }
        }
        Ok(out)
    }
}

impl Drop for RankResident<'_> {
    fn drop(&mut self) {
        let _ = self.gpu.ctx.synchronize();
        self.mem = None;
        self.imports.clear();
        // Peers may still have our FIFOs open: free them only once every rank closed its
        // imports. A dead peer makes the barrier fail after the bootstrap timeout.
        if let Err(e) = self.gpu.boot.barrier() {
            tracing::warn!("rank {}: teardown barrier: {e}", self.gpu.rank());
        }
        self.fifos.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offers_round_trip_and_garbage_is_refused() {
        let h = [7u8; IPC_HANDLE_LEN];
        let v = encode(&[Offer::Ipc(3, h), Offer::Shm(9, PathBuf::from("/dev/shm/x"))]);
        let d = decode(&v).unwrap();
        assert_eq!(d.len(), 2);
        assert!(matches!(&d[0], Offer::Ipc(3, x) if x == &h));
        assert!(matches!(&d[1], Offer::Shm(9, p) if p == &PathBuf::from("/dev/shm/x")));
        assert!(decode(&v[..v.len() - 1]).is_err());
        assert!(decode(&[5, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
        let mut short = encode(&[Offer::Ipc(1, h)]);
        short[5] = 10; // claims a 10-byte handle
        short.truncate(9 + 10);
        assert!(decode(&short).is_err());
    }

    #[test]
    fn p2p_needs_every_vote() {
        assert!(all_true(&[vec![1], vec![1]]));
        assert!(!all_true(&[vec![1], vec![0]]));
        assert!(!all_true(&[vec![1], vec![]]));
    }
}
