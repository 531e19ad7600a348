//! Braid's cost model. [`sim::predict`] prices one call of one plan on a topology by
//! simulating the plan's steps (docs/costmodel.md); [`rank`] prices every candidate plan
//! for a call in every replica count and protocol it can run with, and says why each
//! one won, lost or was excluded (`braid explain`). [`trace`] writes a prediction as a
//! Chrome trace.
//!
//! **Must not know:** the runtime, CUDA. It reads plans and topologies only.

pub mod bound;
pub mod flat;
pub mod profile;
pub mod sim;
pub mod slices;
pub mod trace;

use braid_ir::{Collective, Mode, Protocol};
use braid_plan::Plan;
use braid_topo::Topology;
pub use profile::{ll128_allowed, LinkKind, Ll128Verdict, Profile};
pub use sim::{predict, Call, Prediction};

/// The connection channels a plan may use in all (the plan verifier's bound).
const MAX_CHANNELS: u32 = 32;

/// The call that plans compete for.
#[derive(Clone, Copy, Debug)]
pub struct Request {
    pub collective: Collective,
    pub root: Option<u32>,
    pub mode: Mode,
    pub bytes: u64,
    pub elem: u64,
    /// The ranks run in one launch (several ranks of one process on one GPU): out of
    /// place, receivers read their senders' `in` where a plan allows ([`Call::direct`]).
    pub direct: bool,
    /// The backend may run LL128 on every link of the call (its stress test passed on
    /// each): LL128 is then a candidate protocol too.
    pub ll128: bool,
}

impl Request {
    /// Whether the call's prices assume direct reads ([`Call::direct`]): ranks that launch
    /// together, out of place. Every rank must price a call alike, and of a rooted
    /// collective only the root knows whether its call is in place (the others have one
    /// buffer, which the call leaves untouched either way), so rooted collectives are
    /// priced with them whatever the root's mode: an in-place root's own `in` is then
    /// read through its connections, the others' directly.
    pub fn direct_reads(&self) -> bool {
        self.direct && (self.mode == Mode::OutOfPlace || self.collective.is_rooted())
    }
}

/// One candidate plan, as the registry offers it.
pub struct Candidate<'a> {
    pub plan: &'a Plan,
    /// Where it comes from: `shipped`, `user FILE`, ...
    pub origin: String,
}

/// A candidate priced, or why it cannot serve the call.
#[derive(Clone, Debug)]
pub struct Ranked {
    pub name: String,
    pub origin: String,
    pub replicas: u32,
    pub protocol: Protocol,
    pub result: Result<f64, String>,
}

/// The most replicas of `plan` the plan verifier accepts: its connection channels, times
/// the replicas, stay within the verifier's bound.
pub fn max_replicas(plan: &Plan) -> u32 {
    let used = plan
        .ranks
        .iter()
        .flat_map(|r| r.blocks.iter().map(|b| b.channel + 1))
        .max()
        .unwrap_or(1)
        .max(1);
    (MAX_CHANNELS / used).max(1)
}

/// Replica counts worth trying for `plan`: powers of two while the replicated plan stays
/// within the verifier's channel bound.
pub fn replica_counts(plan: &Plan) -> Vec<u32> {
    if plan.channels != 1 {
        // The plan chose its replicas itself.
        return vec![plan.channels.max(1)];
    }
    let max = max_replicas(plan);
    (0..6).map(|k| 1u32 << k).filter(|&r| r <= max).collect()
}

/// Why `plan` cannot serve `req`, if it cannot.
fn excluded(plan: &Plan, req: &Request, n: u32) -> Option<String> {
    if plan.collective != req.collective {
        return Some(format!("it is a {} plan", plan.collective));
    }
    if plan.n_ranks != n {
        return Some(format!(
            "it is for {} ranks, the topology has {n}",
            plan.n_ranks
        ));
    }
    if plan.root != req.root {
        return Some(format!(
            "its root is {:?}, the call's {:?}",
            plan.root, req.root
        ));
    }
    if !plan.modes.contains(req.mode) {
        return Some(format!(
            "it is not valid {}",
            if req.mode == Mode::InPlace {
                "in place"
            } else {
                "out of place"
            }
        ));
    }
    if let Some(r) = &plan.bytes {
        if !r.contains(req.bytes) {
            return Some(format!(
                "it serves {} to {} bytes",
                r.min,
                r.max.map_or("any".into(), |m| (m - 1).to_string())
            ));
        }
    }
    None
}

/// From this size on, [`cheapest`] bounds every option before it simulates any.
const SORT_MIN_BYTES: u64 = 1 << 20;

