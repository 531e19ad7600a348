//! One step's slices, simulated in closed form.
//!
//! A step moves its bytes in `n` slices. Slice `x` starts when slice `x - 1` has ended
//! and, for a step that receives, when slice `x` of its message has arrived; it then
//! takes a fixed time (plus, over the network, a proxy's post per message). Written out
//! slice by slice ([`run_listed`], the reference) that is `n` steps of
//! `t = max(t, arrival[x]) + cost`, and a 1 GiB call on 32 ranks simulates hundreds of
//! millions of them. But when a message's arrivals are the largest of a few lines in
//! the slice index (a step that receives nothing ends its slices on one line; a step
//! that receives such a message ends them on the largest of its own line and one line
//! per line of the message: see [`run`]), the recurrence has a closed form, and a
//! step's slices cost as much to simulate as its message has lines. Where the sender
//! cut its message into a different number of slices than the receiver (the receiver
//! takes the arrival of the same share), the slices are listed one by one as before.

/// A message's arrival lines `(p, q)`: a few, kept inline.
pub type Lines = smallvec::SmallVec<[(f64, f64); 4]>;

/// When each slice of a message reaches its receiver.
#[derive(Clone, Debug, PartialEq)]
pub enum Arrivals {
    /// Slice 0 at `first`; slice `x` in `1..len` at the largest `p + q·x` of `lines`.
    Ramp {
        len: usize,
        first: f64,
        lines: Lines,
    },
    /// Every slice's arrival.
    Listed(Vec<f64>),
}

impl Default for Arrivals {
    fn default() -> Self {
        Arrivals::Listed(Vec::new())
    }
}

