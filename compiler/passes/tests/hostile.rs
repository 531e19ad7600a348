//! Hostile programs for instantiation: loops with huge trip counts, nested loops, huge
//! buffers and ranges, 100,000 `let`s, nesting at every limit. Each must end quickly with
//! an ordinary diagnostic pointing at the cause, on a 2 MiB stack in a debug build.
//!
//! This file sets no environment variable: the budget in force is the default one.

use braid_ir::{Mode, ModeSet, Shape};
use braid_lang::ast::{Ident, Stmt};
use braid_lang::limits::{MAX_BLOCK_DEPTH, MAX_EXPR_DEPTH, MAX_PAREN_DEPTH};
use braid_lang::{Diagnostic, SourceFile};
use braid_passes::budget::STEP_BUDGET;
use braid_passes::dataflow::Dataflow;
use braid_passes::{instantiate, instantiate_within, verify};
use std::time::{Duration, Instant};

/// Generous: the real times are milliseconds, but debug builds on a loaded machine vary.
const FAST: Duration = Duration::from_secs(5);

/// Runs `f` on a 2 MiB stack (what Rust gives test threads) and checks it is fast.
fn small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let start = Instant::now();
            let out = f();
            assert!(start.elapsed() < FAST, "took {:?}", start.elapsed());
            out
        })
        .expect("thread starts")
        .join()
        .expect("no panic")
}

fn program(body: &str) -> String {
    format!("algorithm a : allreduce {{\n    {body}\n}}\n")
}

/// Parses, checks and instantiates for 4 ranks within `budget` steps; returns the
/// instantiation's diagnostics rendered.
fn refused(body: &str, budget: u64) -> (Vec<Diagnostic>, String) {
    let text = program(body);
    small_stack(move || {
        let (file, diags) = braid_lang::parse_and_check(&text);
        assert!(diags.is_empty(), "{diags:#?}");
        let diags = instantiate_within(&file.algorithms[0], &Shape::single_node(4), None, budget)
            .expect_err("refused");
        let shown = braid_lang::render(&diags, &SourceFile::new("hostile.braid", text.as_str()));
        (diags, shown)
    })
}

fn too_large(diags: &[Diagnostic]) -> &Diagnostic {
    assert_eq!(diags.len(), 1, "{diags:#?}");
    assert_eq!(diags[0].code, "too-large", "{diags:#?}");
    &diags[0]
}

#[test]
fn a_loop_from_minus_two_to_the_31_is_refused_before_it_runs() {
    let (diags, shown) = refused(
        "for i in -2147483648 .. 1 {\n        copy out[0][0] <- in[0][0];\n    }",
        STEP_BUDGET,
    );
    let d = too_large(&diags);
    assert!(
        d.message
            .contains(&format!("more than {STEP_BUDGET} evaluation steps")),
        "{}",
        d.message
    );
    assert_eq!(d.labels[0].text, "2147483649 iterations × 6 steps");
    assert!(
        shown.starts_with("error[too-large]: hostile.braid:2:5\n"),
        "{shown}"
    );
    assert!(shown.contains("for i in -2147483648 .. 1"), "{shown}");
}

#[test]
fn nested_loops_with_fixed_bounds_are_refused_before_they_run() {
    let (diags, shown) = refused(
        "for i in 0 .. 1 << 20 {\n        for j in 0 .. 1 << 20 { copy out[0][0] <- in[0][0]; }\n    }",
        STEP_BUDGET,
    );
    let d = too_large(&diags);
    assert!(
        d.labels[0].text.ends_with("counting its inner loops"),
        "{d:?}"
    );
    assert!(
        shown.starts_with("error[too-large]: hostile.braid:2:5\n"),
        "{shown}"
    );
}

#[test]
fn loops_whose_work_grows_are_stopped_at_the_budget() {
    // The inner bound changes with `i`: the work is found out while running, and the
    // budget stops it at the inner loop that would go over.
    let (diags, shown) = refused(
        "for i in 0 .. 1000 {\n        for j in 0 .. i { copy out[0][0] <- in[0][0]; }\n    }",
        100_000,
    );
    let d = too_large(&diags);
    assert!(d.notes.iter().any(|n| n.contains("with i = ")), "{d:?}");
    assert!(
        shown.starts_with("error[too-large]: hostile.braid:3:9\n"),
        "{shown}"
    );
}

#[test]
fn huge_buffers_and_ranges_are_refused() {
    let (diags, _) = refused("chunks 1 << 25;", STEP_BUDGET);
    assert!(too_large(&diags).labels[0].text.contains("chunk locations"));
    let (diags, _) = refused(
        "chunks 1 << 20;\n    for i in 0 .. 100 { copy out[0][0 .. C] <- in[0][0 .. C]; }",
        STEP_BUDGET,
    );
    assert_eq!(too_large(&diags).labels[0].text, "writes 1048576 chunks");
}

