//! What the flat kernel's argument costs a launch: each of its three entry points
//! ([`crate::kernel::FLAT_ENTRIES`], one per argument size) launched with a launch that
//! does nothing (one block, one sequence without a task), back to back on one stream
//! between two CUDA events, as back-to-back calls run. The driver copies the argument at
//! every launch, so the larger ones cost more. `braid tune` prices flat launches with it
//! (the cost model's `flat_arg_us`); `launch_cost` prints it.

use crate::error::Result;
use crate::flat::{FlatArgs, FlatHead, Packed, WORDS_L, WORDS_M, WORDS_S};
use crate::kernel::{Lane, Variant, Wire};
use crate::stream::Stream;
use braid_runtime::device_comm::Stats;
use braid_runtime::dtype::{DType, RedOp};
use cudarc::driver::{result, sys, CudaContext};

/// One argument size's time per launch, back to back.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ArgTime {
    /// Bytes of the argument.
    pub bytes: usize,
    /// Time per launch, µs: the median of `runs` runs of `calls` launches.
    pub us: f64,
}

/// The three argument sizes' times per launch on GPU `device`, smallest first: `calls`
/// launches back to back, the median of `runs` runs (each size's runs interleaved with
/// the others', so that a slower moment of the machine does not fall on one size).
pub fn flat_arg_times(device: usize, calls: u32, runs: u32) -> Result<[ArgTime; 3]> {
    let ctx = &CudaContext::new(device)?;
    let variant = Variant {
        dtype: DType::F32,
        op: RedOp::Sum,
        wire: Wire {
            lane: Lane::Simple,
            host_fifo: false,
        },
    };
    let loaded = crate::modules::get(ctx, variant, &Stats::default())?;
    let stream = Stream::new(ctx)?;
    // One sequence whose first task is also its end: every block returns at once, and
    // nothing is read but the argument.
    let head = FlatHead {
        nseq: 1,
        parts: 1,
        chunk_elems: 0,
        task_at: 8,
        op_at: 8,
    };
    let args = [
        Packed::S(FlatArgs {
            head,
            w: [0; WORDS_S],
        }),
        Packed::M(FlatArgs {
            head,
            w: [0; WORDS_M],
        }),
        Packed::L(FlatArgs {
            head,
            w: [0; WORDS_L],
        }),
    ];
    let (calls, runs) = (calls.max(1), runs.max(1));
    let mut times: [Vec<f64>; 3] = Default::default();
    ctx.bind_to_thread()?;
    let start = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)?;
    let end = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)?;
    let timed = (|| -> Result<()> {
        for _ in 0..runs {
            for (i, a) in args.iter().enumerate() {
                let mut a = *a;
                let f = loaded.flat[i].cu_function();
                // SAFETY: live events, stream and function; each entry takes a
                // `FlatArgs` of its size by value (`flat::FlatArgs` lays it out, the
                // variant matching the entry), which lives through the launches; its
                // one sequence has no task, so the kernel reads nothing else and
                // writes nothing.
                unsafe {
                    result::event::record(start, stream.raw())?;
                    for _ in 0..calls {
                        let mut p: *mut std::ffi::c_void = match &mut a {
                            Packed::S(x) => x as *mut _ as *mut _,
                            Packed::M(x) => x as *mut _ as *mut _,
                            Packed::L(x) => x as *mut _ as *mut _,
                        };
                        result::launch_kernel(
                            f,
                            (1, 1, 1),
                            (crate::kernel::THREADS, 1, 1),
                            0,
                            stream.raw(),
                            std::slice::from_mut(&mut p),
                        )?;
                    }
                    result::event::record(end, stream.raw())?;
                }
                stream.synchronize()?;
                // SAFETY: both events recorded and complete.
                let ms = unsafe { result::event::elapsed(start, end) }?;
                times[i].push(f64::from(ms) * 1e3 / f64::from(calls));
            }
        }
        Ok(())
    })();
    // SAFETY: the events are ours and no longer in use (synchronised, or never recorded).
    unsafe {
        let _ = result::event::destroy(start);
        let _ = result::event::destroy(end);
    }
    timed?;
    let mut at = |i: usize| ArgTime {
        bytes: args[i].bytes(),
        us: median(&mut times[i]),
    };
    Ok([at(0), at(1), at(2)])
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
