//! Forwarding: what Braid does not serve goes to the real NCCL named by `BRAID_NCCL_LIB`.
//!
//! The real library is opened privately (`RTLD_LOCAL | RTLD_DEEPBIND`), so its symbols
//! never take the place of Braid's in the process and its own calls stay inside it.
//! Each Braid communicator may own one real communicator, made the first time a
//! forwarded call needs it: for a communicator of one rank per process, from the real
//! unique id that rank 0 made and sent with Braid's own init (one small broadcast), with
//! a non-blocking real init that gives up after `BRAID_TIMEOUT` (so a rank whose peers
//! never reach a forwarded call gets an error, not a hang); for `ncclCommInitAll`'s
//! communicators, all of them at once by the real `ncclCommInitAll`. A failure to make
//! the real communicator fails only the forwarded calls; Braid's own stays usable.

use crate::abi::*;
use crate::errors::{Failure, Res};
use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

type Comm = *mut c_void;
type Stream = *mut c_void;

type FnVersion = unsafe extern "C" fn(*mut c_int) -> ncclResult_t;
type FnUniqueId = unsafe extern "C" fn(*mut ncclUniqueId) -> ncclResult_t;
type FnInitRankConfig =
    unsafe extern "C" fn(*mut Comm, c_int, ncclUniqueId, c_int, *mut ncclConfig_t) -> ncclResult_t;
type FnInitAll = unsafe extern "C" fn(*mut Comm, c_int, *const c_int) -> ncclResult_t;
type FnAsyncError = unsafe extern "C" fn(Comm, *mut ncclResult_t) -> ncclResult_t;
type FnComm = unsafe extern "C" fn(Comm) -> ncclResult_t;
type FnGroup = unsafe extern "C" fn() -> ncclResult_t;
type FnLastError = unsafe extern "C" fn(Comm) -> *const c_char;
/// AllReduce, ReduceScatter: (send, recv, count, dtype, op, comm, stream).
type FnReduceLike = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    Comm,
    Stream,
) -> ncclResult_t;
/// Reduce: (send, recv, count, dtype, op, root, comm, stream).
type FnReduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    c_int,
    Comm,
    Stream,
) -> ncclResult_t;
/// Broadcast, Gather, Scatter: (send, recv, count, dtype, root, comm, stream).
type FnRooted = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    Comm,
    Stream,
) -> ncclResult_t;
/// AllGather, AlltoAll: (send, recv, count, dtype, comm, stream).
type FnMove =
    unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, Comm, Stream) -> ncclResult_t;
/// Send, Recv: (buf, count, dtype, peer, comm, stream).
type FnP2p = unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, Comm, Stream) -> ncclResult_t;
type FnPreMul = unsafe extern "C" fn(*mut c_int, *mut c_void, c_int, c_int, Comm) -> ncclResult_t;
type FnOpDestroy = unsafe extern "C" fn(c_int, Comm) -> ncclResult_t;

/// `RTLD_DEEPBIND` (glibc): the library's own symbols first for its own references.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const DEEPBIND: c_int = 0x0008;
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
const DEEPBIND: c_int = 0;

/// A real NCCL, opened privately.
pub struct RealNccl {
    pub path: String,
    pub version: c_int,
    lib: libloading::Library,
    unique_id: FnUniqueId,
    init_rank_config: FnInitRankConfig,
    init_all: FnInitAll,
    async_error: FnAsyncError,
    destroy: FnComm,
    abort: FnComm,
    group_start: FnGroup,
    group_end: FnGroup,
    last_error: FnLastError,
}

// SAFETY: function pointers into a library that stays loaded as long as this value;
// NCCL's functions may be called from any thread.
unsafe impl Send for RealNccl {}
unsafe impl Sync for RealNccl {}

fn symbol<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T, String> {
    // SAFETY: the symbol is NCCL's function of that name, whose C signature `T` spells.
    unsafe { lib.get::<T>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|e| format!("it has no {name}: {e}"))
}

