//! What `braid perf` measured, one row per size and mode, and its renderings: the
//! nccl-tests-style table and the JSON report (`--json`), for every backend alike.

use braid_ir::{Collective, Mode};
use serde::Serialize;

/// nccl-tests' bus-bandwidth factor for `n` ranks.
pub fn busbw_factor(c: Collective, n: u32) -> f64 {
    let n = f64::from(n);
    match c {
        Collective::Allreduce => 2.0 * (n - 1.0) / n,
        Collective::Allgather | Collective::ReduceScatter | Collective::Alltoall => (n - 1.0) / n,
        Collective::Broadcast | Collective::Reduce => 1.0,
    }
}

pub fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::OutOfPlace => "outofplace",
        Mode::InPlace => "inplace",
    }
}

/// One size in one mode.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Bytes of one rank's larger buffer (nccl-tests' size).
    pub size: usize,
    pub count: usize,
    #[serde(rename = "type")]
    pub dtype: &'static str,
    pub redop: &'static str,
    /// -1 for a collective without a root, as nccl-tests prints.
    pub root: i64,
    pub mode: &'static str,
    /// Median of the timed runs, per call, back to back.
    pub time_us: f64,
    pub algbw: f64,
    pub busbw: f64,
    pub wrong: usize,
    /// Every timed run, per call.
    pub runs_us: Vec<f64>,
    /// Each call waited for on the host (`--sync`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_time_us: Option<f64>,
    /// The time the bytes the plan moves would take at the best copy rate measured in
    /// this run, and `roofline_us / time_us`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roofline_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub efficiency: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl_time_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl_busbw: Option<f64>,
    /// NCCL's time over braid's: above 1, braid is faster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    pub plan: String,
    pub replicas: u32,
    pub protocol: &'static str,
    /// `--predict`: the cost model's time for this call, and `predicted_us / time_us - 1`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_error: Option<f64>,
}

impl Row {
    /// Puts the model's prediction (µs) beside the row, and its error against the time.
    pub fn set_predicted(&mut self, us: f64) {
        self.predicted_us = Some(us);
        self.model_error = (self.time_us > 0.0).then(|| us / self.time_us - 1.0);
    }

    /// Puts the roofline (µs) beside the row, and the efficiency it gives.
    pub fn set_roofline(&mut self, us: f64) {
        self.roofline_us = Some(us);
        self.efficiency = Some(if self.time_us > 0.0 {
            us / self.time_us
        } else {
            0.0
        });
    }
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub collective: String,
    pub topology: String,
    pub ranks: u32,
    pub backend: &'static str,
    /// How `time_us` was taken.
    pub timing: &'static str,
    pub iters: u32,
    pub warmup: u32,
    pub runs: u32,
    /// What the roofline is measured against, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roofline: Option<String>,
    /// The NCCL library compared against: its version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl: Option<String>,
    /// The streams the ranks of one process called on (`--backend cuda`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub streams: Option<String>,
    /// `--predict`: where the model's constants come from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub rows: Vec<Row>,
}

/// A row's bandwidths from its size and time.
pub fn bandwidths(c: Collective, n: u32, bytes: usize, secs: f64) -> (f64, f64) {
    let algbw = if secs > 0.0 {
        bytes as f64 / secs / 1e9
    } else {
        0.0
    };
    (algbw, algbw * busbw_factor(c, n))
}

