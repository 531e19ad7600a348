//! What the caller may choose about lowering, and how provenance reaches the plan.

use braid_ir::{Mode, ModeSet, Span};
use braid_plan::DEFAULT_SLOTS;

/// Where a statement is in its source file: what a plan step's `origin` records.
///
/// Lowering never sees source text; the caller maps spans to positions (the CLI does it
/// with its `SourceFile`), so this crate stays independent of how sources are stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourcePos {
    /// 1-based line.
    pub line: u32,
    /// 1-based column, in characters.
    pub col: u32,
    /// The statement's text (its first line is enough).
    pub text: String,
}

/// Maps an operation's span to its source position; `None` leaves the step without origin.
pub type Locate<'a> = &'a dyn Fn(Span) -> Option<SourcePos>;

/// Choices the caller makes; [`LowerOptions::default`] is what `braid compile` uses.
#[derive(Clone, Copy)]
pub struct LowerOptions<'a> {
    /// The name recorded in the plan's `topology.name`; the topology's own name when `None`
    /// (the preset text, or the file name as given).
    pub topology_name: Option<&'a str>,
    /// Call modes the plan is for, intersected with the modes the program declares; all the
    /// declared modes when `None`.
    pub modes: Option<ModeSet>,
    /// Connection FIFO depth recorded in the plan, in slices.
    pub slots: u32,
    /// Whether receive steps may be fused with the send that forwards their data
    /// (`rcs`, `rrs`, `rrcs`). Off, every transfer is a plain `s` / `r` / `rrc` pair.
    pub fuse: bool,
    /// Source positions for step origins; steps carry no origin when `None`.
    pub locate: Option<Locate<'a>>,
}

impl Default for LowerOptions<'_> {
    fn default() -> Self {
        LowerOptions {
            topology_name: None,
            modes: None,
            slots: DEFAULT_SLOTS,
            fuse: true,
            locate: None,
        }
    }
}

impl std::fmt::Debug for LowerOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LowerOptions")
            .field("topology_name", &self.topology_name)
            .field("modes", &self.modes)
            .field("slots", &self.slots)
            .field("fuse", &self.fuse)
            .field("locate", &self.locate.map(|_| "<fn>"))
            .finish()
    }
}

/// The call mode whose dataflow graph [`crate::lower`] needs for a plan valid in `modes`.
///
/// In-place aliasing only ever merges locations, so every pair of operations that conflict
/// out of place also conflicts in place: the in-place graph orders everything the
/// out-of-place one does, except around a copy that is the identity in place (a broadcast
/// root's `out <- in`), which has no edges there. [`crate::lower`] adds the out-of-place
/// graph's edges for a program that has one, so its plan is race-free in both modes.
pub fn flow_mode(modes: ModeSet) -> Mode {
    if modes.in_place {
        Mode::InPlace
    } else {
        Mode::OutOfPlace
    }
}
