//! [`crate::rdma`]'s [`Device`] and [`QueuePair`] over libibverbs: an opened device port
//! ([`VerbsDevice`], with one protection domain) and reliable connected queue pairs, each
//! with its own completion queue ([`VerbsQp`]).
//!
//! Raw calls go through `ibverbs_sys`. The data-path verbs (`ibv_post_send`,
//! `ibv_post_recv`, `ibv_poll_cq`) are static inline functions in `verbs.h` that jump
//! through the context's ops table, so they are called through that table here, as the
//! `ibverbs` crate does.
//!
//! Threads: libibverbs makes every verbs object safe for multi-threaded access unless it
//! was created under a thread domain (`ibv_alloc_td(3)`: "By default all verbs objects are
//! safe for multi-threaded access"); none is here, so a queue pair may be posted to and
//! polled from several threads at once. The list of registered regions, the only state
//! this side mutates, is behind a mutex.
//!
//! Lifetimes: a queue pair holds an `Arc` of its device's context and protection domain,
//! so those outlive it. Dropping a queue pair destroys the queue pair (no more DMA into
//! its regions), then deregisters its regions, then destroys its completion queue; the
//! protection domain and the context go when the device and its last queue pair are gone.

use crate::devices::Port;
use crate::rdma::{Completion, Device, Endpoint, MrKeys, QueuePair, RdmaError, Result};
use ibverbs_sys as ffi;
use std::ffi::CStr;
use std::io;
use std::os::raw::c_int;
use std::ptr;
use std::sync::{Arc, Mutex};

/// Completions taken from the completion queue per `ibv_poll_cq` call.
const POLL_BATCH: usize = 16;

/// The error of a verbs call that returned `rc`: a positive errno, or (negative) a failure
/// whose reason is in `errno`.
fn rc_error(rc: c_int) -> io::Error {
    if rc > 0 {
        io::Error::from_raw_os_error(rc)
    } else {
        io::Error::last_os_error()
    }
}

fn access_flags() -> ffi::ibv_access_flags {
    ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE | ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE
}

/// A first packet sequence number: 24 bits from the standard library's per-process random
/// hash keys, mixed with the time, the process id and a counter.
fn random_psn() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(nanos);
    h.write_u32(std::process::id());
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let x = h.finish();
    ((x ^ (x >> 24) ^ (x >> 48)) & 0xff_ffff) as u32
}

/// The opened device port: its context and protection domain, and what queue pairs on it
/// need to know about the port.
struct DevInner {
    /// `device:port`, for messages.
    name: String,
    ctx: *mut ffi::ibv_context,
    /// Null until allocated (and in an `open` that failed before).
    pd: *mut ffi::ibv_pd,
    port: u8,
    lid: u16,
    active_mtu: ffi::ibv_mtu,
    gid_index: Option<u8>,
    /// Zeros without a GID index.
    gid: [u8; 16],
}

// SAFETY: the context and the protection domain are owned by this value alone (created in
// `VerbsDevice::open`, released in its `Drop`), and the verbs calls made on them from
// shared references (ibv_create_cq, ibv_create_qp, ibv_reg_mr) are safe for multi-threaded
// access: no thread domain is used (ibv_alloc_td(3)). The other fields are plain data.
unsafe impl Send for DevInner {}
// SAFETY: as for `Send`: nothing is mutated through a shared reference on this side, and
// libibverbs serialises what it mutates itself.
unsafe impl Sync for DevInner {}

impl Drop for DevInner {
    fn drop(&mut self) {
        // Errors cannot be reported from a drop; the resources are gone either way as far as
        // this process can tell.
        if !self.pd.is_null() {
            // SAFETY: the protection domain came from ibv_alloc_pd on this context and is
            // released once; every queue pair and region on it is gone, since each queue
            // pair holds an `Arc` of this value.
            unsafe { ffi::ibv_dealloc_pd(self.pd) };
        }
        if !self.ctx.is_null() {
            // SAFETY: the context came from ibv_open_device and is closed once, after the
            // protection domain allocated on it.
            unsafe { ffi::ibv_close_device(self.ctx) };
        }
    }
}

