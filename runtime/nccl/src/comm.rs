//! Communicators behind `ncclComm_t`: Braid's CUDA communicator (`BRAID_BACKEND=cuda`, the
//! default) or the host backend's (`BRAID_BACKEND=host`: "device" pointers are host
//! pointers and every call completes before it returns, which lets C programs run on
//! machines without a GPU, CI's among them).
//!
//! A handle is only a key: the communicator lives in a table of live ones, so a handle
//! that was destroyed, or never made here, is refused with an error instead of being
//! dereferenced.

use crate::abi;
use crate::errors::{Failure, Res};
use crate::forward;
use braid_cuda::CudaComm;
use braid_plan::Verified;
use braid_runtime::bootstrap::{Bootstrap, UniqueId};
use braid_runtime::registry::{Origin, PlanProvider, Registry};
use braid_runtime::Communicator;
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Which engine runs the calls.
pub enum Backend {
    Cuda(CudaComm),
    Host(Communicator),
}

/// What stands behind one `ncclComm_t`.
pub struct Comm {
    pub rank: u32,
    pub n: u32,
    /// The CUDA device (or -1 on the host backend).
    pub device: i32,
    /// Set once the communicator exists (at once for a blocking init, later for a
    /// non-blocking one); the init's failure otherwise.
    pub backend: OnceLock<Res<Backend>>,
    /// The bootstrap of a one-rank-per-process communicator (for `ncclCommSplit`).
    pub boot: OnceLock<Arc<Bootstrap>>,
    /// Forwarding to the real NCCL (set with the backend).
    pub forward: OnceLock<forward::Slot>,
    /// Reduction ops made by `ncclRedOpCreatePreMulSum`: id -> (scalar bytes, dtype).
    pub premul: Mutex<HashMap<i32, (Vec<u8>, i32)>>,
    /// The last error of a call on this communicator.
    pub last_error: Mutex<CString>,
    /// A failure that made the communicator unusable.
    pub failed: Mutex<Option<Failure>>,
}

impl Comm {
    /// A communicator not made yet (the init functions fill it in).
    pub fn new(rank: u32, n: u32, device: i32) -> Comm {
        Comm {
            rank,
            n,
            device,
            backend: OnceLock::new(),
            boot: OnceLock::new(),
            forward: OnceLock::new(),
            premul: Mutex::new(HashMap::new()),
            last_error: Mutex::new(CString::default()),
            failed: Mutex::new(None),
        }
    }

    /// The backend, once the communicator is ready.
    pub fn ready(&self) -> Res<&Backend> {
        match self.backend.get() {
            None => Err(Failure::new(
                abi::IN_PROGRESS,
                "the communicator is still being initialised (poll ncclCommGetAsyncError)",
            )),
            Some(Err(f)) => Err(f.clone()),
            Some(Ok(b)) => Ok(b),
        }
    }

    /// The error that makes the communicator unusable, if any.
    pub fn async_error(&self) -> Option<Failure> {
        if let Some(f) = self.failed.lock().unwrap().clone() {
            return Some(f);
        }
        match self.backend.get()? {
            Err(f) => Some(f.clone()),
            Ok(Backend::Cuda(c)) => c.async_error().map(|m| Failure::new(abi::REMOTE_ERROR, m)),
            Ok(Backend::Host(_)) => None,
        }
    }

    pub fn record(&self, text: &str) {
        *self.last_error.lock().unwrap() =
            CString::new(text.replace('\0', " ")).unwrap_or_default();
    }

    /// Forwarding's state (the communicator is ready).
    pub fn forward(&self) -> Res<&forward::Slot> {
        self.ready()?;
        self.forward.get().ok_or_else(|| {
            Failure::new(
                abi::INTERNAL_ERROR,
                "a ready communicator without forwarding state",
            )
        })
    }

    /// Records a failure that leaves the communicator unusable (a peer's failure).
    pub fn fail(&self, f: &Failure) {
        if f.code == abi::REMOTE_ERROR {
            self.failed.lock().unwrap().get_or_insert(f.clone());
        }
    }

    pub fn abort(&self, reason: &str) {
        if let Some(fw) = self.forward.get() {
            fw.release(true);
        }
        if let Some(Ok(b)) = self.backend.get() {
            match b {
                Backend::Cuda(c) => c.abort(reason),
                Backend::Host(c) => c.abort(reason),
            }
        }
        self.failed
            .lock()
            .unwrap()
            .get_or_insert(Failure::new(abi::REMOTE_ERROR, reason));
    }
}

/// Live communicators by handle.
static LIVE: Mutex<Option<HashMap<usize, Arc<Comm>>>> = Mutex::new(None);

/// Registers `c` and returns its handle.
pub fn register(c: Arc<Comm>) -> usize {
    let key = Arc::as_ptr(&c) as usize;
    LIVE.lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(key, c);
    key
}

/// The communicator behind a handle.
pub fn lookup(handle: usize) -> Res<Arc<Comm>> {
    if handle == 0 {
        return Err(Failure::invalid("comm is NULL"));
    }
    LIVE.lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|m| m.get(&handle).cloned())
        .ok_or_else(|| {
            Failure::invalid(format!(
                "comm {handle:#x} is not a live communicator (destroyed, aborted, or not made by this library)"
            ))
        })
}

