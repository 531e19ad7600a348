//! Send / receive and groups on the host backend, in one process and through the TCP
//! bootstrap (communicators created from a unique id, like ncclCommInitRank).

use braid_runtime::bootstrap::UniqueId;
use braid_runtime::dtype::DType;
use braid_runtime::registry::Registry;
use braid_runtime::{Communicator, RuntimeError};
use std::sync::Arc;
use std::time::Duration;

fn pattern(rank: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u32 * 7 + rank * 13) as u8).collect()
}

/// Every rank sends to every other rank and receives from each, all in one group: with
/// bounded links this only completes because the group runs them concurrently.
fn all_pairs_exchange(comms: &[Communicator], len: usize) {
    let n = comms.len() as u32;
    std::thread::scope(|s| {
        for (r, comm) in comms.iter().enumerate() {
            s.spawn(move || {
                let r = r as u32;
                let mine = pattern(r, len);
                let mut got: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; len]).collect();
                comm.group(|g| {
                    for (p, buf) in got.iter_mut().enumerate() {
                        let p = p as u32;
                        if p != r {
                            g.send(&mine, len, DType::U8, p);
                            g.recv(buf, len, DType::U8, p);
                        }
                    }
                })
                .unwrap();
                for p in (0..n).filter(|&p| p != r) {
                    assert_eq!(got[p as usize], pattern(p, len), "rank {r} from {p}");
                }
            });
        }
    });
}

#[test]
fn grouped_exchanges_between_all_pairs_complete_in_one_process() {
    let comms = Communicator::create_local(4, Arc::new(Registry::new()), Duration::from_secs(20));
    // Larger than slots x slice, so ungrouped blocking sends would deadlock.
    all_pairs_exchange(&comms, 5 * 1024 * 1024 + 3);
}

#[test]
fn communicators_from_a_unique_id_exchange_over_tcp() {
    let (id, _root) = UniqueId::new(None).unwrap();
    let hex = id.to_string();
    let comms: Vec<Communicator> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3)
            .map(|r| {
                let hex = hex.clone();
                s.spawn(move || {
                    let id: UniqueId = hex.parse().unwrap();
                    Communicator::init_rank(
                        &id,
                        r,
                        3,
                        Arc::new(Registry::new()),
                        Duration::from_secs(20),
                    )
                    .unwrap()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    all_pairs_exchange(&comms, 300_001);
}

#[test]
fn a_receive_of_the_wrong_size_is_a_mismatch() {
    let comms = Communicator::create_local(2, Arc::new(Registry::new()), Duration::from_secs(10));
    let results: Vec<Result<(), RuntimeError>> = std::thread::scope(|s| {
        let a = s.spawn(|| comms[0].send(&[1u8; 100], 100, DType::U8, 1));
        let b = s.spawn(|| {
            let mut buf = [0u8; 64];
            comms[1].recv(&mut buf, 16, DType::F32, 0)
        });
        vec![a.join().unwrap(), b.join().unwrap()]
    });
    assert!(
        matches!(results[1], Err(RuntimeError::Mismatch(_))),
        "{results:?}"
    );
    // The small message fit in the link, so the sender may have finished; either way the
    // group is aborted now and nothing more runs on it.
    assert!(matches!(
        comms[0].send(&[0u8; 4], 4, DType::U8, 1),
        Err(RuntimeError::Aborted(_))
    ));
}