impl Arrivals {
    pub fn len(&self) -> usize {
        match self {
            Arrivals::Ramp { len, .. } => *len,
            Arrivals::Listed(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Slice `x`'s arrival (`x < len`).
    pub fn at(&self, x: usize) -> f64 {
        match self {
            Arrivals::Ramp { first, lines, .. } => {
                if x == 0 {
                    *first
                } else {
                    lines
                        .iter()
                        .map(|&(p, q)| p + q * x as f64)
                        .fold(f64::NEG_INFINITY, f64::max)
                }
            }
            Arrivals::Listed(v) => v[x],
        }
    }

    pub fn first(&self) -> Option<f64> {
        (!self.is_empty()).then(|| self.at(0))
    }

    pub fn last(&self) -> Option<f64> {
        (!self.is_empty()).then(|| self.at(self.len() - 1))
    }
}

/// What one step's slices do.
#[derive(Clone, Copy, Debug)]
pub struct Slices {
    /// How many (at least 1).
    pub n: usize,
    /// What each costs, its proxy's posts aside (µs).
    pub cost: f64,
    /// The step receives its message through a network proxy, which takes each slice in
    /// turn (only for a step with a message).
    pub net_in: bool,
    /// The step sends through a network proxy, which posts each slice in turn.
    pub net: bool,
    /// What one post costs the proxy (µs).
    pub net_post: f64,
    /// The step sends: its slices' arrivals at the receiver are wanted.
    pub sends: bool,
    /// From a slice's end to its arrival (µs).
    pub latency: f64,
    /// How long before a slice's arrival the step may take it up (µs): 0 where a slice
    /// is read once it has landed whole (Simple: the sender publishes it at its end),
    /// the slice's own cost where its lines are read as they land (LL and LL128 on a
    /// GPU), so that a receive that waits ends its slice when the message's slice has
    /// arrived, not a slice's cost after.
    pub lead: f64,
}

/// Runs `s` from `start`, receiving `incoming` (its message, if the step receives one),
/// with the proxy of the step's rank next free at `proxy` (updated). Returns when the
/// step ends (after its last slice, and no earlier than its message's last arrival) and
/// when its slices arrive (empty unless it sends). Equal to [`run_listed`] up to rounding.
pub fn run(
    s: &Slices,
    start: f64,
    incoming: Option<&Arrivals>,
    proxy: &mut f64,
) -> (f64, Arrivals) {
    let n = s.n.max(1);
    let lines_in: &[(f64, f64)] = match incoming {
        Some(Arrivals::Ramp { len, lines, .. }) if *len == n => lines,
        Some(a) if !a.is_empty() => return run_listed(s, start, incoming, proxy),
        _ => &[],
    };
    let has_in = incoming.is_some();
    let net_in = has_in && s.net_in;
    let np = s.net_post;
    // Slice 0, as the reference does it.
    let mut u = start;
    if let Some(a) = incoming.and_then(Arrivals::first) {
        u = u.max(a - s.lead);
    }
    if net_in {
        u = u.max(*proxy) + np;
    }
    u += s.cost;
    if s.net {
        // After a receive's post the proxy is free by `u` already.
        u = if net_in { u + np } else { u.max(*proxy) + np };
    }
    let t0 = u;
    // Slices 1.. : t_x = max(t_{x-1}, a_x) + step, where a proxy, once it has taken
    // slice 0, is always free by then. Unrolled, t_x is the largest of t_0 + x·step and,
    // per line p + q·j of the arrivals, max over 1 <= j <= x of p + q·j + (x - j + 1)·step:
    // at j = 1 where q <= step (a line of slope step), at j = x where q > step (slope q).
    let step = s.cost + if net_in { np } else { 0.0 } + if s.net { np } else { 0.0 };
    let mut lines = Lines::new();
    lines.push((t0, step));
    for &(p, q) in lines_in {
        let p = p - s.lead;
        lines.push(if q <= step {
            (p + q, step)
        } else {
            (p + step, q)
        });
    }
    let lines = prune(lines, n);
    let at = |x: usize| -> f64 {
        if x == 0 {
            t0
        } else {
            lines
                .iter()
                .map(|&(p, q)| p + q * x as f64)
                .fold(f64::NEG_INFINITY, f64::max)
        }
    };
    let t_last = at(n - 1);
    if s.net {
        *proxy = t_last;
    } else if net_in {
        *proxy = t_last - s.cost;
    }
    let end = match incoming.and_then(Arrivals::last) {
        Some(l) => t_last.max(l),
        None => t_last,
    };
    let out = if s.sends {
        Arrivals::Ramp {
            len: n,
            first: t0 + s.latency,
            lines: lines.iter().map(|&(p, q)| (p + s.latency, q)).collect(),
        }
    } else {
        Arrivals::default()
    };
    (end, out)
}

/// Drops lines that another one covers on every slice `1..n`, and of lines of one slope
/// keeps the highest.
fn prune(mut lines: Lines, n: usize) -> Lines {
    let last = (n.max(2) - 1) as f64;
    let covers = |a: (f64, f64), b: (f64, f64)| {
        a.0 + a.1 >= b.0 + b.1 && a.0 + a.1 * last >= b.0 + b.1 * last
    };
    let mut i = 0;
    while i < lines.len() {
        let b = lines[i];
        let covered = lines
            .iter()
            .enumerate()
            .any(|(j, &a)| j != i && covers(a, b) && (!covers(b, a) || j < i));
        if covered {
            lines.swap_remove(i);
        } else {
            i += 1;
        }
    }
    lines
}

/// [`run`], slice by slice: the reference, and what runs where the sender cut its
/// message into another number of slices (the receiver takes the arrival of the same
/// share).
pub fn run_listed(
    s: &Slices,
    start: f64,
    incoming: Option<&Arrivals>,
    proxy: &mut f64,
) -> (f64, Arrivals) {
    let n = s.n.max(1);
    let mut t = start;
    let mut out = Vec::with_capacity(if s.sends { n } else { 0 });
    for x in 0..n {
        if let Some(a) = incoming {
            if !a.is_empty() {
                t = t.max(a.at((x * a.len() / n).min(a.len() - 1)) - s.lead);
            }
            if s.net_in {
                // The receiving proxy takes each network message in turn.
                t = t.max(*proxy) + s.net_post;
                *proxy = t;
            }
        }
        t += s.cost;
        if s.net {
            // Posted when the proxy is free; the proxy is busy while it posts.
            t = t.max(*proxy) + s.net_post;
            *proxy = t;
        }
        if s.sends {
            out.push(t + s.latency);
        }
    }
    if let Some(l) = incoming.and_then(Arrivals::last) {
        // Everything received before the step ends.
        t = t.max(l);
    }
    (t, Arrivals::Listed(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

    fn same(a: &Arrivals, b: &Arrivals) -> bool {
        a.len() == b.len() && (0..a.len()).all(|x| close(a.at(x), b.at(x)))
    }

    /// `n` slices of `cost` each, no network.
    fn plain(n: usize, cost: f64, sends: bool, latency: f64) -> Slices {
        Slices {
            n,
            cost,
            net_in: false,
            net: false,
            net_post: 0.0,
            sends,
            latency,
            lead: 0.0,
        }
    }

    fn slices() -> impl Strategy<Value = Slices> {
        (
            1usize..300,
            0.0f64..5.0,
            any::<bool>(),
            any::<bool>(),
            0.0f64..3.0,
            any::<bool>(),
            0.0f64..4.0,
            prop_oneof![Just(0.0f64), 0.0f64..6.0],
        )
            .prop_map(
                |(n, cost, net_in, net, net_post, sends, latency, lead)| Slices {
                    n,
                    cost,
                    net_in,
                    net,
                    net_post,
                    sends,
                    latency,
                    lead,
                },
            )
    }

    proptest! {
        /// A chain of steps, each receiving what the previous one sent (cut alike or
        /// not), priced in closed form and slice by slice: the same ends, the same
        /// arrivals, the same proxy.
        #[test]
        fn closed_form_is_the_slice_by_slice_recurrence(
            steps in proptest::collection::vec((slices(), 0.0f64..200.0, any::<bool>()), 1..6),
            proxy0 in 0.0f64..300.0,
        ) {
            let mut a_closed: Option<Arrivals> = None;
            let mut a_ref: Option<Arrivals> = None;
            let (mut p_closed, mut p_ref) = (proxy0, proxy0);
            for (s, start, receives) in steps {
                let s = Slices { sends: true, ..s };
                let (inc_c, inc_r) = if receives {
                    (a_closed.as_ref(), a_ref.as_ref())
                } else {
                    (None, None)
                };
                let (e1, o1) = run(&s, start, inc_c, &mut p_closed);
                let (e2, o2) = run_listed(&s, start, inc_r, &mut p_ref);
                prop_assert!(close(e1, e2), "end {} against {}", e1, e2);
                prop_assert!(close(p_closed, p_ref), "proxy {} against {}", p_closed, p_ref);
                prop_assert!(same(&o1, &o2), "arrivals {:?} against {:?}", o1, o2);
                a_closed = Some(o1);
                a_ref = Some(o2);
            }
        }
    }

    #[test]
    fn a_step_without_a_message_is_one_line() {
        let s = plain(1000, 2.0, true, 1.0);
        let (end, out) = run(&s, 10.0, None, &mut 0.0);
        assert_eq!(end, 2010.0);
        let Arrivals::Ramp { len, first, lines } = out else {
            panic!("listed")
        };
        assert_eq!((len, first, lines.len()), (1000, 13.0, 1));
        assert_eq!(Arrivals::Ramp { len, first, lines }.last(), Some(2011.0));
    }

    /// `len` slices arriving every 3 µs from 3 µs on.
    fn every_3us(len: usize) -> Arrivals {
        Arrivals::Ramp {
            len,
            first: 3.0,
            lines: Lines::from_slice(&[(3.0, 3.0)]),
        }
    }

    #[test]
    fn a_faster_receiver_waits_for_each_slice() {
        // The sender's slices arrive every 3 µs, the receiver needs 1: it ends one
        // slice after the last arrival.
        let a = every_3us(100);
        let s = plain(100, 1.0, false, 0.0);
        let (end, _) = run(&s, 0.0, Some(&a), &mut 0.0);
        assert_eq!(end, 3.0 + 99.0 * 3.0 + 1.0);
    }

    #[test]
    fn a_receive_that_reads_lines_as_they_land_ends_with_the_last_arrival() {
        // Slices arrive every 3 µs and take the receiver 3: read as they land (lead 3),
        // the step ends when the last one has arrived; read whole, a slice after it.
        // A receiver that starts late is not helped: it still takes its slices' time.
        let a = every_3us(100);
        let whole = plain(100, 3.0, false, 0.0);
        let lines = Slices { lead: 3.0, ..whole };
        assert_eq!(run(&whole, 0.0, Some(&a), &mut 0.0).0, 303.0);
        assert_eq!(run(&lines, 0.0, Some(&a), &mut 0.0).0, 300.0);
        assert_eq!(run_listed(&lines, 0.0, Some(&a), &mut 0.0).0, 300.0);
        assert_eq!(run(&lines, 1000.0, Some(&a), &mut 0.0).0, 1300.0);
    }

    #[test]
    fn slices_cut_otherwise_are_listed() {
        let a = Arrivals::Ramp {
            len: 10,
            first: 1.0,
            lines: Lines::from_slice(&[(1.0, 1.0)]),
        };
        let s = plain(20, 0.1, true, 0.0);
        let (_, out) = run(&s, 0.0, Some(&a), &mut 0.0);
        assert!(matches!(out, Arrivals::Listed(ref v) if v.len() == 20));
    }
}