impl Report {
    pub fn wrong(&self) -> usize {
        self.rows.iter().map(|r| r.wrong).sum()
    }

    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report serialises") + "\n"
    }

    /// The table: a header naming how it was timed, then one line per row.
    pub fn table(&self) -> String {
        let sync = self.rows.iter().any(|r| r.sync_time_us.is_some());
        let roof = self.rows.iter().any(|r| r.roofline_us.is_some());
        let nccl = self.rows.iter().any(|r| r.nccl_time_us.is_some());
        let model = self.rows.iter().any(|r| r.predicted_us.is_some());
        let mut out = format!(
            "# braid perf {} on {} ({} ranks), {} backend{}{}: {} calls {} per run, median of {} runs, {} warm-up calls{}\n",
            self.collective,
            self.topology,
            self.ranks,
            self.backend,
            if self.timing.contains("process") { ", one process per rank" } else { "" },
            match self.streams.as_deref() {
                Some(s) if s.starts_with("one per GPU") => ", one stream per GPU",
                _ => "",
            },
            self.iters,
            if self.timing.contains("graph") { "replayed from CUDA graphs" } else { "back to back" },
            self.runs,
            self.warmup,
            self.nccl.as_ref().map_or(String::new(), |v| format!("; vs NCCL {v} (ratio = NCCL time / braid time)"))
        );
        if let Some(r) = &self.roofline {
            out.push_str(&format!("# roofline: {r}\n"));
        }
        if let Some(m) = &self.model {
            out.push_str(&format!(
                "# model: the cost model's time for what ran (constants: {m}), and its error\n"
            ));
        }
        out.push_str(&format!(
            "#{:>12} {:>12} {:>6} {:>6} {:>5} {:>4} {:>10} {:>9} {:>9} {:>7}",
            "size(B)",
            "count",
            "type",
            "redop",
            "root",
            "mode",
            "time(us)",
            "algbw",
            "busbw",
            "#wrong"
        ));
        if sync {
            out.push_str(&format!(" {:>10}", "sync(us)"));
        }
        if roof {
            out.push_str(&format!(" {:>10} {:>5}", "roof(us)", "eff"));
        }
        if nccl {
            out.push_str(&format!(
                " {:>10} {:>9} {:>6}",
                "nccl(us)", "nccl_bus", "ratio"
            ));
        }
        if model {
            out.push_str(&format!(" {:>10} {:>6}", "model(us)", "error"));
        }
        out.push_str("  plan\n");
        for r in &self.rows {
            out.push_str(&format!(
                " {:>12} {:>12} {:>6} {:>6} {:>5} {:>4} {:>10.2} {:>9.3} {:>9.3} {:>7}",
                r.size,
                r.count,
                r.dtype,
                r.redop,
                r.root,
                if r.mode == "inplace" { "in" } else { "out" },
                r.time_us,
                r.algbw,
                r.busbw,
                r.wrong
            ));
            let dash = |w: usize| format!(" {:>w$}", "-");
            if sync {
                out.push_str(&r.sync_time_us.map_or(dash(10), |t| format!(" {t:>10.2}")));
            }
            if roof {
                match (r.roofline_us, r.efficiency) {
                    (Some(t), Some(e)) => out.push_str(&format!(" {t:>10.2} {e:>5.2}")),
                    _ => out.push_str(&format!("{}{}", dash(10), dash(5))),
                }
            }
            if nccl {
                match (r.nccl_time_us, r.nccl_busbw, r.ratio) {
                    (Some(t), Some(bw), Some(x)) => {
                        out.push_str(&format!(" {t:>10.2} {bw:>9.3} {x:>6.2}"))
                    }
                    _ => out.push_str(&format!("{}{}{}", dash(10), dash(9), dash(6))),
                }
            }
            if model {
                match (r.predicted_us, r.model_error) {
                    (Some(t), Some(e)) => out.push_str(&format!(" {t:>10.2} {:>5.0}%", e * 100.0)),
                    _ => out.push_str(&format!("{}{}", dash(10), dash(6))),
                }
            }
            out.push_str(&format!("  {} x{} {}\n", r.plan, r.replicas, r.protocol));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> Row {
        let (algbw, busbw) = bandwidths(Collective::Allreduce, 2, 1 << 20, 20e-6);
        Row {
            size: 1 << 20,
            count: 1 << 18,
            dtype: "f32",
            redop: "sum",
            root: -1,
            mode: "outofplace",
            time_us: 20.0,
            algbw,
            busbw,
            wrong: 0,
            runs_us: vec![19.0, 20.0, 21.0],
            sync_time_us: None,
            roofline_us: Some(15.0),
            efficiency: Some(0.75),
            nccl_time_us: Some(30.0),
            nccl_busbw: Some(bandwidths(Collective::Allreduce, 2, 1 << 20, 30e-6).1),
            ratio: Some(1.5),
            plan: "ring_allreduce".into(),
            replicas: 16,
            protocol: "simple",
            predicted_us: None,
            model_error: None,
        }
    }

    fn report() -> Report {
        Report {
            collective: "allreduce".into(),
            topology: "nvswitch:2".into(),
            ranks: 2,
            backend: "cuda",
            timing: "back-to-back",
            iters: 20,
            warmup: 5,
            runs: 3,
            roofline: Some("device-to-device copy".into()),
            nccl: Some("2.28.9".into()),
            streams: Some("one per GPU, shared by its ranks".into()),
            model: None,
            rows: vec![row()],
        }
    }

    #[test]
    fn the_table_carries_every_column_asked_for() {
        let t = report().table();
        assert!(t.contains("cuda backend, one stream per GPU:"), "{t}");
        assert!(
            t.contains("nccl(us)") && t.contains("ratio") && t.contains("NCCL 2.28.9"),
            "{t}"
        );
        assert!(t.contains("roof(us)") && t.contains("0.75"), "{t}");
        assert!(!t.contains("sync(us)"), "{t}");
        // 1 MiB in 20 us: algbw 52.429 GB/s; busbw x 2(n-1)/n = 1; ratio 30/20.
        assert!(
            t.contains("20.00") && t.contains("52.429") && t.contains("1.50"),
            "{t}"
        );
        assert!(t.contains("ring_allreduce x16 simple"), "{t}");
        assert!(!t.contains("model(us)"), "{t}");
    }

    #[test]
    fn a_prediction_shows_with_its_error() {
        let mut r = report();
        r.model = Some("defaults".into());
        r.rows[0].set_predicted(25.0);
        let t = r.table();
        // 25 us predicted for 20 measured: 25 % over.
        assert!(
            t.contains("model(us)") && t.contains("25.00") && t.contains("25%"),
            "{t}"
        );
        let v: serde_json::Value = serde_json::from_str(&r.json()).unwrap();
        assert_eq!(v["rows"][0]["predicted_us"], 25.0);
        assert!((v["rows"][0]["model_error"].as_f64().unwrap() - 0.25).abs() < 1e-9);
    }

    #[test]
    fn the_json_report_is_one_document_with_every_row() {
        let j = report().json();
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["timing"], "back-to-back");
        let r = &v["rows"][0];
        assert_eq!(r["ratio"], 1.5);
        assert_eq!(r["type"], "f32");
        assert_eq!(r["runs_us"].as_array().unwrap().len(), 3);
        assert!(r.get("sync_time_us").is_none());
    }

    #[test]
    fn busbw_factors_are_nccl_tests() {
        assert_eq!(busbw_factor(Collective::Allreduce, 4), 1.5);
        assert_eq!(busbw_factor(Collective::Allgather, 4), 0.75);
        assert_eq!(busbw_factor(Collective::Broadcast, 4), 1.0);
    }
}