/// Of `configs` (replicas, protocol) of `plan`, the cheapest for `req` (the first of
/// equals), or where none can be priced the first one's error. Each is bounded
/// ([`sim::predict_below`]; large calls bound them all first and go cheapest bound
/// first), and only those whose bound is below the best time found so far are
/// simulated: the answer is the one that pricing them all gives.
fn cheapest(
    plan: &Plan,
    topo: &Topology,
    profile: &Profile,
    req: &Request,
    configs: &[(u32, Protocol)],
) -> Option<(u32, Protocol, Result<f64, String>)> {
    use sim::Priced;
    let call = |&(replicas, protocol): &(u32, Protocol)| Call {
        bytes: req.bytes,
        elem: req.elem,
        protocol,
        replicas,
        direct: req.direct_reads(),
        together: req.direct,
    };
    // Each one's bound, or its price where the bound is the price (flat launches), or
    // its error. Below `SORT_MIN_BYTES` a simulation costs little more than a bound:
    // the options go in their order, each bounded on its way to being simulated.
    let mut results: Vec<Option<Result<f64, String>>> = vec![None; configs.len()];
    let mut bounds: Vec<(f64, usize)> = Vec::new();
    if req.bytes < SORT_MIN_BYTES || configs.len() < 2 {
        bounds.extend((0..configs.len()).map(|i| (f64::NEG_INFINITY, i)));
    } else {
        for (i, c) in configs.iter().enumerate() {
            match sim::predict_below(plan, topo, profile, &call(c), f64::NEG_INFINITY) {
                Ok(Priced::Above(b)) => bounds.push((b, i)),
                Ok(Priced::Predicted(p)) => results[i] = Some(Ok(p.total_us)),
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        bounds.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    }
    let best = |results: &[Option<Result<f64, String>>]| {
        results
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match r {
                Some(Ok(t)) => Some((*t, i)),
                _ => None,
            })
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
    };
    for (bound, i) in bounds {
        // A margin for the bound's rounding: it sums what the simulation adds in
        // another order.
        let limit = best(&results).map_or(f64::INFINITY, |(t, _)| t * (1.0 + 1e-9));
        if bound > limit {
            break;
        }
        results[i] = match sim::predict_below(plan, topo, profile, &call(&configs[i]), limit) {
            Ok(Priced::Predicted(p)) => Some(Ok(p.total_us)),
            Ok(Priced::Above(_)) => None,
            Err(e) => Some(Err(e)),
        };
    }
    match best(&results) {
        Some((t, i)) => Some((configs[i].0, configs[i].1, Ok(t))),
        None => results.iter().zip(configs).find_map(|(r, c)| match r {
            Some(Err(e)) => Some((c.0, c.1, Err(e.clone()))),
            _ => None,
        }),
    }
}

/// Prices every candidate for `req` on `topo`, in every replica count and protocol it
/// can run with (the cheapest of those per plan is its entry); the cheapest first,
/// then the excluded ones.
pub fn rank(
    candidates: &[Candidate],
    topo: &Topology,
    profile: &Profile,
    req: &Request,
) -> Vec<Ranked> {
    rank_with(candidates, topo, profile, req, None, None)
}

/// [`rank`] with the replica count and the protocol fixed (as `BRAID_CHANNELS` and
/// `BRAID_PROTO` fix them for the runtime, or as a backend runs plans).
pub fn rank_with(
    candidates: &[Candidate],
    topo: &Topology,
    profile: &Profile,
    req: &Request,
    replicas: Option<u32>,
    protocol: Option<Protocol>,
) -> Vec<Ranked> {
    let n = topo.n_ranks();
    let mut out: Vec<Ranked> = Vec::new();
    for c in candidates {
        let p = c.plan;
        if let Some(why) = excluded(p, req, n) {
            out.push(Ranked {
                name: p.name.clone(),
                origin: c.origin.clone(),
                replicas: p.channels.max(1),
                protocol: p.protocol,
                result: Err(why),
            });
            continue;
        }
        let protocols: Vec<Protocol> = match (protocol, p.protocol) {
            (Some(fixed), _) => vec![fixed],
            (None, Protocol::Auto) if req.ll128 => {
                vec![Protocol::Simple, Protocol::Ll, Protocol::Ll128]
            }
            (None, Protocol::Auto) => vec![Protocol::Simple, Protocol::Ll],
            (None, Protocol::Ll128) if req.ll128 => vec![Protocol::Ll128],
            (None, Protocol::Ll128) => vec![Protocol::Simple],
            (None, other) => vec![other],
        };
        let counts = match replicas {
            Some(r) => vec![r],
            None => replica_counts(p),
        };
        let configs: Vec<(u32, Protocol)> = counts
            .iter()
            .flat_map(|&r| protocols.iter().map(move |&p| (r, p)))
            .collect();
        out.extend(
            cheapest(p, topo, profile, req, &configs).map(|(r, proto, result)| Ranked {
                name: p.name.clone(),
                origin: c.origin.clone(),
                replicas: r,
                protocol: proto,
                result,
            }),
        );
    }
    out.sort_by(|a, b| match (&a.result, &b.result) {
        (Ok(x), Ok(y)) => x.total_cmp(y),
        (Ok(_), Err(_)) => std::cmp::Ordering::Less,
        (Err(_), Ok(_)) => std::cmp::Ordering::Greater,
        (Err(_), Err(_)) => a.name.cmp(&b.name),
    });
    out
}
