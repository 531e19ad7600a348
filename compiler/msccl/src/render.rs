//! Verifier diagnostics of an imported plan, pointed back at the XML.
//!
//! `braid_plan::verify` names steps as `(rank, block, step)`; a user of an MSCCL file
//! thinks in `<gpu>`, `<tb>` and `<step>` elements and lines. Step indices of an
//! imported plan equal the XML's `s` values, block indices its tb ids, ranks its gpu
//! ids, so the [`LineIndex`] recorded while importing maps one to the other.

use crate::import::LineIndex;
use braid_plan::{PlanDiagnostic, Site, StepId};

/// `<step s="3"> of <tb id="1"> of <gpu id="2">`.
pub fn step_label(id: StepId) -> String {
    format!(
        "<step s=\"{}\"> of <tb id=\"{}\"> of <gpu id=\"{}\">",
        id.step, id.block, id.rank
    )
}

fn site_label(site: Site) -> String {
    match site {
        Site::Plan => "<algo>".into(),
        Site::Rank(r) => format!("<gpu id=\"{r}\">"),
        Site::Block { rank, block } => format!("<tb id=\"{block}\"> of <gpu id=\"{rank}\">"),
        Site::Step(id) => step_label(id),
    }
}

fn site_pos(site: Site, index: &LineIndex) -> crate::Pos {
    let pos = match site {
        Site::Plan => Some(index.algo),
        Site::Rank(r) => index.ranks.get(&r).copied(),
        Site::Block { rank, block } => index.blocks.get(&(rank, block)).copied(),
        Site::Step(id) => index.steps.get(&id).copied(),
    };
    pos.unwrap_or(index.algo)
}

/// Rewrites `rank R, block B, step S` in a note into the XML element and its line.
fn annotate_note(note: &str, index: &LineIndex) -> String {
    let mut out = note.to_string();
    for (id, pos) in mentioned_steps(note, index) {
        out.push_str(&format!(" [{} at line {}]", step_label(id), pos.line));
    }
    out
}

/// Step ids a free-text note names as `rank R, block B, step S`.
fn mentioned_steps(note: &str, index: &LineIndex) -> Vec<(StepId, crate::Pos)> {
    let mut found = Vec::new();
    let mut rest = note;
    while let Some(i) = rest.find("rank ") {
        rest = &rest[i + 5..];
        let nums: Vec<u32> = rest
            .split([',', ' ', ':', ')'])
            .filter_map(|w| w.parse().ok())
            .take(3)
            .collect();
        let text = rest.get(..40.min(rest.len())).unwrap_or(rest);
        if nums.len() == 3 && text.contains("block") && text.contains("step") {
            let id = StepId {
                rank: nums[0],
                block: nums[1],
                step: nums[2],
            };
            if let Some(pos) = index.steps.get(&id) {
                if !found.iter().any(|(f, _)| *f == id) {
                    found.push((id, *pos));
                }
            }
        }
    }
    found
}

/// Every verifier diagnostic as `FILE:LINE:COL: error[check]: ELEMENT: message`, with notes
/// naming the XML elements of the other steps involved, and a closing count line.
pub fn render_for_xml(diags: &[PlanDiagnostic], index: &LineIndex, file: &str) -> String {
    let mut out = String::new();
    for d in diags {
        out.push_str(&format!(
            "{file}:{}: error[{}]: {} ({}): {}\n",
            site_pos(d.site, index),
            d.check.name(),
            site_label(d.site),
            d.site,
            d.message
        ));
        for n in &d.notes {
            out.push_str(&format!("  = note: {}\n", annotate_note(n, index)));
        }
    }
    out.push_str(&format!(
        "{file}: error: plan rejected: {} problem{} found\n",
        diags.len(),
        if diags.len() == 1 { "" } else { "s" }
    ));
    out
}
