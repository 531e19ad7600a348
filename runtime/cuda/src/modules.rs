//! The kernels loaded in this process, per GPU and variant: compiled (or taken from the
//! disk cache) and loaded once, then shared by every communicator of the process.

use crate::compile;
use crate::error::{CudaError, Result};
use crate::kernel::{self, Variant, THREADS};
use braid_runtime::device_comm::Stats;
use cudarc::driver::{sys, CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::Ptx;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A kernel ready to launch on one GPU.
#[derive(Clone)]
pub struct Loaded {
    pub func: CudaFunction,
    /// The flat launch's kernels ([`crate::flat`]), from the same module: for the small,
    /// middle and full argument ([`kernel::FLAT_ENTRIES`]).
    pub flat: [CudaFunction; 3],
    /// Thread blocks of it one multiprocessor holds at once.
    pub blocks_per_sm: u32,
    /// Multiprocessors of the GPU.
    pub multiprocessors: u32,
    /// The point-to-point kernel and its blocks per multiprocessor (the
    /// [`kernel::p2p_variant`]'s module only).
    pub p2p: Option<(CudaFunction, u32)>,
    /// PreMulSum's scaling kernel (each [`kernel::scale_variant`]'s module only).
    pub scale: Option<CudaFunction>,
    _module: Arc<CudaModule>,
}

impl Loaded {
    /// Blocks of this kernel the whole GPU holds at once.
    pub fn resident(&self) -> u32 {
        self.blocks_per_sm * self.multiprocessors
    }
}

static LOADED: Mutex<Option<HashMap<(usize, Variant), Loaded>>> = Mutex::new(None);

/// The target architecture of a GPU, e.g. `sm_90`.
pub fn arch(ctx: &CudaContext) -> Result<String> {
    let (major, minor) = ctx.compute_capability()?;
    Ok(format!("sm_{major}{minor}"))
}

/// The kernel of `variant` on `ctx`'s GPU; counts compilations and loads in `stats`.
pub fn get(ctx: &Arc<CudaContext>, variant: Variant, stats: &Stats) -> Result<Loaded> {
    let key = (ctx.ordinal(), variant);
    let mut map = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    let map = map.get_or_insert_with(HashMap::new);
    if let Some(l) = map.get(&key) {
        return Ok(l.clone());
    }
    let compiled = compile::compile(&kernel::source(variant), &arch(ctx)?)?;
    if !compiled.cached {
        stats.compiled();
    }
    let module = ctx.load_module(Ptx::from_binary(compiled.cubin))?;
    stats.loaded();
    let func = module.load_function(kernel::ENTRY)?;
    let flat = [
        module.load_function(kernel::FLAT_ENTRIES[0])?,
        module.load_function(kernel::FLAT_ENTRIES[1])?,
        module.load_function(kernel::FLAT_ENTRIES[2])?,
    ];
    let blocks = occupancy(&func, variant, ctx)?;
    let p2p = if variant == kernel::p2p_variant(variant.wire.host_fifo) {
        let f = module.load_function(kernel::P2P_ENTRY)?;
        let b = occupancy(&f, variant, ctx)?;
        Some((f, b))
    } else {
        None
    };
    let scale = if variant == kernel::scale_variant(variant.dtype, variant.wire.host_fifo) {
        Some(module.load_function(kernel::SCALE_ENTRY)?)
    } else {
        None
    };
    let sms = ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    let l = Loaded {
        func,
        flat,
        blocks_per_sm: blocks,
        multiprocessors: sms as u32,
        p2p,
        scale,
        _module: module,
    };
    map.insert(key, l.clone());
    Ok(l)
}

/// Thread blocks of `func` one multiprocessor holds at once (at least one, or an error).
fn occupancy(func: &CudaFunction, variant: Variant, ctx: &CudaContext) -> Result<u32> {
    let mut blocks = 0i32;
    // SAFETY: out-parameter; a function of a live module.
    unsafe {
        sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(
            &mut blocks,
            func.cu_function(),
            THREADS as i32,
            0,
        )
    }
    .result()?;
    if blocks < 1 {
        return Err(CudaError::Invalid(format!(
            "the kernel for {variant:?} fits no thread block of {THREADS} threads on GPU {}",
            ctx.ordinal()
        )));
    }
    Ok(blocks as u32)
}
