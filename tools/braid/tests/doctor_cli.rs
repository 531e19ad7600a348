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
