//! `braid perf --plot FILE.svg`: bus bandwidth against size, one line per series (braid
//! and NCCL in each mode, and the roofline), from one run.

use crate::perf_report::{bandwidths, Report, Row};
use plotters::prelude::*;
use std::path::Path;

/// The series of a report: name and (size, busbw) points.
fn series(report: &Report) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut out: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    let mut push = |name: String, p: (f64, f64)| match out.iter_mut().find(|(n, _)| *n == name) {
        Some((_, v)) => v.push(p),
        None => out.push((name, vec![p])),
    };
    let c = braid_ir::Collective::from_name(&report.collective);
    for r in &report.rows {
        let mode = if r.mode == "inplace" {
            "in place"
        } else {
            "out of place"
        };
        push(format!("braid, {mode}"), (r.size as f64, r.busbw));
        if let Some(bw) = r.nccl_busbw {
            push(format!("NCCL, {mode}"), (r.size as f64, bw));
        }
        if let (Some(t), Some(c)) = (roofline_time(r), c) {
            if r.mode != "inplace" {
                push(
                    "roofline".into(),
                    (r.size as f64, bandwidths(c, report.ranks, r.size, t).1),
                );
            }
        }
    }
    out
}

fn roofline_time(r: &Row) -> Option<f64> {
    r.roofline_us.filter(|&t| t > 0.0).map(|t| t / 1e6)
}

/// Writes the plot of `report` to `path` (SVG).
pub fn write(report: &Report, path: &Path) -> Result<(), String> {
    let series = series(report);
    let xs = series.iter().flat_map(|(_, v)| v.iter().map(|p| p.0));
    let (lo, hi) = xs.fold((f64::MAX, 1.0f64), |(a, b), x| (a.min(x), b.max(x)));
    let top = series
        .iter()
        .flat_map(|(_, v)| v.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
        .max(1e-3)
        * 1.1;
    let (lo, hi) = if lo >= hi {
        (lo.max(1.0) / 2.0, hi * 2.0)
    } else {
        (lo, hi)
    };
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
        root.fill(&WHITE)?;
        let title = format!(
            "braid perf {} on {} ({} ranks, {} backend)",
            report.collective, report.topology, report.ranks, report.backend
        );
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d((lo..hi).log_scale(), 0.0..top)?;
        chart
            .configure_mesh()
            .x_desc("size (bytes)")
            .y_desc("bus bandwidth (GB/s)")
            .x_label_formatter(&|x| crate::sizes::show(*x as u64))
            .draw()?;
        let palette = [BLUE, RED, GREEN, MAGENTA, CYAN, BLACK];
        for (i, (name, points)) in series.iter().enumerate() {
            let color = palette[i % palette.len()];
            let style = if name == "roofline" {
                color.stroke_width(1)
            } else {
                color.stroke_width(2)
            };
            chart
                .draw_series(LineSeries::new(points.iter().copied(), style))?
                .label(name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| format!("cannot write the plot {}: {e}", path.display()))
}
