//! LL128 (docs/cuda.md, Protocols): its stress test on each kind of link this machine
//! has, the test's control (writers that store a line's flag before its data must be
//! caught), and, where the links passed, every collective over LL128 through the FIFOs
//! (direct reads off, so that every byte crosses a connection) against the host
//! reference; where no verdict allows it, a call that asks for LL128 runs Simple.

use super::{matrix_with, opts};
use braid_cuda::ll128::{stress, stress_all, Stress};
use braid_cuda::{CudaComm, Options};
use braid_ir::{Collective, Mode, Protocol};
use braid_runtime::call::CallSpec;
use braid_runtime::dtype::{DType, RedOp};
use std::sync::Arc;

type Cases = Vec<(String, Result<(), String>)>;

/// The protocol a 1 MiB f32 all-reduce of `comm` runs.
fn protocol(comm: &CudaComm) -> Result<Protocol, String> {
    let spec = CallSpec {
        collective: Collective::Allreduce,
        count: 1 << 18,
        dtype: DType::F32,
        op: RedOp::Sum,
        root: None,
    };
    let (_, p) = comm
        .selection(&spec, Mode::OutOfPlace)
        .map_err(|e| e.to_string())?
        .ok_or("a positive count has a plan")?;
    Ok(p)
}

pub fn section(gpus: usize, quick: bool) -> Result<Cases, String> {
    let mut cases = Cases::new();
    let verdicts = stress_all(Stress::default(), 2).map_err(|e| e.to_string())?;
    for v in &verdicts {
        let what = format!(
            "stress test on {} (GPU {} -> {}): {} line reads, {} torn, {} stalled",
            v.link.name(),
            v.gpus.0,
            v.gpus.1,
            v.reads,
            v.torn,
            v.stalled
        );
        println!("{what}");
        // The test must have watched enough; torn lines are the link's property (LL128
        // then stays off there, checked below), not a failure of the test.
        let r = if v.stalled == 0
            && v.reads >= v.lines * braid_cost::Ll128Verdict::MIN_READS_PER_LINE
        {
            Ok(())
        } else {
            Err(format!("the test saw too little: {v:?}"))
        };
        cases.push((what, r));
    }
    let control = stress(
        0,
        0,
        Stress {
            split: true,
            ..Stress::default()
        },
    )
    .map_err(|e| e.to_string())?;
    cases.push((
        format!(
            "the control (flag stored before the data) is caught: {} of {} reads torn",
            control.torn, control.reads
        ),
        if control.torn > 0 {
            Ok(())
        } else {
            Err("no torn line seen where every line's flag leaves before its data".into())
        },
    ));
    let forced = |ll128: Vec<braid_cost::Ll128Verdict>| {
        let mut o: Options = opts(10);
        o.ll128 = ll128;
        // Through the FIFOs: ranks of one launch would otherwise read each other's input.
        o.direct = false;
        o.policy.protocol = Some(Protocol::Ll128);
        o
    };
    for n in [2u32, 4, 8] {
        let devices: Vec<usize> = (0..n as usize).map(|r| r % gpus).collect();
        let uses = braid_cuda::ll128::uses(n as usize > gpus, gpus > 1 && n > 1, true, false);
        let allowed = braid_cuda::ll128::allowed(&verdicts, uses);
        // Without verdicts, LL128 stays off whatever is asked.
        let reg = super::registry(n);
        let none = CudaComm::init_all(&devices, Arc::clone(&reg), &forced(Vec::new()))
            .map_err(|e| e.to_string())?;
        cases.push((
            format!("n={n}: without a verdict a call asking for LL128 runs Simple"),
            match protocol(&none[0])? {
                Protocol::Simple => Ok(()),
                p => Err(format!("ran {p:?}")),
            },
        ));
        drop(none);
        if !allowed {
            println!("n={n}: LL128 not allowed on these links by the verdicts above");
            continue;
        }
        let o = forced(verdicts.clone());
        let comms = CudaComm::init_all(&devices, reg, &o).map_err(|e| e.to_string())?;
        let p = protocol(&comms[0])?;
        drop(comms);
        if p != Protocol::Ll128 {
            cases.push((format!("n={n}: LL128 selected"), Err(format!("ran {p:?}"))));
            continue;
        }
        for (what, r) in matrix_with(n, gpus, quick || n == 8, &o)? {
            cases.push((format!("n={n} LL128: {what}"), r));
        }
    }
    Ok(cases)
}
