//! Hostile input to the front end: very long lines, deep nesting, floods of errors. Each
//! must end quickly in an ordinary diagnostic (file:line:col, excerpt), never in a panic
//! or a stack overflow. Everything runs on a thread with a 2 MiB stack (what Rust gives
//! test threads), in a debug build: the worst case for stack use.

use braid_lang::limits::{MAX_BLOCK_DEPTH, MAX_EXPR_DEPTH, MAX_PAREN_DEPTH};
use braid_lang::{parse_and_check, render, Diagnostic, SourceFile};
use std::time::{Duration, Instant};

/// Generous: the real times are milliseconds, but debug builds on a loaded machine vary.
const FAST: Duration = Duration::from_secs(5);

/// Parses, checks and renders `text` on a 2 MiB stack; returns the diagnostics and the
/// rendered text.
fn front_end(text: String) -> (Vec<Diagnostic>, String) {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let start = Instant::now();
            let (_, diags) = parse_and_check(&text);
            let shown = render(&diags, &SourceFile::new("hostile.braid", text.as_str()));
            assert!(start.elapsed() < FAST, "took {:?}", start.elapsed());
            (diags, shown)
        })
        .expect("thread starts")
        .join()
        .expect("no panic")
}

fn program(body: &str) -> String {
    format!("algorithm a : allreduce {{\n    {body}\n}}\n")
}

fn only(diags: &[Diagnostic], code: &str) -> Diagnostic {
    assert_eq!(diags.len(), 1, "{diags:#?}");
    assert_eq!(diags[0].code, code, "{diags:#?}");
    diags[0].clone()
}

#[test]
fn an_error_past_column_65535_is_shown_cut_around_its_column() {
    let pad = " ".repeat(70_000);
    let (diags, shown) = front_end(program(&format!("let x = {pad}y;")));
    only(&diags, "unknown-name");
    let col = 4 + "let x = ".len() + 70_000 + 1;
    let first = shown.lines().next().unwrap();
    assert_eq!(first, format!("error[unknown-name]: hostile.braid:2:{col}"));
    assert!(
        shown.contains(&format!("[hostile.braid:2:{col}]")),
        "{shown}"
    );
    let excerpt = shown.lines().find(|l| l.starts_with(" 2 │")).unwrap();
    assert!(
        excerpt.contains("...") && excerpt.ends_with("y;"),
        "{excerpt}"
    );
    assert!(excerpt.chars().count() < 200, "{excerpt}");
    assert!(shown.contains("not defined here"), "{shown}");
}

#[test]
fn every_long_line_of_an_excerpt_is_cut() {
    // Two labels on two long lines (a duplicated algorithm name).
    let name = "a".repeat(70_000);
    let text = format!("algorithm {name} : allreduce {{ }}\nalgorithm {name} : allreduce {{ }}\n");
    let (diags, shown) = front_end(text);
    only(&diags, "duplicate-algorithm");
    assert!(
        shown.starts_with("error[duplicate-algorithm]: hostile.braid:2:11\n"),
        "{shown}"
    );
    // The message quotes the name: cut in the middle, as the source lines are.
    assert!(shown.len() < 3_000, "{shown}");
    assert!(shown.contains("aaa ...\n"), "{shown}");
}

#[test]
fn deep_parentheses_are_refused_before_parsing() {
    let text = program(&format!("let x = {}1{};", "(".repeat(900), ")".repeat(900)));
    let (diags, shown) = front_end(text);
    let d = only(&diags, "too-deep");
    assert!(
        d.message
            .contains(&format!("nest more than {MAX_PAREN_DEPTH} deep")),
        "{}",
        d.message
    );
    let col = 4 + "let x = ".len() + MAX_PAREN_DEPTH + 1;
    assert!(
        shown.starts_with(&format!("error[too-deep]: hostile.braid:2:{col}\n")),
        "{shown}"
    );
}

#[test]
fn deep_calls_and_brackets_count_as_parentheses() {
    let calls = format!("let x = {}0{};", "min(0, ".repeat(200), ")".repeat(200));
    only(&front_end(program(&calls)).0, "too-deep");
    let index = format!(
        "copy out[0][{}0{}] <- in[0][0];",
        "(".repeat(100),
        ")".repeat(100)
    );
    only(&front_end(program(&index)).0, "too-deep");
}

#[test]
fn deeply_nested_loops_are_refused_before_parsing() {
    let mut body = String::new();
    for i in 0..5000 {
        body.push_str(&format!("for i{i} in 0 .. 1 {{ "));
    }
    body.push_str(&"} ".repeat(5000));
    let (diags, shown) = front_end(program(&body));
    let d = only(&diags, "too-deep");
    assert!(
        d.message
            .contains(&format!("blocks nest more than {MAX_BLOCK_DEPTH} deep")),
        "{}",
        d.message
    );
    assert!(
        shown.starts_with("error[too-deep]: hostile.braid:2:"),
        "{shown}"
    );
}

#[test]
fn long_operator_chains_are_refused_while_building_the_tree() {
    for body in [
        format!("let x = {}1;", "-".repeat(50_000)),
        format!("let x = {}1;", "! ".repeat(5_000)),
        format!("let x = 1{};", " + 1".repeat(5_000)),
        format!("let x = 1{};", " * -1".repeat(5_000)),
    ] {
        let (diags, shown) = front_end(program(&body));
        let d = only(&diags, "too-deep");
        assert!(
            d.message
                .contains(&format!("more than {MAX_EXPR_DEPTH} operators deep")),
            "{}",
            d.message
        );
        assert!(
            shown.starts_with("error[too-deep]: hostile.braid:2:"),
            "{shown}"
        );
    }
}

#[test]
fn programs_at_every_limit_are_accepted() {
    // Blocks at their limit, the innermost holding a statement whose expression nests
    // parentheses and operators to theirs.
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
    body.push_str(&format!("let y = {e}; copy out[0][{e}] <- in[0][0];"));
    body.push_str(&"} } ".repeat(half));
    let (diags, _) = front_end(program(&body));
    assert!(diags.is_empty(), "{diags:#?}");
}

#[test]
fn a_flood_of_errors_is_rendered_in_part_and_counted() {
    let body = "let x = y;\n    ".repeat(5_000);
    let (diags, shown) = front_end(program(&body));
    assert_eq!(diags.len(), 5_000);
    let shown_errors = shown.lines().filter(|l| l.starts_with("error[")).count();
    assert_eq!(shown_errors, braid_lang::diag::MAX_RENDERED);
    assert!(
        shown.ends_with(&format!(
            "error: {} more errors in hostile.braid are not shown\n",
            5_000 - braid_lang::diag::MAX_RENDERED
        )),
        "{}",
        &shown[shown.len() - 200..]
    );
    // The help lists a few names in scope, not 5,000.
    assert!(
        shown.contains("help: names in scope: x, and the constants"),
        "{shown}"
    );
}
