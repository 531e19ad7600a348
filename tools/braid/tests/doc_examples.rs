//! The command examples of README.md and docs/*.md run as tests, so a doc that drifts
//! from the program fails CI.
//!
//! An example is a fenced block whose info string is `console`: a line `$ braid ARGS`
//! runs the built binary from the repository root, and the lines after it, up to the next
//! `$` line or the end of the block, are its output (standard output, then standard
//! error). In the expected output a line `...` stands for any number of lines and `[..]`
//! for any text within a line. The command must exit 0, or the code a trailing
//! `# exits N` on its line names. Blocks with other info strings (`sh`, GPU commands,
//! sketches) are not run.

mod common;

use common::{braid, root};

struct Example {
    file: String,
    line: usize,
    args: Vec<String>,
    exit: i32,
    expected: Vec<String>,
}

fn examples(file: &str, text: &str) -> Vec<Example> {
    let mut out: Vec<Example> = Vec::new();
    let mut in_block = false;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_end();
        if t.starts_with("```") {
            in_block = !in_block && t.trim_start_matches('`').trim() == "console";
            continue;
        }
        if !in_block {
            continue;
        }
        if let Some(cmd) = t.strip_prefix("$ ") {
            let (cmd, exit) = match cmd.split_once("# exits ") {
                Some((c, n)) => (c.trim(), n.trim().parse().expect("# exits N")),
                None => (cmd.trim(), 0),
            };
            let mut words = cmd.split_whitespace().map(String::from);
            assert_eq!(
                words.next().as_deref(),
                Some("braid"),
                "{file}:{}: only `braid` commands run",
                i + 1
            );
            out.push(Example {
                file: file.into(),
                line: i + 1,
                args: words.collect(),
                exit,
                expected: Vec::new(),
            });
        } else if let Some(e) = out.last_mut() {
            e.expected.push(t.to_string());
        }
    }
    out
}

/// Whether `line` matches `pattern`, where `[..]` matches any text.
fn line_matches(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split("[..]").collect();
    if parts.len() == 1 {
        return pattern == line;
    }
    let mut rest = line;
    for (k, p) in parts.iter().enumerate() {
        if k == 0 {
            match rest.strip_prefix(p) {
                Some(r) => rest = r,
                None => return false,
            }
        } else if k == parts.len() - 1 {
            return rest.ends_with(p);
        } else {
            match rest.find(p) {
                Some(at) => rest = &rest[at + p.len()..],
                None => return false,
            }
        }
    }
    true
}

/// Whether `lines` match `pattern`, where a pattern line `...` matches any lines.
fn lines_match(pattern: &[String], lines: &[&str]) -> bool {
    match pattern.split_first() {
        None => lines.is_empty(),
        Some((p, rest)) if p == "..." => (0..=lines.len()).any(|k| lines_match(rest, &lines[k..])),
        Some((p, rest)) => {
            lines.first().is_some_and(|l| line_matches(p, l)) && lines_match(rest, &lines[1..])
        }
    }
}

fn doc_files() -> Vec<String> {
    let mut files = vec!["README.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .flatten()
        .map(|e| format!("docs/{}", e.file_name().to_string_lossy()))
        .filter(|f| f.ends_with(".md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

#[test]
fn every_console_example_in_the_docs_runs_as_shown() {
    let mut ran = 0;
    let mut failures = Vec::new();
    for file in doc_files() {
        let text = std::fs::read_to_string(root().join(&file)).unwrap();
        for ex in examples(&file, &text) {
            let args: Vec<&str> = ex.args.iter().map(String::as_str).collect();
            let out = braid(&args, &[]);
            let combined = format!("{}{}", out.stdout, out.stderr);
            let lines: Vec<&str> = combined.lines().map(str::trim_end).collect();
            let mut expected = ex.expected.clone();
            while expected.last().is_some_and(|l| l.is_empty()) {
                expected.pop();
            }
            if out.code != ex.exit || !lines_match(&expected, &lines) {
                failures.push(format!(
                    "{}:{}: braid {}\n  exit {} (expected {})\n--- expected\n{}\n--- actual\n{}",
                    ex.file,
                    ex.line,
                    ex.args.join(" "),
                    out.code,
                    ex.exit,
                    expected.join("\n"),
                    combined
                ));
            }
            ran += 1;
        }
    }
    assert!(ran >= 10, "only {ran} examples found in the docs");
    assert!(
        failures.is_empty(),
        "{} of {ran} examples differ:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn the_matcher_can_fail() {
    let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(lines_match(&p(&["a", "...", "z"]), &["a", "b", "c", "z"]));
    assert!(!lines_match(&p(&["a", "...", "z"]), &["a", "b"]));
    assert!(line_matches("took [..] ms", "took 12.5 ms"));
    assert!(!line_matches("took [..] ms", "took 12.5 s"));
    assert!(!lines_match(&p(&["x"]), &["x", "y"]));
}
