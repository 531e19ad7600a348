//! Running a plan on every rank of one process with generated inputs and comparing each
//! rank's result with the reference: what `braid run` and the tests do.

use crate::call::CallSpec;
use crate::comm::Communicator;
use crate::dtype::{DType, RedOp};
use crate::error::{Result, RuntimeError};
use crate::reference::{first_mismatch, reference};
use crate::registry::{Origin, Registry};
use braid_ir::Mode;
use braid_plan::Plan;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use crate::geometry::buffer_elems;

/// What one checked call came to.
#[derive(Debug)]
pub struct Checked {
    pub elapsed: Duration,
    /// `(rank, wrong elements, first wrong element, expected, got)` per wrong rank.
    pub wrong: Vec<(u32, usize, usize, String, String)>,
    /// Bytes of the larger buffer of one rank.
    pub bytes: usize,
    /// Per rank, the plan and the step times the call recorded (`BRAID_TRACE`; empty
    /// without it).
    pub steps: Vec<crate::device_comm::RankSteps>,
}

/// Runs one call of `plan` on all its ranks (threads of this process) and checks it.
/// Runtime errors of any rank are returned as errors.
pub fn run_checked(
    plan: &Plan,
    dtype: DType,
    op: RedOp,
    count: usize,
    mode: Mode,
    seed: u64,
    timeout: Duration,
) -> Result<Checked> {
    let n = plan.n_ranks;
    let c = plan.collective;
    let e = dtype.size();
    let (in_elems, out_elems) = buffer_elems(c, n, count);
    let inputs = crate::reference::inputs(c, dtype, op, n, count, seed);
    let expected = if count == 0 {
        vec![Some(Vec::new()); n as usize]
    } else {
        reference(c, dtype, op, plan.root, &inputs)
    };
    // The caller asked for this plan: run it whatever sizes it says it is meant for.
    let mut plan = plan.clone();
    plan.bytes = None;
    let plan = &plan;
    let registry = Registry::new();
    registry.add(plan.clone(), Origin::User(plan.name.clone()))?;
    let comms = Communicator::create_local(n, Arc::new(registry), timeout);
    let spec = CallSpec {
        collective: c,
        count,
        dtype,
        op,
        root: plan.root,
    };
    let start = Instant::now();
    let outputs: Vec<Result<Vec<u8>>> = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter()
            .enumerate()
            .map(|(r, comm)| {
                let input = &inputs[r];
                s.spawn(move || {
                    let rank = r as u32;
                    let mut buf = crate::bench::rank_buffer(&spec, mode, rank, n, input);
                    comm.call(
                        c,
                        crate::bench::buffers(mode, input, &mut buf),
                        count,
                        dtype,
                        op,
                        plan.root,
                    )?;
                    Ok(crate::bench::result_of(&spec, mode, rank, n, &buf).to_vec())
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(RuntimeError::Invalid("a rank panicked".into())))
            })
            .collect()
    });
    let elapsed = start.elapsed();
    let steps = Communicator::step_times_of(&comms, &spec, mode)?;
    let mut wrong = Vec::new();
    for (r, out) in outputs.into_iter().enumerate() {
        let out = out.map_err(|err| match err {
            RuntimeError::Invalid(m) => RuntimeError::Invalid(format!("rank {r}: {m}")),
            other => other,
        })?;
        if let Some(exp) = &expected[r] {
            if let Some((i, want, got)) = first_mismatch(dtype, exp, &out) {
                let bad = exp
                    .chunks(e)
                    .zip(out.chunks(e))
                    .filter(|(x, y)| x != y)
                    .count();
                wrong.push((r as u32, bad, i, want, got));
            }
        }
    }
    Ok(Checked {
        elapsed,
        wrong,
        bytes: in_elems.max(out_elems) * e,
        steps,
    })
}
