//! The source text a diagnostic shows, with long lines cut to a window.
//!
//! A line longer than [`MAX_SHOWN`] characters is shown as `...` + a window of
//! [`MAX_SHOWN`] characters around what the diagnostic points at + `...`. This keeps the
//! excerpt readable, and keeps miette from seeing a column it cannot format (it panics
//! past column 65535). Lines keep their numbers, and the `[file:line:col]` miette prints
//! keeps the column in the real file.

use crate::diag::SourceFile;
use braid_ir::Span;
use miette::{MietteError, MietteSpanContents, SourceCode, SourceSpan, SpanContents};
use std::sync::Arc;

/// Characters of one source line an excerpt shows at most.
pub const MAX_SHOWN: usize = 120;
/// How far left of the point of interest a cut line's window starts.
const LEAD: usize = 40;
const MARK: &str = "...";

/// The text miette renders for one diagnostic, and its labels' spans in that text.
pub(crate) struct Excerpt {
    name: String,
    text: Arc<str>,
    pub spans: Vec<Span>,
    /// For each label start in `text`, its column (0-based, in bytes as miette counts)
    /// in the real file.
    columns: Vec<(usize, usize)>,
}

/// One line of the real file, with the window shown of it if it is cut.
struct Line {
    start: usize,
    end: usize,
    /// Byte range shown, when the line is cut.
    window: Option<(usize, usize)>,
    /// Where the line starts in the excerpt text.
    shown_at: usize,
}

impl Excerpt {
    /// The excerpt for labels at `labels` (primary first) in `source`.
    pub(crate) fn new(source: &SourceFile, labels: &[Span]) -> Excerpt {
        let text = &source.text;
        let plain = Excerpt {
            name: source.name.clone(),
            text: text.clone(),
            spans: labels.to_vec(),
            columns: Vec::new(),
        };
        if !text
            .split('\n')
            .any(|l| l.len() > MAX_SHOWN && l.chars().count() > MAX_SHOWN)
        {
            return plain;
        }
        let mut lines = Vec::new();
        let mut out = String::with_capacity(text.len().min(1 << 20));
        let mut start = 0;
        for raw in text.split('\n') {
            let end = start + raw.len();
            let window = (raw.chars().count() > MAX_SHOWN).then(|| window(raw, start, labels));
            let shown_at = out.len();
            match window {
                Some((a, b)) => {
                    if a > start {
                        out.push_str(MARK);
                    }
                    out.push_str(&text[a..b]);
                    if b < end {
                        out.push_str(MARK);
                    }
                }
                None => out.push_str(raw),
            }
            lines.push(Line {
                start,
                end,
                window,
                shown_at,
            });
            out.push('\n');
            start = end + 1;
        }
        out.pop(); // the '\n' after the last line, which the file does not have
        let map = |offset: usize| shown_offset(&lines, offset);
        let spans = labels
            .iter()
            .map(|s| {
                let a = map(s.start as usize);
                Span::new(a, map(s.end as usize).max(a))
            })
            .collect::<Vec<_>>();
        let columns = labels
            .iter()
            .zip(&spans)
            .map(|(real, shown)| {
                let at = real.start as usize;
                let line = &lines[line_of(&lines, at)];
                (shown.start as usize, at - line.start)
            })
            .collect();
        Excerpt {
            spans,
            columns,
            text: out.into(),
            ..plain
        }
    }
}

/// The byte window shown of a long line starting at `start`: around the first label that
/// starts on it, else around the end of a label that ends on it, else its beginning.
fn window(line: &str, start: usize, labels: &[Span]) -> (usize, usize) {
    let end = start + line.len();
    let on_line = |o: u32| (start..=end).contains(&(o as usize));
    let anchor = labels
        .iter()
        .find(|s| on_line(s.start))
        .map(|s| s.start)
        .or_else(|| labels.iter().find(|s| on_line(s.end)).map(|s| s.end))
        .map_or(0, |o| o as usize - start);
    // Work in characters: the window must not split one.
    let col = line[..anchor].chars().count();
    let total = line.chars().count();
    let first = col.saturating_sub(LEAD).min(total - MAX_SHOWN);
    let byte_at = |c: usize| line.char_indices().nth(c).map_or(line.len(), |(i, _)| i);
    (start + byte_at(first), start + byte_at(first + MAX_SHOWN))
}

