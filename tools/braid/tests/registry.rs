//! Plan selection: user plans from BRAID_PLANS win, bad plan files are refused, the
//! shipped library fills in by message size, and passed-over plans are logged.

mod common;

use braid_ir::{Collective, Mode};
use braid_runtime::registry::{preference, Registry, SMALL_MESSAGE};
use braid_topo::Topology;
use common::{braid, root};

struct Library(braid_library::Library);

impl braid_runtime::registry::PlanProvider for Library {
    fn plans(&self, c: Collective, root: Option<u32>) -> Vec<std::sync::Arc<braid_plan::Verified>> {
        self.0.plans(c, root)
    }
}

fn library(topo: &str) -> Box<Library> {
    Box::new(Library(braid_library::Library::new(
        Topology::from_arg(topo).unwrap(),
    )))
}

#[test]
fn shipped_plans_are_chosen_by_message_size() {
    let reg = Registry::new().with_provider(library("nvswitch:4"));
    let small = reg
        .select(Collective::Allreduce, 4, None, Mode::OutOfPlace, 4096)
        .unwrap();
    assert_eq!(small.name, preference(Collective::Allreduce, 4, 4096)[0]);
    assert_eq!(small.name, "one_shot_allreduce");
    // On 2 ranks, out of place: the one-shot without staging; in place (where it cannot
    // serve) two-shot.
    let two = Registry::new().with_provider(library("nvswitch:2"));
    let oop = two
        .select(Collective::Allreduce, 2, None, Mode::OutOfPlace, 4096)
        .unwrap();
    assert_eq!(oop.name, "one_shot_oop_allreduce");
    let inplace = two
        .select(Collective::Allreduce, 2, None, Mode::InPlace, 4096)
        .unwrap();
    assert_eq!(inplace.name, "two_shot_allreduce");
    let large = reg
        .select(
            Collective::Allreduce,
            4,
            None,
            Mode::InPlace,
            SMALL_MESSAGE * 64,
        )
        .unwrap();
    assert_eq!(large.name, "ring_allreduce");
    let bcast = reg
        .select(Collective::Broadcast, 4, Some(2), Mode::OutOfPlace, 1 << 20)
        .unwrap();
    assert_eq!(bcast.root, Some(2));
    // A plan for another rank count never serves a call.
    assert!(reg
        .select(Collective::Allreduce, 8, None, Mode::OutOfPlace, 4096)
        .is_err());
}

#[test]
fn braid_plans_are_preferred_and_bad_ones_refused() {
    let dir = std::env::temp_dir().join(format!("braid-registry-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("tree.json");
    let out = braid(
        &[
            "compile",
            "algorithms/tree_allreduce.braid",
            "--topo",
            "nvswitch:4",
            "-o",
            plan.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    // BRAID_PLANS' syntax, passed as a value: tests run in parallel threads, and the
    // process environment is not theirs to change.
    let reg = Registry::new().with_provider(library("nvswitch:4"));
    reg.add_list(plan.to_str().unwrap()).unwrap();
    let chosen = reg
        .select(Collective::Allreduce, 4, None, Mode::OutOfPlace, 1 << 26)
        .unwrap();
    assert_eq!(
        chosen.name, "tree_allreduce",
        "the user plan wins over the size rule"
    );

    let bad = dir.join("bad.json");
    let text =
        std::fs::read_to_string(root().join("tests/plans/bad/race_dropped_dep.json")).unwrap();
    std::fs::write(&bad, text).unwrap();
    let err = Registry::new()
        .add_list(&format!("{}:{}", plan.display(), bad.display()))
        .unwrap_err();
    assert!(err.to_string().contains("fails verification"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn passed_over_plans_are_logged_with_their_reason() {
    use std::process::{Command, Stdio};
    let port = common::free_port();
    // A user plan for 4 ranks cannot serve a 2-rank job: the log must say so.
    let plan = std::env::temp_dir().join(format!("braid-log-{}.json", std::process::id()));
    let out = braid(
        &[
            "compile",
            "algorithms/binomial_broadcast.braid",
            "--topo",
            "nvswitch:4",
            "--root",
            "1",
            "-o",
            plan.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let children: Vec<_> = (0..2)
        .map(|r| {
            Command::new(env!("CARGO_BIN_EXE_braid"))
                .args([
                    "rank",
                    "broadcast",
                    "--topo",
                    "nvswitch:2",
                    "--size",
                    "4K",
                    "--root",
                    "1",
                ])
                .env("RANK", r.to_string())
                .env("WORLD_SIZE", "2")
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .env("BRAID_SECRET", "00112233445566778899aabbccddeeff")
                .env("BRAID_DEBUG", "INFO")
                .env("BRAID_PLANS", &plan)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(stderr.contains("shipped plan selected"), "{stderr}");
        assert!(
            stderr.contains("plan not used for broadcast: it is for 4 ranks, not 2"),
            "{stderr}"
        );
    }
    std::fs::remove_file(plan).unwrap();
}

#[test]
fn byte_ranges_limit_which_calls_a_plan_serves() {
    let lib = braid_library::Library::new(Topology::from_arg("nvswitch:2").unwrap());
    let mut plan = lib.plans(Collective::Allreduce, None)[0].plan().clone();
    plan.bytes = Some(braid_plan::ByteRange {
        min: 1024,
        max: Some(4096),
    });
    let reg = Registry::new();
    reg.add(
        plan.clone(),
        braid_runtime::registry::Origin::User("ranged".into()),
    )
    .unwrap();
    assert!(reg
        .select(Collective::Allreduce, 2, None, Mode::OutOfPlace, 2048)
        .is_ok());
    assert!(
        reg.select(Collective::Allreduce, 2, None, Mode::OutOfPlace, 4096)
            .is_err(),
        "max is exclusive"
    );
    assert!(reg
        .select(Collective::Allreduce, 2, None, Mode::OutOfPlace, 1000)
        .is_err());
}
