//! The file format: round trips, canonical order, errors with positions.

use super::{file, topo};
use crate::text::HEADER;
use crate::{LinkKind, TopoError, Topology, VertexKind};

#[track_caller]
fn round_trip(t: &Topology) {
    let text = t.to_text();
    let back = Topology::parse_text(t.name(), &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(&back, t);
    assert_eq!(back.to_text(), text);
    assert_eq!(back.fingerprint(), t.fingerprint());
    let annotated = Topology::parse_text("annotated", &t.to_annotated_text()).unwrap();
    assert_eq!(&annotated, t);
}

#[test]
fn every_preset_kind_round_trips() {
    for arg in [
        "nvswitch:1",
        "nvswitch:8",
        "pcie:1",
        "pcie:7",
        "cluster:1x1",
        "cluster:3x8",
    ] {
        round_trip(&topo(arg));
    }
}

const NON_UNIFORM: &str = "# braid topology v1
# Two machines: an 8-GPU HGX and a 2-GPU workstation.
node 0
cpu n0.cpu node=0 numa=0 model=\"Xeon 8480+\"
nvswitch n0.nvs node=0
nic n0.ib0 node=0 numa=0 bus=0000:1a:00.0 dev=mlx5_0
link n0.ib0 n0.cpu kind=pcie gen=5 width=16
";

fn non_uniform() -> String {
    let mut text = NON_UNIFORM.to_string();
    for local in 0..8 {
        text += &format!(
            "gpu n0.gpu{local} node=0 rank={local} numa=0 model=\"NVIDIA H200\"\n\
             link n0.gpu{local} n0.nvs kind=nvlink count=18 gen=4\n\
             link n0.gpu{local} n0.cpu kind=pcie gen=5 width=16\n"
        );
    }
    text += "node 1
cpu n1.cpu node=1 numa=0
gpu n1.gpu0 node=1 rank=8   # a comment after a statement
gpu n1.gpu1 node=1 rank=9
nic n1.eth node=1 dev=eth0
link n1.gpu0 n1.cpu kind=pcie gen=4 width=16
link n1.gpu1 n1.cpu kind=pcie gen=4 width=16
link n1.eth n1.cpu kind=pcie gen=4 width=8

network fabric
link n0.ib0 fabric kind=ib rate=400
link n1.eth fabric kind=roce rate=100 bw=11.5 lat=2.5
";
    text
}

#[test]
fn nodes_of_different_sizes_are_described() {
    let t = file(&non_uniform());
    assert_eq!((t.n_ranks(), t.n_nodes(), t.uniform_g()), (10, 2, None));
    assert_eq!(t.node_sizes(), vec![8, 2]);
    assert_eq!(t.ranks_of_node(1), 8..10);
    assert_eq!(t.node_of(9), 1);
    assert_eq!(t.gpu(3).model.as_deref(), Some("NVIDIA H200"));
    assert_eq!(t.path(0, 8).bandwidth_gbps, 11.5);
    let roce = t
        .links()
        .find(|(_, _, l)| matches!(l.kind, LinkKind::Roce { .. }))
        .unwrap()
        .2;
    assert_eq!((roce.bandwidth_gbps, roce.latency_us), (11.5, 2.5));
    round_trip(&t);
}

#[test]
fn omitted_numbers_take_the_nominal_values() {
    let t = file(&non_uniform());
    let ib = t
        .links()
        .find(|(_, _, l)| matches!(l.kind, LinkKind::InfiniBand { .. }))
        .unwrap()
        .2;
    assert_eq!((ib.bandwidth_gbps, ib.latency_us), (50.0, 1.0));
    assert!(t
        .to_text()
        .contains("link n0.ib0 fabric kind=ib rate=400 bw=50 lat=1\n"));
}

#[test]
fn the_printed_order_is_canonical() {
    // Links and vertices of node 1 first, the network in the middle: the
    // printed form sorts them, and the fingerprint does not see the order.
    let shuffled = "# braid topology v1
node 0
node 1
gpu b node=1 rank=1
network net
nic nb node=1
gpu a node=0 rank=0
nic na node=0
link nb net kind=ib rate=200
link b nb kind=pcie gen=4 width=16
link na net kind=ib rate=200
link a na kind=pcie gen=4 width=16
";
    let t = file(shuffled);
    let expected = format!(
        "{HEADER}

node 0
gpu a node=0 rank=0
nic na node=0
link a na kind=pcie gen=4 width=16 bw=31.504 lat=0.25

node 1
gpu b node=1 rank=1
nic nb node=1
link b nb kind=pcie gen=4 width=16 bw=31.504 lat=0.25

network net
link nb net kind=ib rate=200 bw=25 lat=1
link na net kind=ib rate=200 bw=25 lat=1
"
    );
    assert_eq!(t.to_text(), expected);
    assert_eq!(file(&expected).fingerprint(), t.fingerprint());
}

#[test]
fn quoted_values_survive() {
    let text = format!(
        "{HEADER}\nnode 0\ngpu g node=0 rank=0 model=\"say \\\"hi\\\" \\\\ # not a comment\"\n"
    );
    let t = file(&text);
    assert_eq!(
        t.gpu(0).model.as_deref(),
        Some("say \"hi\" \\ # not a comment")
    );
    round_trip(&t);
}

#[test]
fn fingerprints_tell_machines_apart() {
    let a = topo("nvswitch:8").fingerprint();
    assert_eq!(a.len(), 16);
    assert_eq!(a, topo("nvswitch:8").with_name("other").fingerprint());
    assert_ne!(a, topo("nvswitch:4").fingerprint());
    assert_ne!(
        topo("pcie:8").fingerprint(),
        topo("cluster:1x8").fingerprint()
    );
    // The hash itself is pinned: plans store it, so it must not drift.
    assert_eq!(crate::fingerprint::fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
}

#[test]
fn serde_stores_the_text() {
    let t = topo("cluster:2x2");
    let json = serde_json::to_string(&t).unwrap();
    assert!(json.starts_with("\"# braid topology v1\\n"));
    let back: Topology = serde_json::from_str(&json).unwrap();
    assert_eq!(back, t);
}

/// `text` must fail to parse at `line:col` with a message containing `message`.
#[track_caller]
fn fails(text: &str, line: usize, col: usize, message: &str) {
    match Topology::parse_text("bad.topo", text) {
        Err(TopoError::Parse {
            file,
            line: l,
            col: c,
            message: m,
        }) => {
            assert_eq!(file, "bad.topo");
            assert!(m.contains(message), "message `{m}` lacks `{message}`");
            assert_eq!((l, c), (line, col), "position of `{m}`");
        }
        other => panic!("expected a parse error, got {other:?}"),
    }
}

#[test]
fn header_errors() {
    fails("", 1, 1, "missing header");
    fails("node 0\n", 1, 1, "missing header");
    fails(
        "# a comment\n\n  gpu g node=0 rank=0\n",
        3,
        3,
        "missing header",
    );
    fails(
        "# braid topology v2\nnode 0\n",
        1,
        18,
        "unsupported topology format `v2`",
    );
    fails(&format!("{HEADER}\n"), 1, 1, "no GPU");
}

#[test]
fn statement_errors() {
    let h = HEADER;
    fails(
        &format!("{h}\nnode 0\ngpux g node=0 rank=0\n"),
        3,
        1,
        "unknown statement `gpux`",
    );
    fails(
        &format!("{h}\nnode 1\n"),
        2,
        6,
        "node 1 is out of order: the next node is 0",
    );
    fails(&format!("{h}\nnode\n"), 2, 5, "expected `node <index>`");
    fails(
        &format!("{h}\nnode 0\ngpu g node=0 rank=0 extra\n"),
        3,
        21,
        "names come before key=value",
    );
    fails(
        &format!("{h}\nnode 0\ngpu g h node=0 rank=0\n"),
        3,
        7,
        "unexpected `h`",
    );
    fails(
        &format!("{h}\nnode 0\ngpu g node=0\n"),
        3,
        13,
        "`gpu` needs `rank=`",
    );
    fails(
        &format!("{h}\nnode 0\ngpu g node=0 rank=0 colour=red\n"),
        3,
        21,
        "unknown key `colour` for `gpu`",
    );
    fails(
        &format!("{h}\nnode 0\ngpu g node=0 rank=x\n"),
        3,
        19,
        "`x` is not a non-negative integer",
    );
    fails(
        &format!("{h}\nnode 0\ngpu g node=3 rank=0\n"),
        3,
        12,
        "node 3 is not declared",
    );
    fails(
        &format!("{h}\nnode 0\ngpu g node=0 rank=0 rank=1\n"),
        3,
        21,
        "`rank` is given twice",
    );
    fails(
        &format!("{h}\nnode 0\ngpu g/1 node=0 rank=0\n"),
        3,
        5,
        "bad vertex name `g/1`",
    );
    fails(
        &format!("{h}\nnode 0\ngpu g node=0 rank=0\ncpu g node=0 numa=0\n"),
        4,
        5,
        "declared twice",
    );
    fails(
        &format!("{h}\nnode 0\ngpu g node=0 rank=0 model=\"open\n"),
        3,
        27,
        "unterminated quoted value",
    );
    fails(
        &format!("{h}\nnode 0\nnode=0\n"),
        3,
        1,
        "starts with a statement keyword",
    );
    fails(
        &format!("{h}\nnetwork n node=0\n"),
        2,
        11,
        "unknown key `node` for `network`",
    );
}

#[test]
fn link_errors() {
    let h = format!(
        "{HEADER}\nnode 0\ngpu g node=0 rank=0\ngpu h node=0 rank=1\ncpu c node=0 numa=0\n"
    );
    fails(
        &format!("{h}link g x kind=pcie gen=4 width=16\n"),
        6,
        8,
        "no vertex `x` is declared",
    );
    fails(
        &format!("{h}link g h kind=warp\n"),
        6,
        15,
        "unknown link kind `warp`",
    );
    fails(&format!("{h}link g h\n"), 6, 9, "`link` needs `kind=`");
    fails(
        &format!("{h}link g kind=smp\n"),
        6,
        16,
        "expected `link <a> <b>",
    );
    fails(
        &format!("{h}link g h kind=nvlink count=18 gen=9\n"),
        6,
        15,
        "NVLink generation 9 is unknown",
    );
    fails(
        &format!("{h}link g h kind=pcie gen=4 width=3\n"),
        6,
        15,
        "x3 does not exist",
    );
    fails(
        &format!("{h}link g h kind=pcie gen=4\n"),
        6,
        25,
        "`link` needs `width=`",
    );
    fails(
        &format!("{h}link g h kind=pcie gen=4 width=16 count=2\n"),
        6,
        35,
        "unknown key `count`",
    );
    fails(
        &format!("{h}link g h kind=pcie gen=4 width=16 bw=fast\n"),
        6,
        38,
        "`bw=fast` is not a number",
    );
    fails(
        &format!("{h}link g h kind=pcie gen=4 width=16 bw=0\n"),
        6,
        38,
        "`bw` must be positive",
    );
    fails(
        &format!("{h}link g h kind=pcie gen=4 width=16 lat=-1\n"),
        6,
        39,
        "`lat` must be non-negative",
    );
    fails(
        &format!("{h}link g h kind=pcie gen=4 width=16 lat=inf\n"),
        6,
        39,
        "`lat=inf` is not a number",
    );
    fails(
        &format!("{h}link g g kind=nvlink count=1 gen=4\n"),
        6,
        6,
        "linked to itself",
    );
    fails(
        &format!("{h}link g c kind=nvlink count=1 gen=4\n"),
        6,
        6,
        "cannot attach to cpu `c`",
    );
    fails(
        &format!("{h}link g c kind=smp\n"),
        6,
        6,
        "a smp link cannot attach to gpu `g`",
    );
    fails(
        &format!("{h}link g c kind=pcie gen=4 width=16\nlink c g kind=pcie gen=4 width=16\n"),
        7,
        6,
        "linked twice",
    );
}

#[test]
fn machine_errors_point_at_the_culprit() {
    let h = HEADER;
    fails(
        &format!("{h}\nnode 0\ngpu g node=0 rank=1\n"),
        3,
        5,
        "rank 0 is missing",
    );
    fails(
        &format!("{h}\nnode 0\ngpu g node=0 rank=0\ngpu h node=0 rank=0\nlink g h kind=nvlink count=1 gen=4\n"),
        4,
        5,
        "rank 0 is given to two GPUs",
    );
    fails(
        &format!("{h}\nnode 0\nnode 1\ngpu g node=0 rank=0\n"),
        3,
        1,
        "node 1 has no GPU",
    );
    fails(
        &format!(
            "{h}\nnode 0\nnode 1\ngpu g node=1 rank=0\ngpu h node=0 rank=1\n\
             nic x node=0\nnic y node=1\nnetwork n\nlink h x kind=pcie gen=4 width=16\n\
             link g y kind=pcie gen=4 width=16\nlink x n kind=ib rate=100\nlink y n kind=ib rate=100\n"
        ),
        5,
        5,
        "must be node-major",
    );
    fails(
        &format!("{h}\nnode 0\nnode 1\ngpu g node=0 rank=0\ngpu h node=1 rank=1\nlink g h kind=pcie gen=4 width=16\n"),
        6,
        6,
        "only a network link",
    );
}

#[test]
fn builder_errors_have_no_position() {
    let mut b = crate::TopologyBuilder::new();
    let e = b
        .add_vertex(crate::Vertex {
            name: "g".into(),
            node: None,
            kind: VertexKind::NvSwitch,
        })
        .unwrap_err();
    assert_eq!(e.to_string(), "invalid topology: nvswitch `g` needs a node");
    assert_eq!(
        b.build("empty").unwrap_err().to_string(),
        "invalid topology: the topology has no GPU"
    );
}
