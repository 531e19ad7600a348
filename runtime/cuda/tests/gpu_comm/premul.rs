//! PreMulSum on the GPU (`braid_cuda::premul`, NCCL's ncclRedOpCreatePreMulSum): the
//! reducing collectives with each rank's input times its own scalar, then summed, in
//! place and out of place, against the host reference of the same definition (the
//! inputs scaled on the host, then summed). The caller's input must come out unchanged
//! where it is not the output.

use super::support::KINDS;
use super::{check_outputs, download, open, opts, run_between_app_kernels, Ranks};
use braid_cuda::PremulCall;
use braid_ir::{Collective, Mode};
use braid_runtime::call::CallSpec;
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::reduce::scale;
use braid_runtime::reference::{fill_input, inputs, reference};

type Cases = Vec<(String, Result<(), String>)>;

/// Rank `r`'s scalar, as the dtype's bytes: 0.5 on even ranks, 1 on odd ones for floats
/// (with inputs drawn for twice the ranks, every scaled partial sum stays exact, so any
/// reduction order gives the reference's bits), r + 2 for integers (wrapping arithmetic
/// is exact in any order).
fn scalar(d: DType, r: u32) -> Vec<u8> {
    let half = r % 2 == 0;
    let f = if half { 0.5f64 } else { 1.0 };
    match d {
        DType::F32 => (f as f32).to_le_bytes().to_vec(),
        DType::F64 => f.to_le_bytes().to_vec(),
        DType::Bf16 => (((f as f32).to_bits() >> 16) as u16).to_le_bytes().to_vec(),
        DType::F16 => (if half { 0x3800u16 } else { 0x3C00 })
            .to_le_bytes()
            .to_vec(),
        DType::I8 | DType::U8 => vec![(r + 2) as u8],
        DType::I32 | DType::U32 => (r + 2).to_le_bytes().to_vec(),
        DType::I64 | DType::U64 => u64::from(r + 2).to_le_bytes().to_vec(),
    }
}

fn case(r: &Ranks, spec: &CallSpec, mode: Mode, seed: u64) -> Result<(), String> {
    let n = r.comms.len() as u32;
    // The call's buffer sizes for n ranks, values drawn as for 2n ranks (half the range):
    // room for the scaling without a rounding in any order.
    let mut ins = inputs(spec.collective, spec.dtype, RedOp::Sum, n, spec.count, seed);
    for (q, buf) in ins.iter_mut().enumerate() {
        fill_input(spec.dtype, RedOp::Sum, q as u32, 2 * n, seed, buf);
    }
    let kind = KINDS[seed as usize % KINDS.len()];
    let scalars: Vec<Vec<u8>> = (0..n).map(|q| scalar(spec.dtype, q)).collect();
    let calls = run_between_app_kernels(r, spec, mode, kind, &ins, |calls| {
        let items: Vec<PremulCall> = calls
            .iter()
            .enumerate()
            .map(|(q, c)| {
                let (send, recv) = match &c.recv {
                    Some(out) => (c.send.ptr(), out.ptr()),
                    None => (
                        c.send.ptr() + c.input_at as u64,
                        c.send.ptr() + c.output_at as u64,
                    ),
                };
                PremulCall {
                    comm: &r.comms[q],
                    spec: *spec,
                    send,
                    recv,
                    scalar: &scalars[q],
                    stream: &r.streams[q],
                }
            })
            .collect();
        // SAFETY: every buffer is a live allocation of its rank's GPU sized for the call
        // (as `RankCall` makes them), kept until the streams are synchronised.
        unsafe { braid_cuda::premul::enqueue(&items) }.map_err(|e| e.to_string())
    })?;
    let scaled: Vec<Vec<u8>> = ins
        .iter()
        .zip(&scalars)
        .map(|(i, s)| scale(spec.dtype, i, s))
        .collect();
    let expected = reference(spec.collective, spec.dtype, RedOp::Sum, spec.root, &scaled);
    check_outputs(spec, &calls, &expected)?;
    for (q, c) in calls.iter().enumerate() {
        // Out of place, the input is the caller's and stays as it was.
        if mode == Mode::OutOfPlace && !ins[q].is_empty() {
            let left = download(&c.send, ins[q].len())?;
            if left != ins[q] {
                return Err(format!("rank {q}: the input buffer was modified"));
            }
        }
    }
    Ok(())
}

pub fn section(gpus: usize, quick: bool) -> Result<Cases, String> {
    let mut cases = Cases::new();
    let dtypes: &[DType] = if quick {
        &[DType::F32, DType::Bf16, DType::I32]
    } else {
        &DType::ALL
    };
    for n in [2u32, 4] {
        let r = open(n, gpus, &opts(20))?;
        let mut seed = 0;
        for c in [
            Collective::Allreduce,
            Collective::ReduceScatter,
            Collective::Reduce,
        ] {
            for &d in dtypes {
                for mode in [Mode::OutOfPlace, Mode::InPlace] {
                    for count in [1usize, 7, 4099, (1 << 20) + 3] {
                        seed += 1;
                        let spec = CallSpec {
                            collective: c,
                            count,
                            dtype: d,
                            op: RedOp::Sum,
                            root: (c == Collective::Reduce).then_some(1),
                        };
                        cases.push((
                            format!("n={n} {c} {} {mode} count {count}", d.name()),
                            case(&r, &spec, mode, seed),
                        ));
                    }
                }
            }
        }
    }
    Ok(cases)
}
