//! CUDA graphs of calls, as PyTorch's CUDA-graph users run collectives: what a closure
//! enqueues on one or several streams is captured once and replayed.

use crate::error::{CudaError, Result};
use crate::stream::Stream;
use cudarc::driver::{result, sys};

/// An instantiated graph.
pub struct Graph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
}

// SAFETY: graph handles may be used from any thread.
unsafe impl Send for Graph {}

fn check(r: sys::CUresult, what: &str) -> Result<()> {
    r.result()
        .map_err(|e| CudaError::Invalid(format!("{what}: {e}")))
}

impl Graph {
    /// Captures what `f` enqueues on `streams` (relaxed mode: the communicator may look
    /// at streams while capturing). Every stream is one GPU's; the first leads: the
    /// others join its capture before `f` and it waits for them after, so the graph
    /// holds the work of all of them.
    pub fn capture(streams: &[Stream], f: impl FnOnce() -> Result<()>) -> Result<Graph> {
        let Some(lead) = streams.first() else {
            return Err(CudaError::Invalid("a capture needs a stream".into()));
        };
        if let Some(s) = streams.iter().find(|s| s.device() != lead.device()) {
            return Err(CudaError::Invalid(format!(
                "one capture covers one GPU's streams (GPU {} and GPU {})",
                lead.device(),
                s.device()
            )));
        }
        let event = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?;
        // SAFETY: live streams; the capture ends below whatever happens in between.
        unsafe {
            check(
                sys::cuStreamBeginCapture_v2(
                    lead.raw(),
                    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
                ),
                "cuStreamBeginCapture",
            )?;
        }
        let fork = || -> Result<()> {
            for s in &streams[1..] {
                // SAFETY: a live event and streams; waiting on an event recorded in a
                // capture joins the waiting stream to it.
                unsafe {
                    result::event::record(event, lead.raw())?;
                    result::stream::wait_event(
                        s.raw(),
                        event,
                        sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                    )?;
                }
            }
            Ok(())
        };
        let join = || -> Result<()> {
            for s in &streams[1..] {
                // SAFETY: as above; the lead waits for each joined stream's work.
                unsafe {
                    result::event::record(event, s.raw())?;
                    result::stream::wait_event(
                        lead.raw(),
                        event,
                        sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                    )?;
                }
            }
            Ok(())
        };
        let r = fork().and_then(|()| f()).and_then(|()| join());
        let mut graph = std::ptr::null_mut();
        // SAFETY: ends the capture begun above.
        let end = unsafe { sys::cuStreamEndCapture(lead.raw(), &mut graph) };
        // SAFETY: created above, no longer used.
        let _ = unsafe { result::event::destroy(event) };
        if r.is_err() && !graph.is_null() {
            // SAFETY: a graph this function owns, not instantiated.
            unsafe { sys::cuGraphDestroy(graph) };
        }
        r?;
        check(end, "cuStreamEndCapture")?;
        let mut exec = std::ptr::null_mut();
        // SAFETY: a graph just captured.
        let made = unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) };
        if let Err(e) = check(made, "cuGraphInstantiate") {
            // SAFETY: as above.
            unsafe { sys::cuGraphDestroy(graph) };
            return Err(e);
        }
        Ok(Graph { graph, exec })
    }

    /// Replays the graph on `s`.
    ///
    /// # Safety
    /// Everything the captured work uses (buffers, communicators, streams) must still
    /// be alive and unused by anything else until the replay completes on `s`.
    pub unsafe fn launch(&self, s: &Stream) -> Result<()> {
        // SAFETY: an instantiated graph and a live stream; the rest is the caller's.
        check(
            unsafe { sys::cuGraphLaunch(self.exec, s.raw()) },
            "cuGraphLaunch",
        )
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: created by `capture`, destroyed once. A replay still running keeps its
        // own reference to the executable graph (the driver defers the free).
        unsafe {
            sys::cuGraphExecDestroy(self.exec);
            sys::cuGraphDestroy(self.graph);
        }
    }
}
