//! Checks that run before anything reaches a GPU. A kernel trusts its constant chunk
//! indices completely (there are no bounds checks on the device), so a plan is refused
//! unless the verifier proves it and every step of every rank lies inside the memory
//! this call allocates for it.

use crate::error::{CudaError, Result};
use crate::layout::CallShape;
use braid_ir::Mode;
use braid_plan::{Plan, Slice};

/// Everything checked before a resident call allocates anything, on every path (one
/// process or one per GPU): the plan verifies for the call's mode, the count is positive,
/// every step lies inside this call's buffers, and every thread block fits at once.
pub fn check_call(shape: &CallShape, multiprocessors: u32) -> Result<()> {
    check_plan(shape.plan, shape.mode)?;
    if shape.count == 0 {
        return Err(CudaError::Invalid("a resident call needs count > 0".into()));
    }
    check_bounds(shape)?;
    check_residency(shape.plan, multiprocessors)
}

/// `braid_plan::verify`, and the call mode is one the plan was verified for.
pub fn check_plan(plan: &Plan, mode: Mode) -> Result<()> {
    if let Err(diags) = braid_plan::verify(plan) {
        let diagnostics = diags
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("\n");
        return Err(CudaError::Unverified {
            plan: plan.name.clone(),
            diagnostics,
        });
    }
    let ok = match mode {
        Mode::OutOfPlace => plan.modes.out_of_place,
        Mode::InPlace => plan.modes.in_place,
    };
    if !ok {
        return Err(CudaError::Invalid(format!(
            "plan `{}` is not valid for {mode:?} calls",
            plan.name
        )));
    }
    Ok(())
}

fn buf_index(b: braid_ir::Buf) -> usize {
    match b {
        braid_ir::Buf::In => 0,
        braid_ir::Buf::Out => 1,
        braid_ir::Buf::Scratch => 2,
    }
}

/// Every slice of every step, on every rank, ends inside the buffer this call gives that
/// rank (independently of the verifier, against the real byte lengths).
pub fn check_bounds(shape: &CallShape) -> Result<()> {
    let chunk_bytes = shape.geometry().chunk_elems * shape.elem;
    for rank in &shape.plan.ranks {
        let layout = shape.rank_layout(rank.rank);
        for block in &rank.blocks {
            for (i, step) in block.steps.iter().enumerate() {
                let check = |s: &Slice| -> Result<()> {
                    let end = (u64::from(s.offset) + u64::from(s.count)) * chunk_bytes as u64;
                    let have = layout.len[buf_index(s.buf)] as u64;
                    if s.count == 0 || end > have {
                        return Err(CudaError::Invalid(format!(
                            "rank {}, block {}, step {i}: {}[{}..{}] ends at byte {end}, \
                             but the buffer has {have} bytes",
                            rank.rank,
                            block.id,
                            s.buf,
                            s.offset,
                            u64::from(s.offset) + u64::from(s.count)
                        )));
                    }
                    Ok(())
                };
                step.src.iter().try_for_each(check)?;
                step.dst.iter().try_for_each(check)?;
            }
        }
    }
    Ok(())
}

/// Every thread block of a rank spins on its peers, so all of them must be resident at
/// once: at most one block per multiprocessor.
pub fn check_residency(plan: &Plan, multiprocessors: u32) -> Result<()> {
    for rank in &plan.ranks {
        let grid = rank.blocks.len() as u64 * u64::from(plan.channels);
        if grid > u64::from(multiprocessors) {
            return Err(CudaError::Invalid(format!(
                "rank {} needs {grid} resident thread blocks, the GPU has {multiprocessors} \
                 multiprocessors",
                rank.rank
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> Plan {
        Plan::from_json(include_str!(
            "../../../tests/plans/good/exchange_allgather_2.json"
        ))
        .unwrap()
    }

    fn shape(plan: &Plan) -> CallShape<'_> {
        CallShape {
            plan,
            elem: 4,
            count: 10,
            mode: Mode::OutOfPlace,
        }
    }

    #[test]
    fn a_good_plan_passes() {
        let p = fixture();
        check_plan(&p, Mode::OutOfPlace).unwrap();
        check_plan(&p, Mode::InPlace).unwrap();
        check_bounds(&shape(&p)).unwrap();
        check_residency(&p, 132).unwrap();
    }

    #[test]
    fn a_step_outside_its_buffer_is_refused_by_both_checks() {
        let mut p = fixture();
        p.ranks[1].blocks[1].steps[0].dst.as_mut().unwrap().offset = 2;
        let e = check_bounds(&shape(&p)).unwrap_err().to_string();
        assert!(
            e.contains("rank 1, block 1, step 0: out[2..3] ends at byte 120"),
            "{e}"
        );
        assert!(e.contains("has 80 bytes"), "{e}");
        assert!(matches!(
            check_plan(&p, Mode::OutOfPlace),
            Err(CudaError::Unverified { .. })
        ));
    }

    #[test]
    fn an_unsupported_mode_is_refused() {
        let mut p = fixture();
        p.modes.in_place = false;
        assert!(check_plan(&p, Mode::InPlace).is_err());
    }

    #[test]
    fn too_many_blocks_for_the_gpu_are_refused() {
        let p = fixture();
        assert!(check_residency(&p, 1).is_err());
    }

    #[test]
    fn a_call_is_refused_for_any_one_reason() {
        let p = fixture();
        check_call(&shape(&p), 132).unwrap();
        let zero = CallShape {
            count: 0,
            ..shape(&p)
        };
        assert!(check_call(&zero, 132)
            .unwrap_err()
            .to_string()
            .contains("count > 0"));
        assert!(check_call(&shape(&p), 1).is_err());
        let mut bad = fixture();
        bad.ranks[1].blocks[1].steps[0].dst.as_mut().unwrap().offset = 2;
        assert!(matches!(
            check_call(&shape(&bad), 132),
            Err(CudaError::Unverified { .. })
        ));
    }
}