/// An opened RDMA device port, where [`VerbsQp`]s come from.
pub struct VerbsDevice {
    inner: Arc<DevInner>,
}

impl VerbsDevice {
    /// Opens `port` (device by its libibverbs name), learns its LID and active MTU, and
    /// with `gid_index` its GID (needed for RoCE, where the port has no LID).
    pub fn open(port: &Port, gid_index: Option<u8>) -> Result<VerbsDevice> {
        let name = format!("{}:{}", port.device, port.port);
        let fail = |what: String| RdmaError(format!("RDMA device {name}: {what}"));

        let ctx = open_context(&port.device).map_err(&fail)?;
        let mut inner = DevInner {
            name: name.clone(),
            ctx,
            pd: ptr::null_mut(),
            port: port.port,
            lid: 0,
            active_mtu: ffi::IBV_MTU_1024,
            gid_index,
            gid: [0; 16],
        };

        // The exported ibv_query_port (the one verbs.h falls back to) fills the
        // compatibility prefix of `ibv_port_attr`; the rest stays zero.
        let mut attr = ffi::ibv_port_attr::default();
        // SAFETY: `ctx` is an open context; `attr` is a writable `ibv_port_attr`, which
        // begins with the layout of `_compat_ibv_port_attr` and is larger than it.
        let rc = unsafe {
            ffi::ibv_query_port(
                ctx,
                port.port,
                &mut attr as *mut ffi::ibv_port_attr as *mut ffi::_compat_ibv_port_attr,
            )
        };
        if rc != 0 {
            return Err(fail(format!("ibv_query_port failed: {}", rc_error(rc))));
        }
        if attr.state != ffi::ibv_port_state::IBV_PORT_ACTIVE {
            return Err(fail(format!(
                "the port is not active (state {})",
                port_state_name(attr.state)
            )));
        }
        inner.lid = attr.lid;
        inner.active_mtu = attr.active_mtu;

        match gid_index {
            Some(index) => {
                let mut gid = ffi::ibv_gid::default();
                // SAFETY: `ctx` is an open context and `gid` a writable `ibv_gid`.
                let rc =
                    unsafe { ffi::ibv_query_gid(ctx, port.port, c_int::from(index), &mut gid) };
                if rc != 0 {
                    return Err(fail(format!(
                        "ibv_query_gid of GID index {index} failed: {}",
                        rc_error(rc)
                    )));
                }
                // SAFETY: every bit pattern of the union is a valid `[u8; 16]`.
                inner.gid = unsafe { gid.raw };
                if inner.gid == [0; 16] {
                    return Err(fail(format!("GID index {index} is empty")));
                }
            }
            None if u32::from(attr.link_layer) == ffi::IBV_LINK_LAYER_ETHERNET => {
                return Err(fail(
                    "the port is Ethernet (RoCE), which routes by GID: give a GID index".into(),
                ));
            }
            None => {}
        }

        // SAFETY: `ctx` is an open context.
        let pd = unsafe { ffi::ibv_alloc_pd(ctx) };
        if pd.is_null() {
            return Err(fail(format!(
                "ibv_alloc_pd failed: {}",
                io::Error::last_os_error()
            )));
        }
        inner.pd = pd;
        Ok(VerbsDevice {
            inner: Arc::new(inner),
        })
    }
}

