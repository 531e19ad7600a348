//! Property tests: the front end and the passes never panic or hang, whatever the input.
//! Arbitrary text, token soup, grammar-shaped random programs and mutations of the
//! shipped algorithms all go through parse → check → instantiate → verify → dataflow,
//! and must end in a value (a program or diagnostics).

use braid_ir::{ModeSet, Shape};
use braid_passes::dataflow::Dataflow;
use braid_passes::{failed_conditions, instantiate_within, verify};
use proptest::prelude::*;

fn shapes() -> Vec<Shape> {
    vec![
        Shape::single_node(1),
        Shape::single_node(3),
        Shape::uniform(2, 2),
        Shape {
            n: 5,
            nodes: 2,
            g: None,
        },
    ]
}

/// Runs the whole pipeline; only a panic fails the property.
fn pipeline(text: &str) {
    let (file, diags) = braid_lang::parse_and_check(text);
    let source = braid_lang::SourceFile::new("fuzz.braid", text);
    let _ = braid_lang::render(&diags, &source);
    if !diags.is_empty() {
        return;
    }
    for alg in &file.algorithms {
        for shape in shapes() {
            let root = alg.collective.is_rooted().then_some(shape.n - 1);
            match failed_conditions(alg, &shape, root) {
                Ok(f) if f.is_empty() => {}
                Ok(_) => continue,
                Err(d) => {
                    let _ = braid_lang::render(&d, &source);
                    continue;
                }
            }
            // Keep runaway loops short: the budget error is what we want to reach,
            // quickly (passed as an argument: tests run in parallel threads, and the
            // process environment is not theirs to change).
            match instantiate_within(alg, &shape, root, 20_000) {
                Ok(prog) => {
                    if let Err(d) = verify(&prog, ModeSet::BOTH) {
                        let _ = braid_lang::render(&d, &source);
                    }
                    let flow = Dataflow::build(&prog, braid_ir::Mode::OutOfPlace);
                    let _ = flow.stats(&prog);
                }
                Err(d) => {
                    let _ = braid_lang::render(&d, &source);
                }
            }
        }
    }
}

const TOKENS: &[&str] = &[
    "algorithm",
    "a",
    "b",
    ":",
    "allreduce",
    "allgather",
    "reduce_scatter",
    "alltoall",
    "broadcast",
    "reduce",
    "where",
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    ";",
    ",",
    "chunks",
    "scratch",
    "channels",
    "protocol",
    "ll128",
    "mode",
    "inplace",
    "both",
    "let",
    "for",
    "in",
    "rev",
    "..",
    "step",
    "if",
    "else",
    "copy",
    "<-",
    "out",
    "@ch",
    "N",
    "NODES",
    "G",
    "ROOT",
    "C",
    "K",
    "r",
    "s",
    "0",
    "1",
    "2",
    "-1",
    "0x7fffffffffffffff",
    "+",
    "-",
    "*",
    "/",
    "%",
    "<<",
    ">>",
    "&",
    "|",
    "^",
    "==",
    "<",
    "<=",
    "&&",
    "||",
    "!",
    "min",
    "log2",
    "node",
    "rank",
    "/*",
    "*/",
    "//",
    "\n",
    "=",
];

fn expr(depth: u32) -> BoxedStrategy<String> {
    let leaf = prop_oneof![
        (-3i64..20).prop_map(|v| v.to_string()),
        prop::sample::select(vec!["N", "r", "s", "G", "NODES", "C", "K", "ROOT"])
            .prop_map(String::from),
    ];
    if depth == 0 {
        return leaf.boxed();
    }
    prop_oneof![
        leaf,
        (
            expr(depth - 1),
            prop::sample::select(vec!["+", "-", "*", "/", "%", "<<", "&", "==", "<", "&&"]),
            expr(depth - 1)
        )
            .prop_map(|(a, op, b)| format!("({a} {op} {b})")),
        (
            prop::sample::select(vec!["node", "local", "log2", "ilog2", "pow2"]),
            expr(depth - 1)
        )
            .prop_map(|(f, a)| format!("{f}({a})")),
        (expr(depth - 1), expr(depth - 1)).prop_map(|(a, b)| format!("min({a}, {b})")),
    ]
    .boxed()
}

fn buf_ref() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["in", "out", "scratch"]),
        expr(1),
        expr(1),
        prop::option::of(expr(1)),
    )
        .prop_map(|(b, r, c, hi)| match hi {
            Some(hi) => format!("{b}[{r}][{c} .. {hi}]"),
            None => format!("{b}[{r}][{c}]"),
        })
}

fn stmt(depth: u32) -> BoxedStrategy<String> {
    let op = prop_oneof![
        (buf_ref(), buf_ref()).prop_map(|(d, s)| format!("copy {d} <- {s};")),
        (buf_ref(), buf_ref()).prop_map(|(d, s)| format!("reduce {d} <- {s};")),
        (buf_ref(), buf_ref(), buf_ref()).prop_map(|(d, a, b)| format!("reduce {d} <- {a}, {b};")),
    ];
    if depth == 0 {
        return op.boxed();
    }
    prop_oneof![
        op,
        (
            expr(1),
            expr(1),
            prop::collection::vec(stmt(depth - 1), 0..3)
        )
            .prop_map(|(lo, hi, body)| format!("for r in {lo} .. {hi} {{ {} }}", body.join(" "))),
        (
            expr(1),
            prop::collection::vec(stmt(depth - 1), 0..3),
            prop::collection::vec(stmt(depth - 1), 0..2)
        )
            .prop_map(|(c, a, b)| format!(
                "if {c} {{ {} }} else {{ {} }}",
                a.join(" "),
                b.join(" ")
            )),
        expr(2).prop_map(|e| format!("let s = {e};")),
    ]
    .boxed()
}

fn program() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec![
            "allreduce",
            "allgather",
            "reduce_scatter",
            "alltoall",
            "broadcast",
            "reduce",
        ]),
        prop::option::of(expr(1)),
        prop::option::of(expr(1)),
        prop::collection::vec(stmt(2), 0..5),
    )
        .prop_map(|(c, chunks, scratch, body)| {
            let mut s = format!("algorithm fuzz : {c} {{\n");
            if let Some(e) = chunks {
                s.push_str(&format!("chunks {e};\n"));
            }
            if let Some(e) = scratch {
                s.push_str(&format!("scratch {e};\n"));
            }
            for b in body {
                s.push_str(&b);
                s.push('\n');
            }
            s.push_str("}\n");
            s
        })
}

fn shipped() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../algorithms");
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    v.sort();
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
        pipeline(&text);
    }

    #[test]
    fn token_soup_never_panics(tokens in prop::collection::vec(prop::sample::select(TOKENS), 0..60)) {
        pipeline(&tokens.join(" "));
    }

    #[test]
    fn random_programs_never_panic(text in program()) {
        pipeline(&text);
    }

    #[test]
    fn mutated_algorithms_never_panic(
        which in any::<prop::sample::Index>(),
        cut in any::<prop::sample::Index>(),
        len in 0usize..12,
        insert in prop::sample::select(TOKENS),
    ) {
        let all = shipped();
        let text = which.get(&all);
        let mut chars: Vec<char> = text.chars().collect();
        let at = cut.index(chars.len().max(1)).min(chars.len());
        let end = (at + len).min(chars.len());
        chars.splice(at..end, insert.chars());
        pipeline(&chars.into_iter().collect::<String>());
    }
}
