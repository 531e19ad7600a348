//! `braid doctor` on this machine and on described ones: exit 0 when healthy, 1 with
//! findings (each with its fix, on stdout); a machine with P2P disabled and a 64 MiB
//! /dev/shm gets both findings.

mod common;

use common::braid;

#[test]
fn this_machine_is_examined_and_the_exit_code_follows_the_findings() {
    let out = braid(&["doctor", "--json"], &[]);
    assert!(
        out.code == 0 || out.code == 1,
        "{}{}",
        out.stdout,
        out.stderr
    );
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let findings = v["findings"].as_array().unwrap().len();
    assert_eq!(v["healthy"].as_bool().unwrap(), findings == 0);
    assert_eq!(out.code == 0, findings == 0);
    if !braid_detect::cuda_driver_present() {
        assert!(
            v["notes"][0].as_str().unwrap().contains("no GPU to check"),
            "{}",
            out.stdout
        );
    }
}

#[test]
fn a_described_machine_with_p2p_off_and_a_tiny_shm_gets_both_findings() {
    let live = braid(&["doctor", "--json"], &[]);
    let mut v: serde_json::Value = serde_json::from_str(&live.stdout).unwrap();
    let mut survey = v["survey"].take();
    survey["env"]["NCCL_P2P_DISABLE"] = "1".into();
    survey["shm_bytes"] = (64u64 << 20).into();
    let dir = std::env::temp_dir().join(format!("braid-doctor-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("machine.json");
    std::fs::write(&file, serde_json::to_string(&survey).unwrap()).unwrap();
    let out = braid(&["doctor", "--machine", file.to_str().unwrap()], &[]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("finding [p2p-disabled]: NCCL_P2P_DISABLE=1"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("finding [shm]: /dev/shm holds 64 MiB"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("fix: give it at least 1 GiB"),
        "{}",
        out.stdout
    );
    // Fixed, the same machine is healthy as far as these two go.
    survey["env"]
        .as_object_mut()
        .unwrap()
        .remove("NCCL_P2P_DISABLE");
    survey["shm_bytes"] = (8u64 << 30).into();
    std::fs::write(&file, serde_json::to_string(&survey).unwrap()).unwrap();
    let out = braid(&["doctor", "--machine", file.to_str().unwrap()], &[]);
    assert!(
        !out.stdout.contains("[p2p-disabled]") && !out.stdout.contains("[shm]"),
        "{}",
        out.stdout
    );
    std::fs::write(&file, "{\"gpus\": 3}").unwrap();
    let bad = braid(&["doctor", "--machine", file.to_str().unwrap()], &[]);
    assert_eq!(bad.code, 1);
    assert!(
        bad.stderr.contains("not a machine description"),
        "{}",
        bad.stderr
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `braid doctor --no-bench` as rank `rank` of a torchrun-style job of `world` ranks.
fn doctor_rank(rank: u32, world: u32, port: u16, extra: &[&str]) -> std::process::Child {
    use std::process::{Command, Stdio};
    Command::new(env!("CARGO_BIN_EXE_braid"))
        .args(["doctor", "--no-bench"])
        .args(extra)
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env("BRAID_SECRET", "00112233445566778899aabbccddeeff")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn under_a_launcher_every_rank_joins_the_others_and_opens_a_link_to_each() {
    let port = common::free_port();
    let children: Vec<_> = (0..3).map(|r| doctor_rank(r, 3, port, &[])).collect();
    for (r, c) in children.into_iter().enumerate() {
        let out = c.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "rank {r}: {stdout}");
        let note = stdout
            .lines()
            .find(|l| l.contains("joined the job"))
            .unwrap_or_else(|| panic!("rank {r}: {stdout}"));
        assert!(
            note.contains(&format!("this rank ({r} of 3)"))
                && note.contains(&format!("at 127.0.0.1:{}", port + 1))
                && note.contains("(ranks 0-2)")
                && note.contains("every pair of its ranks opened a link"),
            "{note}"
        );
        // Where a program's own group id (PyTorch's) would listen is said too.
        assert!(stdout.contains("(ncclGetUniqueId) listens on"), "{stdout}");
    }
}

#[test]
fn a_rank_whose_job_has_no_rank_0_gets_a_finding_within_its_timeout() {
    let port = common::free_port();
    let start = std::time::Instant::now();
    let out = doctor_rank(1, 2, port, &["--peer-timeout", "1.5"])
        .wait_with_output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "finding [peers]: rank 1 of 2 could not join the job's other ranks at 127.0.0.1:{}",
            port + 1
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("fix: run `braid doctor` on every rank"),
        "{stdout}"
    );
    assert!(start.elapsed() < std::time::Duration::from_secs(15));
    // --no-peers skips the probe: nothing to wait for, no finding about it.
    let out = doctor_rank(1, 2, port, &["--no-peers"])
        .wait_with_output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("[peers]"), "{stdout}");
}
