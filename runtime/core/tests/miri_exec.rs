//! A small run of the host executor meant for Miri (`cargo +nightly miri test -p
//! braid-runtime --test miri_exec`, docs/testing.md): ranks as threads run a ring
//! all-reduce of an odd count through the communicator (raw buffer addresses, block
//! threads sharing the caller's memory through the executor's borrow protocol) and an
//! all-gather in place; the results checked. The plans come from the test plan files
//! (`tests/plans/good/`), so Miri interprets the executor, not the compiler. It runs
//! under plain `cargo test` too.

use braid_runtime::comm::Buffers;
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::registry::Registry;
use braid_runtime::Communicator;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn comms(n: u32, plan: &str) -> Vec<Communicator> {
    let reg = Registry::new();
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/plans/good")
        .join(plan);
    reg.add_file(&file).unwrap();
    Communicator::create_local(n, Arc::new(reg), Duration::from_secs(600))
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn four_ranks_ring_allreduce_out_of_place() {
    let n = 4usize;
    let count = 7usize;
    let comms = comms(n as u32, "ring_allreduce_4.json");
    std::thread::scope(|s| {
        for (r, c) in comms.iter().enumerate() {
            s.spawn(move || {
                let send: Vec<u8> = (0..count)
                    .flat_map(|i| ((r * 10 + i) as f32).to_le_bytes())
                    .collect();
                let mut recv = vec![0u8; count * 4];
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
                let want: Vec<f32> = (0..count).map(|i| (60 + n * i) as f32).collect();
                assert_eq!(f32s(&recv), want, "rank {r}");
            });
        }
    });
}

#[test]
fn two_ranks_allgather_in_place() {
    let n = 2usize;
    let count = 5usize;
    let comms = comms(n as u32, "exchange_allgather_2.json");
    std::thread::scope(|s| {
        for (r, c) in comms.iter().enumerate() {
            s.spawn(move || {
                let mut all = vec![0u8; count * 4 * n];
                for i in 0..count {
                    all[(r * count + i) * 4..][..4]
                        .copy_from_slice(&((r * 10 + i) as f32).to_le_bytes());
                }
                c.all_gather(Buffers::InPlace(&mut all), count, DType::F32)
                    .unwrap();
                let want: Vec<f32> = (0..n)
                    .flat_map(|q| (0..count).map(move |i| (q * 10 + i) as f32))
                    .collect();
                assert_eq!(f32s(&all), want, "rank {r}");
            });
        }
    });
}

#[test]
fn four_ranks_ring_allreduce_in_place() {
    let n = 4usize;
    let count = 9usize;
    let comms = comms(n as u32, "ring_allreduce_4.json");
    std::thread::scope(|s| {
        for (r, c) in comms.iter().enumerate() {
            s.spawn(move || {
                let mut buf: Vec<u8> = (0..count)
                    .flat_map(|i| ((r + i) as f32).to_le_bytes())
                    .collect();
                c.all_reduce(Buffers::InPlace(&mut buf), count, DType::F32, RedOp::Max)
                    .unwrap();
                let want: Vec<f32> = (0..count).map(|i| (n - 1 + i) as f32).collect();
                assert_eq!(f32s(&buf), want, "rank {r}");
            });
        }
    });
}

#[test]
fn three_ranks_chain_broadcast() {
    let n = 3usize;
    let count = 11usize;
    let comms = comms(n as u32, "chain_broadcast_3.json");
    let root = 0;
    std::thread::scope(|s| {
        for (r, c) in comms.iter().enumerate() {
            s.spawn(move || {
                let send: Vec<u8> = (0..count)
                    .flat_map(|i| ((r * 100 + i) as f32).to_le_bytes())
                    .collect();
                let mut recv = vec![0u8; count * 4];
                c.broadcast(
                    Buffers::OutOfPlace {
                        send: &send,
                        recv: &mut recv,
                    },
                    count,
                    DType::F32,
                    root,
                )
                .unwrap();
                let want: Vec<f32> = (0..count)
                    .map(|i| (root as usize * 100 + i) as f32)
                    .collect();
                assert_eq!(f32s(&recv), want, "rank {r}");
            });
        }
    });
}