impl RealNccl {
    /// Opens the library at `path` and checks that it is a real NCCL, not this one.
    pub fn open(path: &str) -> Result<RealNccl, String> {
        let flags = libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL | DEEPBIND;
        // SAFETY: loading a library runs its initialisers; the user named it as NCCL.
        let lib = unsafe { libloading::os::unix::Library::open(Some(path), flags) }
            .map_err(|e| format!("BRAID_NCCL_LIB={path}: cannot load it: {e}"))?;
        let lib = libloading::Library::from(lib);
        let err = |e: String| format!("BRAID_NCCL_LIB={path}: {e}");
        let get_version: FnVersion = symbol(&lib, "ncclGetVersion").map_err(err)?;
        if get_version as *const () == crate::ncclGetVersion as *const () {
            return Err(format!(
                "BRAID_NCCL_LIB={path} is Braid's own library; name the real NCCL's file by its path"
            ));
        }
        let mut version = 0;
        // SAFETY: an out-parameter.
        unsafe { get_version(&mut version) };
        Ok(RealNccl {
            path: path.to_string(),
            version,
            unique_id: symbol(&lib, "ncclGetUniqueId").map_err(err)?,
            init_rank_config: symbol(&lib, "ncclCommInitRankConfig").map_err(err)?,
            init_all: symbol(&lib, "ncclCommInitAll").map_err(err)?,
            async_error: symbol(&lib, "ncclCommGetAsyncError").map_err(err)?,
            destroy: symbol(&lib, "ncclCommDestroy").map_err(err)?,
            abort: symbol(&lib, "ncclCommAbort").map_err(err)?,
            group_start: symbol(&lib, "ncclGroupStart").map_err(err)?,
            group_end: symbol(&lib, "ncclGroupEnd").map_err(err)?,
            last_error: symbol(&lib, "ncclGetLastError").map_err(err)?,
            lib,
        })
    }

    fn failure(&self, what: &str, rc: ncclResult_t, comm: Comm) -> Failure {
        // SAFETY: the real library's message (a C string it owns), or null.
        let text = unsafe {
            let p = (self.last_error)(comm);
            if p.is_null() {
                String::new()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        Failure::new(
            if (0..NUM_RESULTS).contains(&rc) {
                rc
            } else {
                INTERNAL_ERROR
            },
            format!(
                "forwarded to the real NCCL ({}): {what} returned {rc}: {text}",
                self.path
            ),
        )
    }

    fn check(&self, what: &str, rc: ncclResult_t, comm: Comm) -> Res<()> {
        if rc == SUCCESS || rc == IN_PROGRESS {
            Ok(())
        } else {
            Err(self.failure(what, rc, comm))
        }
    }

    /// A fresh real unique id.
    pub fn unique_id(&self) -> Res<ncclUniqueId> {
        let mut id = ncclUniqueId {
            internal: [0; UNIQUE_ID_BYTES],
        };
        // SAFETY: an out-parameter of NCCL's size.
        let rc = unsafe { (self.unique_id)(&mut id) };
        self.check("ncclGetUniqueId", rc, std::ptr::null_mut())?;
        Ok(id)
    }

    /// Waits until every real communicator of `comms` has finished what it was doing
    /// (a non-blocking init or group), failing after `deadline`.
    fn settle(&self, what: &str, comms: &[Comm], deadline: Instant) -> Res<()> {
        for &c in comms {
            loop {
                let mut state = IN_PROGRESS;
                // SAFETY: a live real communicator; an out-parameter.
                let rc = unsafe { (self.async_error)(c, &mut state) };
                self.check("ncclCommGetAsyncError", rc, c)?;
                match state {
                    SUCCESS => break,
                    IN_PROGRESS if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_micros(200))
                    }
                    IN_PROGRESS => {
                        return Err(Failure::new(
                            REMOTE_ERROR,
                            format!(
                                "forwarded to the real NCCL ({}): {what} did not finish within BRAID_TIMEOUT \
                                 (every rank must reach the same forwarded calls)",
                                self.path
                            ),
                        ))
                    }
                    e => return Err(self.failure(what, e, c)),
                }
            }
        }
        Ok(())
    }
}

/// Real libraries by path, opened once per process.
static OPENED: Mutex<Option<HashMap<String, Arc<RealNccl>>>> = Mutex::new(None);

/// The real NCCL `BRAID_NCCL_LIB` names: `None` when unset, else the library or why it
/// cannot be used.
pub fn configured() -> Option<Result<Arc<RealNccl>, String>> {
    let path = std::env::var("BRAID_NCCL_LIB")
        .ok()
        .filter(|p| !p.trim().is_empty())?;
    let mut opened = OPENED.lock().unwrap_or_else(|e| e.into_inner());
    let map = opened.get_or_insert_with(HashMap::new);
    if let Some(l) = map.get(&path) {
        return Some(Ok(l.clone()));
    }
    Some(RealNccl::open(&path).map(|l| {
        tracing::info!(path = %path, version = l.version, "forwarding what Braid does not serve to this NCCL");
        let l = Arc::new(l);
        map.insert(path, l.clone());
        l
    }))
}

