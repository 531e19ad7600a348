//! `braid verify` end to end: every corrupted plan fixture exits 1 naming rank, block and
//! step; every good fixture and every freshly compiled plan exits 0.

mod common;

use common::{braid, root};

fn fixtures(dir: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root().join(dir))
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            (p.extension()? == "json")
                .then(|| format!("{dir}/{}", p.file_name().unwrap().to_string_lossy()))
        })
        .collect();
    v.sort();
    v
}

#[test]
fn corrupted_plans_are_rejected_naming_rank_block_and_step() {
    let bad = fixtures("tests/plans/bad");
    assert!(bad.len() >= 10, "{bad:?}");
    for plan in bad {
        let out = braid(&["verify", &plan], &[]);
        assert_eq!(out.code, 1, "{plan} must be rejected:\n{}", out.stdout);
        assert!(
            out.stdout.is_empty(),
            "{plan}: nothing on stdout when rejected"
        );
        // Problems of the plan as a whole (its JSON, its version, its header) have no
        // rank, block or step to name; every other problem must name them.
        let structural = plan.contains("malformed")
            || plan.contains("version")
            || plan.contains("bad_structure")
            || out.stderr.contains("malformed plan")
            || out.stderr.contains("error[structure]: plan:");
        if !structural {
            assert!(
                out.stderr.contains("rank ")
                    && out.stderr.contains("block ")
                    && out.stderr.contains("step "),
                "{plan}: the message must name rank, block and step:\n{}",
                out.stderr
            );
        }
    }
}

#[test]
fn good_and_compiled_plans_verify() {
    for plan in fixtures("tests/plans/good") {
        let out = braid(&["verify", &plan], &[]);
        assert_eq!(out.code, 0, "{plan}: {}", out.stderr);
        assert!(out.stdout.contains("ok"), "{}", out.stdout);
    }
    let dir = std::env::temp_dir().join(format!("braid-verify-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("h.json");
    let out = braid(
        &[
            "compile",
            "algorithms/hierarchical_allreduce.braid",
            "--topo",
            "cluster:2x4",
            "-o",
            plan.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let out = braid(&["verify", plan.to_str().unwrap()], &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    // Editing an offset past the buffer makes the same plan fail.
    let text = std::fs::read_to_string(&plan).unwrap();
    let edited = text.replacen("\"offset\": 0", "\"offset\": 4096", 1);
    assert_ne!(text, edited);
    std::fs::write(&plan, edited).unwrap();
    let out = braid(&["verify", plan.to_str().unwrap()], &[]);
    assert_eq!(out.code, 1, "an out-of-bounds edit must be refused");
    assert!(out.stderr.contains("rank "), "{}", out.stderr);
    std::fs::remove_dir_all(dir).unwrap();
}
