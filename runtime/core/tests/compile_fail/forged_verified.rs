// A `Verified` plan can only come out of the verifier: it cannot be built by hand.
fn main() {
    let plan = braid_plan::Plan::from_json("{}").unwrap();
    let _forged = braid_plan::Verified { plan, digest: 0 };
}
