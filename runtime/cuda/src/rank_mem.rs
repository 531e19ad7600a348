//! One rank's device memory for a resident call, and the FIFOs connections write into.
//! Shared by the single-process executor ([`crate::exec`]) and one-rank-per-process
//! ([`crate::process`]): both allocate, launch, reset and read back a rank the same way.

use crate::device::{DeviceAlloc, HostAlloc};
use crate::error::{CudaError, Result};
use crate::layout::CallShape;
use crate::shared_host::SharedHost;
use crate::table::{self, Conn, Ends};
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use std::sync::Arc;

/// Bytes of one connection's FIFO allocation with `slots` slots.
pub fn fifo_len(slots: u32) -> usize {
    table::FIFO_HEADER + slots as usize * crate::SLICE_BYTES
}

/// A connection's FIFO: in the receiver's device memory, or pinned host memory for a
/// host-staged connection. Zeroed when allocated.
pub enum Fifo {
    Device(DeviceAlloc),
    Host(HostAlloc),
    /// Host memory shared with the sender's process (one rank per process, host-staged).
    Shared(SharedHost),
}

impl Fifo {
    pub fn device(ctx: &Arc<CudaContext>, slots: u32) -> Result<Fifo> {
        Ok(Fifo::Device(DeviceAlloc::new(ctx, fifo_len(slots), 0)?))
    }

    pub fn host(ctx: &Arc<CudaContext>, slots: u32) -> Result<Fifo> {
        Ok(Fifo::Host(HostAlloc::new(ctx, fifo_len(slots))?))
    }

    pub fn ptr(&self) -> u64 {
        match self {
            Fifo::Device(d) => d.ptr(),
            Fifo::Host(h) => h.ptr(),
            Fifo::Shared(h) => h.ptr(),
        }
    }

    /// Zeroes counters and slots (blocking; nothing may run on it): after a failed call,
    /// stale LL flags must not be mistaken for new data.
    pub fn clear(&self) -> Result<()> {
        match self {
            Fifo::Device(d) => d.fill(0, d.len()),
            Fifo::Host(h) => {
                h.fill(0, h.len_bytes());
                Ok(())
            }
            Fifo::Shared(h) => {
                h.clear();
                Ok(())
            }
        }
    }
}

/// One rank's allocations for a resident call: its data (staged `in`/`out`), scratch,
/// progress counters, status word, per-block state records and launch table.
pub struct RankMem {
    pub data: DeviceAlloc,
    _scratch: DeviceAlloc,
    progress: DeviceAlloc,
    status: DeviceAlloc,
    state: DeviceAlloc,
    _table: DeviceAlloc,
    table_ptr: u64,
    grid: u32,
    rank: u32,
    /// What the kernel was compiled to wait at most, for the error message.
    timeout: std::time::Duration,
}

impl RankMem {
    /// Allocates rank `rank`'s memory on `ctx`, uploads its staged input and its table.
    /// `fifos[i]` is the base address of connection `conns[i]`'s FIFO as this rank sees it
    /// (0 where the rank does not use it).
    pub fn new(
        ctx: &Arc<CudaContext>,
        shape: &CallShape,
        rank: u32,
        input: &[u8],
        conns: &[Conn],
        fifos: &[u64],
        timeout: std::time::Duration,
    ) -> Result<RankMem> {
        let plan = shape.plan;
        let layout = shape.rank_layout(rank);
        let data = DeviceAlloc::new(ctx, layout.data_len, 0xAA)?;
        data.upload(&shape.stage_in(rank, input))?;
        let scratch = DeviceAlloc::new(ctx, layout.len[2], 0)?;
        let ends: Vec<Ends> = table::ends(plan, conns, rank);
        let grid = ends.len() as u32;
        let progress = DeviceAlloc::new(ctx, 8 * ends.len(), 0)?;
        let status = DeviceAlloc::new(ctx, 4, 0)?;
        let state = DeviceAlloc::new(ctx, 8 * table::STATE * ends.len(), 0)?;
        let at = |present: bool, off: usize| if present { data.ptr() + off as u64 } else { 0 };
        let bufs = [
            at(layout.len[0] > 0, layout.in_at),
            at(layout.len[1] > 0, layout.out_at),
            if layout.len[2] > 0 { scratch.ptr() } else { 0 },
        ];
        let t = table::build(
            bufs,
            progress.ptr(),
            status.ptr(),
            state.ptr(),
            &ends,
            fifos,
        );
        let bytes: Vec<u8> = t.iter().flat_map(|v| v.to_ne_bytes()).collect();
        let tab = DeviceAlloc::new(ctx, bytes.len(), 0)?;
        tab.upload(&bytes)?;
        Ok(RankMem {
            data,
            _scratch: scratch,
            table_ptr: tab.ptr(),
            progress,
            status,
            state,
            _table: tab,
            grid,
            rank,
            timeout,
        })
    }

    /// Enqueues the rank's kernel on `stream`; returns at once.
    pub fn launch(&self, func: &CudaFunction, chunk_elems: u64, stream: &CudaStream) -> Result<()> {
        let cfg = LaunchConfig {
            grid_dim: (self.grid, 1, 1),
            block_dim: (crate::THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = stream.launch_builder(func);
        b.arg(&self.table_ptr).arg(&chunk_elems);
        // SAFETY: the kernel's arguments match its signature (table pointer, element
        // count); every address in the table is a live allocation sized by `layout`
        // (or a peer's FIFO kept open as long as this rank), and `validate::check_bounds`
        // proved every step stays inside them.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }

    /// Reads the status word (after the rank's stream was synchronised): an error naming
    /// the block and what it waited for when the kernel timed out.
    pub fn status(&self) -> Result<()> {
        let s = self.status.download(4)?;
        let code = u32::from_ne_bytes(s[..4].try_into().unwrap());
        if code == 0 {
            return Ok(());
        }
        let what = match code >> 24 {
            1 => "waiting for data from its receive peer",
            2 => "waiting for FIFO space at its send peer",
            _ => "waiting for another block's step",
        };
        Err(CudaError::Kernel {
            rank: self.rank,
            what: format!(
                "block {} timed out {what} ({:?}, BRAID_TIMEOUT)",
                code & 0xff_ffff,
                self.timeout
            ),
        })
    }

    /// Zeroes the status word, progress counters and state records (blocking): after a
    /// failed call, together with every FIFO the rank's peers use, so the next call
    /// starts from nothing.
    pub fn reset(&self) -> Result<()> {
        self.status.fill(0, 4)?;
        self.progress.fill(0, self.progress.len())?;
        self.state.fill(0, self.state.len())
    }

    /// The rank's result (NCCL's receive buffer; `None` where the rank has none), before
    /// `avg` is finished.
    pub fn output(&self, shape: &CallShape) -> Result<Option<Vec<u8>>> {
        let layout = shape.rank_layout(self.rank);
        let data = self.data.download(layout.data_len)?;
        Ok(shape.unstage_out(self.rank, &data))
    }
}
