//! All-reduce plans that promise every rank the same bits: on floats whose sums depend
//! on the order of the additions, every rank's output is identical byte for byte (a data
//! parallel job's replicas stay in step only if they do).

use braid_ir::Collective;
use braid_library::Library;
use braid_runtime::comm::{Buffers, Communicator};
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::policy::Policy;
use braid_runtime::registry::{Origin, Registry};
use braid_topo::Topology;
use std::sync::Arc;
use std::time::Duration;

/// Rank `r`'s input: values of very different magnitudes, so that a sum's rounding
/// depends on the order of its terms.
fn input(r: u32, count: usize) -> Vec<f32> {
    (0..count)
        .map(|i| {
            let x = ((i as u64 * 2_654_435_761 + u64::from(r) * 40_503) % 1_000_003) as f32;
            let scale = [1e-3f32, 1.0, 1e4, 3e7][(i + r as usize) % 4];
            (x / 1_000_003.0 - 0.5) * scale
        })
        .collect()
}

#[test]
fn the_out_of_place_one_shot_all_reduce_gives_every_rank_the_same_bits() {
    let (n, count) = (4u32, 4099usize);
    // The test means something only if the order of the additions shows in the bits.
    let sum = |order: &[u32], i: usize| order.iter().fold(0f32, |acc, &r| acc + input(r, count)[i]);
    assert!(
        (0..count).any(|i| sum(&[0, 1, 2, 3], i).to_bits() != sum(&[2, 3, 1, 0], i).to_bits()),
        "the inputs sum to the same bits in any order"
    );
    // The shipped plan alone in the registry.
    let topo = Topology::from_arg(&format!("nvswitch:{n}")).unwrap();
    let plan = Library::new(topo)
        .plans(Collective::Allreduce, None)
        .into_iter()
        .find(|p| p.name == "one_shot_oop_allreduce")
        .expect("the shipped plan applies to nvswitch:4");
    let registry = Registry::new();
    registry.add_verified(plan, Origin::User("test".into()));
    let comms = Communicator::create_local_with(
        n,
        Arc::new(registry),
        Duration::from_secs(60),
        Policy::default(),
    );
    let outs: Vec<Vec<u8>> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .iter()
            .enumerate()
            .map(|(r, c)| {
                s.spawn(move || {
                    let send: Vec<u8> = input(r as u32, count)
                        .iter()
                        .flat_map(|x| x.to_le_bytes())
                        .collect();
                    let mut recv = vec![0u8; send.len()];
                    c.all_reduce(
                        Buffers::OutOfPlace {
                            send: &send,
                            recv: &mut recv,
                        },
                        count,
                        DType::F32,
                        RedOp::Sum,
                    )
                    .unwrap();
                    recv
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (r, out) in outs.iter().enumerate().skip(1) {
        assert!(out == &outs[0], "rank {r}'s result differs from rank 0's");
    }
    // In rank order, as the plan adds them.
    let first: Vec<u8> = (0..count)
        .flat_map(|i| sum(&[0, 1, 2, 3], i).to_le_bytes())
        .collect();
    assert!(outs[0] == first, "not the sum in rank order");
}
