//! Braid's cost model. [`sim::predict`] prices one call of one plan on a topology by
//! simulating the plan's steps (docs/costmodel.md); [`rank`] prices every candidate plan
//! for a call in every replica count and protocol it can run with, and says why each
//! one won, lost or was excluded (`braid explain`). [`trace`] writes a prediction as a
//! Chrome trace.
//!
//! **Must not know:** the runtime, CUDA. It reads plans and topologies only.

pub mod bound;
pub mod flat;
pub mod memory;
pub mod near;
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
    /// Simple or LL, where the protocol list excludes it and keeps the other two
    /// (`NCCL_PROTO=^LL`, `^Simple`): not a candidate, and plans that ask for it run
    /// the other of the two.
    pub excluded: Option<Protocol>,
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

    /// Whether the call's prices skip the copies onto themselves of an in-place call
    /// ([`Call::in_place`]): where every rank knows the call is in place, which of a rooted
    /// collective only the root does (as for [`Request::direct_reads`]).
    pub fn in_place(&self) -> bool {
        self.mode == Mode::InPlace && !self.collective.is_rooted()
    }

    /// The call this request makes of a plan run with `replicas` and `protocol`.
    pub fn call(&self, replicas: u32, protocol: Protocol) -> Call {
        Call {
            bytes: self.bytes,
            elem: self.elem,
            protocol,
            replicas,
            direct: self.direct_reads(),
            together: self.direct,
            in_place: self.in_place(),
        }
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

/// Why `plan` cannot serve `req` on a topology of `n` ranks, if it cannot.
pub fn excluded(plan: &Plan, req: &Request, n: u32) -> Option<String> {
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

/// Of `configs` (replicas, protocol) of `plan`, the cheapest for `req` (the first of
/// equals), or where none can be priced the first one's error; the options that cannot
/// beat it are bounded, not simulated ([`near::price_near`]).
fn cheapest(
    plan: &Plan,
    topo: &Topology,
    profile: &Profile,
    req: &Request,
    configs: &[(u32, Protocol)],
) -> Option<(u32, Protocol, Result<f64, String>)> {
    let offers: Vec<near::Offer> = configs
        .iter()
        .map(|&(replicas, protocol)| near::Offer {
            plan,
            call: req.call(replicas, protocol),
        })
        .collect();
    let results = near::price_near(&offers, topo, profile, 0.0);
    let best = results
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match r {
            Some(Ok(t)) => Some((*t, i)),
            _ => None,
        })
        .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    match best {
        Some((t, i)) => Some((configs[i].0, configs[i].1, Ok(t))),
        None => results.iter().zip(configs).find_map(|(r, c)| match r {
            Some(Err(e)) => Some((c.0, c.1, Err(e.clone()))),
            _ => None,
        }),
    }
}

/// The protocols `plan` may run with for `req`: `forced` where given, else the plan's own,
/// `Auto` meaning every one the backend has. LL128 only where `req` allows it: a plan or
/// a caller that asks for it elsewhere gets Simple, as the runtime runs it.
pub fn protocols(plan: &Plan, req: &Request, forced: Option<Protocol>) -> Vec<Protocol> {
    let mut v = protocols_asked(plan, req, forced);
    let other = match req.excluded {
        Some(Protocol::Ll) => Some((Protocol::Ll, Protocol::Simple)),
        Some(Protocol::Simple) => Some((Protocol::Simple, Protocol::Ll)),
        _ => None,
    };
    if let Some((out, instead)) = other.filter(|&(out, _)| forced != Some(out)) {
        for p in &mut v {
            if *p == out {
                *p = instead;
            }
        }
        // Simple and LL are neighbours in every list: one left where both were.
        v.dedup();
    }
    v
}

/// [`protocols`] before the protocol list's exclusion of Simple or LL.
fn protocols_asked(plan: &Plan, req: &Request, forced: Option<Protocol>) -> Vec<Protocol> {
    match (forced, plan.protocol) {
        (Some(Protocol::Ll128), _) if !req.ll128 => vec![Protocol::Simple],
        (Some(fixed), _) => vec![fixed],
        (None, Protocol::Auto) if req.ll128 => {
            vec![Protocol::Simple, Protocol::Ll, Protocol::Ll128]
        }
        (None, Protocol::Auto) => vec![Protocol::Simple, Protocol::Ll],
        (None, Protocol::Ll128) if req.ll128 => vec![Protocol::Ll128],
        (None, Protocol::Ll128) => vec![Protocol::Simple],
        (None, other) => vec![other],
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
        let protocols = protocols(p, req, protocol);
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