/// Opens the device libibverbs lists as `device`; errors in words, without the device
/// name (the caller adds it).
fn open_context(device: &str) -> std::result::Result<*mut ffi::ibv_context, String> {
    let mut n: c_int = 0;
    // SAFETY: `n` is a writable int; the list is freed below.
    let list = unsafe { ffi::ibv_get_device_list(&mut n) };
    if list.is_null() {
        return Err(format!(
            "listing the RDMA devices failed (ibv_get_device_list: {})",
            io::Error::last_os_error()
        ));
    }
    let mut names = Vec::new();
    let mut found: std::result::Result<*mut ffi::ibv_context, String> = Ok(ptr::null_mut());
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: the list holds `n` device pointers (then a null); `i < n`.
        let dev = unsafe { *list.add(i) };
        if dev.is_null() {
            break;
        }
        // SAFETY: `dev` is a device of the live list; its name, when there is one, is a
        // NUL-terminated string that lives as long as the device.
        let dev_name = unsafe {
            let p = ffi::ibv_get_device_name(dev);
            (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
        };
        let Some(dev_name) = dev_name else { continue };
        if dev_name == device {
            // SAFETY: `dev` is a device of the live list; the context, once open, stays
            // valid after the list is freed (ibv_get_device_list(3)).
            let ctx = unsafe { ffi::ibv_open_device(dev) };
            found = if ctx.is_null() {
                Err(format!(
                    "ibv_open_device failed: {}",
                    io::Error::last_os_error()
                ))
            } else {
                Ok(ctx)
            };
            break;
        }
        names.push(dev_name);
    }
    // SAFETY: `list` came from ibv_get_device_list and is freed once; only an opened
    // context is used after this.
    unsafe { ffi::ibv_free_device_list(list) };
    match found {
        Ok(ctx) if ctx.is_null() => Err(format!(
            "no such device (libibverbs lists {})",
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        )),
        other => other,
    }
}

fn port_state_name(state: ffi::ibv_port_state::Type) -> String {
    use ffi::ibv_port_state::*;
    match state {
        IBV_PORT_NOP => "NOP".into(),
        IBV_PORT_DOWN => "DOWN".into(),
        IBV_PORT_INIT => "INIT".into(),
        IBV_PORT_ARMED => "ARMED".into(),
        IBV_PORT_ACTIVE => "ACTIVE".into(),
        IBV_PORT_ACTIVE_DEFER => "ACTIVE_DEFER".into(),
        other => other.to_string(),
    }
}

impl Device for VerbsDevice {
    fn name(&self) -> String {
        self.inner.name.clone()
    }

    fn queue_pair(&self, depth: u32) -> Result<Box<dyn QueuePair>> {
        let dev = &self.inner;
        let fail = |what: String| RdmaError(format!("RDMA device {}: {what}", dev.name));
        if depth == 0 {
            return Err(fail("a queue pair needs a depth of at least 1".into()));
        }
        let cqe = c_int::try_from(2 * u64::from(depth) + 16)
            .map_err(|_| fail(format!("a queue pair depth of {depth} is too large")))?;

        // SAFETY: `dev.ctx` is an open context; no completion channel (completions are
        // polled), no CQ context, completion vector 0.
        let cq = unsafe { ffi::ibv_create_cq(dev.ctx, cqe, ptr::null_mut(), ptr::null_mut(), 0) };
        if cq.is_null() {
            return Err(fail(format!(
                "ibv_create_cq of {cqe} entries failed: {}",
                io::Error::last_os_error()
            )));
        }
        // From here on, dropping `qp` releases what was created.
        let mut qp = VerbsQp {
            dev: Arc::clone(dev),
            qp: ptr::null_mut(),
            cq,
            mrs: Mutex::new(Vec::new()),
            qpn: 0,
            psn: random_psn(),
        };

        let mut init = ffi::ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: cq,
            recv_cq: cq,
            srq: ptr::null_mut(),
            cap: ffi::ibv_qp_cap {
                max_send_wr: depth,
                max_recv_wr: depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: ffi::ibv_qp_type::IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: `dev.pd` is a live protection domain, `cq` a live completion queue of the
        // same context, `init` a valid, writable attribute block.
        let raw = unsafe { ffi::ibv_create_qp(dev.pd, &mut init) };
        if raw.is_null() {
            return Err(fail(format!(
                "ibv_create_qp (RC, depth {depth}) failed: {}",
                io::Error::last_os_error()
            )));
        }
        qp.qp = raw;
        // SAFETY: `raw` is the live queue pair just created.
        qp.qpn = unsafe { (*raw).qp_num };
        Ok(Box::new(qp))
    }
}

/// A reliable connected queue pair of a [`VerbsDevice`], with its own completion queue.
pub struct VerbsQp {
    dev: Arc<DevInner>,
    /// Null only while being built.
    qp: *mut ffi::ibv_qp,
    cq: *mut ffi::ibv_cq,
    /// Regions registered through this queue pair, deregistered when it drops.
    mrs: Mutex<Vec<*mut ffi::ibv_mr>>,
    qpn: u32,
    psn: u32,
}

// SAFETY: the queue pair, the completion queue and the regions are owned by this value
// alone and released in its `Drop`; the verbs calls made on them through shared references
// (ibv_modify_qp, ibv_reg_mr, post_send, post_recv, poll_cq) are safe for multi-threaded
// access, since no thread domain is used (ibv_alloc_td(3)); the list of regions is behind a
// mutex; the device state is `Send + Sync` and shared through an `Arc`.
unsafe impl Send for VerbsQp {}
// SAFETY: as for `Send`.
unsafe impl Sync for VerbsQp {}

impl VerbsQp {
    fn fail(&self, what: String) -> RdmaError {
        RdmaError(format!(
            "RDMA device {}, queue pair {}: {what}",
            self.dev.name, self.qpn
        ))
    }