fn line_of(lines: &[Line], offset: usize) -> usize {
    lines
        .partition_point(|l| l.start <= offset)
        .saturating_sub(1)
}

/// Where a byte offset of the real file lands in the excerpt: offsets outside a cut
/// line's window land on its nearest edge.
fn shown_offset(lines: &[Line], offset: usize) -> usize {
    let line = &lines[line_of(lines, offset)];
    let offset = offset.min(line.end + 1);
    match line.window {
        None => line.shown_at + (offset - line.start),
        Some((a, b)) => {
            let lead = if a > line.start { MARK.len() } else { 0 };
            line.shown_at + lead + offset.clamp(a, b) - a
        }
    }
}

impl SourceCode for Excerpt {
    fn read_span<'a>(
        &'a self,
        span: &SourceSpan,
        context_lines_before: usize,
        context_lines_after: usize,
    ) -> Result<Box<dyn SpanContents<'a> + 'a>, MietteError> {
        let c = self
            .text
            .read_span(span, context_lines_before, context_lines_after)?;
        // miette reads a label's own span (no context) for the `[file:line:col]` header.
        let column = match self.columns.iter().find(|(at, _)| *at == span.offset()) {
            Some((_, col)) if context_lines_before == 0 => *col,
            _ => c.column(),
        };
        Ok(Box::new(MietteSpanContents::new_named(
            self.name.clone(),
            c.data(),
            *c.span(),
            c.line(),
            column,
            c.line_count(),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_lines_are_shown_as_they_are() {
        let src = SourceFile::new("f", "ab\ncd");
        let e = Excerpt::new(&src, &[Span::new(3, 4)]);
        assert_eq!(&*e.text, "ab\ncd");
        assert_eq!(e.spans, vec![Span::new(3, 4)]);
    }

    #[test]
    fn a_long_line_is_cut_around_the_label() {
        let long = format!("{}X{}", "a".repeat(100_000), "b".repeat(100_000));
        let src = SourceFile::new("f", format!("first\n{long}\nlast"));
        let at = 6 + 100_000;
        let e = Excerpt::new(&src, &[Span::new(at, at + 1)]);
        let lines: Vec<&str> = e.text.split('\n').collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0], "first");
        assert_eq!(lines[2], "last");
        assert!(
            lines[1].starts_with("...a") && lines[1].ends_with("b..."),
            "{}",
            lines[1]
        );
        assert_eq!(lines[1].len(), MAX_SHOWN + 2 * MARK.len());
        let s = e.spans[0];
        assert_eq!(&e.text[s.start as usize..s.end as usize], "X");
        assert_eq!(e.columns, vec![(s.start as usize, 100_000)]);
    }

    #[test]
    fn labels_outside_the_window_are_clamped_to_it() {
        let long = "x".repeat(10_000);
        let src = SourceFile::new("f", format!("{long}\n"));
        let e = Excerpt::new(&src, &[Span::new(9_000, 9_001), Span::new(0, 10_000)]);
        let shown = e.text.len();
        for s in &e.spans {
            assert!(s.start <= s.end && (s.end as usize) <= shown, "{s:?}");
        }
        assert!(e.text.starts_with("...x") && e.text.ends_with("x...\n"));
    }

    #[test]
    fn multibyte_characters_are_not_split() {
        let long = "é".repeat(1_000);
        let src = SourceFile::new("f", long.clone());
        let e = Excerpt::new(&src, &[Span::new(1_000, 1_002)]);
        assert!(e.text.starts_with("...é"));
        assert_eq!(e.text.chars().filter(|c| *c == 'é').count(), MAX_SHOWN);
    }
}
