//! A prediction as a Chrome trace (the JSON that Perfetto and chrome://tracing open): one
//! process per rank, one thread per block, one slice per step.

use crate::sim::{Prediction, StepTime};
use serde::Serialize;

#[derive(Serialize)]
struct Event<'a> {
    name: &'a str,
    cat: &'static str,
    ph: &'static str,
    /// Microseconds.
    ts: f64,
    dur: f64,
    pid: u32,
    tid: u32,
    args: Args,
}

#[derive(Serialize)]
struct Args {
    step: u32,
}

#[derive(Serialize)]
struct Meta {
    name: &'static str,
    ph: &'static str,
    pid: u32,
    tid: u32,
    args: MetaArgs,
}

#[derive(Serialize)]
struct MetaArgs {
    name: String,
}

#[derive(Serialize)]
struct Trace<'a> {
    #[serde(rename = "traceEvents")]
    events: Vec<serde_json::Value>,
    #[serde(rename = "displayTimeUnit")]
    unit: &'static str,
    #[serde(rename = "otherData")]
    other: Other<'a>,
}

#[derive(Serialize)]
struct Other<'a> {
    plan: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    predicted_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    measured_us: Option<f64>,
    /// What set the predicted total beyond the steps shown ([`crate::sim::Bound`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    bound_by: Option<&'static str>,
    /// Where the steps shown end, when something else set the total.
    #[serde(skip_serializing_if = "Option::is_none")]
    steps_end_us: Option<f64>,
}

/// The trace of `p` for the plan named `plan`.
pub fn chrome_trace(plan: &str, p: &Prediction) -> String {
    write(
        plan,
        &p.timeline,
        Some(p.total_us),
        None,
        p.bound.map(|b| (b.name(), p.steps_end_us())),
    )
}

/// The trace of step times measured on a device (`BRAID_TRACE`), in the same form as a
/// prediction's, so the two open side by side: `total_us` from the first step's start
/// to the last one's end.
pub fn chrome_trace_measured(plan: &str, timeline: &[StepTime]) -> String {
    let total = timeline.iter().map(|s| s.end_us).fold(0f64, f64::max);
    write(plan, timeline, None, Some(total), None)
}

fn write(
    plan: &str,
    timeline: &[StepTime],
    predicted_us: Option<f64>,
    measured_us: Option<f64>,
    bound: Option<(&'static str, f64)>,
) -> String {
    let mut events = Vec::new();
    let mut named = std::collections::BTreeSet::new();
    for s in timeline {
        if named.insert((s.rank, u32::MAX)) {
            events.push(
                serde_json::to_value(Meta {
                    name: "process_name",
                    ph: "M",
                    pid: s.rank,
                    tid: 0,
                    args: MetaArgs {
                        name: format!("rank {}", s.rank),
                    },
                })
                .expect("serialises"),
            );
        }
        if named.insert((s.rank, s.block)) {
            events.push(
                serde_json::to_value(Meta {
                    name: "thread_name",
                    ph: "M",
                    pid: s.rank,
                    tid: s.block,
                    args: MetaArgs {
                        name: format!("block {}", s.block),
                    },
                })
                .expect("serialises"),
            );
        }
        events.push(
            serde_json::to_value(Event {
                name: s.kind,
                cat: "step",
                ph: "X",
                ts: s.start_us,
                dur: (s.end_us - s.start_us).max(0.0),
                pid: s.rank,
                tid: s.block,
                args: Args { step: s.step },
            })
            .expect("serialises"),
        );
    }
    serde_json::to_string(&Trace {
        events,
        unit: "ns",
        other: Other {
            plan,
            predicted_us,
            measured_us,
            bound_by: bound.map(|b| b.0),
            steps_end_us: bound.map(|b| b.1),
        },
    })
    .expect("a trace serialises")
        + "\n"
}
