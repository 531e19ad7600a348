//! How failures reach the caller: an NCCL result code, and the message behind it for
//! `ncclGetLastError` (per thread, and per communicator when there is one), logged at WARN
//! (`NCCL_DEBUG=WARN`). Nothing here exits the process, and no panic crosses the C
//! boundary: [`guard`] turns one into `ncclInternalError`.

use crate::abi::{self, ncclResult_t};
use std::cell::RefCell;
use std::ffi::CString;

/// A failure: the code NCCL would return and the message.
#[derive(Clone, Debug)]
pub struct Failure {
    pub code: ncclResult_t,
    pub message: String,
}

impl Failure {
    pub fn new(code: ncclResult_t, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Failure {
        Self::new(abi::INVALID_ARGUMENT, message)
    }

    pub fn usage(message: impl Into<String>) -> Failure {
        Self::new(abi::INVALID_USAGE, message)
    }
}

pub type Res<T> = Result<T, Failure>;

/// The code NCCL gives a runtime error of Braid's.
pub fn from_runtime(e: &braid_runtime::RuntimeError) -> ncclResult_t {
    use braid_runtime::RuntimeError as E;
    match e {
        E::Invalid(_) => abi::INVALID_ARGUMENT,
        E::PeerFailed { .. } | E::Timeout { .. } | E::Mismatch(_) => abi::REMOTE_ERROR,
        E::Aborted(_) => abi::REMOTE_ERROR,
        _ => abi::SYSTEM_ERROR,
    }
}

/// The code NCCL gives an error of the CUDA backend.
pub fn from_cuda(e: &braid_cuda::CudaError) -> ncclResult_t {
    use braid_cuda::CudaError as E;
    match e {
        E::NoDriver | E::Driver(_) => abi::UNHANDLED_CUDA_ERROR,
        E::Invalid(_) => abi::INVALID_ARGUMENT,
        E::Compile(_) | E::Nccl(_) => abi::INTERNAL_ERROR,
        E::Runtime(r) => from_runtime(r),
    }
}

impl From<braid_runtime::RuntimeError> for Failure {
    fn from(e: braid_runtime::RuntimeError) -> Failure {
        Failure::new(from_runtime(&e), e.to_string())
    }
}

impl From<braid_cuda::CudaError> for Failure {
    fn from(e: braid_cuda::CudaError) -> Failure {
        Failure::new(from_cuda(&e), e.to_string())
    }
}

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `f` as this thread's last error and logs it; returns its code.
pub fn report(what: &str, f: &Failure) -> ncclResult_t {
    let text = format!("{what}: {}", f.message);
    tracing::warn!("{text}");
    set_last(&text);
    f.code
}

/// This thread's last error message.
pub fn set_last(text: &str) {
    let c = CString::new(text.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
}

/// A pointer to this thread's last error message, valid until its next failing call.
pub fn last_ptr() -> *const std::ffi::c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

/// Runs one API function: its result, or the failure reported; a panic becomes
/// `ncclInternalError` with its message instead of unwinding into C.
pub fn guard(what: &str, f: impl FnOnce() -> Res<()>) -> ncclResult_t {
    crate::env::init_logging();
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => abi::SUCCESS,
        Ok(Err(e)) => report(what, &e),
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            report(
                what,
                &Failure::new(
                    abi::INTERNAL_ERROR,
                    format!("internal error (caught): {msg}"),
                ),
            )
        }
    }
}

/// Checks a pointer argument.
pub fn non_null<T>(p: *const T, name: &str) -> Res<()> {
    if p.is_null() {
        Err(Failure::invalid(format!("{name} is NULL")))
    } else {
        Ok(())
    }
}
