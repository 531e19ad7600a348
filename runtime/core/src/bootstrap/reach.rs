//! Whether every rank of a joined group can open a link to every other one, as the
//! transports will: what `braid doctor` checks when a launcher starts it on every rank.
//! The join only proves that each rank reaches rank 0; a job hangs or fails later when
//! rank 5 cannot reach the interface rank 12 listens on. Every pair is tried once, each
//! link with its own deadline, and every rank learns every failure (through rank 0,
//! which every rank reached to join).

use super::Bootstrap;
use crate::error::Result;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The tag of the probe links (the liveness streams take `u64::MAX - 1`).
const REACH_TAG: u64 = u64::MAX - 2;

/// Links a rank opens at once.
const AT_ONCE: usize = 32;

/// Barriers timed for [`Reach::barrier_us`] (the median is kept).
const BARRIERS: usize = 5;

/// What the probe found, the same on every rank.
#[derive(Clone, Debug, PartialEq)]
pub struct Reach {
    /// Each rank's host name, by rank.
    pub hosts: Vec<String>,
    /// Where each rank accepts links, by rank.
    pub addrs: Vec<SocketAddr>,
    /// The links that could not be opened: `(from, to, why)`, in order.
    pub failed: Vec<(u32, u32, String)>,
    /// A barrier through rank 0, µs (median of a few): the control path's round trip.
    pub barrier_us: f64,
}

/// This host's name (the kernel's; `?` where it cannot be read).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "?".into())
}

