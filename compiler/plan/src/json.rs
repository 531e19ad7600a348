//! Loading and saving plans as JSON.
//!
//! Saving uses a layout tuned for people who read and hand-edit plans: the document is
//! indented as usual down to the step lists, and every step sits on one line. Loading
//! accepts any JSON layout, checks `format_version` before anything else (so a plan from
//! a newer Braid gets "unsupported version" rather than a confusing field error), and
//! reports every error with its line and column.

use crate::plan::{Plan, FORMAT_VERSION};
use serde::{Deserialize, Serialize};
use std::io;
use thiserror::Error;

/// Why a plan could not be loaded.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum PlanError {
    /// Not JSON, or JSON that does not have the shape of a plan.
    #[error("{line}:{column}: malformed plan: {message}")]
    Json {
        line: usize,
        column: usize,
        message: String,
    },
    /// A `format_version` this crate does not read.
    #[error("unsupported plan format_version {found} (this braid reads version {supported}); re-generate the plan with a matching braid")]
    Version { found: String, supported: u32 },
    /// No `format_version` at all: probably not a Braid plan.
    #[error(
        "not a Braid plan: the top-level object has no `format_version` (expected {supported})"
    )]
    MissingVersion { supported: u32 },
}

impl PlanError {
    fn from_serde(e: serde_json::Error) -> PlanError {
        // serde_json appends " at line L column C" to its messages; we carry those apart.
        let text = e.to_string();
        let message = match text.rfind(" at line ") {
            Some(i) if e.line() > 0 => text[..i].to_string(),
            _ => text,
        };
        PlanError::Json {
            line: e.line(),
            column: e.column(),
            message,
        }
    }
}

/// Just enough of a plan to learn its version, whatever else the document holds.
#[derive(Deserialize)]
struct VersionProbe {
    format_version: Option<serde_json::Value>,
}

impl Plan {
    /// Parse a plan. Rejects malformed JSON, unknown fields and any `format_version` other
    /// than [`FORMAT_VERSION`]. Says nothing about whether the plan is *correct*: that is
    /// [`crate::verify()`]'s job.
    pub fn from_json(text: &str) -> Result<Plan, PlanError> {
        let probe: VersionProbe = serde_json::from_str(text).map_err(PlanError::from_serde)?;
        match probe.format_version {
            None => {
                return Err(PlanError::MissingVersion {
                    supported: FORMAT_VERSION,
                })
            }
            Some(v) if v.as_u64() != Some(u64::from(FORMAT_VERSION)) => {
                return Err(PlanError::Version {
                    found: v.to_string(),
                    supported: FORMAT_VERSION,
                })
            }
            Some(_) => {}
        }
        serde_json::from_str(text).map_err(PlanError::from_serde)
    }

    /// The canonical text of a plan: `from_json(&p.to_json_pretty()) == p`, and the text of
    /// a loaded canonical file is reproduced byte for byte.
    pub fn to_json_pretty(&self) -> String {
        let mut out = Vec::new();
        let mut ser = serde_json::Serializer::with_formatter(&mut out, StepPerLine::new());
        self.serialize(&mut ser)
            .expect("a plan always serializes to JSON");
        out.push(b'\n');
        String::from_utf8(out).expect("serde_json writes UTF-8")
    }
}

/// Containers nested deeper than this are written on one line. The plan object is depth
/// 1, `ranks` 2, a rank 3, `blocks` 4, a block 5, `steps` 6: so each step is one line.
const FLAT_BELOW_DEPTH: usize = 6;

/// A serde_json formatter: two-space indentation down to [`FLAT_BELOW_DEPTH`], single-line
/// `{"a": 1, "b": [2, 3]}` below.
struct StepPerLine {
    depth: usize,
    has_value: bool,
}

impl StepPerLine {
    fn new() -> StepPerLine {
        StepPerLine {
            depth: 0,
            has_value: false,
        }
    }

    /// Whether the container currently open is written flat.
    fn flat(&self) -> bool {
        self.depth > FLAT_BELOW_DEPTH
    }

    fn newline_indent<W: ?Sized + io::Write>(&self, w: &mut W) -> io::Result<()> {
        w.write_all(b"\n")?;
        for _ in 0..self.depth {
            w.write_all(b"  ")?;
        }
        Ok(())
    }

    fn open<W: ?Sized + io::Write>(&mut self, w: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        w.write_all(bracket)
    }

    fn close<W: ?Sized + io::Write>(&mut self, w: &mut W, bracket: &[u8]) -> io::Result<()> {
        let was_flat = self.flat();
        self.depth -= 1;
        if self.has_value && !was_flat {
            self.newline_indent(w)?;
        }
        w.write_all(bracket)
    }

    fn item<W: ?Sized + io::Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if self.flat() {
            if !first {
                w.write_all(b", ")?;
            }
            Ok(())
        } else {
            if !first {
                w.write_all(b",")?;
            }
            self.newline_indent(w)
        }
    }
}

impl serde_json::ser::Formatter for StepPerLine {
    fn begin_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(w, b"[")
    }

    fn end_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.close(w, b"]")
    }

    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.item(w, first)
    }

    fn end_array_value<W: ?Sized + io::Write>(&mut self, _w: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn begin_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(w, b"{")
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.close(w, b"}")
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.item(w, first)
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }

    fn end_object_value<W: ?Sized + io::Write>(&mut self, _w: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}