/// Logs each kind of forwarded call once per process.
fn log_once(kind: &str, path: &str) {
    static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    if SEEN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashSet::new)
        .insert(kind.to_string())
    {
        tracing::info!(
            "{kind}: forwarded to the real NCCL ({path}); further such calls are not logged"
        );
    }
}

/// How a Braid communicator's real twin is made.
pub enum How {
    /// One rank per process (or thread): the real id rank 0 made, if it had a real NCCL.
    Rank {
        id: Option<ncclUniqueId>,
        rank: u32,
        n: u32,
    },
    /// One of `ncclCommInitAll`'s communicators.
    All { group: Arc<AllGroup>, index: usize },
}

/// The real communicators of one `ncclCommInitAll`, made together.
pub struct AllGroup {
    pub devices: Vec<c_int>,
    comms: OnceLock<Res<Vec<usize>>>,
}

impl AllGroup {
    pub fn new(devices: Vec<c_int>) -> Arc<AllGroup> {
        Arc::new(AllGroup {
            devices,
            comms: OnceLock::new(),
        })
    }
}

/// A Braid communicator's forwarding state.
pub struct Slot {
    /// The real library (`None`: `BRAID_NCCL_LIB` was unset when the communicator was made).
    pub lib: Option<Result<Arc<RealNccl>, String>>,
    pub how: How,
    /// The real communicator once made (rank-per-process kind), or why it could not be.
    real: Mutex<Option<Res<usize>>>,
}

impl Slot {
    pub fn new(lib: Option<Result<Arc<RealNccl>, String>>, how: How) -> Slot {
        Slot {
            lib,
            how,
            real: Mutex::new(None),
        }
    }

    fn lib(&self, what: &str) -> Res<&Arc<RealNccl>> {
        match &self.lib {
            Some(Ok(l)) => Ok(l),
            Some(Err(e)) => Err(Failure::usage(format!("{what} is not served by Braid, and {e}"))),
            None => Err(Failure::usage(format!(
                "{what} is not served by Braid; set BRAID_NCCL_LIB to a real libnccl.so.2 (its path) to forward it"
            ))),
        }
    }

    /// The real communicator, made now if needed (see the module's doc).
    fn real(&self, lib: &RealNccl, timeout: Duration) -> Res<Comm> {
        match &self.how {
            How::All { group, index } => {
                let comms = group.comms.get_or_init(|| {
                    let mut comms = vec![std::ptr::null_mut(); group.devices.len()];
                    // SAFETY: one slot per device.
                    let rc = unsafe {
                        (lib.init_all)(
                            comms.as_mut_ptr(),
                            comms.len() as c_int,
                            group.devices.as_ptr(),
                        )
                    };
                    lib.check("ncclCommInitAll", rc, std::ptr::null_mut())?;
                    Ok(comms.into_iter().map(|c| c as usize).collect())
                });
                match comms {
                    Ok(v) => Ok(v[*index] as Comm),
                    Err(e) => Err(e.clone()),
                }
            }
            How::Rank { id, rank, n } => {
                let mut real = self.real.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(r) = &*real {
                    return r.clone().map(|c| c as Comm);
                }
                let made = (|| {
                    let Some(id) = id else {
                        return Err(Failure::usage(
                            "rank 0 had no real NCCL (BRAID_NCCL_LIB) when this communicator was made",
                        ));
                    };
                    let mut config = config_nonblocking();
                    let mut c: Comm = std::ptr::null_mut();
                    // SAFETY: out-parameter, a config of NCCL 2.28's layout (versioned).
                    let rc = unsafe {
                        (lib.init_rank_config)(
                            &mut c,
                            *n as c_int,
                            *id,
                            *rank as c_int,
                            &mut config,
                        )
                    };
                    lib.check("ncclCommInitRankConfig", rc, c)?;
                    if let Err(e) =
                        lib.settle("ncclCommInitRankConfig", &[c], Instant::now() + timeout)
                    {
                        // SAFETY: the real communicator just made, given up.
                        unsafe { (lib.abort)(c) };
                        return Err(e);
                    }
                    Ok(c as usize)
                })();
                *real = Some(made.clone());
                made.map(|c| c as Comm)
            }
        }
    }

    /// Destroys (or aborts) the real communicator, if one was made.
    pub fn release(&self, abort: bool) {
        let Some(Ok(lib)) = &self.lib else { return };
        let c = match &self.how {
            How::All { group, index } => match group.comms.get() {
                Some(Ok(v)) => v[*index],
                _ => return,
            },
            How::Rank { .. } => match self.real.lock().unwrap_or_else(|e| e.into_inner()).take() {
                Some(Ok(c)) => c,
                _ => return,
            },
        };
        // SAFETY: a real communicator this slot made, released once.
        unsafe {
            if abort {
                (lib.abort)(c as Comm);
            } else {
                (lib.destroy)(c as Comm);
            }
        }
    }
}

