//! Diagnostics as values: collected by every pass, rendered once with a source excerpt.
//!
//! Passes return `Vec<Diagnostic>`; nothing prints. [`render`] turns them into the text
//! users see (file:line:col, the source lines, labels), through miette's graphical handler
//! with colours off so that golden files are stable. Long lines are cut to a window
//! around the error (`excerpt`).

use crate::excerpt::Excerpt;
use braid_ir::Span;
use miette::{GraphicalReportHandler, GraphicalTheme, LabeledSpan, SourceSpan};
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

/// A source file as diagnostics see it.
#[derive(Clone, Debug)]
pub struct SourceFile {
    pub name: String,
    pub text: Arc<str>,
}

impl SourceFile {
    pub fn new(name: impl Into<String>, text: impl Into<Arc<str>>) -> SourceFile {
        SourceFile {
            name: name.into(),
            text: text.into(),
        }
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub fn line_col(&self, offset: u32) -> (usize, usize) {
        let offset = (offset as usize).min(self.text.len());
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        (line, before[line_start..].chars().count() + 1)
    }

    /// The text of a span, trimmed to its first line.
    pub fn snippet(&self, span: Span) -> &str {
        let s = &self.text[span.start as usize..span.end as usize];
        s.lines().next().unwrap_or("").trim()
    }
}

/// A labelled span inside a diagnostic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    pub span: Span,
    pub text: String,
}

/// One problem found in a program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// A stable short code (`syntax`, `unknown-name`, `postcondition`, ...) for tools.
    pub code: &'static str,
    pub message: String,
    /// The first label is the primary location.
    pub labels: Vec<Label>,
    pub notes: Vec<String>,
    pub help: Option<String>,
}

impl Diagnostic {
    pub fn new(code: &'static str, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            code,
            message: message.into(),
            labels: Vec::new(),
            notes: Vec::new(),
            help: None,
        }
    }

    pub fn with_label(mut self, span: Span, text: impl Into<String>) -> Diagnostic {
        self.labels.push(Label {
            span,
            text: text.into(),
        });
        self
    }

    pub fn with_note(mut self, note: impl Into<String>) -> Diagnostic {
        self.notes.push(note.into());
        self
    }

    pub fn with_help(mut self, help: impl Into<String>) -> Diagnostic {
        self.help = Some(help.into());
        self
    }

    /// The primary span, if the diagnostic points into the source.
    pub fn primary_span(&self) -> Option<Span> {
        self.labels.first().map(|l| l.span)
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Adapter that lets miette draw one of our diagnostics against its source.
struct Rendered<'a> {
    diag: &'a Diagnostic,
    /// The source as shown, long lines cut; the labels' spans are in its coordinates.
    source: Excerpt,
}

impl fmt::Debug for Rendered<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.diag, f)
    }
}

impl fmt::Display for Rendered<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&clip(&self.diag.message))
    }
}

impl std::error::Error for Rendered<'_> {}

impl miette::Diagnostic for Rendered<'_> {
    fn help<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        self.diag
            .help
            .as_ref()
            .map(|h| Box::new(clip(h)) as Box<dyn fmt::Display>)
    }

    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        if self.diag.labels.is_empty() {
            None
        } else {
            Some(&self.source)
        }
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        if self.diag.labels.is_empty() {
            return None;
        }
        Some(Box::new(
            self.diag
                .labels
                .iter()
                .zip(&self.source.spans)
                .enumerate()
                .map(|(i, (l, shown))| {
                    let span = SourceSpan::new((shown.start as usize).into(), shown.len());
                    let text = (!l.text.is_empty()).then(|| clip(&l.text).into_owned());
                    if i == 0 {
                        LabeledSpan::new_primary_with_span(text, span)
                    } else {
                        LabeledSpan::new_with_span(text, span)
                    }
                }),
        ))
    }
}

/// Characters of one message, label, note or help [`render`] shows: they may quote the
/// program (a name, a condition), and a name may be 100,000 characters long.
const MAX_TEXT: usize = 400;

/// `text`, its middle cut out if it is longer than [`MAX_TEXT`].
fn clip(text: &str) -> Cow<'_, str> {
    let len = text.chars().count();
    if len <= MAX_TEXT {
        return Cow::Borrowed(text);
    }
    let keep = MAX_TEXT / 2;
    let head: String = text.chars().take(keep).collect();
    let tail: String = text.chars().skip(len - keep).collect();
    Cow::Owned(format!("{head} ... {tail}"))
}

/// Diagnostics [`render`] shows; it counts the others. Each costs a pass over the file, so
/// a file with 100,000 errors must not render them all.
pub const MAX_RENDERED: usize = 100;

/// Renders diagnostics the way `braid` prints them: for each, a plain first line
/// `error[CODE]: FILE:LINE:COL` (easy to grep and to jump to), then the message with the
/// source excerpt and labels, then notes. After [`MAX_RENDERED`], one line counts the rest.
pub fn render(diags: &[Diagnostic], source: &SourceFile) -> String {
    let handler = GraphicalReportHandler::new_themed(GraphicalTheme::unicode_nocolor())
        .with_width(100)
        .with_links(false);
    let mut out = String::new();
    for diag in diags.iter().take(MAX_RENDERED) {
        let location = match diag.primary_span() {
            Some(span) => {
                let (line, col) = source.line_col(span.start);
                format!("{}:{line}:{col}", source.name)
            }
            None => source.name.clone(),
        };
        out.push_str(&format!("error[{}]: {location}\n", diag.code));
        let spans: Vec<Span> = diag.labels.iter().map(|l| l.span).collect();
        let rendered = Rendered {
            diag,
            source: Excerpt::new(source, &spans),
        };
        let mut text = String::new();
        if handler.render_report(&mut text, &rendered).is_err() {
            text = format!("  × {diag}\n");
        }
        out.push_str(text.trim_end_matches('\n'));
        out.push('\n');
        for note in &diag.notes {
            out.push_str(&format!("  note: {}\n", clip(note)));
        }
        out.push('\n');
    }
    if diags.len() > MAX_RENDERED {
        out.push_str(&format!(
            "error: {} more errors in {} are not shown\n",
            diags.len() - MAX_RENDERED,
            source.name
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_from_one() {
        let src = SourceFile::new("f.braid", "ab\ncd\n");
        assert_eq!(src.line_col(0), (1, 1));
        assert_eq!(src.line_col(4), (2, 2));
    }

    #[test]
    fn render_names_file_line_col_and_shows_the_line() {
        let src = SourceFile::new(
            "x.braid",
            "algorithm a : allreduce {\n  copy in[0][0] <- out[0][0];\n}\n",
        );
        let d = Diagnostic::new("write-to-in", "cannot write to `in`")
            .with_label(Span::new(33, 41), "`in` is read-only")
            .with_note("in is the input buffer");
        let text = render(&[d], &src);
        assert!(
            text.starts_with("error[write-to-in]: x.braid:2:8\n"),
            "{text}"
        );
        assert!(text.contains("cannot write to `in`"), "{text}");
        assert!(text.contains("copy in[0][0] <- out[0][0];"), "{text}");
        assert!(text.contains("note: in is the input buffer"), "{text}");
    }
}
