//! Host memory shared between processes and mapped into their GPUs: the FIFOs of
//! host-staged connections when each rank is its own process (no peer-to-peer access, or
//! `BRAID_P2P_DISABLE=1`).
//!
//! The receiver creates a file under `/dev/shm` (else the temporary directory) with a
//! random name, for this user alone (mode 0600), maps it and registers the mapping with
//! CUDA (`cuMemHostRegister`, `PORTABLE | DEVICEMAP`); the sender opens the same file by
//! name (sent through the bootstrap), refusing anything but a private file of this user's
//! of the agreed size, maps and registers it too. The creator removes the name once every rank has opened it ([`SharedHost::unlink`]
//! after a barrier), so nothing stays behind; the memory lives as long as the mappings.

use crate::error::{CudaError, Result};
use cudarc::driver::{sys, CudaContext};
use memmap2::MmapRaw;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One mapping of a shared file, registered with a context.
pub struct SharedHost {
    ctx: Arc<CudaContext>,
    map: MmapRaw,
    dev: u64,
    /// The file's name while this mapping created it and has not unlinked it.
    owned: Option<PathBuf>,
}

// SAFETY: the mapping is owned by this value and only handed to the driver and kernels.
unsafe impl Send for SharedHost {}
unsafe impl Sync for SharedHost {}

/// The prefix of every such file's name.
const PREFIX: &str = "braid-gpu-";

fn dir() -> PathBuf {
    braid_runtime::shm_link::shm_dir()
}

impl SharedHost {
    /// Creates a zeroed shared file of `len` bytes and maps it for `ctx`.
    pub fn create(ctx: &Arc<CudaContext>, len: usize) -> Result<SharedHost> {
        let path = dir().join(braid_runtime::shm_link::random_name(PREFIX));
        let file = braid_runtime::shm_link::private_file(&path).map_err(|e| io(&path, e))?;
        file.set_len(len.max(1) as u64).map_err(|e| io(&path, e))?;
        let mapped = Self::map(ctx, &file, &path);
        if mapped.is_err() {
            let _ = std::fs::remove_file(&path);
        }
        let mut m = mapped?;
        m.owned = Some(path);
        Ok(m)
    }

    /// Maps the file another rank created under `name` (a bare name in the shared
    /// directory), which must be a private file of this user's of exactly `len` bytes.
    pub fn open(ctx: &Arc<CudaContext>, name: &str, len: usize) -> Result<SharedHost> {
        if !name.starts_with(PREFIX) || name.contains(['/', '\\', '\0']) {
            return Err(CudaError::Invalid(format!(
                "shared host memory: {name:?} is not a name this backend makes"
            )));
        }
        let path = dir().join(name);
        let file = braid_runtime::shm_link::open_private(&path)?;
        let size = file.metadata().map_err(|e| io(&path, e))?.len();
        if size != len.max(1) as u64 {
            return Err(CudaError::Invalid(format!(
                "shared host memory {}: {size} bytes, expected {}",
                path.display(),
                len.max(1)
            )));
        }
        Self::map(ctx, &file, &path)
    }

    fn map(ctx: &Arc<CudaContext>, file: &std::fs::File, path: &Path) -> Result<SharedHost> {
        let map = MmapRaw::map_raw(file).map_err(|e| io(path, e))?;
        ctx.bind_to_thread()?;
        let flags = sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_DEVICEMAP;
        // SAFETY: the mapping is `map.len()` bytes, page aligned, and stays mapped until
        // `drop` unregisters it.
        unsafe { sys::cuMemHostRegister_v2(map.as_mut_ptr().cast(), map.len(), flags) }.result()?;
        let mut dev = 0;
        // SAFETY: out-parameter; the range was registered with DEVICEMAP just above.
        let got =
            unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dev, map.as_mut_ptr().cast(), 0) }
                .result();
        let m = SharedHost {
            ctx: ctx.clone(),
            map,
            dev,
            owned: None,
        };
        got?;
        Ok(m)
    }

    /// The file's name, for the other rank.
    pub fn path(&self) -> Option<&Path> {
        self.owned.as_deref()
    }

    /// Removes the file's name (the mappings stay); call once every rank opened it.
    pub fn unlink(&mut self) {
        if let Some(p) = self.owned.take() {
            let _ = std::fs::remove_file(p);
        }
    }

    /// The address kernels use.
    pub fn ptr(&self) -> u64 {
        self.dev
    }

    /// Sets every byte to 0 (no kernel may be running on it).
    pub fn clear(&self) {
        // SAFETY: within the mapping.
        unsafe { std::ptr::write_bytes(self.map.as_mut_ptr(), 0, self.map.len()) };
    }
}

impl Drop for SharedHost {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: registered by `map`, unregistered once, after the kernels using it
            // finished.
            let _ = unsafe { sys::cuMemHostUnregister(self.map.as_mut_ptr().cast()) };
        }
        self.unlink();
    }
}

fn io(path: &Path, e: std::io::Error) -> CudaError {
    CudaError::Invalid(format!("shared host memory {}: {e}", path.display()))
}
