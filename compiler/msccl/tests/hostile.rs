//! Hostile MSCCL XML: files shaped to make the importer slow or greedy are imported or
//! refused quickly, with an error naming the element and its line.

use braid_msccl::{import, render_errors, XmlError};
use std::time::{Duration, Instant};

/// `<algo>` for one gpu of allgather with C = 1, to which `body` is added.
const ALGO: &str = r#"<algo name="big" proto="Simple" nchannels="1" nchunksperloop="1" ngpus="1" coll="allgather" inplace="0">"#;

/// A valid algorithm with `tbs` threadblocks of `steps` `nop` steps each, all on one line.
fn one_line(tbs: usize, steps: usize) -> String {
    let mut x = format!(r#"{ALGO}<gpu id="0" i_chunks="1" o_chunks="1" s_chunks="0">"#);
    for t in 0..tbs {
        x.push_str(&format!(r#"<tb id="{t}" send="-1" recv="-1" chan="0">"#));
        for s in 0..steps {
            x.push_str(&format!(
                r#"<step s="{s}" type="nop" cnt="0" depid="-1" deps="-1"/>"#
            ));
        }
        x.push_str("</tb>");
    }
    x.push_str("</gpu></algo>\n");
    x
}

/// Imports `text`, failing the test if that takes `bound` or longer.
fn timed(text: &str, bound: Duration) -> Result<braid_plan::Plan, Vec<XmlError>> {
    let start = Instant::now();
    let result = import(text, "hostile.xml");
    let took = start.elapsed();
    assert!(took < bound, "importing took {took:?}, bound {bound:?}");
    result
}

fn rendered(errors: &[XmlError]) -> String {
    render_errors(errors, "hostile.xml")
}

#[test]
fn four_hundred_thousand_steps_on_one_line_import_in_linear_time() {
    // Debug build: about 3 s here (the same text on 400k lines takes as long); the
    // column computation that rescanned the line from its start took 333 s.
    let plan = timed(&one_line(8, 50_000), Duration::from_secs(12)).expect("valid");
    assert_eq!(plan.step_count(), 400_000);
}

#[test]
fn four_hundred_thousand_skipped_elements_on_one_line_import_in_linear_time() {
    // Debug build: 0.15 s here.
    let text = one_line(1, 1).replace("</tb>", &format!("{}</tb>", "<x/>".repeat(400_000)));
    let plan = timed(&text, Duration::from_secs(2)).expect("valid");
    assert_eq!(plan.step_count(), 1);
}

#[test]
fn four_hundred_thousand_misplaced_elements_are_each_named_quickly() {
    let text = one_line(1, 1).replace("</tb>", &format!("{}</tb>", "<tb/>".repeat(400_000)));
    let errors = timed(&text, Duration::from_secs(4)).unwrap_err();
    assert_eq!(errors.len(), 400_000);
    // Columns count on along the one line.
    assert_eq!(errors[1].pos.col - errors[0].pos.col, 5);
    assert!(errors[0].message.contains("misplaced element: <tb>"));
}

#[test]
fn huge_sizes_are_refused_before_anything_is_sized_by_them() {
    // 2 x 4e9 chunks once overflowed the layout's u32 arithmetic (a panic in debug builds).
    for (ngpus, chunks) in [("1", "4000000000"), ("65536", "65536"), ("2", "4294967295")] {
        let text = format!(
            r#"<algo name="a" proto="Simple" nchannels="1" nchunksperloop="{chunks}" ngpus="{ngpus}" coll="allreduce" inplace="0"><gpu id="0" i_chunks="0" o_chunks="0" s_chunks="0"/></algo>"#
        );
        let errors = timed(&text, Duration::from_secs(1)).unwrap_err();
        let out = rendered(&errors);
        assert_eq!(errors.len(), 1, "{out}");
        assert!(
            out.starts_with("hostile.xml:1:1: error: <algo>: ngpus=")
                && out.contains(
                    "chunk locations of in and out, more than the 16777216 braid verifies"
                ),
            "{out}"
        );
    }
    let text =
        format!(r#"{ALGO}<gpu id="0" i_chunks="1" o_chunks="1" s_chunks="4294967295"/></algo>"#);
    let out = rendered(&timed(&text, Duration::from_secs(1)).unwrap_err());
    assert!(
        out.contains(r#"1:105: error: <gpu id="0">: s_chunks="4294967295" on 1 gpus"#),
        "{out}"
    );
    let text = ALGO.replace(r#"nchannels="1""#, r#"nchannels="1000000000""#) + "</algo>";
    let out = rendered(&timed(&text, Duration::from_secs(1)).unwrap_err());
    assert!(
        out.contains(r#"attribute nchannels="1000000000" is out of range (expected 1 to 32)"#),
        "{out}"
    );
}

#[test]
fn high_ids_cost_one_entry_not_a_table_up_to_them() {
    // 16384 gpus, each naming tb 65536 holding step 65536: filling a table up to each id
    // was 2 x 16384 x 65537 entries.
    let mut text = ALGO
        .replace(r#"ngpus="1""#, r#"ngpus="16384""#)
        .replace("allgather", "allreduce");
    for g in 0..16384 {
        text.push_str(&format!(
            r#"<gpu id="{g}" i_chunks="1" o_chunks="1" s_chunks="0"><tb id="65536" send="-1" recv="-1" chan="0"><step s="65536" type="nop" cnt="0"/></tb></gpu>"#
        ));
    }
    text.push_str("</algo>");
    let errors = timed(&text, Duration::from_secs(4)).unwrap_err();
    assert_eq!(errors.len(), 2 * 16384);
    assert!(
        errors[0].message.contains(
            r#"no <tb id="0">, but a tb with a higher id exists; tb ids must be 0..65537"#
        ),
        "{errors:?}"
    );
    assert!(
        errors[1].message.contains(
            r#"no <step s="0">, but a step with a higher s exists; steps must be numbered 0..65537"#
        ),
        "{errors:?}"
    );
}

#[test]
fn missing_gpus_are_one_message() {
    let text = ALGO
        .replace(r#"ngpus="1""#, r#"ngpus="65536""#)
        .replace("allgather", "allreduce")
        + r#"<gpu id="1" i_chunks="1" o_chunks="1" s_chunks="0"/></algo>"#;
    let out = rendered(&timed(&text, Duration::from_secs(1)).unwrap_err());
    assert_eq!(
        out,
        "hostile.xml:1:1: error: <algo>: no <gpu id=\"0\">, but ngpus=\"65536\"\n\
         hostile.xml:1:1: error: <algo>: no <gpu id=\"2\"> to <gpu id=\"65535\">, but ngpus=\"65536\"\n\
         hostile.xml: error: MSCCL XML rejected: 2 problems found\n"
    );
}

#[test]
fn an_element_with_a_hundred_thousand_attributes_is_refused() {
    let attrs: String = (0..100_000).map(|i| format!(" a{i}=\"{i}\"")).collect();
    let text = format!("{ALGO}<gpu id=\"0\"{attrs}/></algo>");
    let out = rendered(&timed(&text, Duration::from_secs(1)).unwrap_err());
    assert_eq!(
        out,
        "hostile.xml:1:105: error: <gpu>: more than 64 attributes; MSCCL elements have about a dozen\n\
         hostile.xml: error: MSCCL XML rejected: 1 problem found\n"
    );
}

#[test]
fn long_values_are_quoted_short() {
    // A valid tb id padded to a megabyte, and 200 steps with a 64 KB bad type: every
    // step's error names the tb, so quoting values whole would make 200 MB of messages.
    let pad = " ".repeat(1 << 20);
    let bad = "x".repeat(1 << 16);
    let mut text = format!(
        r#"{ALGO}<gpu id="0" i_chunks="1" o_chunks="1" s_chunks="0"><tb id="0{pad}" send="-1" recv="-1" chan="0">"#
    );
    for s in 0..200 {
        text.push_str(&format!(r#"<step s="{s}" type="{bad}" cnt="0"/>"#));
    }
    text.push_str("</tb></gpu></algo>");
    let errors = timed(&text, Duration::from_secs(4)).unwrap_err();
    assert_eq!(errors.len(), 200);
    let out = rendered(&errors);
    assert!(out.len() < 200 * 400, "{} bytes of errors", out.len());
    assert!(
        errors[0].to_string().contains(&format!(
            ": error: <step s=\"0\"> of <tb id=\"0{}...\"> of <gpu id=\"0\">: type=\"{}...\" is not an MSCCL step type",
            " ".repeat(39),
            "x".repeat(40)
        )),
        "{}",
        errors[0]
    );
}

#[test]
fn deep_nesting_is_skipped_or_reported_without_recursion() {
    let deep = "<x>".repeat(200_000);
    let text = one_line(1, 1).replace("</tb>", &format!("{deep}{}</tb>", "</x>".repeat(200_000)));
    assert!(timed(&text, Duration::from_secs(2)).is_ok());
    // Never closed: one error at the end of the file naming the open MSCCL elements.
    let text = format!("{ALGO}<gpu id=\"0\">{deep}");
    let out = rendered(&timed(&text, Duration::from_secs(2)).unwrap_err());
    assert!(
        out.contains("the file ends before closing <algo> (line 1), <gpu id=\"0\"> (line 1); is it truncated?"),
        "{out}"
    );
}