#[test]
fn a_hundred_thousand_lets_take_linear_time() {
    // Built from a parsed template: parsing 100,000 lines takes seconds in a debug build.
    let lets = |chunk: &str| {
        let text = program(&format!(
            "let a0 = 1; let a1 = a0; for r in 0 .. N {{ copy out[r][0] <- in[r][{chunk}]; }}"
        ));
        let (mut file, diags) = braid_lang::parse_and_check(&text);
        assert!(diags.is_empty(), "{diags:#?}");
        let body = &mut file.algorithms[0].body;
        let template = body[1].clone();
        let copies = (2..100_000).map(|i| match &template {
            Stmt::Let { name, value, span } => Stmt::Let {
                name: Ident {
                    name: format!("a{i}"),
                    span: name.span,
                },
                value: value.clone(),
                span: *span,
            },
            s => panic!("{s:?}"),
        });
        body.splice(2..2, copies);
        file
    };
    let file = lets("a1 - 1");
    let start = Instant::now();
    assert!(braid_lang::check::check(&file).is_empty());
    let prog = instantiate(&file.algorithms[0], &Shape::single_node(4), None).unwrap();
    assert_eq!(prog.ops.len(), 4);
    assert!(start.elapsed() < FAST, "took {:?}", start.elapsed());
    // An error's note shows the loop variable and a few `let`s, not 100,000.
    let diags = instantiate(&lets("a0").algorithms[0], &Shape::single_node(4), None)
        .expect_err("chunk 1 is out of bounds");
    let note = &diags[0].notes[0];
    assert!(
        note.contains("r = 0") && note.contains("99990 earlier `let`s"),
        "{note}"
    );
}

#[test]
fn programs_at_every_nesting_limit_run_through_every_pass() {
    let half = MAX_BLOCK_DEPTH / 2;
    let mut body = String::new();
    for i in 0..half {
        body.push_str(&format!("if 1 {{ for i{i} in 0 .. 1 {{ "));
    }
    let parens = MAX_PAREN_DEPTH - 1; // the `[` of the index is one
    let e = format!(
        "{}0{}{}",
        "-(".repeat(parens),
        " + 0".repeat(MAX_EXPR_DEPTH - parens),
        ")".repeat(parens)
    );
    let calls = format!("{}0{}", "min(".repeat(parens), ", 0)".repeat(parens));
    body.push_str(&format!(
        "let y = {e}; copy out[0][{e}] <- in[0][{calls}]; copy out[1][0] <- in[1][0]; \
         copy out[2][0] <- in[2][0]; copy out[3][0] <- in[3][0];"
    ));
    body.push_str(&"} } ".repeat(half));
    let text = program(&body);
    small_stack(move || {
        let (file, diags) = braid_lang::parse_and_check(&text);
        assert!(diags.is_empty(), "{diags:#?}");
        let alg = &file.algorithms[0];
        let prog = instantiate(alg, &Shape::single_node(4), None).unwrap();
        assert_eq!(prog.ops.len(), 4);
        // Not a correct all-reduce: verification runs to the end and says so.
        assert!(verify(&prog, ModeSet::BOTH).is_err());
        let _ = Dataflow::build(&prog, Mode::OutOfPlace).stats(&prog);
        // Nodes of different sizes: every use of `G` is searched for, through all of it.
        let uneven = Shape {
            n: 5,
            nodes: 2,
            g: None,
        };
        assert!(instantiate(alg, &uneven, None).is_ok());
    });
}

#[test]
fn every_shipped_algorithm_fits_the_budget_many_times_over() {
    // The largest shapes the algorithm tests use (tests/algorithms.rs).
    let shapes = [Shape::single_node(16), Shape::uniform(4, 8)];
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../algorithms");
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "braid") {
            continue;
        }
        let (file, diags) = braid_lang::parse_and_check(&std::fs::read_to_string(&path).unwrap());
        assert!(diags.is_empty());
        for alg in &file.algorithms {
            for shape in &shapes {
                let root = alg.collective.is_rooted().then_some(0);
                if !braid_passes::failed_conditions(alg, shape, root)
                    .unwrap()
                    .is_empty()
                {
                    continue;
                }
                let r = instantiate_within(alg, shape, root, STEP_BUDGET / 64);
                assert!(r.is_ok(), "{} on {shape}: {r:?}", alg.name.name);
            }
        }
    }
}
