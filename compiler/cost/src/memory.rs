//! A call's memory traffic over time, where its ranks share one memory (several ranks on
//! one GPU). The simulation runs each step at its block's rate; where the steps running
//! at one moment ask more of the memory than its shared rate, that stretch of the call
//! lasts longer, by as much as they ask over the rate. Summed over the call, this is
//! at least the simulated end (no stretch lasts less than simulated) and, for a call whose
//! steps all run at once, the whole traffic over the shared rate; a call in phases (a
//! staged reduction: receives and copies together, then the reductions alone) pays for
//! each phase's own demand instead of their average. Pure arithmetic.
//!
//! How sharply the rate binds is the profile's `shared_knee` ([`combine`]): a memory
//! does not deliver its whole rate to blocks that ask exactly that much of it (their
//! loads queue behind each other as it fills), so near its rate a stretch lasts longer
//! than either the blocks' own pace or the rate alone would say.

/// The time of work that two rates bound at once, from the time each alone would take
/// (`a`, `b`, µs): with `knee` 0 the larger of the two (the slower rate binds sharply),
/// else their `knee`-norm, `(a^knee + b^knee)^(1/knee)`: the larger one where the other
/// is small, up to `2^(1/knee)` times it where the two are equal. `braid tune` measures
/// the knee where ranks share a GPU (a call whose blocks alone would ask about the
/// memory's rate).
pub fn combine(a: f64, b: f64, knee: f64) -> f64 {
    // (A demand summed from its steps' starts and stops may round below 0.)
    let (a, b) = (a.max(0.0), b.max(0.0));
    let (hi, lo) = if a >= b { (a, b) } else { (b, a) };
    if knee <= 0.0 || hi <= 0.0 {
        return hi;
    }
    // Scaled by the larger, so that no power overflows.
    hi * (1.0 + (lo / hi).powf(knee)).powf(1.0 / knee)
}

/// One step's memory traffic as the simulation ran it: `[start, end)` µs, and the bytes
/// it reads and writes in that time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Traffic {
    pub start: f64,
    pub end: f64,
    pub bytes: f64,
}

/// The simulated clock mapped onto the stretched one: every stretch of the call whose
/// steps together ask more than the shared rate lengthened to what the rate allows (each
/// step's demand spread evenly over its span), the rest kept as simulated.
#[derive(Clone, Debug, Default)]
pub struct Stretch {
    /// (simulated, stretched) µs where the demand changes, in order; none: no stretch.
    points: Vec<(f64, f64)>,
}

impl Stretch {
    /// The stretch of a call whose steps made `traffic`, on a memory shared at
    /// `shared_gbps` (none if 0) whose rate binds as sharply as `knee` says ([`combine`]).
    pub fn new(traffic: impl IntoIterator<Item = Traffic>, shared_gbps: f64, knee: f64) -> Stretch {
        if shared_gbps <= 0.0 {
            return Stretch::default();
        }
        // Each step's rate (bytes per µs) starting and stopping.
        let mut events: Vec<(f64, f64)> = Vec::new();
        for t in traffic {
            let span = t.end - t.start;
            if span > 0.0 && t.bytes > 0.0 {
                let rate = t.bytes / span;
                events.push((t.start, rate));
                events.push((t.end, -rate));
            }
        }
        events.sort_by(|a, b| a.0.total_cmp(&b.0));
        let capacity = shared_gbps * 1e3; // bytes per µs
        let (mut rate, mut at, mut total) = (0f64, 0f64, 0f64);
        let mut points = vec![(0.0, 0.0)];
        let mut stretches = false;
        for (t, delta) in events {
            let factor = combine(1.0, rate / capacity, knee);
            stretches |= factor > 1.0 && t > at;
            total += (t - at) * factor;
            rate += delta;
            at = t;
            points.push((at, total));
        }
        if !stretches {
            points.clear();
        }
        Stretch { points }
    }

