//! The fixture plans under `tests/plans`: good ones verify and are stored canonically; each
//! bad one is rejected with the diagnostics recorded next to it (`NAME.stderr`).

mod common;

use braid_plan::verify;
use common::{bad, check_bad, check_canonical, good, load, plans_dir};

const GOOD: [&str; 4] = [
    "ring_allreduce_4",
    "chain_broadcast_3",
    "chain_reduce_3",
    "exchange_allgather_2",
];

#[test]
fn good_plans_verify() {
    for name in GOOD {
        let plan = load(&good(name));
        if let Err(d) = verify(&plan) {
            panic!("{name}:\n{}", braid_plan::render_diagnostics(&d));
        }
    }
}

#[test]
fn good_plans_are_canonical_json() {
    for name in GOOD {
        check_canonical(&good(name));
    }
}

#[test]
fn every_bad_fixture_has_a_golden_file() {
    for entry in std::fs::read_dir(plans_dir().join("bad")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            check_bad(&path);
        }
    }
}

macro_rules! bad_fixture {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            check_bad(&bad(stringify!($name)));
        }
    )*};
}

bad_fixture!(
    offset_past_buffer,
    missing_buffer,
    race_dropped_dep,
    swapped_sends_mismatch,
    swapped_sends_race,
    swapped_sends_deadlock,
    recv_first_deadlock,
    removed_step,
    dependency_cycle,
    count_mismatch,
    reduced_twice,
    undefined_read,
    bad_structure,
    unknown_version,
    malformed_json,
    inverted_byte_range,
    empty_byte_range,
    empty_slice,
    slice_end_past_u32,
    negative_offset,
    offset_past_u32,
    huge_chunk_count,
    too_many_chunk_accesses,
);
