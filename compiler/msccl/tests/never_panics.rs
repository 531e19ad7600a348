//! The importer takes files from anywhere: on mutated corpus files and on token soup it
//! answers (a plan, or errors with positions), never panics; an imported plan goes through
//! the verifier, the XML rendering of its findings and the exporter without panicking.

use proptest::prelude::*;
use std::path::Path;

/// Small real files, the seeds of the mutations.
fn seeds() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/msccl");
    [
        "corpus/msccl-tools-examples/allreduce_ring_2r_1i.xml",
        "corpus/msccl-tools-examples/allgather_ring_2r_1ch_2i.xml",
        "corpus/msccl-tools-examples/allreduce_1step_2r_LL.xml",
        "bad/duplicate_tb_id.xml",
    ]
    .iter()
    .map(|f| std::fs::read_to_string(root.join(f)).unwrap())
    .collect()
}

/// Attribute values that sit on or past some limit.
const VALUES: &[&str] = &[
    "-1",
    "0",
    "1",
    "2",
    "32",
    "33",
    "65536",
    "65537",
    "4294967295",
    "4294967296",
    "-9223372036854775808",
    "99999999999999999999",
    "",
    " 1 ",
    "1e9",
    "0x10",
    "é",
    "&amp;",
    "&#0;",
    "&bogus;",
    "s",
    "i",
    "o",
    "nop",
    "rrcs",
    "reducescatter",
    "LL128",
];

const TOKENS: &[&str] = &[
    "<algo",
    "<gpu",
    "<tb",
    "<step",
    "<copy",
    ">",
    "/>",
    "</algo>",
    "</gpu>",
    "</tb>",
    "</step>",
    " ngpus=\"2\"",
    " nchunksperloop=\"2\"",
    " nchannels=\"1\"",
    " coll=\"allreduce\"",
    " proto=\"Simple\"",
    " inplace=\"0\"",
    " outofplace=\"1\"",
    " id=\"0\"",
    " id=\"1\"",
    " s=\"0\"",
    " s=\"1\"",
    " type=\"s\"",
    " type=\"r\"",
    " send=\"1\"",
    " recv=\"0\"",
    " chan=\"0\"",
    " cnt=\"1\"",
    " srcbuf=\"i\"",
    " dstbuf=\"o\"",
    " srcoff=\"0\"",
    " dstoff=\"1\"",
    " i_chunks=\"2\"",
    " o_chunks=\"2\"",
    " s_chunks=\"4294967295\"",
    " depid=\"0\"",
    " deps=\"0\"",
    "\n",
    "<!--",
    "-->",
    "<?xml version=\"1.0\"?>",
    "\"",
    "=",
    "é",
];

/// One edit of a text, at a position given as a fraction of its length.
#[derive(Clone, Debug)]
enum Edit {
    /// Replace the value of the n-th attribute (`="..."`) by one of [`VALUES`].
    Value(usize, usize),
    Delete(f64, usize),
    Duplicate(f64, usize),
    Insert(f64, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        4 => (0usize..400, 0..VALUES.len()).prop_map(|(a, v)| Edit::Value(a, v)),
        1 => (0.0..1.0, 1usize..40).prop_map(|(at, n)| Edit::Delete(at, n)),
        1 => (0.0..1.0, 1usize..200).prop_map(|(at, n)| Edit::Duplicate(at, n)),
        1 => (0.0..1.0, 0..TOKENS.len()).prop_map(|(at, t)| Edit::Insert(at, t)),
    ]
}

/// The largest char boundary at or before `at * len`.
fn boundary(text: &str, at: f64) -> usize {
    let mut i = ((text.len() as f64) * at) as usize;
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn apply(text: &mut String, e: &Edit) {
    match *e {
        Edit::Value(a, v) => {
            let starts: Vec<usize> = text.match_indices("=\"").map(|(i, _)| i + 2).collect();
            if starts.is_empty() {
                return;
            }
            let start = starts[a % starts.len()];
            let Some(len) = text[start..].find('"') else {
                return;
            };
            text.replace_range(start..start + len, VALUES[v]);
        }
        Edit::Delete(at, n) => {
            let i = boundary(text, at);
            let j = boundary(text, ((i + n) as f64 / text.len().max(1) as f64).min(1.0));
            text.replace_range(i..j.max(i), "");
        }
        Edit::Duplicate(at, n) => {
            let i = boundary(text, at);
            let j = boundary(text, ((i + n) as f64 / text.len().max(1) as f64).min(1.0));
            let piece = text[i..j.max(i)].to_string();
            text.insert_str(i, &piece);
        }
        Edit::Insert(at, t) => {
            let i = boundary(text, at);
            text.insert_str(i, TOKENS[t]);
        }
    }
}

/// Everything downstream of an import must answer too.
fn exercise(text: &str) {
    match braid_msccl::import_with_lines(text, "fuzz.xml") {
        Err(errors) => {
            assert!(!errors.is_empty());
            for e in &errors {
                assert!(e.pos.line >= 1 && e.pos.col >= 1, "{e}");
            }
            braid_msccl::render_errors(&errors, "fuzz.xml");
        }
        Ok((plan, index)) => {
            if let Err(d) = braid_plan::verify(&plan) {
                braid_msccl::render_for_xml(&d, &index, "fuzz.xml");
            }
            let _ = braid_msccl::export(&plan);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn mutated_corpus_files_never_panic(
        seed in 0usize..4,
        edits in prop::collection::vec(edit(), 1..6),
    ) {
        let mut text = seeds()[seed].clone();
        for e in &edits {
            apply(&mut text, e);
        }
        exercise(&text);
    }

    #[test]
    fn token_soup_never_panics(tokens in prop::collection::vec(0..TOKENS.len(), 0..80)) {
        let text: String = tokens.iter().map(|&t| TOKENS[t]).collect();
        exercise(&text);
    }

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
        exercise(&text);
    }
}