/// Removes a handle; the communicator goes once nothing uses it.
pub fn unregister(handle: usize) -> Res<Arc<Comm>> {
    let c = lookup(handle)?;
    if let Some(m) = LIVE.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        m.remove(&handle);
    }
    Ok(c)
}

/// Whether calls run on the host backend.
pub fn host_backend() -> bool {
    std::env::var("BRAID_BACKEND").is_ok_and(|v| v.trim().eq_ignore_ascii_case("host"))
}

/// How long a blocked wait lasts before it fails.
pub fn timeout() -> Duration {
    braid_runtime::comm::timeout_from_env()
}

struct Lib(Arc<braid_library::Library>);

impl PlanProvider for Lib {
    fn plans(&self, c: braid_ir::Collective, root: Option<u32>) -> Vec<Arc<Verified>> {
        self.0.plans(c, root)
    }
}

/// The shipped library per topology, compiled once per process.
static LIBRARIES: Mutex<Option<HashMap<String, Arc<braid_library::Library>>>> = Mutex::new(None);

/// The plans a communicator of `n` ranks chooses from: `BRAID_PLANS` first, then the
/// shipped library, both for `BRAID_TOPO` (default: one node of `n` GPUs joined by
/// NVSwitch).
pub fn registry(n: u32) -> Res<Arc<Registry>> {
    let (name, topo) = topology(n)?;
    let registry = Registry::new();
    if let Ok(list) = std::env::var("BRAID_PLANS") {
        for p in list.split(':').filter(|p| !p.is_empty()) {
            let path = std::path::Path::new(p);
            for plan in braid_library::user_plans(path, &topo).map_err(Failure::invalid)? {
                tracing::info!(plan = %plan.name, file = p, "user plan from BRAID_PLANS");
                registry.add_verified(Arc::new(plan), Origin::User(p.to_string()));
            }
        }
    }
    let lib = LIBRARIES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .entry(name)
        .or_insert_with(|| Arc::new(braid_library::Library::new(topo)))
        .clone();
    Ok(Arc::new(registry.with_provider(Box::new(Lib(lib)))))
}

/// The topology of a communicator of `n` ranks: `BRAID_TOPO`, else one node of `n` GPUs
/// joined by NVSwitch; with the name it was given.
pub fn topology(n: u32) -> Res<(String, braid_topo::Topology)> {
    let name = std::env::var("BRAID_TOPO").unwrap_or_else(|_| format!("nvswitch:{n}"));
    let topo = braid_topo::Topology::from_arg(&name)
        .map_err(|e| Failure::invalid(format!("BRAID_TOPO={name}: {e}")))?;
    if topo.n_ranks() != n {
        return Err(Failure::invalid(format!(
            "BRAID_TOPO={name} has {} ranks, the communicator {n}",
            topo.n_ranks()
        )));
    }
    Ok((name, topo))
}

/// The CUDA device the calling thread works on (its current context's, else 0).
pub fn current_device() -> i32 {
    if !braid_cuda::driver_present() {
        return -1;
    }
    use cudarc::driver::sys;
    let mut ctx = std::ptr::null_mut();
    // SAFETY: out-parameters.
    unsafe {
        if sys::cuInit(0) != sys::CUresult::CUDA_SUCCESS
            || sys::cuCtxGetCurrent(&mut ctx) != sys::CUresult::CUDA_SUCCESS
            || ctx.is_null()
        {
            return 0;
        }
        let mut dev = 0;
        if sys::cuCtxGetDevice(&mut dev) != sys::CUresult::CUDA_SUCCESS {
            return 0;
        }
        dev
    }
}

/// A unique id for a new group: its root listens from now on (kept for the process,
/// as NCCL's is).
pub fn new_unique_id() -> Res<UniqueId> {
    let (id, listener) = UniqueId::new(None)?;
    // The root socket stays pending until rank 0's init takes it over.
    std::mem::forget(listener);
    Ok(id)
}

/// Options of a CUDA communicator of `n` ranks from the environment and NCCL's twins;
/// its calls choose by the cost model on its topology (`BRAID_SELECT=rules`: by rules).
pub fn cuda_options(n: u32) -> Res<braid_cuda::Options> {
    let mut o = braid_cuda::Options::from_env()?;
    let (_, topo) = topology(n)?;
    let profile = braid_cost::Profile::from_env(&topo.fingerprint()).map_err(Failure::invalid)?;
    // LL128 only over links the profile's stress tests passed on.
    o.ll128 = profile.ll128.clone();
    o.policy = o.policy.with_model(topo, profile);
    o.p2p_disable = o.p2p_disable || crate::env::p2p_disabled();
    if let Some(b) = crate::env::buffsize().map_err(Failure::invalid)? {
        o.scratch_bytes = b;
    }
    if o.policy.replicas.is_none() {
        o.policy.replicas = crate::env::channels();
    }
    Ok(o)
}

