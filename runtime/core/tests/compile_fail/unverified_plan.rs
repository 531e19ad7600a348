// An executor takes only a plan the verifier proved: handing it a plan as loaded from a
// file must not compile.
use braid_runtime::device_comm::CallArgs;
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::exec::{run_rank, Job, Mem};
use braid_runtime::fabric::InProcGroup;
use braid_runtime::geometry::Geometry;
use std::time::Duration;

fn main() {
    let plan = braid_plan::Plan::from_json("{}").unwrap();
    let geometry = Geometry::new(plan.collective, 2, plan.chunks, 0, 4, 4, 1, 0);
    let job = Job {
        plan: &plan,
        args: CallArgs { input: 0, output: 0, geometry, avg_ranks: 0, in_untouched: false },
        dtype: DType::F32,
        op: RedOp::Sum,
        mem: Mem { base: [std::ptr::null_mut(); 3], len: [0; 3] },
        timeout: Duration::from_secs(1),
        trace: None,
    };
    let group = InProcGroup::new(2);
    let _ = run_rank(&job, &group.member(0));
}
