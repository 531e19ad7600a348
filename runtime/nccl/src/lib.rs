//! Braid as `libnccl.so.2`: NCCL 2.28's C API (every symbol NCCL's library exports, with
//! NCCL's signatures, enum values and struct layouts) on Braid's device communicator, so
//! programs written against `nccl.h` (PyTorch, nccl-tests, C code) run on Braid
//! unchanged. `include/nccl.h` is the header of this library. What Braid does not serve
//! yet returns `ncclInvalidUsage` with a message naming it (`ncclGetLastError`); nothing
//! here exits the process or lets a panic cross into C. `docs/pytorch.md` tells how to
//! use it.
//!
//! # Safety
//! Every exported function is `unsafe` to call from Rust: its pointer arguments must be
//! what NCCL's API says (null where NCCL allows it, else valid for the sizes the call
//! implies, device memory of the communicator's GPU on the CUDA backend). Handles
//! (communicators, register handles, ops) are checked against tables of live ones, so a
//! stale or foreign handle is an error, not a dereference.

#![allow(non_snake_case, non_camel_case_types, clippy::missing_safety_doc)]

pub mod abi;
pub mod comm;
pub mod env;
pub mod errors;
pub mod forward;
pub mod ops;

/// Marks the shared object as Braid's (not an exported symbol: `braid perf --vs-nccl`
/// reads the file to refuse comparing Braid with itself).
#[used]
static BRAID_MARK: [u8; 40] = *braid_cuda::nccl::BRAID_MARK;

use abi::*;
use braid_ir::Collective;
use braid_runtime::bootstrap::UniqueId;
use braid_runtime::call::CallSpec;
use comm::Comm;
use errors::{guard, non_null, Failure, Res};
use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

/// `ncclComm_t`: a key into the table of live communicators.
pub type ncclComm_t = *mut c_void;
/// `ncclWindow_t`.
pub type ncclWindow_t = *mut c_void;
/// `cudaStream_t`.
pub type cudaStream_t = *mut c_void;

fn key(c: ncclComm_t) -> usize {
    c as usize
}

/// Runs `f` on a live communicator, recording a failure on it for `ncclGetLastError`.
fn with_comm(what: &str, c: ncclComm_t, f: impl FnOnce(&Arc<Comm>) -> Res<()>) -> ncclResult_t {
    guard(what, || {
        let comm = comm::lookup(key(c))?;
        let r = f(&comm);
        if let Err(e) = &r {
            comm.record(&format!("{what}: {}", e.message));
            ops::note_group_error(e);
        }
        r
    })
}

fn out<T>(p: *mut T, name: &str, v: T) -> Res<()> {
    non_null(p, name)?;
    // SAFETY: a non-null out-parameter the caller provides (NCCL's contract).
    unsafe { p.write(v) };
    Ok(())
}

// ---- version, errors ------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn ncclGetVersion(version: *mut c_int) -> ncclResult_t {
    guard("ncclGetVersion", || out(version, "version", VERSION_CODE))
}

#[no_mangle]
pub unsafe extern "C" fn ncclGetErrorString(result: ncclResult_t) -> *const c_char {
    error_string(result).as_ptr()
}

#[no_mangle]
pub unsafe extern "C" fn ncclGetLastError(comm: ncclComm_t) -> *const c_char {
    if !comm.is_null() {
        if let Ok(c) = comm::lookup(key(comm)) {
            let text = c.last_error.lock().unwrap().clone();
            if !text.as_bytes().is_empty() {
                errors::set_last(&text.to_string_lossy());
            }
        }
    }
    errors::last_ptr()
}

#[no_mangle]
pub unsafe extern "C" fn ncclResetDebugInit() {}

#[no_mangle]
pub unsafe extern "C" fn ncclResetDebugInitInternal() {}

// ---- unique ids and communicators -----------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn ncclGetUniqueId(unique_id: *mut ncclUniqueId) -> ncclResult_t {
    guard("ncclGetUniqueId", || {
        non_null(unique_id, "uniqueId")?;
        let id = comm::new_unique_id()?;
        let mut v = ncclUniqueId {
            internal: [0; UNIQUE_ID_BYTES],
        };
        for (d, s) in v.internal.iter_mut().zip(id.to_bytes()) {
            *d = s as c_char;
        }
        out(unique_id, "uniqueId", v)
    })
}

fn id_of(id: &ncclUniqueId) -> Res<UniqueId> {
    let bytes: Vec<u8> = id.internal.iter().map(|&c| c as u8).collect();
    UniqueId::from_bytes(&bytes)
        .map_err(|e| Failure::invalid(format!("not a unique id made by ncclGetUniqueId: {e}")))
}

