//! Timing calls as nccl-tests times them, for Braid and NCCL alike: `iters` calls issued
//! back to back on their streams between two CUDA events per stream, or captured in CUDA
//! graphs and replayed between two events (PyTorch's CUDA-graph users); the slowest
//! stream's (GPU's) time divided by `iters`.

use crate::error::Result;
use crate::graph::Graph;
use crate::stream::Stream;
use std::time::Duration;

/// How the calls are issued while timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timing {
    /// Enqueued one after the other, no host wait between them.
    BackToBack,
    /// Captured once into one graph per GPU (a warm-up replay, then the timed replay).
    Graph,
}

/// The time per call of `iters` calls of `enqueue` (which enqueues one call on every
/// stream of `streams`), issued as `how` says. The streams must be made by braid-cuda
/// (timing events need their context); an enqueue that fails is the error.
pub fn time_calls(
    streams: &[Stream],
    enqueue: &dyn Fn() -> Result<()>,
    iters: u32,
    how: Timing,
) -> Result<Duration> {
    let iters = iters.max(1);
    // Each stream once (ranks may share one).
    let mut distinct: Vec<Stream> = Vec::with_capacity(streams.len());
    for s in streams {
        if !distinct.iter().any(|d| d.raw() == s.raw()) {
            distinct.push(s.clone());
        }
    }
    let streams = &distinct[..];
    let sync = || -> Result<()> {
        for s in streams {
            s.synchronize()?;
        }
        Ok(())
    };
    // The streams timed: every stream back to back; each GPU's first under a graph,
    // which joins the GPU's other streams into its replay.
    let (timed, graphs): (Vec<Stream>, Vec<Graph>) = match how {
        Timing::BackToBack => (streams.to_vec(), Vec::new()),
        Timing::Graph => {
            let mut by_gpu: Vec<Vec<Stream>> = Vec::new();
            for s in streams {
                match by_gpu.iter_mut().find(|g| g[0].device() == s.device()) {
                    Some(g) => g.push(s.clone()),
                    None => by_gpu.push(vec![s.clone()]),
                }
            }
            let graphs = capture_nested(&by_gpu, &|| {
                for _ in 0..iters {
                    enqueue()?;
                }
                Ok(())
            })?;
            (by_gpu.iter().map(|g| g[0].clone()).collect(), graphs)
        }
    };
    let issue = || -> Result<()> {
        match how {
            Timing::BackToBack => {
                for _ in 0..iters {
                    enqueue()?;
                }
            }
            Timing::Graph => {
                for (g, s) in graphs.iter().zip(&timed) {
                    // SAFETY: the captured calls use what the caller's `enqueue` uses,
                    // which outlives this function; every stream is synchronised before
                    // the graphs are dropped.
                    unsafe { g.launch(s) }?;
                }
            }
        }
        Ok(())
    };
    if how == Timing::Graph {
        // The first replay uploads the graph: not timed.
        issue()?;
        sync()?;
    }
    let starts = timed
        .iter()
        .map(Stream::record_timing)
        .collect::<Result<Vec<_>>>()?;
    let issued = issue();
    let ends = timed
        .iter()
        .map(Stream::record_timing)
        .collect::<Result<Vec<_>>>();
    sync()?;
    issued?;
    let ends = ends?;
    let mut worst = 0f32;
    for (a, b) in starts.iter().zip(&ends) {
        worst = worst.max(a.elapsed_ms(b)?);
    }
    Ok(Duration::from_secs_f64(f64::from(worst) / 1e3) / iters)
}

/// Captures what `f` enqueues into one graph per GPU (`groups`: each GPU's streams): the
/// captures nest, so every GPU's capture is open while `f` runs.
fn capture_nested(groups: &[Vec<Stream>], f: &dyn Fn() -> Result<()>) -> Result<Vec<Graph>> {
    let Some((first, rest)) = groups.split_first() else {
        f()?;
        return Ok(Vec::new());
    };
    let mut inner = None;
    let g = Graph::capture(first, || {
        inner = Some(capture_nested(rest, f)?);
        Ok(())
    })?;
    let mut all = vec![g];
    all.extend(inner.unwrap_or_default());
    Ok(all)
}
