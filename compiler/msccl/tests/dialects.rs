//! The dialect rule and the byte-range conversions of docs/msccl.md.

use braid_ir::{Collective, ModeSet};
use braid_msccl::{import, V1_DEFAULT_MAX_BYTES};
use braid_plan::ByteRange;

const BODY: &str = r#"
  <gpu id="0" i_chunks="2" o_chunks="2" s_chunks="0">
    <!-- ForestColl writes comments; TACCL writes <copy>. Both are ignored. -->
    <copy i_off="0" o_off="0"/>
    <tb id="0" send="1" recv="1" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="1" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="r" srcbuf="i" srcoff="1" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
    <tb id="1" send="-1" recv="-1" chan="0">
      <step s="0" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
  <gpu id="1" i_chunks="2" o_chunks="2" s_chunks="0">
    <tb id="0" send="0" recv="0" chan="0">
      <step s="1" type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
    <tb id="1" send="-1" recv="-1" chan="0">
      <step s="0" type="cpy" srcbuf="i" srcoff="1" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
</algo>"#;

fn with(algo: &str) -> String {
    format!("{algo}{BODY}")
}

#[test]
fn v1_defaults_to_an_exclusive_128_mb_bound_and_its_inplace_flag_alone() {
    let p = import(&with(r#"<algo name="a2a" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="alltoall" inplace="0">"#), "f").unwrap();
    assert_eq!(p.collective, Collective::Alltoall);
    assert_eq!(p.modes, ModeSet::OUT_OF_PLACE);
    assert_eq!(
        p.bytes,
        Some(ByteRange {
            min: 0,
            max: Some(V1_DEFAULT_MAX_BYTES)
        })
    );
    assert_eq!(p.execution, braid_plan::Execution::Tiled);
    assert_eq!((p.channels, p.slots), (1, 8));
    // Steps are placed by `s`, not by file order.
    assert_eq!(
        p.ranks[1].blocks[0].steps[0].kind,
        braid_plan::StepKind::Send
    );
    braid_plan::verify(&p).unwrap();
}

#[test]
fn the_executor_dialect_is_told_by_outofplace_and_its_bound_is_inclusive() {
    let p = import(&with(r#"<algo proto="LL" nchannels="1" nchunksperloop="2" ngpus="2" coll="alltoall" inplace="0" outofplace="1" minBytes="64" maxBytes="4095">"#), "named").unwrap();
    assert_eq!(p.name, "named");
    assert_eq!(
        p.bytes,
        Some(ByteRange {
            min: 64,
            max: Some(4096)
        })
    );
    let p = import(&with(r#"<algo proto="LL128" nchannels="1" nchunksperloop="2" ngpus="2" coll="alltoall" inplace="0" outofplace="1" minBytes="0" maxBytes="0">"#), "x").unwrap();
    assert_eq!(
        p.bytes, None,
        "0 = unbounded, and [0, inf) is no range at all"
    );
    let e = import(&with(r#"<algo proto="LL" nchannels="1" nchunksperloop="2" ngpus="2" coll="alltoall" inplace="0" outofplace="1" minBytes="0">"#), "x").unwrap_err();
    assert!(
        e[0].message
            .contains("missing required attribute `maxBytes`"),
        "{e:?}"
    );
}

#[test]
fn both_reduce_scatter_spellings_are_accepted() {
    for coll in ["reduce_scatter", "reducescatter"] {
        let text = format!(
            r#"<algo proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="{coll}" inplace="1"></algo>"#
        );
        // No gpus: the collective is read, then the missing ranks are reported.
        let e = import(&text, "x").unwrap_err();
        assert!(e.iter().all(|e| !e.message.contains("coll=")), "{e:?}");
    }
}
