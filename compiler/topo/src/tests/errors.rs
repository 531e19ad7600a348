//! Rejected `--topo` arguments.

use crate::{TopoError, Topology};

#[track_caller]
fn bad_preset(arg: &str, reason: &str) {
    match Topology::from_arg(arg) {
        Err(TopoError::BadPreset { arg: a, reason: r }) => {
            assert_eq!(a, arg);
            assert!(r.contains(reason), "{arg}: reason `{r}` lacks `{reason}`");
        }
        other => panic!("{arg}: expected BadPreset, got {other:?}"),
    }
}

#[test]
fn bad_parameters_are_refused() {
    bad_preset("nvswitch:0", "at least 1");
    bad_preset("pcie:0", "at least 1");
    bad_preset("cluster:0x8", "M must be at least 1");
    bad_preset("cluster:2x0", "G must be at least 1");
    bad_preset("nvswitch:", "missing");
    bad_preset("cluster:2x", "G is missing");
    bad_preset("cluster:x8", "M is missing");
    bad_preset("cluster:8", "not MxG");
    bad_preset("pcie:abc", "not a number");
    bad_preset("pcie:-1", "not a number");
    bad_preset("pcie:+4", "not a number");
    bad_preset("nvswitch: 8", "not a number");
    bad_preset("cluster:2x8x1", "not a number");
    bad_preset("nvswitch:99999999999", "too large");
    bad_preset("cluster:100x100", "more than the 4096");
}

#[test]
fn unknown_kinds_and_garbage_are_refused() {
    bad_preset("nvlink:8", "unknown kind `nvlink`");
    match Topology::from_arg("no-such-topology") {
        Err(e @ TopoError::Unrecognized { .. }) => {
            let m = e.to_string();
            assert!(
                m.contains("no-such-topology") && m.contains("nvswitch:N"),
                "{m}"
            );
        }
        other => panic!("expected Unrecognized, got {other:?}"),
    }
    assert!(matches!(
        Topology::from_arg(""),
        Err(TopoError::Unrecognized { .. })
    ));
}

#[test]
fn detect_is_left_to_the_caller() {
    let e = Topology::from_arg("detect").unwrap_err();
    assert_eq!(e, TopoError::DetectRequested);
    assert!(e.to_string().contains("braid_detect::detect()"));
}

#[test]
fn unreadable_files_say_so() {
    let dir = std::env::temp_dir();
    let e = Topology::from_arg(dir.to_str().unwrap()).unwrap_err();
    assert!(matches!(e, TopoError::Io { .. }), "{e:?}");
}
