//! How a connection's FIFO memory, which lives with its receiver, reaches its sender: one
//! interface ([`Transport`]) and one implementation per way, as NCCL's `src/transport/`
//! has one interface for every transport. The receiver creates the memory and describes
//! it in bytes; the description travels to the sender (directly in one process, through
//! the bootstrap across processes), which opens it. The kernels do not know which
//! transport carries a connection; only whether its FIFO is in device or host memory.
//!
//! | transport | FIFO memory | when |
//! |---|---|---|
//! | [`PeerMemory`] | receiver's device memory, peer access | sender in the same process |
//! | [`Ipc`] | receiver's device memory, CUDA IPC handle | sender in another process |
//! | [`PinnedHost`] | pinned host memory | same process, no peer-to-peer |
//! | [`SharedFile`] | a shared host file, registered with CUDA | other process, no peer-to-peer |
//!
//! The network transport (sockets, InfiniBand) will be one more implementation.

use crate::device::{enable_peer, DeviceAlloc, HostAlloc, IpcImport, IPC_HANDLE_LEN};
use crate::error::{CudaError, Result};
use crate::shared_host::SharedHost;
use cudarc::driver::CudaContext;
use std::sync::Arc;

/// Memory of one side of a connection, kept open while the connection lives.
pub trait Region: Send + Sync {
    /// The address kernels of this side use.
    fn ptr(&self) -> u64;
    /// Every sender has opened it: names may be removed now.
    fn opened_by_all(&mut self) {}
}

/// One way of making a receiver's FIFO memory reachable by its sender.
pub trait Transport: Send + Sync {
    fn name(&self) -> &'static str;
    /// Whether the memory is host memory (kernels then bypass the caches).
    fn host_memory(&self) -> bool;
    /// Receiver's side: `len` zeroed bytes the sender can write, and their description.
    fn create(&self, ctx: &Arc<CudaContext>, len: usize) -> Result<(Box<dyn Region>, Vec<u8>)>;
    /// Sender's side: the receiver's memory, from its description.
    fn open(&self, ctx: &Arc<CudaContext>, desc: &[u8]) -> Result<Box<dyn Region>>;
}

/// The transport between two ranks: same process or not, peer-to-peer or host-staged.
pub fn choose(same_process: bool, p2p: bool) -> &'static dyn Transport {
    match (same_process, p2p) {
        (true, true) => &PeerMemory,
        (false, true) => &Ipc,
        (true, false) => &PinnedHost,
        (false, false) => &SharedFile,
    }
}

struct Owned<T: Send + Sync>(T, u64);

impl<T: Send + Sync> Region for Owned<T> {
    fn ptr(&self) -> u64 {
        self.1
    }
}

/// An address another region of this process owns.
struct Borrowed(u64);

impl Region for Borrowed {
    fn ptr(&self) -> u64 {
        self.0
    }
}

fn malformed(what: &str) -> CudaError {
    CudaError::Invalid(format!("malformed {what} connection description"))
}

fn u64_at(d: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(d.get(at..at + 8)?.try_into().ok()?))
}

/// Device memory of the receiver, used by a sender in the same process (peer access is
/// enabled between the process's GPUs, or both ranks share one GPU).
pub struct PeerMemory;

impl Transport for PeerMemory {
    fn name(&self) -> &'static str {
        "p2p"
    }
    fn host_memory(&self) -> bool {
        false
    }
    fn create(&self, ctx: &Arc<CudaContext>, len: usize) -> Result<(Box<dyn Region>, Vec<u8>)> {
        let d = DeviceAlloc::new(ctx, len, 0)?;
        let p = d.ptr();
        Ok((Box::new(Owned(d, p)), p.to_le_bytes().to_vec()))
    }
    fn open(&self, _ctx: &Arc<CudaContext>, desc: &[u8]) -> Result<Box<dyn Region>> {
        Ok(Box::new(Borrowed(
            u64_at(desc, 0).ok_or_else(|| malformed("p2p"))?,
        )))
    }
}

/// Device memory of the receiver, exported to the sender's process as a CUDA IPC handle.
/// A sender that turns out to be in the receiver's own process (several ranks started
/// with `init_rank` from threads of one process) uses the address directly: a process
/// cannot open its own IPC handles.
pub struct Ipc;