/// `NCCL_CONFIG_INITIALIZER` with `blocking = 0`.
fn config_nonblocking() -> ncclConfig_t {
    ncclConfig_t {
        size: std::mem::size_of::<ncclConfig_t>(),
        magic: CONFIG_MAGIC,
        version: VERSION_CODE as u32,
        blocking: 0,
        cgaClusterSize: CONFIG_UNDEF_INT,
        minCTAs: CONFIG_UNDEF_INT,
        maxCTAs: CONFIG_UNDEF_INT,
        netName: std::ptr::null(),
        splitShare: CONFIG_UNDEF_INT,
        trafficClass: CONFIG_UNDEF_INT,
        commName: std::ptr::null(),
        collnetEnable: CONFIG_UNDEF_INT,
        CTAPolicy: CONFIG_UNDEF_INT,
        shrinkShare: CONFIG_UNDEF_INT,
        nvlsCTAs: CONFIG_UNDEF_INT,
        nChannelsPerNetPeer: CONFIG_UNDEF_INT,
        nvlinkCentricSched: CONFIG_UNDEF_INT,
    }
}

/// A call as the application made it, for the real library.
#[derive(Clone, Debug)]
pub enum Call {
    AllReduce {
        send: u64,
        recv: u64,
        count: usize,
        dtype: c_int,
        op: c_int,
    },
    ReduceScatter {
        send: u64,
        recv: u64,
        count: usize,
        dtype: c_int,
        op: c_int,
    },
    Reduce {
        send: u64,
        recv: u64,
        count: usize,
        dtype: c_int,
        op: c_int,
        root: c_int,
    },
    Broadcast {
        send: u64,
        recv: u64,
        count: usize,
        dtype: c_int,
        root: c_int,
    },
    Gather {
        send: u64,
        recv: u64,
        count: usize,
        dtype: c_int,
        root: c_int,
    },
    Scatter {
        send: u64,
        recv: u64,
        count: usize,
        dtype: c_int,
        root: c_int,
    },
    AllGather {
        send: u64,
        recv: u64,
        count: usize,
        dtype: c_int,
    },
    AlltoAll {
        send: u64,
        recv: u64,
        count: usize,
        dtype: c_int,
    },
    Send {
        buf: u64,
        count: usize,
        dtype: c_int,
        peer: c_int,
    },
    Recv {
        buf: u64,
        count: usize,
        dtype: c_int,
        peer: c_int,
    },
}

impl Call {
    pub fn name(&self) -> &'static str {
        match self {
            Call::AllReduce { .. } => "ncclAllReduce",
            Call::ReduceScatter { .. } => "ncclReduceScatter",
            Call::Reduce { .. } => "ncclReduce",
            Call::Broadcast { .. } => "ncclBroadcast",
            Call::Gather { .. } => "ncclGather",
            Call::Scatter { .. } => "ncclScatter",
            Call::AllGather { .. } => "ncclAllGather",
            Call::AlltoAll { .. } => "ncclAlltoAll",
            Call::Send { .. } => "ncclSend",
            Call::Recv { .. } => "ncclRecv",
        }
    }

    fn op_mut(&mut self) -> Option<&mut c_int> {
        match self {
            Call::AllReduce { op, .. }
            | Call::ReduceScatter { op, .. }
            | Call::Reduce { op, .. } => Some(op),
            _ => None,
        }
    }

    /// Issues the call on the real library.
    ///
    /// # Safety
    /// NCCL's contract for the buffers and the stream, as the application gave them.
    unsafe fn issue(&self, lib: &RealNccl, comm: Comm, stream: Stream) -> Res<ncclResult_t> {
        let name = self.name();
        let p = |a: u64| a as *mut c_void;
        Ok(match *self {
            Call::AllReduce {
                send,
                recv,
                count,
                dtype,
                op,
            }
            | Call::ReduceScatter {
                send,
                recv,
                count,
                dtype,
                op,
            } => {
                let f: FnReduceLike = symbol(&lib.lib, name).map_err(Failure::usage)?;
                f(p(send), p(recv), count, dtype, op, comm, stream)
            }
            Call::Reduce {
                send,
                recv,
                count,
                dtype,
                op,
                root,
            } => {
                let f: FnReduce = symbol(&lib.lib, name).map_err(Failure::usage)?;
                f(p(send), p(recv), count, dtype, op, root, comm, stream)
            }
            Call::Broadcast {
                send,
                recv,
                count,
                dtype,
                root,
            }
            | Call::Gather {
                send,
                recv,
                count,
                dtype,
                root,
            }
            | Call::Scatter {
                send,
                recv,
                count,
                dtype,
                root,
            } => {
                let f: FnRooted = symbol(&lib.lib, name).map_err(Failure::usage)?;
                f(p(send), p(recv), count, dtype, root, comm, stream)
            }
            Call::AllGather {
                send,
                recv,
                count,
                dtype,
            }
            | Call::AlltoAll {
                send,
                recv,
                count,
                dtype,
            } => {
                let f: FnMove = symbol(&lib.lib, name).map_err(Failure::usage)?;
                f(p(send), p(recv), count, dtype, comm, stream)
            }
            Call::Send {
                buf,
                count,
                dtype,
                peer,
            }
            | Call::Recv {
                buf,
                count,
                dtype,
                peer,
            } => {
                let f: FnP2p = symbol(&lib.lib, name).map_err(Failure::usage)?;
                f(p(buf), count, dtype, peer, comm, stream)
            }
        })
    }
}

