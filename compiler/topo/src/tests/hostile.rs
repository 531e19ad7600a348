//! Topology files shaped to make the reader slow, greedy or wrong: refused quickly at the
//! line and column of the problem, or read in time that grows with their size. Bounds
//! are generous for debug builds.

use std::time::{Duration, Instant};

use super::topo;
use crate::text::HEADER;
use crate::{TopoError, Topology, MAX_FILE_BYTES, MAX_VERTICES};

#[track_caller]
fn timed(text: &str, bound: Duration) -> Result<Topology, TopoError> {
    let start = Instant::now();
    let r = Topology::parse_text("hostile.topo", text);
    let took = start.elapsed();
    assert!(took < bound, "reading took {took:?}");
    r
}

#[track_caller]
fn refused(text: &str, bound: Duration, want: &str) {
    match timed(text, bound) {
        Err(e) => assert_eq!(e.to_string(), want),
        Ok(_) => panic!("accepted; expected {want}"),
    }
}

#[test]
fn eighty_thousand_pairs_on_a_line_are_refused_at_once() {
    // Each pair was compared with every pair before it: 98 s.
    let pairs: String = (0..80_000).map(|i| format!(" k{i}=1")).collect();
    refused(
        &format!("{HEADER}\nnode 0\ngpu g node=0{pairs}\n"),
        Duration::from_secs(2),
        "hostile.topo:3:49: more than 8 key=value pairs; no statement takes that many",
    );
}

#[test]
fn more_nodes_than_ranks_are_refused_at_the_first_extra_one() {
    let nodes: String = (0..5000).map(|i| format!("node {i}\n")).collect();
    refused(
        &format!("{HEADER}\n{nodes}"),
        Duration::from_secs(2),
        "hostile.topo:4098:6: node 4096: every node needs a GPU, and a topology has at most 4096",
    );
}

#[test]
fn more_vertices_than_the_limit_are_refused_at_the_first_extra_one() {
    let mut text = format!("{HEADER}\nnode 0\ngpu g node=0 rank=0\n");
    for i in 1..=MAX_VERTICES {
        text.push_str(&format!("cpu c{i} node=0 numa=0\n"));
    }
    refused(
        &text,
        Duration::from_secs(10),
        "hostile.topo:65539:5: `c65536` would be vertex 65537: a topology has at most 65536",
    );
}

#[test]
fn numbers_out_of_range_are_refused_where_they_are() {
    let h = format!("{HEADER}\nnode 0\ngpu g node=0 rank=0\ngpu h node=0 rank=1\n");
    let cases = [
        ("link g h kind=nvlink count=4 gen=4 bw=1e999", 39, "`bw=1e999` is not a number"),
        (
            "link g h kind=nvlink count=4 gen=4 bw=2e6",
            39,
            "`bw=2e6` is more than the 1000000 a link may have",
        ),
        (
            "link g h kind=nvlink count=4 gen=4 lat=1e300",
            40,
            "`lat=1e300` is more than the 1000000 a link may have",
        ),
        ("link g h kind=nvlink count=4294967296 gen=4", 28, "`4294967296` is too large"),
        (
            "link g h kind=nvlink count=4294967295 gen=4",
            15,
            "these numbers make a nominal bandwidth of 114085068773.4375 GB/s, more than the 1000000 a link may have",
        ),
        ("gpu x node=99999999999999999999 rank=2", 12, "is too large"),
    ];
    for (line, col, want) in cases {
        match timed(&format!("{h}{line}\n"), Duration::from_secs(1)) {
            Err(TopoError::Parse {
                line: 5,
                col: c,
                message,
                ..
            }) => {
                assert_eq!(c, col, "{line}: {message}");
                assert!(message.contains(want), "{line}: {message}");
            }
            other => panic!("{line}: {other:?}"),
        }
    }
}

#[test]
fn thousands_of_gpus_in_one_node_are_checked_in_linear_time() {
    // Searching routes from every GPU took 24 s for nvswitch:4096 and 31 s for 4000 GPUs
    // on a chain of 4000 PCIe switches.
    let start = Instant::now();
    assert_eq!(topo("nvswitch:4096").n_ranks(), 4096);
    assert!(start.elapsed() < Duration::from_secs(8));
    let mut text = format!("{HEADER}\nnode 0\n");
    for i in 0..4000 {
        text.push_str(&format!(
            "pcie-switch s{i} node=0\ngpu g{i} node=0 rank={i}\nlink g{i} s{i} kind=pcie gen=5 width=16\n"
        ));
        if i > 0 {
            text.push_str(&format!("link s{} s{i} kind=pcie gen=5 width=16\n", i - 1));
        }
    }
    assert_eq!(
        timed(&text, Duration::from_secs(8)).unwrap().n_ranks(),
        4000
    );
}

#[test]
fn files_are_read_up_to_a_size_and_as_utf8_with_positions() {
    let dir = std::env::temp_dir().join(format!("braid-topo-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("latin1.topo");
    let mut bytes = format!("{HEADER}\nnode 0\ngpu g node=0 rank=0 model=").into_bytes();
    bytes.extend_from_slice(b"caf\xe9\n");
    std::fs::write(&bad, &bytes).unwrap();
    let e = Topology::read_file(&bad).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}:3:30: not UTF-8 text (byte 0xe9); a topology file is text",
            bad.display()
        )
    );
    let big = dir.join("big.topo");
    let file = std::fs::File::create(&big).unwrap();
    file.set_len(MAX_FILE_BYTES + 1).unwrap(); // sparse
    let e = Topology::read_file(&big).unwrap_err();
    assert!(
        e.to_string()
            .ends_with("larger than 67108864 bytes, which no topology needs"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
    // An endless file is cut at the limit, not read forever.
    let zero = std::path::Path::new("/dev/zero");
    if zero.exists() {
        assert!(matches!(
            Topology::read_file(zero),
            Err(TopoError::Io { .. })
        ));
    }
}