/// Opens a link from every rank to every other rank of `boot`'s group (each waiting at
/// most `link_timeout`) and gathers what failed. All ranks must call it. Errors only
/// where the group itself fails (rank 0 unreachable, a rank gone); a link that cannot be
/// opened is a finding in the result, not an error.
pub fn probe(boot: &mut Bootstrap, link_timeout: Duration) -> Result<Reach> {
    let me = boot.rank();
    let n = boot.n_ranks();
    let hosts = boot
        .allgather(host_name().as_bytes())?
        .into_iter()
        .map(|h| String::from_utf8_lossy(&h).into_owned())
        .collect();
    let addrs: Vec<SocketAddr> = (0..n).filter_map(|r| boot.peer_addr(r)).collect();
    let group_timeout = boot.timeout();
    boot.set_timeout(link_timeout);
    // Links to the ranks above, opened first: a rank's acceptor takes them in the
    // background, so no rank waits on another's order. They are opened [`AT_ONCE`] at a
    // time, so links that cannot open cost a few deadlines, not one per peer.
    let mut open = Vec::new();
    let mut failed: Vec<(u32, u32, String)> = Vec::new();
    let above: Vec<u32> = (me + 1..n).collect();
    for batch in above.chunks(AT_ONCE) {
        let shared: &Bootstrap = boot;
        let results: Vec<_> = std::thread::scope(|s| {
            let tries: Vec<_> = batch
                .iter()
                .map(|&peer| s.spawn(move || (peer, shared.connect_link(peer, REACH_TAG))))
                .collect();
            tries.into_iter().map(|t| t.join()).collect()
        });
        for r in results {
            match r {
                Ok((_, Ok(stream))) => open.push(stream),
                Ok((peer, Err(e))) => failed.push((me, peer, e.to_string())),
                Err(_) => {
                    return Err(crate::error::RuntimeError::Bootstrap(
                        "a thread opening a probe link panicked".into(),
                    ))
                }
            }
        }
    }
    boot.set_timeout(group_timeout);
    // Everyone learns which links were not opened, so no rank waits for one of them.
    let all = gather_failures(boot, &failed)?;
    boot.set_timeout(link_timeout);
    let mut mine = Vec::new();
    for peer in 0..me {
        if all.iter().any(|f| f.0 == peer && f.1 == me) {
            continue;
        }
        match boot.accept_link(peer, REACH_TAG) {
            Ok(s) => open.push(s),
            Err(e) => mine.push((peer, me, e.to_string())),
        }
    }
    boot.set_timeout(group_timeout);
    let mut failed = all;
    failed.extend(gather_failures(boot, &mine)?);
    failed.sort_by_key(|f| (f.0, f.1));
    drop(open);
    let mut times = Vec::with_capacity(BARRIERS);
    for _ in 0..BARRIERS {
        let t = Instant::now();
        boot.barrier()?;
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    Ok(Reach {
        hosts,
        addrs,
        failed,
        barrier_us: times[BARRIERS / 2],
    })
}

/// Every rank's failures, gathered on every rank.
fn gather_failures(
    boot: &Bootstrap,
    mine: &[(u32, u32, String)],
) -> Result<Vec<(u32, u32, String)>> {
    let text: String = mine
        .iter()
        .map(|(a, b, why)| format!("{a}\t{b}\t{}\n", why.replace(['\t', '\n'], " ")))
        .collect();
    let mut all = Vec::new();
    for part in boot.allgather(text.as_bytes())? {
        for line in String::from_utf8_lossy(&part).lines() {
            let mut f = line.splitn(3, '\t');
            if let (Some(a), Some(b), Some(why)) = (f.next(), f.next(), f.next()) {
                if let (Ok(a), Ok(b)) = (a.parse(), b.parse()) {
                    all.push((a, b, why.to_string()));
                }
            }
        }
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::UniqueId;
    use std::thread;

    const T: Duration = Duration::from_secs(5);

    /// Each link's deadline in these tests.
    const LINK: Duration = Duration::from_millis(1500);

    /// `n` ranks on threads, each probing once `edit` has changed its bootstrap.
    fn probe_group(n: u32, edit: fn(&mut Bootstrap)) -> Vec<Reach> {
        let (id, _root) = UniqueId::new(Some("127.0.0.1:0".parse().unwrap())).unwrap();
        let handles: Vec<_> = (0..n)
            .map(|r| {
                let id = id.clone();
                thread::spawn(move || {
                    let mut b = Bootstrap::init(&id, r, n, T).unwrap();
                    edit(&mut b);
                    probe(&mut b, LINK).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn every_pair_of_ranks_opens_a_link_and_all_agree() {
        let reach = probe_group(4, |_| {});
        for r in &reach {
            assert!(r.failed.is_empty(), "{:?}", r.failed);
            assert_eq!(r.hosts, vec![host_name(); 4]);
            assert_eq!(r.addrs.len(), 4);
            assert!(r.barrier_us > 0.0);
            assert_eq!(r.addrs, reach[0].addrs);
        }
    }

    #[test]
    fn a_link_that_cannot_open_is_reported_on_every_rank_and_nobody_waits_for_it() {
        // Rank 0 sees rank 2 at a port where nothing listens (its own link listener's
        // port plus one is not rank 2's): its link to rank 2 fails, the others open.
        fn misdirect(b: &mut Bootstrap) {
            if b.rank() == 0 {
                let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                let addr = dead.local_addr().unwrap();
                drop(dead);
                b.table[2] = addr;
            }
        }
        let start = Instant::now();
        let reach = probe_group(3, misdirect);
        for r in &reach {
            assert_eq!(r.failed.len(), 1, "{:?}", r.failed);
            let (from, to, why) = &r.failed[0];
            assert_eq!((*from, *to), (0, 2));
            assert!(why.contains("rank 0 connecting a link to rank 2"), "{why}");
        }
        // Rank 2 did not wait for the link rank 0 could not open (else it would report
        // it a second time, from its side), and nothing waited for the group's timeout.
        assert!(start.elapsed() < T, "{:?}", start.elapsed());
    }

    #[test]
    fn links_that_cannot_open_cost_one_deadline_not_one_each() {
        // Rank 0 sees ranks 1-3 where nothing listens: three links fail, tried at once
        // (one after another they would take three deadlines, 4.5 s).
        fn misdirect_all(b: &mut Bootstrap) {
            if b.rank() == 0 {
                for r in 1..4 {
                    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                    b.table[r] = dead.local_addr().unwrap();
                }
            }
        }
        let start = Instant::now();
        let reach = probe_group(4, misdirect_all);
        let took = start.elapsed();
        for r in &reach {
            let pairs: Vec<(u32, u32)> = r.failed.iter().map(|f| (f.0, f.1)).collect();
            assert_eq!(pairs, [(0, 1), (0, 2), (0, 3)]);
        }
        assert!(took < 2 * LINK + LINK / 3, "{took:?}");
    }
}