fn check_ranks(nranks: c_int, rank: c_int) -> Res<(u32, u32)> {
    if nranks < 1 || rank < 0 || rank >= nranks {
        return Err(Failure::invalid(format!(
            "rank {rank} of {nranks} ranks: need 0 <= rank < nranks"
        )));
    }
    Ok((rank as u32, nranks as u32))
}

/// Whether a config asks for a non-blocking communicator (checking its header).
fn blocking(config: *const ncclConfig_t) -> Res<bool> {
    if config.is_null() {
        return Ok(true);
    }
    // SAFETY: a non-null config the caller initialised with NCCL_CONFIG_INITIALIZER
    // (checked just below by its magic).
    let c = unsafe { &*config };
    if c.magic != CONFIG_MAGIC || c.size < 20 {
        return Err(Failure::invalid(
            "config was not initialised with NCCL_CONFIG_INITIALIZER (bad magic or size)",
        ));
    }
    // NCCL_CONFIG_UNDEF_INT (the initializer's) means NCCL's default: blocking.
    Ok(c.blocking != 0)
}

fn init_rank_config(
    what: &str,
    newcomm: *mut ncclComm_t,
    nranks: c_int,
    id: ncclUniqueId,
    rank: c_int,
    config: *const ncclConfig_t,
) -> ncclResult_t {
    let mut nonblocking_started = false;
    let r = guard(what, || {
        non_null(newcomm, "comm")?;
        let (rank, n) = check_ranks(nranks, rank)?;
        let id = id_of(&id)?;
        let blocking = blocking(config)?;
        let shell = Arc::new(comm::shell(rank, n));
        if blocking && !ops::in_group() {
            comm::init_rank(&shell, &id)?;
            let h = comm::register(shell);
            return out(newcomm, "comm", h as ncclComm_t);
        }
        // The handle now, the communicator later: at the group's end (a blocking init
        // inside ncclGroupStart / ncclGroupEnd, so that one thread can make several
        // ranks), or in the background (non-blocking: ncclCommGetAsyncError says
        // ncclInProgress until it is made).
        let h = comm::register(shell.clone());
        out(newcomm, "comm", h as ncclComm_t)?;
        if blocking {
            ops::defer_init(shell, id);
            return Ok(());
        }
        std::thread::spawn(move || {
            let device = shell.device;
            comm::on_device(device, || {
                let _ = comm::init_rank(&shell, &id);
            })
        });
        nonblocking_started = true;
        Ok(())
    });
    if r == SUCCESS && nonblocking_started {
        IN_PROGRESS
    } else {
        r
    }
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommInitRank(
    newcomm: *mut ncclComm_t,
    nranks: c_int,
    comm_id: ncclUniqueId,
    rank: c_int,
) -> ncclResult_t {
    init_rank_config(
        "ncclCommInitRank",
        newcomm,
        nranks,
        comm_id,
        rank,
        std::ptr::null(),
    )
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommInitRankConfig(
    newcomm: *mut ncclComm_t,
    nranks: c_int,
    comm_id: ncclUniqueId,
    rank: c_int,
    config: *mut ncclConfig_t,
) -> ncclResult_t {
    init_rank_config(
        "ncclCommInitRankConfig",
        newcomm,
        nranks,
        comm_id,
        rank,
        config,
    )
}

/// Several ids spread NCCL's bootstrap over several roots; Braid's has one, the first.
#[no_mangle]
pub unsafe extern "C" fn ncclCommInitRankScalable(
    newcomm: *mut ncclComm_t,
    nranks: c_int,
    myrank: c_int,
    n_id: c_int,
    comm_ids: *mut ncclUniqueId,
    config: *mut ncclConfig_t,
) -> ncclResult_t {
    if comm_ids.is_null() || n_id < 1 {
        return guard("ncclCommInitRankScalable", || {
            Err(Failure::invalid("commIds is NULL or nId < 1"))
        });
    }
    // SAFETY: at least one id (checked).
    let id = unsafe { *comm_ids };
    init_rank_config(
        "ncclCommInitRankScalable",
        newcomm,
        nranks,
        id,
        myrank,
        config,
    )
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommInitAll(
    comms: *mut ncclComm_t,
    ndev: c_int,
    devlist: *const c_int,
) -> ncclResult_t {
    guard("ncclCommInitAll", || {
        non_null(comms, "comms")?;
        if ndev < 1 {
            return Err(Failure::invalid(format!("ndev is {ndev}")));
        }
        let devices: Vec<c_int> = if devlist.is_null() {
            (0..ndev).collect()
        } else {
            // SAFETY: `ndev` entries (NCCL's contract).
            unsafe { std::slice::from_raw_parts(devlist, ndev as usize) }.to_vec()
        };
        if devices.iter().any(|&d| d < 0) {
            return Err(Failure::invalid(format!(
                "devlist has a negative device: {devices:?}"
            )));
        }
        let made = comm::init_all(&devices)?;
        for (i, c) in made.into_iter().enumerate() {
            let h = comm::register(Arc::new(c));
            // SAFETY: `ndev` slots (NCCL's contract).
            unsafe { comms.add(i).write(h as ncclComm_t) };
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommFinalize(comm: ncclComm_t) -> ncclResult_t {
    // Calls complete in stream order; nothing is pending on the host.
    with_comm("ncclCommFinalize", comm, |c| c.ready().map(|_| ()))
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommDestroy(comm: ncclComm_t) -> ncclResult_t {
    guard("ncclCommDestroy", || {
        if comm.is_null() {
            return Ok(());
        }
        let c = comm::unregister(key(comm))?;
        if let Some(fw) = c.forward.get() {
            fw.release(false);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommAbort(comm: ncclComm_t) -> ncclResult_t {
    guard("ncclCommAbort", || {
        if comm.is_null() {
            return Ok(());
        }
        let c = comm::unregister(key(comm))?;
        c.abort("ncclCommAbort");
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommRevoke(comm: ncclComm_t, revoke_flags: c_int) -> ncclResult_t {
    with_comm("ncclCommRevoke", comm, |_| {
        Err(Failure::usage(format!(
            "ncclCommRevoke (flags {revoke_flags}) is not served by Braid yet"
        )))
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommGetAsyncError(
    comm: ncclComm_t,
    async_error: *mut ncclResult_t,
) -> ncclResult_t {
    with_comm("ncclCommGetAsyncError", comm, |c| {
        non_null(async_error, "asyncError")?;
        let state = match c.backend.get() {
            None => IN_PROGRESS,
            Some(_) => match c.async_error() {
                Some(f) => {
                    c.record(&f.message);
                    f.code
                }
                None => SUCCESS,
            },
        };
        out(async_error, "asyncError", state)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommCount(comm: ncclComm_t, count: *mut c_int) -> ncclResult_t {
    with_comm("ncclCommCount", comm, |c| out(count, "count", c.n as c_int))
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommCuDevice(comm: ncclComm_t, device: *mut c_int) -> ncclResult_t {
    with_comm("ncclCommCuDevice", comm, |c| {
        out(device, "device", c.device)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommUserRank(comm: ncclComm_t, rank: *mut c_int) -> ncclResult_t {
    with_comm("ncclCommUserRank", comm, |c| {
        out(rank, "rank", c.rank as c_int)
    })
}

/// Splits a one-rank-per-process communicator by color, ranked by key (NCCL's
/// semantics); ranks with `NCCL_SPLIT_NOCOLOR` get no communicator.
#[no_mangle]
pub unsafe extern "C" fn ncclCommSplit(
    comm: ncclComm_t,
    color: c_int,
    split_key: c_int,
    newcomm: *mut ncclComm_t,
    _config: *mut ncclConfig_t,
) -> ncclResult_t {
    with_comm("ncclCommSplit", comm, |c| {
        non_null(newcomm, "newcomm")?;
        if color < SPLIT_NOCOLOR {
            return Err(Failure::invalid(format!("color {color} is negative")));
        }
        let Some(boot) = c.boot.get() else {
            return Err(Failure::usage(
                "ncclCommSplit: Braid splits communicators of one rank per process (ncclCommInitRank); this one was made by ncclCommInitAll",
            ));
        };
        // Everyone's (color, key); each color's first member makes the new group's id.
        let mine = [color.to_le_bytes(), split_key.to_le_bytes()].concat();
        let all = boot.allgather(&mine)?;
        let parse = |b: &Vec<u8>| -> Res<(c_int, c_int)> {
            if b.len() != 8 {
                return Err(Failure::new(
                    REMOTE_ERROR,
                    "a rank sent a malformed split request",
                ));
            }
            Ok((
                c_int::from_le_bytes(b[..4].try_into().unwrap()),
                c_int::from_le_bytes(b[4..].try_into().unwrap()),
            ))
        };
        let entries = all.iter().map(parse).collect::<Res<Vec<_>>>()?;
        let mut members: Vec<(c_int, u32)> = entries
            .iter()
            .enumerate()
            .filter(|(_, (col, _))| *col == color && color != SPLIT_NOCOLOR)
            .map(|(r, (_, k))| (*k, r as u32))
            .collect();
        members.sort();
        let new_rank = members.iter().position(|(_, r)| *r == c.rank);
        let leader = new_rank == Some(0);
        let id = if leader {
            Some(comm::new_unique_id()?)
        } else {
            None
        };
        let ids = boot.allgather(
            &id.as_ref()
                .map(|i| i.to_bytes().to_vec())
                .unwrap_or_default(),
        )?;
        let Some(new_rank) = new_rank else {
            return out(newcomm, "newcomm", std::ptr::null_mut());
        };
        let leader_rank = members[0].1 as usize;
        let id = UniqueId::from_bytes(&ids[leader_rank])?;
        let made = Arc::new(comm::Comm::new(
            new_rank as u32,
            members.len() as u32,
            c.device,
        ));
        comm::init_rank(&made, &id)?;
        let h = comm::register(made);
        out(newcomm, "newcomm", h as ncclComm_t)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommShrink(
    comm: ncclComm_t,
    _exclude_ranks_list: *mut c_int,
    _exclude_ranks_count: c_int,
    _newcomm: *mut ncclComm_t,
    _config: *mut ncclConfig_t,
    _shrink_flags: c_int,
) -> ncclResult_t {
    with_comm("ncclCommShrink", comm, |_| {
        Err(Failure::usage("ncclCommShrink is not served by Braid yet"))
    })
}

// ---- memory and registration -------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn ncclMemAlloc(ptr: *mut *mut c_void, size: usize) -> ncclResult_t {
    guard("ncclMemAlloc", || {
        non_null(ptr, "ptr")?;
        let p = memory::alloc(size)?;
        out(ptr, "ptr", p)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclMemFree(ptr: *mut c_void) -> ncclResult_t {
    guard("ncclMemFree", || memory::free(ptr))
}

/// Braid needs no registration: a handle that stands for the buffer.
#[no_mangle]
pub unsafe extern "C" fn ncclCommRegister(
    comm: ncclComm_t,
    buff: *mut c_void,
    size: usize,
    handle: *mut *mut c_void,
) -> ncclResult_t {
    with_comm("ncclCommRegister", comm, |_| {
        non_null(buff, "buff")?;
        non_null(handle, "handle")?;
        out(handle, "handle", memory::make_handle(buff, size))
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommDeregister(comm: ncclComm_t, handle: *mut c_void) -> ncclResult_t {
    with_comm("ncclCommDeregister", comm, |_| {
        memory::release_handle(handle, "handle")
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommWindowRegister(
    comm: ncclComm_t,
    buff: *mut c_void,
    size: usize,
    win: *mut ncclWindow_t,
    _win_flags: c_int,
) -> ncclResult_t {
    with_comm("ncclCommWindowRegister", comm, |_| {
        non_null(buff, "buff")?;
        non_null(win, "win")?;
        out(win, "win", memory::make_handle(buff, size))
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclCommWindowDeregister(
    comm: ncclComm_t,
    win: ncclWindow_t,
) -> ncclResult_t {
    with_comm("ncclCommWindowDeregister", comm, |_| {
        memory::release_handle(win, "win")
    })
}

mod memory {
    use super::*;
    use std::collections::HashSet;
    use std::sync::Mutex;

    /// Handles made by the register calls (so a bad or repeated deregister is an error).
    static HANDLES: Mutex<Option<HashSet<usize>>> = Mutex::new(None);
    /// Host-backend allocations: address -> size.
    static HOST: Mutex<Option<std::collections::HashMap<usize, usize>>> = Mutex::new(None);

    /// A handle for a registered buffer.
    pub fn make_handle(buff: *mut c_void, size: usize) -> *mut c_void {
        let h = Box::into_raw(Box::new((buff as usize, size))) as *mut c_void;
        HANDLES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(HashSet::new)
            .insert(h as usize);
        h
    }

    pub fn release_handle(h: *mut c_void, name: &str) -> Res<()> {
        non_null(h, name)?;
        let known = HANDLES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
            .is_some_and(|s| s.remove(&(h as usize)));
        if !known {
            return Err(Failure::invalid(format!(
                "{name} {h:?} was not made by a register call (or was released already)"
            )));
        }
        // SAFETY: made by `make_handle` (checked above), released once.
        drop(unsafe { Box::from_raw(h as *mut (usize, usize)) });
        Ok(())
    }

    pub fn alloc(size: usize) -> Res<*mut c_void> {
        if size == 0 {
            return Err(Failure::invalid("size is 0"));
        }
        if comm::host_backend() {
            let layout = std::alloc::Layout::from_size_align(size, 4096)
                .map_err(|e| Failure::invalid(format!("size {size}: {e}")))?;
            // SAFETY: a non-zero size.
            let p = unsafe { std::alloc::alloc_zeroed(layout) };
            if p.is_null() {
                return Err(Failure::new(
                    SYSTEM_ERROR,
                    format!("out of host memory for {size} bytes"),
                ));
            }
            HOST.lock()
                .unwrap()
                .get_or_insert_with(Default::default)
                .insert(p as usize, size);
            return Ok(p as *mut c_void);
        }
        if !braid_cuda::driver_present() {
            return Err(Failure::new(
                UNHANDLED_CUDA_ERROR,
                "no CUDA driver on this machine",
            ));
        }
        let device = comm::current_device().max(0) as usize;
        let ctx = cudarc::driver::CudaContext::new(device)
            .map_err(|e| Failure::new(UNHANDLED_CUDA_ERROR, e.to_string()))?;
        ctx.bind_to_thread()
            .map_err(|e| Failure::new(UNHANDLED_CUDA_ERROR, e.to_string()))?;
        // SAFETY: a fresh allocation, owned by the caller until ncclMemFree.
        let p = unsafe { cudarc::driver::result::malloc_sync(size) }
            .map_err(|e| Failure::new(UNHANDLED_CUDA_ERROR, e.to_string()))?;
        Ok(p as *mut c_void)
    }

    pub fn free(p: *mut c_void) -> Res<()> {
        non_null(p, "ptr")?;
        if let Some(size) = HOST
            .lock()
            .unwrap()
            .as_mut()
            .and_then(|m| m.remove(&(p as usize)))
        {
            let layout = std::alloc::Layout::from_size_align(size, 4096).expect("made by alloc");
            // SAFETY: allocated by `alloc` with this layout, freed once (removed above).
            unsafe { std::alloc::dealloc(p as *mut u8, layout) };
            return Ok(());
        }
        if comm::host_backend() || !braid_cuda::driver_present() {
            return Err(Failure::invalid(format!(
                "{p:?} was not allocated by ncclMemAlloc"
            )));
        }
        // SAFETY: memory from ncclMemAlloc (the caller's contract); cuMemFree refuses
        // anything else with an error.
        unsafe { cudarc::driver::result::free_sync(p as u64) }
            .map_err(|e| Failure::invalid(format!("ncclMemFree({p:?}): {e}")))
    }
}

// ---- reduction ops --------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn ncclRedOpCreatePreMulSum(
    op: *mut ncclRedOp_t,
    scalar: *mut c_void,
    datatype: ncclDataType_t,
    residence: ncclScalarResidence_t,
    comm: ncclComm_t,
) -> ncclResult_t {
    with_comm("ncclRedOpCreatePreMulSum", comm, |c| {
        non_null(op, "op")?;
        non_null(scalar, "scalar")?;
        let d = dtype(datatype, true).map_err(Failure::invalid)?;
        if residence != SCALAR_HOST_IMMEDIATE && residence != SCALAR_DEVICE {
            return Err(Failure::invalid(format!(
                "residence {residence} is neither host nor device"
            )));
        }
        let bytes = match residence {
            // SAFETY: one element of `datatype` at `scalar` (NCCL's contract).
            SCALAR_HOST_IMMEDIATE => {
                unsafe { std::slice::from_raw_parts(scalar as *const u8, d.size()) }.to_vec()
            }
            _ => return Err(Failure::usage(
                "ncclRedOpCreatePreMulSum with a device-resident scalar is not served by Braid yet",
            )),
        };
        let mut ops = c.premul.lock().unwrap();
        let id = (NUM_OPS..)
            .find(|i| !ops.contains_key(i))
            .expect("free op id");
        ops.insert(id, (bytes, datatype));
        out(op, "op", id)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclRedOpDestroy(op: ncclRedOp_t, comm: ncclComm_t) -> ncclResult_t {
    with_comm("ncclRedOpDestroy", comm, |c| {
        if c.premul.lock().unwrap().remove(&op).is_none() {
            return Err(Failure::invalid(format!(
                "op {op} was not made by ncclRedOpCreatePreMulSum on this communicator"
            )));
        }
        Ok(())
    })
}

// ---- collectives ----------------------------------------------------------------------

/// The call as the real NCCL takes it (for forwarding).
#[allow(clippy::too_many_arguments)]
fn forward_call(
    collective: Collective,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: ncclDataType_t,
    op: ncclRedOp_t,
    root: c_int,
) -> forward::Call {
    let (send, recv) = (send as u64, recv as u64);
    match collective {
        Collective::Allreduce => forward::Call::AllReduce {
            send,
            recv,
            count,
            dtype,
            op,
        },
        Collective::ReduceScatter => forward::Call::ReduceScatter {
            send,
            recv,
            count,
            dtype,
            op,
        },
        Collective::Reduce => forward::Call::Reduce {
            send,
            recv,
            count,
            dtype,
            op,
            root,
        },
        Collective::Broadcast => forward::Call::Broadcast {
            send,
            recv,
            count,
            dtype,
            root,
        },
        Collective::Allgather => forward::Call::AllGather {
            send,
            recv,
            count,
            dtype,
        },
        Collective::Alltoall => forward::Call::AlltoAll {
            send,
            recv,
            count,
            dtype,
        },
    }
}

#[allow(clippy::too_many_arguments)]
fn collective(
    what: &str,
    collective: Collective,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    root: Option<c_int>,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    with_comm(what, comm, |c| {
        let reduces = collective.reduces();
        let root_checked = match root {
            None => None,
            Some(r) if r >= 0 && (r as u32) < c.n => Some(r as u32),
            Some(r) => {
                return Err(Failure::invalid(format!(
                    "root {r} is not a rank of {}",
                    c.n
                )))
            }
        };
        // What Braid does not serve goes to the real NCCL, checked as NCCL would.
        let fp8_reduction = reduces && matches!(datatype, FLOAT8_E4M3 | FLOAT8_E5M2);
        let (red, premul) = ops::resolve_op(c, op, reduces)?;
        let why = if fp8_reduction {
            Some("fp8 reductions")
        } else {
            None
        };
        if let Some(why) = why {
            forward::available(c.forward()?, what)?;
            check_count(count, 1, c.n)?;
            let at_root = root_checked.is_none_or(|r| r == c.rank);
            let (sends, receives) = match collective {
                Collective::Broadcast => (at_root, true),
                Collective::Reduce => (true, at_root),
                _ => (true, true),
            };
            check_buffers(count, send, recv, sends, receives)?;
            let premul = premul.map(|s| {
                let d = c
                    .premul
                    .lock()
                    .unwrap()
                    .get(&op)
                    .map(|(_, d)| *d)
                    .unwrap_or(datatype);
                (s, d)
            });
            return ops::submit(ops::Op::Fwd {
                comm: c.clone(),
                call: forward_call(
                    collective,
                    send,
                    recv,
                    count,
                    datatype,
                    op,
                    root.unwrap_or(0),
                ),
                stream: stream as usize,
                premul,
                why,
            });
        }
        let dtype = dtype(datatype, reduces).map_err(Failure::invalid)?;
        check_count(count, dtype.size(), c.n)?;
        let spec = CallSpec {
            collective,
            count,
            dtype,
            op: red,
            root: root_checked,
        };
        let sizes = spec.sizes(c.rank, c.n);
        if count > 0 {
            if sizes.send.is_some() && send.is_null() {
                return Err(Failure::invalid("sendbuff is NULL"));
            }
            if sizes.recv.is_some() && recv.is_null() {
                return Err(Failure::invalid("recvbuff is NULL"));
            }
        }
        ops::submit(ops::Op::Coll {
            comm: c.clone(),
            spec,
            premul,
            send: send as u64,
            recv: recv as u64,
            stream: stream as usize,
        })
    })
}

/// Refuses counts whose buffers would not fit in the address space.
fn check_count(count: usize, elem: usize, n: u32) -> Res<()> {
    if count > (isize::MAX as usize) / elem.max(1) / n.max(1) as usize {
        return Err(Failure::invalid(format!(
            "count {count} overflows the buffer size"
        )));
    }
    Ok(())
}

/// Refuses null buffers a forwarded call would use on this rank.
fn check_buffers(
    count: usize,
    send: *const c_void,
    recv: *mut c_void,
    sends: bool,
    receives: bool,
) -> Res<()> {
    if count > 0 && sends && send.is_null() {
        return Err(Failure::invalid("sendbuff is NULL"));
    }
    if count > 0 && receives && recv.is_null() {
        return Err(Failure::invalid("recvbuff is NULL"));
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn ncclAllReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    collective(
        "ncclAllReduce",
        Collective::Allreduce,
        sendbuff,
        recvbuff,
        count,
        datatype,
        op,
        None,
        comm,
        stream,
    )
}

#[no_mangle]
pub unsafe extern "C" fn ncclReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    collective(
        "ncclReduce",
        Collective::Reduce,
        sendbuff,
        recvbuff,
        count,
        datatype,
        op,
        Some(root),
        comm,
        stream,
    )
}

#[no_mangle]
pub unsafe extern "C" fn ncclBroadcast(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    collective(
        "ncclBroadcast",
        Collective::Broadcast,
        sendbuff,
        recvbuff,
        count,
        datatype,
        0,
        Some(root),
        comm,
        stream,
    )
}

/// The in-place broadcast of NCCL's older API.
#[no_mangle]
pub unsafe extern "C" fn ncclBcast(
    buff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    collective(
        "ncclBcast",
        Collective::Broadcast,
        buff,
        buff,
        count,
        datatype,
        0,
        Some(root),
        comm,
        stream,
    )
}

#[no_mangle]
pub unsafe extern "C" fn ncclAllGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: ncclDataType_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    collective(
        "ncclAllGather",
        Collective::Allgather,
        sendbuff,
        recvbuff,
        sendcount,
        datatype,
        0,
        None,
        comm,
        stream,
    )
}

#[no_mangle]
pub unsafe extern "C" fn ncclReduceScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    recvcount: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    collective(
        "ncclReduceScatter",
        Collective::ReduceScatter,
        sendbuff,
        recvbuff,
        recvcount,
        datatype,
        op,
        None,
        comm,
        stream,
    )
}

#[no_mangle]
pub unsafe extern "C" fn ncclAlltoAll(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    collective(
        "ncclAlltoAll",
        Collective::Alltoall,
        sendbuff,
        recvbuff,
        count,
        datatype,
        0,
        None,
        comm,
        stream,
    )
}

/// Gather and Scatter: Braid has no plans for them; they go to the real NCCL.
#[allow(clippy::too_many_arguments)]
fn rooted_forwarded(
    what: &str,
    gather: bool,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    with_comm(what, comm, |c| {
        forward::available(c.forward()?, what)?;
        let elem = dtype(datatype, false).map_err(Failure::invalid)?.size();
        if root < 0 || root as u32 >= c.n {
            return Err(Failure::invalid(format!(
                "root {root} is not a rank of {}",
                c.n
            )));
        }
        check_count(count, elem, c.n)?;
        let at_root = root as u32 == c.rank;
        let (sends, receives) = if gather {
            (true, at_root)
        } else {
            (at_root, true)
        };
        check_buffers(count, send, recv, sends, receives)?;
        let (send, recv) = (send as u64, recv as u64);
        let call = if gather {
            forward::Call::Gather {
                send,
                recv,
                count,
                dtype: datatype,
                root,
            }
        } else {
            forward::Call::Scatter {
                send,
                recv,
                count,
                dtype: datatype,
                root,
            }
        };
        ops::submit(ops::Op::Fwd {
            comm: c.clone(),
            call,
            stream: stream as usize,
            premul: None,
            why: "Braid has no gather or scatter plans",
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    rooted_forwarded(
        "ncclGather",
        true,
        sendbuff,
        recvbuff,
        count,
        datatype,
        root,
        comm,
        stream,
    )
}

#[no_mangle]
pub unsafe extern "C" fn ncclScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    rooted_forwarded(
        "ncclScatter",
        false,
        sendbuff,
        recvbuff,
        count,
        datatype,
        root,
        comm,
        stream,
    )
}

// ---- point to point and groups --------------------------------------------------------

#[allow(clippy::too_many_arguments)]
fn p2p(
    what: &str,
    send: bool,
    buf: *const c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    with_comm(what, comm, |c| {
        let dtype = dtype(datatype, false).map_err(Failure::invalid)?;
        if peer < 0 || peer as u32 >= c.n {
            return Err(Failure::invalid(format!(
                "peer {peer} is not a rank of {}",
                c.n
            )));
        }
        if count > (isize::MAX as usize) / dtype.size() {
            return Err(Failure::invalid(format!(
                "count {count} overflows the buffer size"
            )));
        }
        if count > 0 && buf.is_null() {
            return Err(Failure::invalid("the buffer is NULL"));
        }
        // To itself Braid copies (on either backend); to another rank, Braid's point to
        // point serves it, unless it was turned off on the CUDA backend
        // (BRAID_P2P_CHANNELS=0): then the real NCCL does.
        if peer as u32 != c.rank
            && matches!(c.ready()?, comm::Backend::Cuda(cc) if !cc.serves_p2p())
        {
            forward::available(c.forward()?, what)?;
            let (buf, peer) = (buf as u64, peer);
            let call = if send {
                forward::Call::Send {
                    buf,
                    count,
                    dtype: datatype,
                    peer,
                }
            } else {
                forward::Call::Recv {
                    buf,
                    count,
                    dtype: datatype,
                    peer,
                }
            };
            return ops::submit(ops::Op::Fwd {
                comm: c.clone(),
                call,
                stream: stream as usize,
                premul: None,
                why: "point to point on the CUDA backend with BRAID_P2P_CHANNELS=0",
            });
        }
        ops::submit(ops::Op::P2p {
            comm: c.clone(),
            send,
            buf: buf as u64,
            count,
            dtype,
            peer: peer as u32,
            stream: stream as usize,
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclSend(
    sendbuff: *const c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    p2p(
        "ncclSend", true, sendbuff, count, datatype, peer, comm, stream,
    )
}

#[no_mangle]
pub unsafe extern "C" fn ncclRecv(
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    p2p(
        "ncclRecv", false, recvbuff, count, datatype, peer, comm, stream,
    )
}

#[no_mangle]
pub unsafe extern "C" fn ncclGroupStart() -> ncclResult_t {
    guard("ncclGroupStart", || {
        ops::group_start();
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclGroupEnd() -> ncclResult_t {
    guard("ncclGroupEnd", || ops::group_end(false))
}

/// Ends the group without running it. Braid has no cost model yet: the estimated time
/// is NCCL's "undefined" (-1).
#[no_mangle]
pub unsafe extern "C" fn ncclGroupSimulateEnd(sim_info: *mut ncclSimInfo_t) -> ncclResult_t {
    guard("ncclGroupSimulateEnd", || {
        if !sim_info.is_null() {
            // SAFETY: a non-null struct the caller initialised (checked by its magic).
            let s = unsafe { &mut *sim_info };
            if s.magic != SIM_INFO_MAGIC {
                return Err(Failure::invalid(
                    "simInfo was not initialised with NCCL_SIM_INFO_INITIALIZER",
                ));
            }
            s.estimatedTime = -1.0;
        }
        ops::group_end(true)
    })
}

// ---- the device API (NCCL 2.28): not served -------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn ncclDevCommCreate(
    comm: ncclComm_t,
    _reqs: *const c_void,
    _out: *mut c_void,
) -> ncclResult_t {
    with_comm("ncclDevCommCreate", comm, |_| {
        Err(Failure::usage(
            "NCCL's device API (ncclDevCommCreate) is not served by Braid",
        ))
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclDevCommDestroy(
    comm: ncclComm_t,
    _dev_comm: *const c_void,
) -> ncclResult_t {
    with_comm("ncclDevCommDestroy", comm, |_| {
        Err(Failure::usage(
            "NCCL's device API (ncclDevCommDestroy) is not served by Braid",
        ))
    })
}

fn unserved_device_api(what: &str) -> ncclResult_t {
    guard(what, || {
        Err(Failure::usage(format!(
            "NCCL's device API ({what}) is not served by Braid"
        )))
    })
}

#[no_mangle]
pub unsafe extern "C" fn ncclLsaBarrierCreateRequirement(
    _team: ncclTeam_t,
    _n_barriers: c_int,
    _out_handle: *mut c_void,
    _out_req: *mut c_void,
) -> ncclResult_t {
    unserved_device_api("ncclLsaBarrierCreateRequirement")
}

#[no_mangle]
pub unsafe extern "C" fn ncclGinBarrierCreateRequirement(
    _comm: ncclComm_t,
    _team: ncclTeam_t,
    _n_barriers: c_int,
    _out_handle: *mut c_void,
    _out_req: *mut c_void,
) -> ncclResult_t {
    unserved_device_api("ncclGinBarrierCreateRequirement")
}

#[no_mangle]
pub unsafe extern "C" fn ncclLLA2ACreateRequirement(
    _n_blocks: c_int,
    _n_slots: c_int,
    _out_handle: *mut c_void,
    _out_req: *mut c_void,
) -> ncclResult_t {
    unserved_device_api("ncclLLA2ACreateRequirement")
}

/// Slots an LL all-to-all of `max_elts` elements of `max_elt_size` bytes needs; the
/// device API is not served, so no size is valid: -1.
#[no_mangle]
pub unsafe extern "C" fn ncclLLA2ACalcSlots(_max_elts: c_int, _max_elt_size: c_int) -> c_int {
    errors::set_last("ncclLLA2ACalcSlots: NCCL's device API is not served by Braid");
    -1
}

fn team_of(comm: ncclComm_t) -> ncclTeam_t {
    match comm::lookup(key(comm)) {
        Ok(c) => ncclTeam_t {
            nRanks: c.n as c_int,
            rank: c.rank as c_int,
            stride: 1,
        },
        _ => {
            errors::set_last("not a live communicator");
            ncclTeam_t::default()
        }
    }
}

/// Every rank of the communicator.
#[no_mangle]
pub unsafe extern "C" fn ncclTeamWorld(comm: ncclComm_t) -> ncclTeam_t {
    team_of(comm)
}

/// The ranks that share memory: Braid's communicators are one node, so every rank.
#[no_mangle]
pub unsafe extern "C" fn ncclTeamLsa(comm: ncclComm_t) -> ncclTeam_t {
    team_of(comm)
}

/// This rank's rail across nodes: one node, so itself alone.
#[no_mangle]
pub unsafe extern "C" fn ncclTeamRail(comm: ncclComm_t) -> ncclTeam_t {
    match comm::lookup(key(comm)) {
        Ok(c) => ncclTeam_t {
            nRanks: 1,
            rank: 0,
            stride: c.n as c_int,
        },
        Err(_) => {
            errors::set_last("not a live communicator");
            ncclTeam_t::default()
        }
    }
}

/// The world rank of rank `rank` of `team` (as seen from this rank); -1 if not a
/// communicator.
#[no_mangle]
pub unsafe extern "C" fn ncclTeamRankToWorld(
    comm: ncclComm_t,
    team: ncclTeam_t,
    rank: c_int,
) -> c_int {
    match comm::lookup(key(comm)) {
        Ok(c) => c.rank as c_int + (rank - team.rank) * team.stride,
        Err(_) => -1,
    }
}

/// The rank in the shared-memory team (all ranks here) of rank `rank` of `team`.
#[no_mangle]
pub unsafe extern "C" fn ncclTeamRankToLsa(
    comm: ncclComm_t,
    team: ncclTeam_t,
    rank: c_int,
) -> c_int {
    ncclTeamRankToWorld(comm, team, rank)
}
