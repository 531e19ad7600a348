//! Compile-fail tests: no executor accepts a plan the verifier has not proved, and no
//! code can claim a plan is proved without the verifier (`tests/compile_fail/`, with the
//! compiler's expected errors beside each; `TRYBUILD=overwrite` rewrites them).

#[test]
fn an_executor_refuses_an_unverified_plan() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile_fail/*.rs");
}
