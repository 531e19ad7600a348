//! What every call of a process's GPUs is validated, generated, compiled and wired with,
//! and the kernels already loaded: one home for both shapes, one process driving every
//! GPU ([`crate::Gpus`]) and one process per GPU ([`crate::process::RankGpu`]).

use crate::codegen::{self, Source, Wire};
use crate::compile;
use crate::error::{CudaError, Result};
use crate::layout::CallShape;
use crate::protocol;
use crate::validate;
use braid_ir::Protocol;
use braid_runtime::dtype::{DType, RedOp};
use cudarc::driver::{sys, CudaContext, CudaFunction};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(crate) struct Settings {
    /// Target architecture, e.g. `sm_90`.
    pub arch: String,
    pub driver_version: i32,
    /// The smallest multiprocessor count of the GPUs (every block must be resident).
    pub multiprocessors: u32,
    /// Whether connections go peer to peer (else through host memory).
    pub p2p: bool,
    /// The protocol every call uses (`None`: the plan's, `auto` by size); from
    /// `BRAID_PROTO` at open.
    pub protocol: Option<Protocol>,
    /// How long a kernel waits for one peer, FIFO or block before it fails the call;
    /// from `BRAID_TIMEOUT` at open (as the host backend).
    pub timeout: Duration,
    /// Loaded kernels per source hash: one function per rank this process runs.
    modules: Mutex<HashMap<String, Vec<CudaFunction>>>,
}

impl Settings {
    /// The settings of `ctxs` (all the same architecture), peer to peer or not.
    pub fn new(ctxs: &[Arc<CudaContext>], p2p: bool) -> Result<Settings> {
        let (major, minor) = ctxs[0].compute_capability()?;
        let mut multiprocessors = u32::MAX;
        for c in ctxs {
            if c.compute_capability()? != (major, minor) {
                return Err(CudaError::Invalid(
                    "GPUs of different architectures are not supported yet".into(),
                ));
            }
            let sms =
                c.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
            multiprocessors = multiprocessors.min(sms as u32);
        }
        let mut driver_version = 0;
        // SAFETY: out-parameter.
        unsafe { sys::cuDriverGetVersion(&mut driver_version) }.result()?;
        Ok(Settings {
            arch: format!("sm_{major}{minor}"),
            driver_version,
            multiprocessors,
            p2p,
            protocol: protocol::from_env()?,
            timeout: braid_runtime::comm::timeout_from_env(),
            modules: Mutex::new(HashMap::new()),
        })
    }

    /// Validates a call (see [`validate::check_call`]) and generates its source: the wire
    /// it runs with and the kernels of every rank.
    pub fn source(&self, shape: &CallShape, dtype: DType, op: RedOp) -> Result<(Wire, Source)> {
        validate::check_call(shape, self.multiprocessors)?;
        let wire = protocol::choose(shape, self.protocol, !self.p2p);
        let source = codegen::generate(shape.plan, dtype, op, wire, self.timeout);
        Ok((wire, source))
    }

    /// The kernels of `source`: from memory, or compiled (or taken from the disk cache)
    /// and loaded by `load` from the PTX. Also says whether they were compiled before.
    pub fn kernels(
        &self,
        source: &Source,
        load: impl FnOnce(&str) -> Result<Vec<CudaFunction>>,
    ) -> Result<(Vec<CudaFunction>, bool)> {
        let key = crate::cache::key(&source.text, &self.arch, self.driver_version, (0, 0));
        if let Some(f) = self.modules.lock().unwrap().get(&key) {
            return Ok((f.clone(), true));
        }
        let (ptx, from_disk) = compile::compile(&source.text, &self.arch, self.driver_version)?;
        let funcs = load(&ptx)?;
        self.modules.lock().unwrap().insert(key, funcs.clone());
        Ok((funcs, from_disk))
    }
}
