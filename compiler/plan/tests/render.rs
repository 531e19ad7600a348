//! `explain` and `to_dot` output, checked against golden files next to the fixtures
//! (`BLESS=1` rewrites them).

mod common;

use braid_plan::{explain, to_dot};
use common::{good, load};
use std::path::Path;

fn golden(path: &Path, got: &str) {
    if std::env::var_os("BLESS").is_some_and(|v| v == "1") {
        std::fs::write(path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(path)
        .unwrap_or_else(|_| panic!("{} missing; run with BLESS=1", path.display()));
    assert!(
        want == got,
        "{} differs (BLESS=1 rewrites it)\n--- got\n{got}",
        path.display()
    );
}

#[test]
fn explain_matches_golden() {
    for name in ["ring_allreduce_4", "chain_broadcast_3"] {
        let path = good(name);
        golden(&path.with_extension("explain"), &explain(&load(&path)));
    }
}

#[test]
fn dot_matches_golden() {
    let path = good("chain_broadcast_3");
    golden(&path.with_extension("dot"), &to_dot(&load(&path)));
}

#[test]
fn explain_names_kinds_peers_deps_and_origins() {
    let text = explain(&load(&good("ring_allreduce_4")));
    assert!(text.contains("block 2  channel 0  recv <- 3"), "{text}");
    assert!(
        text.contains("0: rrc  recv from 3, out[3] = out[3] (+) recv   deps (0,0)  <- line 5:27"),
        "{text}"
    );
}

#[test]
fn dot_has_message_and_dependency_edges() {
    let dot = to_dot(&load(&good("ring_allreduce_4")));
    assert!(dot.starts_with("digraph \"ring_allreduce\" {"));
    assert!(
        dot.contains("s0_1_0 -> s1_2_0 [color=red, penwidth=2, label=\"1\"];"),
        "{dot}"
    );
    assert!(
        dot.contains("s0_0_0 -> s0_1_0 [style=dashed, color=blue];"),
        "{dot}"
    );
    assert_eq!(dot.matches("color=red").count(), 4 * 6);
}
