//! Pricing only what can win. Choosing among many options (plans, replica counts,
//! protocols) needs the exact time of the fastest and of those near it, not of the
//! others: each option is bounded first ([`sim::predict_below`]: a fraction of a
//! simulation's cost), and, cheapest bound first, only those whose bound is within reach
//! are simulated. What comes out is what pricing them all and discarding the slow ones
//! gives.

use crate::profile::Profile;
use crate::sim::{self, Call, Priced};
use braid_plan::Plan;
use braid_topo::Topology;

/// From this size on, [`price_near`] bounds every option before it simulates any; below
/// it, a simulation costs little more than a bound, and each option is bounded on its
/// way to being simulated, in the given order.
pub const SORT_MIN_BYTES: u64 = 1 << 20;

/// One option: a plan and the call it would run.
#[derive(Clone, Copy)]
pub struct Offer<'a> {
    pub plan: &'a Plan,
    pub call: Call,
}

/// Prices every offer whose time is within `within` (a fraction: 0.02 is 2 %) of the
/// fastest offer's, exactly (`Some(Ok(µs))`); an offer the model cannot price has its
/// error (`Some(Err)`); of the others, those bounded above that are `None` (those
/// simulated before a faster one was found keep their price).
pub fn price_near(
    offers: &[Offer],
    topo: &Topology,
    profile: &Profile,
    within: f64,
) -> Vec<Option<Result<f64, String>>> {
    // Each plan's wiring, made once for all its options with direct reads and once for
    // those without (or the error that says it cannot be priced).
    type Made<'a> = (&'a Plan, bool, Result<sim::Wired<'a>, String>);
    let mut wired: Vec<Made> = Vec::new();
    let mut wired_of = Vec::with_capacity(offers.len());
    for o in offers {
        let found = wired
            .iter()
            .position(|(p, d, _)| std::ptr::eq(*p, o.plan) && *d == o.call.direct);
        wired_of.push(found.unwrap_or_else(|| {
            wired.push((
                o.plan,
                o.call.direct,
                sim::Wired::new(o.plan, topo, o.call.direct),
            ));
            wired.len() - 1
        }));
    }
    let price = |i: usize, limit: f64| match &wired[wired_of[i]].2 {
        Ok(w) => w.price(profile, &offers[i].call, limit),
        Err(e) => Err(e.clone()),
    };
    let mut results: Vec<Option<Result<f64, String>>> = vec![None; offers.len()];
    let mut order: Vec<(f64, usize)> = Vec::with_capacity(offers.len());
    let large = offers.iter().any(|o| o.call.bytes >= SORT_MIN_BYTES);
    if offers.len() < 2 || !large {
        order.extend((0..offers.len()).map(|i| (f64::NEG_INFINITY, i)));
    } else {
        for (i, result) in results.iter_mut().enumerate() {
            match price(i, f64::NEG_INFINITY) {
                Ok(Priced::Above(b)) => order.push((b, i)),
                // A flat launch is priced outright.
                Ok(Priced::Predicted(p)) => *result = Some(Ok(p.total_us)),
                Err(e) => *result = Some(Err(e)),
            }
        }
        order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    }
    let mut fastest = results
        .iter()
        .filter_map(|r| r.as_ref().and_then(|r| r.as_ref().ok()).copied())
        .fold(f64::INFINITY, f64::min);
    for (bound, i) in order {
        // What an offer must beat to matter, with a margin for the bound's rounding (it
        // adds up what the simulation adds in another order).
        let limit = fastest * (1.0 + within) * (1.0 + 1e-9);
        if bound > limit {
            break;
        }
        results[i] = match price(i, limit) {
            Ok(Priced::Predicted(p)) => {
                fastest = fastest.min(p.total_us);
                Some(Ok(p.total_us))
            }
            Ok(Priced::Above(_)) => None,
            Err(e) => Some(Err(e)),
        };
    }
    results
}
