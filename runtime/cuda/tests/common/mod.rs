//! What the GPU tests share: the shipped plans for two ranks, the roots and call modes
//! each is run with, and a tally of passed and failed cases.

// Each test binary compiles this module on its own and uses part of it.
#![allow(dead_code)]

use braid_ir::{Collective, Mode};
use braid_library::Library;
use braid_plan::Plan;
use braid_topo::Topology;
use std::sync::Arc;

/// Every shipped plan of `c` (with `root`) for two GPUs.
pub fn plans(c: Collective, root: Option<u32>) -> Vec<Arc<Plan>> {
    Library::new(Topology::from_arg("nvswitch:2").unwrap()).plans(c, root)
}

/// Both roots for rooted collectives, none otherwise.
pub fn roots(c: Collective) -> Vec<Option<u32>> {
    if c.is_rooted() {
        vec![Some(0), Some(1)]
    } else {
        vec![None]
    }
}

/// The call modes `plan` is valid for.
pub fn modes(plan: &Plan) -> Vec<Mode> {
    plan.modes.iter().collect()
}

/// Cases that passed, and the names of those that failed (each printed as it fails).
#[derive(Default)]
pub struct Tally {
    pub pass: usize,
    pub fail: Vec<String>,
}

impl Tally {
    /// Counts one case; `loud` prints a passing one too.
    pub fn record<T>(&mut self, what: String, r: Result<T, String>, loud: bool) {
        match r {
            Ok(_) => {
                self.pass += 1;
                if loud {
                    println!("ok   {what}");
                }
            }
            Err(e) => {
                println!("FAIL {what}: {e}");
                self.fail.push(what);
            }
        }
    }

    /// Prints `label: N passed, M failed` and fails the test if any case failed.
    pub fn assert_all_passed(&self, label: &str) {
        println!("{label}: {} passed, {} failed", self.pass, self.fail.len());
        assert!(self.fail.is_empty(), "{:#?}", self.fail);
    }
}