    fn modify(
        &self,
        state: &str,
        attr: &mut ffi::ibv_qp_attr,
        mask: ffi::ibv_qp_attr_mask,
    ) -> Result<()> {
        // SAFETY: `self.qp` is a live queue pair and `attr` a valid attribute block whose
        // fields named in `mask` are set.
        let rc = unsafe { ffi::ibv_modify_qp(self.qp, attr, mask.0 as c_int) };
        if rc != 0 {
            return Err(self.fail(format!(
                "moving the queue pair to {state} failed (ibv_modify_qp: {})",
                rc_error(rc)
            )));
        }
        Ok(())
    }

    /// The context's ops table, through which the inline data-path verbs go.
    fn ops(&self) -> &ffi::ibv_context_ops {
        // SAFETY: the context is open for as long as `self.dev` lives, and libibverbs never
        // changes its ops table after opening it.
        unsafe { &(*self.dev.ctx).ops }
    }
}

impl QueuePair for VerbsQp {
    fn endpoint(&self) -> Endpoint {
        Endpoint {
            qpn: self.qpn,
            lid: self.dev.lid,
            gid: self.dev.gid,
            psn: self.psn,
        }
    }

    fn connect(&self, remote: &Endpoint) -> Result<()> {
        use ffi::ibv_qp_attr_mask as M;
        let dev = &self.dev;

        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: dev.port,
            qp_access_flags: access_flags().0,
            ..Default::default()
        };
        self.modify(
            "INIT",
            &mut attr,
            M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT | M::IBV_QP_ACCESS_FLAGS,
        )?;

        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_RTR,
            path_mtu: dev.active_mtu,
            dest_qp_num: remote.qpn,
            rq_psn: remote.psn & 0xff_ffff,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ah_attr: ffi::ibv_ah_attr {
                dlid: remote.lid,
                sl: 0,
                src_path_bits: 0,
                port_num: dev.port,
                ..Default::default()
            },
            ..Default::default()
        };
        if remote.gid != [0; 16] {
            let Some(sgid_index) = dev.gid_index else {
                return Err(self.fail(
                    "the peer routes by GID but this device was opened without a GID index".into(),
                ));
            };
            attr.ah_attr.is_global = 1;
            attr.ah_attr.grh.dgid = ffi::ibv_gid { raw: remote.gid };
            attr.ah_attr.grh.sgid_index = sgid_index;
            attr.ah_attr.grh.hop_limit = 255;
        }
        self.modify(
            "RTR",
            &mut attr,
            M::IBV_QP_STATE
                | M::IBV_QP_AV
                | M::IBV_QP_PATH_MTU
                | M::IBV_QP_DEST_QPN
                | M::IBV_QP_RQ_PSN
                | M::IBV_QP_MAX_DEST_RD_ATOMIC
                | M::IBV_QP_MIN_RNR_TIMER,
        )?;

        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_RTS,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            sq_psn: self.psn,
            max_rd_atomic: 1,
            ..Default::default()
        };
        self.modify(
            "RTS",
            &mut attr,
            M::IBV_QP_STATE
                | M::IBV_QP_TIMEOUT
                | M::IBV_QP_RETRY_CNT
                | M::IBV_QP_RNR_RETRY
                | M::IBV_QP_SQ_PSN
                | M::IBV_QP_MAX_QP_RD_ATOMIC,
        )
    }

    unsafe fn register(&self, addr: *mut u8, len: usize) -> Result<MrKeys> {
        // SAFETY: the protection domain is live; the caller keeps the range allocated until
        // this queue pair (which deregisters it first) is dropped.
        let mr =
            unsafe { ffi::ibv_reg_mr(self.dev.pd, addr.cast(), len, access_flags().0 as c_int) };
        if mr.is_null() {
            let e = io::Error::last_os_error();
            return Err(self.fail(format!(
                "registering {len} bytes at {addr:p} failed (ibv_reg_mr: {e})"
            )));
        }
        // SAFETY: `mr` is the live region just registered.
        let keys = unsafe {
            MrKeys {
                lkey: (*mr).lkey,
                rkey: (*mr).rkey,
            }
        };
        self.mrs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(mr);
        Ok(keys)
    }

    unsafe fn write(
        &self,
        wr_id: u64,
        local: *const u8,
        len: u32,
        lkey: u32,
        remote: u64,
        rkey: u32,
        imm: Option<u32>,
    ) -> Result<()> {
        let mut sge = ffi::ibv_sge {
            addr: local as u64,
            length: len,
            lkey,
        };
        let (sg_list, num_sge) = if len == 0 {
            (ptr::null_mut(), 0)
        } else {
            (&mut sge as *mut ffi::ibv_sge, 1)
        };
        let mut wr = ffi::ibv_send_wr {
            wr_id,
            next: ptr::null_mut(),
            sg_list,
            num_sge,
            opcode: if imm.is_some() {
                ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM
            } else {
                ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE
            },
            send_flags: ffi::ibv_send_flags::IBV_SEND_SIGNALED.0,
            __bindgen_anon_1: ffi::ibv_send_wr__bindgen_ty_1 {
                imm_data: imm.unwrap_or(0).to_be(),
            },
            wr: ffi::ibv_send_wr__bindgen_ty_2 {
                rdma: ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
                    remote_addr: remote,
                    rkey,
                },
            },
            ..Default::default()
        };
        let mut bad: *mut ffi::ibv_send_wr = ptr::null_mut();
        let Some(post_send) = self.ops().post_send else {
            return Err(self.fail("the verbs provider has no post_send".into()));
        };
        // SAFETY: `self.qp` is a live queue pair of the context whose ops table this is (what
        // verbs.h's inline ibv_post_send calls); `wr` is one valid work request whose
        // scatter/gather entry (`sge`) outlives the call (the provider copies it into the
        // send queue); the caller keeps the local bytes unchanged until the completion.
        let rc = unsafe { post_send(self.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(self.fail(format!(
                "posting an RDMA write of {len} bytes failed (ibv_post_send: {})",
                rc_error(rc)
            )));
        }
        Ok(())
    }

    fn post_recv(&self, wr_id: u64) -> Result<()> {
        let mut wr = ffi::ibv_recv_wr {
            wr_id,
            next: ptr::null_mut(),
            sg_list: ptr::null_mut(),
            num_sge: 0,
        };
        let mut bad: *mut ffi::ibv_recv_wr = ptr::null_mut();
        let Some(post_recv) = self.ops().post_recv else {
            return Err(self.fail("the verbs provider has no post_recv".into()));
        };
        // SAFETY: `self.qp` is a live queue pair of the context whose ops table this is (what
        // verbs.h's inline ibv_post_recv calls); `wr` is one valid work request with no
        // scatter/gather entries.
        let rc = unsafe { post_recv(self.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(self.fail(format!(
                "posting a receive failed (ibv_post_recv: {})",
                rc_error(rc)
            )));
        }
        Ok(())
    }

    fn poll(&self, out: &mut Vec<Completion>) -> Result<()> {
        let Some(poll_cq) = self.ops().poll_cq else {
            return Err(self.fail("the verbs provider has no poll_cq".into()));
        };
        loop {
            // SAFETY: `ibv_wc` is a plain C struct of integers, for which all zeros is a
            // valid value.
            let mut wcs: [ffi::ibv_wc; POLL_BATCH] = unsafe { std::mem::zeroed() };
            // SAFETY: `self.cq` is a live completion queue of the context whose ops table
            // this is (what verbs.h's inline ibv_poll_cq calls); `wcs` has room for
            // `POLL_BATCH` completions.
            let n = unsafe { poll_cq(self.cq, POLL_BATCH as c_int, wcs.as_mut_ptr()) };
            if n < 0 {
                return Err(self.fail(format!("polling the completion queue failed ({n})")));
            }
            let n = n as usize;
            out.extend(wcs[..n].iter().map(completion));
            if n < POLL_BATCH {
                return Ok(());
            }
        }
    }
}