    /// Simulated time `t` (µs) on the stretched clock.
    pub fn at(&self, t: f64) -> f64 {
        let Some(&(last_t, last_s)) = self.points.last() else {
            return t;
        };
        if t >= last_t {
            return last_s + (t - last_t);
        }
        // The last point at or before `t`, and the one after it.
        let i = self.points.partition_point(|p| p.0 <= t).max(1);
        let (t0, s0) = self.points[i - 1];
        let (t1, s1) = self.points[i];
        if t1 > t0 {
            s0 + (t - t0) * (s1 - s0) / (t1 - t0)
        } else {
            s0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(start: f64, end: f64, bytes: f64) -> Traffic {
        Traffic { start, end, bytes }
    }

    #[test]
    fn a_phase_asking_more_than_the_shared_rate_lasts_longer_and_one_within_it_does_not() {
        // 1 GB/s = 1000 bytes per µs. Phase 1 (0-10 µs): two steps of 15000 bytes each,
        // 3000 bytes/µs together: 3x the rate, so 30 µs. Phase 2 (10-20): one step
        // asking half the rate, 10 µs.
        let phases = [
            t(0.0, 10.0, 15_000.0),
            t(0.0, 10.0, 15_000.0),
            t(10.0, 20.0, 5_000.0),
        ];
        let total = Stretch::new(phases, 1.0, 0.0).at(20.0);
        assert!((total - 40.0).abs() < 1e-9, "{total}");
        // The average over the call (35000 bytes in 20 µs) would say 35 µs: the phases
        // cost more than their average.
        let average = 35_000.0 / 1e3;
        assert!(total > average);
        // Inside: halfway through phase 1 is 15 µs stretched; phase 2 keeps its pace.
        let s = Stretch::new(phases, 1.0, 0.0);
        assert!((s.at(5.0) - 15.0).abs() < 1e-9);
        assert!((s.at(15.0) - 35.0).abs() < 1e-9);
    }

    #[test]
    fn within_the_rate_or_without_one_the_simulated_end_stands() {
        let steps = [t(0.0, 10.0, 4_000.0), t(5.0, 12.0, 3_000.0)];
        assert_eq!(Stretch::new(steps, 1.0, 0.0).at(12.0), 12.0);
        assert_eq!(Stretch::new(steps, 0.0, 0.0).at(12.0), 12.0);
        // Idle time after the last step's traffic (a latency) is kept.
        assert_eq!(Stretch::new(steps, 1.0, 0.0).at(15.0), 15.0);
    }

    #[test]
    fn steps_all_at_once_cost_their_whole_traffic_over_the_rate() {
        let steps = [t(0.0, 10.0, 20_000.0), t(0.0, 10.0, 20_000.0)];
        assert!((Stretch::new(steps, 2.0, 0.0).at(10.0) - 20.0).abs() < 1e-9);
    }

    #[test]
    fn a_knee_slows_demand_near_the_rate_most_and_far_from_it_hardly() {
        // Sharp: the larger time.
        assert_eq!(combine(3.0, 5.0, 0.0), 5.0);
        // A knee of 2: equal times cost sqrt(2) times either; a time a tenth of the other
        // adds half a percent; the order of the two does not matter.
        assert!((combine(4.0, 4.0, 2.0) - 4.0 * 2f64.sqrt()).abs() < 1e-12);
        assert!((combine(10.0, 1.0, 2.0) - 101f64.sqrt()).abs() < 1e-12);
        assert_eq!(combine(1.0, 10.0, 2.0), combine(10.0, 1.0, 2.0));
        // A time rounded below 0 counts as none (a fractional power of a negative number
        // is not a number).
        assert_eq!(combine(1.0, -1e-18, 2.72), 1.0);
        assert_eq!(combine(-1e-18, 1.0, 2.72), 1.0);
        // A large knee is nearly sharp, and nothing overflows.
        assert!((combine(1e300, 1e299, 1000.0) - 1e300).abs() / 1e300 < 1e-9);
        // A stretch whose demand equals the rate lasts sqrt(2) times as long with a knee
        // of 2 (none without one), one at a tenth of the rate hardly longer.
        let at_rate = [t(0.0, 10.0, 10_000.0)];
        assert_eq!(Stretch::new(at_rate, 1.0, 0.0).at(10.0), 10.0);
        let knee = Stretch::new(at_rate, 1.0, 2.0).at(10.0);
        assert!((knee - 10.0 * 2f64.sqrt()).abs() < 1e-9, "{knee}");
        let light = Stretch::new([t(0.0, 10.0, 1_000.0)], 1.0, 2.0).at(10.0);
        assert!(light > 10.0 && light < 10.06, "{light}");
    }
}
