//! Selection by the cost model: a call gets the plan, replica count and protocol that
//! `braid_cost` predicts fastest on the communicator's topology, among every plan the
//! registry offers for it (user and shipped alike), within what the backend can run (its
//! thread-block budget, its protocols) and what the variables force (`BRAID_ALGO`,
//! `BRAID_PROTO`, `BRAID_CHANNELS`). Choices are cached per size bucket (powers of two),
//! so a call of a size seen before, or near it, costs a lookup. Every rank computes the
//! same choice from the same topology and profile: the model is deterministic.

use crate::error::Result;
use crate::policy::{blocks_per_replica, Choice, Policy, Request, Target, MAX_REPLICAS};
use crate::registry::Registry;
use braid_cost::{Candidate, Profile};
use braid_ir::{Collective, Mode, Protocol};
use braid_topo::Topology;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// What the model prices calls on.
pub struct Model {
    pub topo: Topology,
    pub profile: Profile,
    /// Per size bucket: the chosen plan's digest, replicas, protocol.
    cache: Mutex<HashMap<Bucket, (u64, u32, Protocol)>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Bucket {
    collective: Collective,
    root: Option<u32>,
    mode: Mode,
    elem: usize,
    /// log2 of the bytes, rounded up.
    log2: u32,
    /// What the backend offered (communicators sharing a model may differ: their block
    /// budgets, whether LL128 passed on their links, whether their ranks launch
    /// together).
    target: Target,
}

impl Model {
    pub fn new(topo: Topology, profile: Profile) -> Model {
        Model {
            topo,
            profile,
            cache: Mutex::new(HashMap::new()),
        }
    }
}

/// A shared model as the policy holds it (compared by identity).
#[derive(Clone)]
pub struct ModelRef(pub Arc<Model>);

impl PartialEq for ModelRef {
    fn eq(&self, other: &ModelRef) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
impl Eq for ModelRef {}

impl std::fmt::Debug for ModelRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Model({} ranks, constants: {})",
            self.0.topo.n_ranks(),
            self.0.profile.source
        )
    }
}

/// Replica counts a plan may run with on `target`: powers of two within the block budget
/// (at most [`MAX_REPLICAS`]); the plan's own count where it fixes one or the backend
/// runs plans as written.
fn replica_counts(plan: &braid_plan::Plan, target: &Target) -> Vec<u32> {
    if plan.channels != 1 || !target.size_replicas {
        return vec![plan.channels.max(1)];
    }
    let fit = (target.block_budget / blocks_per_replica(plan))
        .clamp(1, MAX_REPLICAS)
        .min(braid_cost::max_replicas(plan));
    (0..6).map(|k| 1u32 << k).filter(|&r| r <= fit).collect()
}

/// Choices predicted within this fraction of the fastest count as equally fast: the one
/// with the fewest thread blocks wins among them (it leaves the GPU's multiprocessors to
/// the application, and the model's small differences are below its error).
pub const TIE: f64 = 0.02;

/// The fastest option, or among those within [`TIE`] of it the one with the fewest
/// blocks (then the fastest of those, then the first).
pub fn pick<P: Copy>(options: &[(f64, usize, u32, P, u32)]) -> Option<(f64, usize, u32, P, u32)> {
    let fastest = options.iter().map(|o| o.0).min_by(f64::total_cmp)?;
    options
        .iter()
        .filter(|o| o.0 <= fastest * (1.0 + TIE))
        .min_by(|a, b| a.4.cmp(&b.4).then(a.0.total_cmp(&b.0)))
        .copied()
}

/// One priced choice: (predicted µs, index of the plan, replicas, protocol, thread blocks
/// on the busiest rank).
pub type Priced = (f64, usize, u32, Protocol, u32);

