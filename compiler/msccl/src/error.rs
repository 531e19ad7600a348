//! Import errors: what is wrong, which XML element, and where in the file.
//!
//! quick-xml reports byte offsets; users want `line:col`, so every error carries a
//! [`Pos`] computed once from the text by [`Lines`].

use std::cell::Cell;
use std::fmt;

/// A 1-based line and column (columns count characters, not bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pos {
    pub line: u32,
    pub col: u32,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

/// Byte offset to line and column, by binary search over the line starts.
///
/// Columns count characters, so a column needs the text between the line's start and the
/// offset. The parser asks for offsets in increasing order, so the last answer is kept and
/// the next one counts on from there: a file whose every element sits on one line costs
/// linear time, not quadratic.
pub(crate) struct Lines<'t> {
    text: &'t str,
    starts: Vec<usize>,
    /// The last offset asked for, its line index and its 0-based column.
    last: Cell<(usize, usize, usize)>,
}

impl<'t> Lines<'t> {
    pub fn new(text: &'t str) -> Lines<'t> {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Lines {
            text,
            starts,
            last: Cell::new((0, 0, 0)),
        }
    }

    pub fn pos(&self, offset: u64) -> Pos {
        let offset = usize::try_from(offset).map_or(self.text.len(), |o| o.min(self.text.len()));
        let line = self.starts.partition_point(|&s| s <= offset) - 1;
        let (last, last_line, last_col) = self.last.get();
        // Count from the previous answer when it lies on this line before `offset`, else
        // from the start of the line.
        let (from, col0) = if last_line == line && last <= offset {
            (last, last_col)
        } else {
            (self.starts[line], 0)
        };
        let col = match self.text.get(from..offset) {
            Some(s) => {
                let col = col0 + s.chars().count();
                self.last.set((offset, line, col));
                col
            }
            // Not on a character boundary (a syntax error inside a character): bytes.
            None => col0 + offset - from,
        };
        Pos {
            line: line as u32 + 1,
            col: col as u32 + 1,
        }
    }
}

/// Longest attribute value quoted in a message: values come from the file, and a label is
/// repeated in every error about the element's children.
const QUOTED_CHARS: usize = 40;

/// `value`, or its first [`QUOTED_CHARS`] characters and `...` when it is longer.
pub(crate) fn shorten(value: &str) -> String {
    match value.char_indices().nth(QUOTED_CHARS) {
        None => value.to_string(),
        Some((cut, _)) => format!("{}...", &value[..cut]),
    }
}

/// One structural problem in an MSCCL XML file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{pos}: error: {element}: {message}")]
pub struct XmlError {
    /// Where the element (or, for syntax errors, the offending byte) starts.
    pub pos: Pos,
    /// The element and its ancestors, e.g. `<step s="3"> of <tb id="1"> of <gpu id="2">`,
    /// or `the file` for problems with no element.
    pub element: String,
    /// One sentence, without the location.
    pub message: String,
}

impl XmlError {
    pub fn new(pos: Pos, element: impl Into<String>, message: impl Into<String>) -> XmlError {
        XmlError {
            pos,
            element: element.into(),
            message: message.into(),
        }
    }
}

/// Every error as `FILE:LINE:COL: error: ELEMENT: MESSAGE`, then a count line.
pub fn render_errors(errors: &[XmlError], file: &str) -> String {
    let mut out = String::new();
    for e in errors {
        out.push_str(&format!("{file}:{e}\n"));
    }
    out.push_str(&format!(
        "{file}: error: MSCCL XML rejected: {} problem{} found\n",
        errors.len(),
        if errors.len() == 1 { "" } else { "s" }
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_become_lines_and_columns() {
        let l = Lines::new("ab\ncd\n\nxé z");
        assert_eq!(l.pos(0), Pos { line: 1, col: 1 });
        assert_eq!(l.pos(4), Pos { line: 2, col: 2 });
        assert_eq!(l.pos(6), Pos { line: 3, col: 1 });
        // `é` is two bytes but one column.
        assert_eq!(l.pos(11), Pos { line: 4, col: 4 });
        assert_eq!(l.pos(999), Pos { line: 4, col: 5 });
    }

    #[test]
    fn answers_do_not_depend_on_the_order_of_questions() {
        let text = "aé b\ncdé\n";
        let l = Lines::new(text);
        let fresh = |o| Lines::new(text).pos(o);
        for o in [5, 1, 3, 0, 8, 6, 10, 4, 4, 11, 7] {
            assert_eq!(l.pos(o), fresh(o), "offset {o}");
        }
    }
}
