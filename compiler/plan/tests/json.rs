//! Loading and saving: exact round trips, versioning, and errors with positions.

use braid_ir::{Buf, Collective, ModeSet, Protocol};
use braid_plan::{
    Block, Dep, Origin, Plan, PlanError, RankPlan, Slice, Step, StepKind, Topology, FORMAT_VERSION,
};
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;

fn any_buf() -> impl Strategy<Value = Buf> {
    prop::sample::select(Buf::ALL.to_vec())
}

fn any_slice() -> impl Strategy<Value = Slice> {
    (any_buf(), any::<u32>(), any::<u32>()).prop_map(|(buf, offset, count)| Slice {
        buf,
        offset,
        count,
    })
}

fn any_origin() -> impl Strategy<Value = Origin> {
    (
        any::<u32>(),
        any::<u32>(),
        ".*",
        vec(("[a-z_][a-z0-9_]{0,6}", any::<i64>()), 0..3),
    )
        .prop_map(|(line, col, text, bindings)| Origin {
            line,
            col,
            text,
            bindings,
        })
}

fn any_step() -> impl Strategy<Value = Step> {
    (
        prop::sample::select(StepKind::ALL.to_vec()),
        option::of(any_slice()),
        option::of(any_slice()),
        vec((any::<u32>(), any::<u32>()), 0..3),
        option::of(any_origin()),
    )
        .prop_map(|(kind, src, dst, deps, origin)| Step {
            kind,
            src,
            dst,
            deps: deps
                .into_iter()
                .map(|(block, step)| Dep { block, step })
                .collect(),
            origin,
        })
}

fn any_block() -> impl Strategy<Value = Block> {
    (
        any::<u32>(),
        any::<u32>(),
        option::of(any::<u32>()),
        option::of(any::<u32>()),
        vec(any_step(), 0..4),
    )
        .prop_map(|(id, channel, send_peer, recv_peer, steps)| Block {
            id,
            channel,
            send_peer,
            recv_peer,
            steps,
        })
}

/// Any plan the types can hold, valid or not: the format must carry all of them.
fn any_plan() -> impl Strategy<Value = Plan> {
    let header = (
        ".*",
        prop::sample::select(Collective::ALL.to_vec()),
        any::<u32>(),
        option::of(any::<u32>()),
        (".*", ".*"),
        (any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>()),
        prop::sample::select(vec![
            Protocol::Simple,
            Protocol::Ll,
            Protocol::Ll128,
            Protocol::Auto,
        ]),
        (any::<u32>(), any::<bool>(), any::<bool>(), any::<u32>()),
    );
    let ranks = vec((any::<u32>(), vec(any_block(), 0..3)), 0..3);
    (header, ranks).prop_map(
        |(
            (
                name,
                collective,
                n_ranks,
                root,
                (tn, tf),
                (c, i, o, s),
                protocol,
                (ch, oop, ip, slots),
            ),
            ranks,
        )| Plan {
            format_version: FORMAT_VERSION,
            name,
            collective,
            n_ranks,
            root,
            topology: Topology {
                name: tn,
                fingerprint: tf,
            },
            chunks: c,
            in_chunks: i,
            out_chunks: o,
            scratch_chunks: s,
            protocol,
            channels: ch,
            modes: ModeSet {
                out_of_place: oop,
                in_place: ip,
            },
            slots,
            connections: Vec::new(),
            execution: Default::default(),
            bytes: None,
            ranks: ranks
                .into_iter()
                .map(|(rank, blocks)| RankPlan { rank, blocks })
                .collect(),
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn json_round_trip_is_the_identity(plan in any_plan()) {
        let text = plan.to_json_pretty();
        let back = Plan::from_json(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(&back, &plan);
        prop_assert_eq!(back.to_json_pretty(), text);
    }
}

fn minimal() -> String {
    r#"{"format_version": 1, "name": "x", "collective": "allreduce", "n_ranks": 1,
        "topology": {"name": "t", "fingerprint": "f"}, "chunks": 1, "in_chunks": 1,
        "out_chunks": 1, "scratch_chunks": 0, "protocol": "auto", "channels": 1,
        "modes": {"out_of_place": true, "in_place": false},
        "ranks": [{"rank": 0, "blocks": [{"id": 0, "channel": 0, "steps": [
            {"kind": "cpy", "src": {"buf": "in", "offset": 0, "count": 1},
             "dst": {"buf": "out", "offset": 0, "count": 1}}]}]}]}"#
        .to_string()
}

#[test]
fn optional_fields_take_their_defaults() {
    let p = Plan::from_json(&minimal()).unwrap();
    assert_eq!(p.slots, braid_plan::DEFAULT_SLOTS);
    assert_eq!(p.root, None);
    assert_eq!(p.ranks[0].blocks[0].send_peer, None);
    assert!(braid_plan::verify(&p).is_ok());
}

#[test]
fn other_versions_are_rejected_before_anything_else() {
    let text = minimal().replace(
        "\"format_version\": 1",
        "\"format_version\": 7, \"new_field\": true",
    );
    let e = Plan::from_json(&text).unwrap_err();
    assert_eq!(
        e,
        PlanError::Version {
            found: "7".into(),
            supported: 1
        }
    );
    assert!(e.to_string().contains("unsupported plan format_version 7"));
    let text = minimal().replace("\"format_version\": 1", "\"format_version\": \"1\"");
    assert!(matches!(
        Plan::from_json(&text),
        Err(PlanError::Version { .. })
    ));
    let text = minimal().replace("\"format_version\": 1,", "");
    assert!(matches!(
        Plan::from_json(&text),
        Err(PlanError::MissingVersion { .. })
    ));
}

#[test]
fn shape_errors_carry_line_and_column() {
    let text = minimal().replace("\"kind\": \"cpy\"", "\"kind\": \"copy\"");
    match Plan::from_json(&text) {
        Err(PlanError::Json {
            line,
            column,
            message,
        }) => {
            assert_eq!(line, 6);
            assert!(column > 0);
            assert!(message.contains("unknown variant `copy`"), "{message}");
            assert!(message.contains("`rrcs`"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let text = minimal().replace("\"chunks\": 1,", "\"chunks\": 1, \"chunk\": 2,");
    let e = Plan::from_json(&text).unwrap_err().to_string();
    assert!(
        e.starts_with("2:") && e.contains("unknown field `chunk`"),
        "{e}"
    );
}

#[test]
fn syntax_errors_carry_line_and_column() {
    let e = Plan::from_json("{\n  \"format_version\": 1,\n  \"name\": \n}").unwrap_err();
    assert!(
        matches!(
            e,
            PlanError::Json {
                line: 4,
                column: 1,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(Plan::from_json("").is_err());
    assert!(Plan::from_json("[]").is_err());
}