/// One forwarded call: its communicator's slot, the call, its stream, and (a
/// `ncclRedOpCreatePreMulSum` op) the scalar and its data type.
pub struct Forwarded<'a> {
    pub slot: &'a Slot,
    pub call: Call,
    pub stream: usize,
    pub premul: Option<(Vec<u8>, c_int)>,
    /// Why Braid does not serve it (logged once per kind).
    pub why: &'static str,
}

/// Whether `slot` can forward at all (the error a forwarded call would get otherwise).
pub fn available(slot: &Slot, what: &str) -> Res<()> {
    slot.lib(what).map(drop)
}

/// Runs forwarded calls together: the real communicators first (made if needed), then
/// the calls inside one real group, then waits for the group to be issued.
pub fn run(calls: Vec<Forwarded>, timeout: Duration) -> Res<()> {
    let Some(first) = calls.first() else {
        return Ok(());
    };
    let lib = first.slot.lib(first.call.name())?.clone();
    let mut reals = Vec::with_capacity(calls.len());
    for f in &calls {
        let l = f.slot.lib(f.call.name())?;
        if !Arc::ptr_eq(l, &lib) {
            return Err(Failure::usage(
                "one group forwards to two different real NCCL libraries",
            ));
        }
        log_once(&format!("{} ({})", f.call.name(), f.why), &lib.path);
        reals.push(f.slot.real(&lib, timeout)?);
    }
    let mut made_ops: Vec<(c_int, Comm)> = Vec::new();
    let destroy_ops = |made: &[(c_int, Comm)]| {
        if let Ok(d) = symbol::<FnOpDestroy>(&lib.lib, "ncclRedOpDestroy") {
            for &(op, c) in made {
                // SAFETY: an op made below on that real communicator, destroyed once.
                unsafe { d(op, c) };
            }
        }
    };
    // SAFETY: no arguments.
    lib.check(
        "ncclGroupStart",
        unsafe { (lib.group_start)() },
        std::ptr::null_mut(),
    )?;
    let mut result = Ok(());
    for (f, &c) in calls.iter().zip(&reals) {
        let mut call = f.call.clone();
        if let Some((scalar, dtype)) = &f.premul {
            let made = (|| {
                let create: FnPreMul =
                    symbol(&lib.lib, "ncclRedOpCreatePreMulSum").map_err(Failure::usage)?;
                let mut op = 0;
                let mut s = scalar.clone();
                // SAFETY: one element of `dtype` on the host, read at once.
                let rc = unsafe {
                    create(
                        &mut op,
                        s.as_mut_ptr() as *mut c_void,
                        *dtype,
                        SCALAR_HOST_IMMEDIATE,
                        c,
                    )
                };
                lib.check("ncclRedOpCreatePreMulSum", rc, c)?;
                Ok(op)
            })();
            match made {
                Ok(op) => {
                    made_ops.push((op, c));
                    if let Some(o) = call.op_mut() {
                        *o = op;
                    }
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        // SAFETY: the application's buffers and stream, under NCCL's contract.
        match unsafe { call.issue(&lib, c, f.stream as Stream) } {
            Ok(rc) => {
                if let Err(e) = lib.check(call.name(), rc, c) {
                    result = Err(e);
                    break;
                }
            }
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    // SAFETY: no arguments; ends the group started above.
    let rc = unsafe { (lib.group_end)() };
    let result = result
        .and_then(|_| lib.check("ncclGroupEnd", rc, std::ptr::null_mut()))
        .and_then(|_| lib.settle("the forwarded group", &reals, Instant::now() + timeout));
    destroy_ops(&made_ops);
    result
}