/// Every choice the backend `target` can run for `plans` (replica counts within its block
/// budget, or `replicas`; its protocols, or `protocol`), priced by the model; plans the
/// model cannot price (they do not apply, or it cannot simulate them) have none. With
/// `near`, only the choices within that fraction of the fastest are sure to be there
/// (the others may be bounded and left out: [`braid_cost::near`]), which is all [`pick`]
/// needs with [`TIE`]; without, every plan and replica count has its fastest protocol
/// (what `braid explain` shows).
#[allow(clippy::too_many_arguments)]
pub fn price(
    topo: &Topology,
    profile: &Profile,
    plans: &[&braid_plan::Plan],
    req: &braid_cost::Request,
    replicas: Option<u32>,
    protocol: Option<Protocol>,
    target: &Target,
    near: Option<f64>,
) -> Vec<Priced> {
    let protocol = if target.ll {
        protocol
    } else {
        Some(Protocol::Simple)
    };
    // A backend that runs no flat launches (or has them off) pays for the steps.
    let stepwise;
    let profile = if !target.flat && profile.flat_call_us > 0.0 {
        stepwise = Profile {
            flat_call_us: 0.0,
            ..profile.clone()
        };
        &stepwise
    } else {
        profile
    };
    let counts = |plan: &braid_plan::Plan| match replicas {
        Some(r) => vec![r],
        None => replica_counts(plan, target),
    };
    // The blocks a choice holds on the busiest rank's GPU: a flat launch's grid where the
    // call runs as one (all the ranks' blocks: few for small calls; the same for every
    // replica count, so found once per plan and protocol), else the plan's.
    let grids = std::cell::RefCell::new(HashMap::new());
    let held = |i: usize, r: u32, proto: Protocol| {
        let plan = plans[i];
        let grid = *grids
            .borrow_mut()
            .entry((i, proto))
            .or_insert_with(|| braid_cost::flat::blocks(plan, profile, &req.call(r, proto)));
        grid.map_or(blocks_per_replica(plan) * r, |b| {
            b.min(u64::from(u32::MAX)) as u32
        })
    };
    let mut options = Vec::new();
    if let Some(within) = near {
        // Every plan, replica count and protocol as one offer, priced where it can win.
        let mut offers = Vec::new();
        let mut what = Vec::new();
        for (i, plan) in plans.iter().enumerate() {
            if let Some(why) = braid_cost::excluded(plan, req, topo.n_ranks()) {
                tracing::debug!(plan = %plan.name, "the cost model cannot price it: {why}");
                continue;
            }
            for r in counts(plan) {
                for proto in braid_cost::protocols(plan, req, protocol) {
                    offers.push(braid_cost::near::Offer {
                        plan,
                        call: req.call(r, proto),
                    });
                    what.push((i, r, proto));
                }
            }
        }
        let results = braid_cost::near::price_near(&offers, topo, profile, within);
        for ((i, r, proto), result) in what.into_iter().zip(results) {
            match result {
                Some(Ok(t)) => {
                    options.push((t, i, r, proto, held(i, r, proto)));
                }
                Some(Err(why)) => {
                    tracing::debug!(plan = %plans[i].name, "the cost model cannot price it: {why}")
                }
                None => {}
            }
        }
        return options;
    }
    for (i, plan) in plans.iter().enumerate() {
        let cand = [Candidate {
            plan,
            origin: String::new(),
        }];
        for r in counts(plan) {
            for ranked in braid_cost::rank_with(&cand, topo, profile, req, Some(r), protocol) {
                match ranked.result {
                    Ok(t) => options.push((t, i, r, ranked.protocol, held(i, r, ranked.protocol))),
                    Err(why) => {
                        tracing::debug!(plan = %plan.name, "the cost model cannot price it: {why}")
                    }
                }
            }
        }
    }
    options
}

/// The cheapest choice for `req` by the model, among the registry's candidates.
pub fn choose(
    policy: &Policy,
    model: &Model,
    registry: &Registry,
    req: &Request,
    target: &Target,
) -> Result<Choice> {
    let fitting = registry.candidates(
        req.collective,
        req.n_ranks,
        req.root,
        req.mode,
        req.bytes,
        policy.algo.as_ref(),
    )?;
    let bucket = Bucket {
        collective: req.collective,
        root: req.root,
        mode: req.mode,
        elem: req.elem,
        log2: req.bytes.max(1).next_power_of_two().trailing_zeros(),
        target: *target,
    };
    if let Some(&(digest, replicas, protocol)) = model.cache.lock().unwrap().get(&bucket) {
        if let Some((p, _)) = fitting.iter().find(|(p, _)| p.digest() == digest) {
            return Ok(Choice {
                plan: p.clone(),
                replicas,
                protocol,
            });
        }
    }
    let forced_protocol = match policy.protocol_of(req.collective) {
        _ if !target.ll => Some(Protocol::Simple),
        Some(p) if p != Protocol::Auto => Some(p),
        _ => None,
    };
    let creq = braid_cost::Request {
        collective: req.collective,
        root: req.root,
        mode: req.mode,
        bytes: req.bytes as u64,
        elem: req.elem as u64,
        direct: target.direct,
        ll128: target.ll128,
        excluded: policy.excluded_of(req.collective),
    };
    let plans: Vec<&braid_plan::Plan> = fitting.iter().map(|(p, _)| &***p).collect();
    let options = price(
        &model.topo,
        &model.profile.for_launch(target.direct),
        &plans,
        &creq,
        policy.replicas,
        forced_protocol,
        target,
        Some(TIE),
    );
    let priced: Vec<String> = options
        .iter()
        .map(|o| format!("{} x{} {:?}: {:.2} us", plans[o.1].name, o.2, o.3, o.0))
        .collect();
    let best = pick(&options);
    let Some((t, i, replicas, protocol, _)) = best else {
        // Nothing priced (a plan the model cannot simulate): the rules decide.
        tracing::info!(
            "{} of {} bytes: no candidate could be priced; choosing by rules",
            req.collective,
            req.bytes
        );
        return policy.choose_by_rules(registry, req, target);
    };
    let plan = fitting[i].0.clone();
    tracing::info!(
        plan = %plan.name,
        "{} of {} bytes: selected by the cost model, {replicas} replica(s), {protocol:?}, predicted {t:.2} us (of {})",
        req.collective,
        req.bytes,
        priced.join("; ")
    );
    model
        .cache
        .lock()
        .unwrap()
        .insert(bucket, (plan.digest(), replicas, protocol));
    Ok(Choice {
        plan,
        replicas,
        protocol,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_ties_go_to_the_fewest_blocks_and_clear_wins_to_the_fastest() {
        // (time, candidate, replicas, protocol, blocks)
        let o = [
            (10.0, 0, 8, 'l', 16),
            (10.1, 1, 1, 'l', 2),
            (10.5, 2, 1, 's', 1),
        ];
        assert_eq!(pick(&o).map(|x| x.1), Some(1), "10.1 is within 2 % of 10.0");
        let o = [(10.0, 0, 8, 'l', 16), (10.3, 1, 1, 'l', 2)];
        assert_eq!(pick(&o).map(|x| x.1), Some(0), "10.3 is 3 % slower");
        assert!(pick::<char>(&[]).is_none());
    }
}
