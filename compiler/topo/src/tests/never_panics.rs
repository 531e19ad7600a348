//! The reader takes files from anywhere: on mutated real files, token soup and arbitrary
//! text it returns a topology (which then prints and reads back the same) or an error
//! with a position, and never panics.

use proptest::prelude::*;

use super::topo;
use crate::{TopoError, Topology};

fn seeds() -> Vec<String> {
    let mut s: Vec<String> = ["cluster:2x2", "pcie:3", "nvswitch:2"]
        .iter()
        .map(|a| topo(a).to_text())
        .collect();
    s.push(include_str!("../../../../tests/topologies/uneven_2_1.topo").to_string());
    s
}

/// Values on or past some limit, or otherwise odd.
const VALUES: &[&str] = &[
    "0",
    "1",
    "-1",
    "4095",
    "4096",
    "4294967295",
    "4294967296",
    "99999999999999999999",
    "",
    "1e6",
    "1e7",
    "1e999",
    "inf",
    "NaN",
    "-0",
    "0.0000001",
    "\"a b\"",
    "\"",
    "\"\\q\"",
    "é",
    "nvlink",
    "pcie",
    "ib",
    "n0.gpu0",
];

const TOKENS: &[&str] = &[
    "node 0",
    "node 1",
    "gpu",
    "nic",
    "network net",
    "link",
    " kind=nvlink",
    " count=18",
    " gen=4",
    " width=16",
    " rate=400",
    " rank=0",
    " node=0",
    " numa=0",
    " bw=50",
    " lat=1",
    "=",
    "#",
    "\"",
    "\n",
    " ",
    "# braid topology v1\n",
    "# braid topology v2\n",
];

#[derive(Clone, Debug)]
enum Edit {
    Value(usize, usize),
    Delete(f64, usize),
    Duplicate(f64, usize),
    Insert(f64, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        3 => (0usize..200, 0..VALUES.len()).prop_map(|(a, v)| Edit::Value(a, v)),
        1 => (0.0..1.0, 1usize..40).prop_map(|(at, n)| Edit::Delete(at, n)),
        1 => (0.0..1.0, 1usize..200).prop_map(|(at, n)| Edit::Duplicate(at, n)),
        1 => (0.0..1.0, 0..TOKENS.len()).prop_map(|(at, t)| Edit::Insert(at, t)),
    ]
}

fn boundary(text: &str, at: f64) -> usize {
    let mut i = ((text.len() as f64) * at) as usize;
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn apply(text: &mut String, e: &Edit) {
    let span = |text: &String, at: f64, n: usize| {
        let i = boundary(text, at);
        let j = boundary(text, ((i + n) as f64 / text.len().max(1) as f64).min(1.0));
        (i, j.max(i))
    };
    match *e {
        Edit::Value(a, v) => {
            let starts: Vec<usize> = text.match_indices('=').map(|(i, _)| i + 1).collect();
            if starts.is_empty() {
                return;
            }
            let start = starts[a % starts.len()];
            let len = text[start..]
                .find(|c: char| c.is_whitespace())
                .unwrap_or(text.len() - start);
            text.replace_range(start..start + len, VALUES[v]);
        }
        Edit::Delete(at, n) => {
            let (i, j) = span(text, at, n);
            text.replace_range(i..j, "");
        }
        Edit::Duplicate(at, n) => {
            let (i, j) = span(text, at, n);
            let piece = text[i..j].to_string();
            text.insert_str(i, &piece);
        }
        Edit::Insert(at, t) => {
            let i = boundary(text, at);
            text.insert_str(i, TOKENS[t]);
        }
    }
}

fn exercise(text: &str) -> Result<(), TestCaseError> {
    match Topology::parse_text("fuzz.topo", text) {
        Ok(t) => {
            let back = Topology::parse_text("fuzz.topo", &t.to_text());
            prop_assert_eq!(back.as_ref(), Ok(&t));
            let _ = t.summary();
        }
        Err(TopoError::Parse { line, col, .. }) => {
            prop_assert!(line >= 1 && col >= 1);
        }
        Err(other) => prop_assert!(false, "not a parse error: {other}"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn mutated_files_never_panic(seed in 0usize..4, edits in prop::collection::vec(edit(), 1..6)) {
        let mut text = seeds()[seed].clone();
        for e in &edits {
            apply(&mut text, e);
        }
        exercise(&text)?;
    }

    #[test]
    fn token_soup_never_panics(tokens in prop::collection::vec(0..TOKENS.len(), 0..60)) {
        let text: String = tokens.iter().map(|&t| TOKENS[t]).collect();
        exercise(&text)?;
    }

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,300}") {
        exercise(&text)?;
    }
}