/// A work completion in this crate's terms. Only `wr_id`, the status and the vendor error
/// are valid in a failed one (ibv_poll_cq(3)), so it never has `recv`.
fn completion(wc: &ffi::ibv_wc) -> Completion {
    match wc.error() {
        Some((status, vendor_err)) => Completion {
            wr_id: wc.wr_id(),
            status: Err(format!(
                "{} (status {status}, vendor error {vendor_err:#x})",
                wc_status_text(status)
            )),
            recv: None,
        },
        None => Completion {
            wr_id: wc.wr_id(),
            status: Ok(()),
            recv: (wc.opcode() == ffi::ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM)
                .then(|| (u32::from_be(wc.imm_data), wc.len() as u32)),
        },
    }
}

fn wc_status_text(status: ffi::ibv_wc_status::Type) -> String {
    // SAFETY: ibv_wc_status_str returns a static NUL-terminated string for any value
    // (an "unknown" one for values it does not know).
    let p = unsafe { ffi::ibv_wc_status_str(status) };
    if p.is_null() {
        return "unknown completion status".into();
    }
    // SAFETY: `p` is non-null, NUL-terminated and static.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

impl Drop for VerbsQp {
    fn drop(&mut self) {
        // Errors cannot be reported from a drop. Order: the queue pair (no more DMA into the
        // regions, and the completion queue is no longer attached), the regions, the
        // completion queue; the protection domain and the context go with `self.dev`.
        if !self.qp.is_null() {
            // SAFETY: the queue pair came from ibv_create_qp and is destroyed once.
            unsafe { ffi::ibv_destroy_qp(self.qp) };
        }
        let mrs = self
            .mrs
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for mr in mrs.drain(..) {
            // SAFETY: each region came from ibv_reg_mr and is deregistered once, after the
            // queue pair that could still write into it is gone.
            unsafe { ffi::ibv_dereg_mr(mr) };
        }
        // SAFETY: the completion queue came from ibv_create_cq, is destroyed once, and no
        // queue pair uses it any more.
        unsafe { ffi::ibv_destroy_cq(self.cq) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::PortState;

    /// Without RDMA hardware (CI), listing fails or lists nothing; either way the error
    /// names the device asked for, and nothing panics.
    #[test]
    fn opening_a_device_that_is_not_there_is_an_error_naming_it() {
        let port = Port {
            device: "braid_no_such_hca".into(),
            port: 1,
            state: PortState::Active,
            gids: 0,
        };
        let e = match VerbsDevice::open(&port, None) {
            Ok(_) => panic!("a device named braid_no_such_hca opened"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains("braid_no_such_hca:1"), "{e}");
        assert!(VerbsDevice::open(&port, Some(3)).is_err());
    }

    #[test]
    fn first_sequence_numbers_are_24_bits_and_vary() {
        let psns: Vec<u32> = (0..64).map(|_| random_psn()).collect();
        assert!(psns.iter().all(|&p| p <= 0xff_ffff));
        assert!(psns.iter().any(|&p| p != psns[0]));
    }
}
