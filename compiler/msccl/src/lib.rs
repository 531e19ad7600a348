//! MSCCL XML algorithms to and from Braid plans.
//!
//! * [`import`]: a streaming parse of either XML dialect (microsoft/msccl v1 and the
//!   Azure executor) into a [`braid_plan::Plan`], with every structural problem named by
//!   element and line. The plan must still pass `braid_plan::verify`;
//!   [`render_for_xml`] words the verifier's findings in terms of the XML.
//! * [`export`]: a plan as executor-dialect XML, one `<step>` per line.
//!
//! `docs/msccl.md` documents the dialect rule, the buffer mapping and what round-trips.

mod attrs;
mod error;
mod export;
mod header;
mod import;
mod numbering;
mod parse;
mod render;

pub use error::{render_errors, Pos, XmlError};
pub use export::{export, msccl_form, ExportError};
pub use header::{Dialect, V1_DEFAULT_MAX_BYTES};
pub use import::{import, import_with_lines, LineIndex};
pub use render::{render_for_xml, step_label};