impl Transport for Ipc {
    fn name(&self) -> &'static str {
        "cuda-ipc"
    }
    fn host_memory(&self) -> bool {
        false
    }
    fn create(&self, ctx: &Arc<CudaContext>, len: usize) -> Result<(Box<dyn Region>, Vec<u8>)> {
        let d = DeviceAlloc::new(ctx, len, 0)?;
        let p = d.ptr();
        let mut desc = Vec::with_capacity(20 + IPC_HANDLE_LEN);
        desc.extend_from_slice(&std::process::id().to_le_bytes());
        desc.extend_from_slice(&(ctx.ordinal() as u64).to_le_bytes());
        desc.extend_from_slice(&p.to_le_bytes());
        desc.extend_from_slice(&d.ipc_handle()?);
        Ok((Box::new(Owned(d, p)), desc))
    }
    fn open(&self, ctx: &Arc<CudaContext>, desc: &[u8]) -> Result<Box<dyn Region>> {
        if desc.len() != 20 + IPC_HANDLE_LEN {
            return Err(malformed("CUDA IPC"));
        }
        let pid = u32::from_le_bytes(desc[..4].try_into().unwrap());
        let ordinal = u64_at(desc, 4).unwrap() as usize;
        let ptr = u64_at(desc, 12).unwrap();
        if pid == std::process::id() {
            if ordinal != ctx.ordinal() {
                enable_peer(ctx, &CudaContext::new(ordinal)?)?;
            }
            return Ok(Box::new(Borrowed(ptr)));
        }
        let handle: [u8; IPC_HANDLE_LEN] = desc[20..].try_into().unwrap();
        let import = IpcImport::open(ctx, &handle)?;
        let p = import.ptr();
        Ok(Box::new(Owned(import, p)))
    }
}

/// Pinned host memory every GPU of the process addresses (no peer-to-peer between the
/// GPUs, or `BRAID_P2P_DISABLE=1`).
pub struct PinnedHost;

impl Transport for PinnedHost {
    fn name(&self) -> &'static str {
        "host-staged"
    }
    fn host_memory(&self) -> bool {
        true
    }
    fn create(&self, ctx: &Arc<CudaContext>, len: usize) -> Result<(Box<dyn Region>, Vec<u8>)> {
        let h = HostAlloc::new(ctx, len)?;
        let p = h.ptr();
        Ok((Box::new(Owned(h, p)), p.to_le_bytes().to_vec()))
    }
    fn open(&self, _ctx: &Arc<CudaContext>, desc: &[u8]) -> Result<Box<dyn Region>> {
        Ok(Box::new(Borrowed(
            u64_at(desc, 0).ok_or_else(|| malformed("host-staged"))?,
        )))
    }
}

/// Host memory shared between processes through a file, mapped and registered with CUDA
/// on both sides; its name is removed once every sender opened it.
pub struct SharedFile;

struct SharedRegion(SharedHost);

impl Region for SharedRegion {
    fn ptr(&self) -> u64 {
        self.0.ptr()
    }
    fn opened_by_all(&mut self) {
        self.0.unlink();
    }
}

impl Transport for SharedFile {
    fn name(&self) -> &'static str {
        "shared-host"
    }
    fn host_memory(&self) -> bool {
        true
    }
    /// The descriptor is `<len> <file name>`: the opener checks both.
    fn create(&self, ctx: &Arc<CudaContext>, len: usize) -> Result<(Box<dyn Region>, Vec<u8>)> {
        let h = SharedHost::create(ctx, len)?;
        let name = h
            .path()
            .and_then(|p| p.file_name())
            .expect("created here")
            .to_string_lossy()
            .into_owned();
        Ok((
            Box::new(SharedRegion(h)),
            format!("{len} {name}").into_bytes(),
        ))
    }
    fn open(&self, ctx: &Arc<CudaContext>, desc: &[u8]) -> Result<Box<dyn Region>> {
        let text = std::str::from_utf8(desc).map_err(|_| malformed("shared-host"))?;
        let (len, name) = text
            .split_once(' ')
            .ok_or_else(|| malformed("shared-host"))?;
        let len: usize = len.parse().map_err(|_| malformed("shared-host"))?;
        Ok(Box::new(SharedRegion(SharedHost::open(ctx, name, len)?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_situation_has_its_transport() {
        assert_eq!(choose(true, true).name(), "p2p");
        assert_eq!(choose(false, true).name(), "cuda-ipc");
        assert_eq!(choose(true, false).name(), "host-staged");
        assert_eq!(choose(false, false).name(), "shared-host");
        assert!(choose(false, false).host_memory());
        assert!(!choose(false, true).host_memory());
    }

    #[test]
    fn malformed_descriptions_are_errors() {
        assert!(u64_at(&[1, 2, 3], 0).is_none());
        assert_eq!(u64_at(&7u64.to_le_bytes(), 0), Some(7));
    }
}