/// A communicator of rank `rank` of `n` to be made on the calling thread's device (or
/// on the host).
pub fn shell(rank: u32, n: u32) -> Comm {
    Comm::new(rank, n, if host_backend() { -1 } else { current_device() })
}

/// Runs `f` with `device`'s primary context current on this thread (a no-op for the
/// host, -1), restoring the thread's context afterwards.
pub fn on_device<T>(device: i32, f: impl FnOnce() -> T) -> T {
    if device < 0 || !braid_cuda::driver_present() {
        return f();
    }
    use cudarc::driver::sys;
    let mut before = std::ptr::null_mut();
    // SAFETY: an out-parameter.
    unsafe { sys::cuCtxGetCurrent(&mut before) };
    if let Ok(ctx) = cudarc::driver::CudaContext::new(device as usize) {
        let _ = ctx.bind_to_thread();
    }
    let r = f();
    // SAFETY: the context that was current before (possibly none).
    unsafe { sys::cuCtxSetCurrent(before) };
    r
}

/// Rank `rank` of `n` in this process joining `id`'s group (blocking): fills `shell`
/// (made by [`Comm::new`]) in; on failure, the error is both returned and left in it.
pub fn init_rank(shell: &Comm, id: &UniqueId) -> Res<()> {
    let made = make_rank(shell, id);
    let result = made.as_ref().map(drop).map_err(Clone::clone);
    let _ = shell.backend.set(made);
    result
}

fn make_rank(shell: &Comm, id: &UniqueId) -> Res<Backend> {
    let (rank, n) = (shell.rank, shell.n);
    let registry = registry(n)?;
    let host = host_backend();
    if !host && !braid_cuda::driver_present() {
        return Err(Failure::new(
            abi::UNHANDLED_CUDA_ERROR,
            "no CUDA driver on this machine (BRAID_BACKEND=host runs on host memory)",
        ));
    }
    let timeout = if host {
        timeout()
    } else {
        cuda_options(n)?.timeout
    };
    let boot = Arc::new(Bootstrap::init(id, rank, n, timeout)?);
    let backend = if host {
        Backend::Host(Communicator::with_bootstrap(
            boot.clone(),
            registry,
            timeout,
        ))
    } else {
        let opts = cuda_options(n)?;
        Backend::Cuda(CudaComm::with_bootstrap(
            boot.clone(),
            shell.device.max(0) as usize,
            registry,
            &opts,
        )?)
    };
    // The real NCCL's id for forwarding: rank 0 makes one if it has a real NCCL and
    // sends it (or nothing) to all.
    let lib = forward::configured();
    let mine = match (&lib, rank) {
        (Some(Ok(l)), 0) => match l.unique_id() {
            Ok(id) => id.internal.iter().map(|&c| c as u8).collect(),
            Err(e) => {
                tracing::warn!("forwarding disabled: {}", e.message);
                Vec::new()
            }
        },
        _ => Vec::new(),
    };
    let got = boot.broadcast_from(0, &mine)?;
    let real_id = (got.len() == UNIQUE_ID_BYTES_USIZE).then(|| {
        let mut id = abi::ncclUniqueId {
            internal: [0; abi::UNIQUE_ID_BYTES],
        };
        for (d, s) in id.internal.iter_mut().zip(&got) {
            *d = *s as std::ffi::c_char;
        }
        id
    });
    let _ = shell.boot.set(boot);
    let _ = shell.forward.set(forward::Slot::new(
        lib,
        forward::How::Rank {
            id: real_id,
            rank,
            n,
        },
    ));
    Ok(backend)
}

const UNIQUE_ID_BYTES_USIZE: usize = abi::UNIQUE_ID_BYTES;

/// One communicator per device of `devices`, all in this process.
pub fn init_all(devices: &[i32]) -> Res<Vec<Comm>> {
    let n = devices.len() as u32;
    let registry = registry(n)?;
    let backends: Vec<Backend> = if host_backend() {
        Communicator::create_local(n, registry, timeout())
            .into_iter()
            .map(Backend::Host)
            .collect()
    } else {
        if !braid_cuda::driver_present() {
            return Err(Failure::new(
                abi::UNHANDLED_CUDA_ERROR,
                "no CUDA driver on this machine (BRAID_BACKEND=host runs on host memory)",
            ));
        }
        let ds: Vec<usize> = devices.iter().map(|&d| d as usize).collect();
        CudaComm::init_all(&ds, registry, &cuda_options(n)?)?
            .into_iter()
            .map(Backend::Cuda)
            .collect()
    };
    let host = host_backend();
    let lib = forward::configured();
    let group = forward::AllGroup::new(devices.to_vec());
    Ok(backends
        .into_iter()
        .enumerate()
        .map(|(r, b)| {
            let comm = Comm::new(r as u32, n, if host { -1 } else { devices[r] });
            let _ = comm.forward.set(forward::Slot::new(
                lib.clone(),
                forward::How::All {
                    group: group.clone(),
                    index: r,
                },
            ));
            let _ = comm.backend.set(Ok(b));
            comm
        })
        .collect())
}
