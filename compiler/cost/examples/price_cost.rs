//! The time to price a call: every shipped plan of a collective on a topology, in every
//! replica count and protocol it can run with ([`braid_cost::rank`], what `braid explain`
//! and a communicator's first call of a size bucket do), without compiling the plans.
//!
//! ```text
//! cargo run --release -p braid-cost --example price_cost -- [TOPO] [COLLECTIVE] [SIZES...]
//! ```
//!
//! Defaults: `cluster:4x8 allreduce 8 1M 64M 1G`. Prints, per size, the median of 5
//! timings and the plan that won.

use braid_cost::{rank, Candidate, Profile, Request};
use braid_ir::{Collective, Mode};
use braid_library::Library;
use braid_topo::Topology;
use std::time::Instant;

fn size(s: &str) -> u64 {
    let (num, mult) = match s.as_bytes().last() {
        Some(b'K') => (&s[..s.len() - 1], 1 << 10),
        Some(b'M') => (&s[..s.len() - 1], 1 << 20),
        Some(b'G') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().expect("a size such as 8, 4K, 64M or 1G") * mult
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let topo = args.first().map_or("cluster:4x8", String::as_str);
    let collective = Collective::from_name(args.get(1).map_or("allreduce", String::as_str))
        .expect("a collective");
    let sizes: Vec<u64> = if args.len() > 2 {
        args[2..].iter().map(|s| size(s)).collect()
    } else {
        ["8", "1M", "64M", "1G"].iter().map(|s| size(s)).collect()
    };
    let t = Topology::from_arg(topo).expect("a topology");
    let plans = Library::new(t.clone()).plans(collective, collective.is_rooted().then_some(0));
    let cands: Vec<Candidate> = plans
        .iter()
        .map(|p| Candidate {
            plan: p,
            origin: "shipped".into(),
        })
        .collect();
    let profile = Profile::default();
    println!(
        "# pricing {} plans of {collective} on {topo}: median of 5, ms",
        cands.len()
    );
    for bytes in sizes {
        let req = Request {
            collective,
            root: collective.is_rooted().then_some(0),
            mode: Mode::OutOfPlace,
            bytes,
            elem: 4,
            direct: false,
            ll128: false,
            excluded: None,
        };
        let mut times = Vec::new();
        let mut winner = String::new();
        for _ in 0..5 {
            let start = Instant::now();
            let ranked = rank(&cands, &t, &profile, &req);
            times.push(start.elapsed().as_secs_f64() * 1e3);
            winner = ranked.first().map_or(String::new(), |r| r.name.clone());
        }
        times.sort_by(f64::total_cmp);
        println!("{bytes:>12} B  {:>9.2} ms  {winner}", times[2]);
    }
}
