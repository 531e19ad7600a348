//! A prediction as a Chrome trace (the JSON that Perfetto and chrome://tracing open): one
//! process per rank, one thread per block, one slice per step.

use crate::sim::Prediction;
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
    predicted_us: f64,
}

/// The trace of `p` for the plan named `plan`.
pub fn chrome_trace(plan: &str, p: &Prediction) -> String {
    let mut events = Vec::new();
    let mut named = std::collections::BTreeSet::new();
    for s in &p.timeline {
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
            predicted_us: p.total_us,
        },
    })
    .expect("a trace serialises")
        + "\n"
}
