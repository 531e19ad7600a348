//! The Braid schedule language: source text to a checked, typed syntax tree.
//!
//! * [`parser`]: pest grammar (`grammar/braid.pest`) to [`ast`], with syntax errors.
//! * [`check`]: the errors that do not depend on a topology (names, reserved words,
//!   headers, `ROOT` / `K` / `C` misuse, writes to `in`), reported wherever they appear.
//! * [`diag`]: diagnostics as values and their rendering with a source excerpt.
//! * [`limits`]: how deep a program may nest, checked before anything recurses.
//!
//! This crate knows nothing of topologies or of what a program computes: instantiating a
//! program for a shape and verifying it are passes (`braid-passes`).

pub mod ast;
pub mod check;
pub mod diag;
mod excerpt;
pub mod limits;
pub mod names;
pub mod parser;

pub use diag::{render, Diagnostic, SourceFile};

/// Parses and statically checks a file: the syntax tree and every diagnostic found.
/// Algorithms with errors stay in the tree (so that callers can list them), but a caller
/// must not instantiate a file whose diagnostics are not empty.
pub fn parse_and_check(text: &str) -> (ast::File, Vec<Diagnostic>) {
    let (file, mut diags) = parser::parse(text);
    diags.extend(check::check(&file));
    diags.sort_by_key(|d| d.primary_span().map(|s| s.start));
    (file, diags)
}
