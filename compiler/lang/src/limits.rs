//! How deep a program may nest, and the scan that enforces it before anything recurses.
//!
//! The parser (pest), the syntax tree builder, the static checks and the evaluator all
//! recurse once per nesting level, so a hostile file (900 parentheses, 5000 nested loops)
//! would overflow the stack. These limits keep every one of them shallow, with room to
//! spare on a 2 MiB thread stack in a debug build (Rust's test threads). Numbers are in
//! docs/language.md ("Limits").
//!
//! Brackets are counted on the raw text, before pest sees it ([`scan_nesting`]); operator
//! chains (`- - - x`, `a + b + c + ...`) parse without recursion and are counted while the
//! syntax tree is built ([`MAX_EXPR_DEPTH`]).

use crate::diag::Diagnostic;
use braid_ir::Span;

/// Parentheses, brackets and call parentheses open at once, in one expression or buffer
/// reference: `((((x))))` is 4.
pub const MAX_PAREN_DEPTH: usize = 32;

/// Blocks (`for` and `if` bodies) open at once, inside an algorithm's body.
pub const MAX_BLOCK_DEPTH: usize = 64;

/// Operators on the path from an expression's root to its deepest leaf: every unary
/// operator, every binary operator of a chain (`a + b + c` is 2) and every call counts one.
pub const MAX_EXPR_DEPTH: usize = 256;

/// Finds the first place where `text` (one parse segment starting at byte `base` of the
/// file) opens more brackets or blocks than allowed. Comments are skipped as the grammar
/// skips them; unbalanced brackets are left to the parser.
pub fn scan_nesting(text: &str, base: usize) -> Option<Diagnostic> {
    let bytes = text.as_bytes();
    let mut parens = 0usize;
    // The algorithm's own `{` is depth 1; its body's blocks start at 2.
    let mut braces = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < bytes.len() && !(bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                i += 2;
                continue;
            }
            b'(' | b'[' => {
                parens += 1;
                if parens > MAX_PAREN_DEPTH {
                    return Some(too_deep(
                        base + i,
                        format!("parentheses and brackets nest more than {MAX_PAREN_DEPTH} deep"),
                        format!("bracket {parens} levels deep"),
                    ));
                }
            }
            b')' | b']' => parens = parens.saturating_sub(1),
            b'{' => {
                braces += 1;
                if braces > MAX_BLOCK_DEPTH + 1 {
                    return Some(too_deep(
                        base + i,
                        format!("blocks nest more than {MAX_BLOCK_DEPTH} deep"),
                        format!("block {} levels deep", braces - 1),
                    ));
                }
            }
            b'}' => braces = braces.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    None
}

fn too_deep(at: usize, message: String, label: String) -> Diagnostic {
    Diagnostic::new("too-deep", message)
        .with_label(Span::new(at, at + 1), label)
        .with_help("split the code: bind parts of an expression with `let`, or flatten loops")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_brackets_and_blocks_outside_comments() {
        let ok = format!(
            "{}x{}",
            "(".repeat(MAX_PAREN_DEPTH),
            ")".repeat(MAX_PAREN_DEPTH)
        );
        assert!(scan_nesting(&ok, 0).is_none());
        let deep = format!("a[{}", "(".repeat(MAX_PAREN_DEPTH));
        let d = scan_nesting(&deep, 10).expect("too deep");
        assert_eq!(d.code, "too-deep");
        assert_eq!(
            d.primary_span(),
            Some(Span::new(10 + deep.len() - 1, 10 + deep.len()))
        );
        let commented = format!("// {}\n/* {} */", "(".repeat(100), "{".repeat(100));
        assert!(scan_nesting(&commented, 0).is_none());
        let blocks = "{".repeat(MAX_BLOCK_DEPTH + 1);
        assert!(scan_nesting(&blocks, 0).is_none());
        let d = scan_nesting(&format!("{blocks}{{"), 0).expect("too deep");
        assert!(d.message.contains("blocks nest"), "{}", d.message);
    }
}
