//! A small run of the host executor meant for Miri (`cargo +nightly miri test -p
//! braid-runtime --test miri_exec`, docs/testing.md): two ranks as threads, a ring
//! all-reduce of an odd count through the communicator (raw buffer addresses, block
//! threads sharing the caller's memory through the executor's borrow protocol) and an
//! all-gather in place; the results checked. It runs under plain `cargo test` too.

use braid_ir::Collective;
use braid_library::Library;
use braid_plan::Verified;
use braid_runtime::comm::Buffers;
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::registry::{PlanProvider, Registry};
use braid_runtime::Communicator;
use braid_topo::Topology;
use std::sync::Arc;
use std::time::Duration;

struct Lib(Library);

impl PlanProvider for Lib {
    fn plans(&self, c: Collective, root: Option<u32>) -> Vec<Arc<Verified>> {
        self.0.plans(c, root)
    }
}

#[test]
fn two_ranks_allreduce_and_allgather() {
    let n = 2u32;
    let lib = Library::new(Topology::from_arg("nvswitch:2").unwrap());
    let reg = Arc::new(Registry::new().with_provider(Box::new(Lib(lib))));
    let comms = Communicator::create_local(n, reg, Duration::from_secs(600));
    let count = 7usize;
    std::thread::scope(|s| {
        for (r, c) in comms.iter().enumerate() {
            s.spawn(move || {
                let mine: Vec<f32> = (0..count).map(|i| (r * 10 + i) as f32).collect();
                let send: Vec<u8> = mine.iter().flat_map(|x| x.to_le_bytes()).collect();
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
                for i in 0..count {
                    let got = f32::from_le_bytes(recv[i * 4..i * 4 + 4].try_into().unwrap());
                    assert_eq!(got, (10 + 2 * i) as f32);
                }
                let mut all = vec![0u8; count * 4 * n as usize];
                all[r * count * 4..(r + 1) * count * 4].copy_from_slice(&send);
                c.all_gather(Buffers::InPlace(&mut all), count, DType::F32)
                    .unwrap();
                for q in 0..n as usize {
                    for i in 0..count {
                        let at = (q * count + i) * 4;
                        let got = f32::from_le_bytes(all[at..at + 4].try_into().unwrap());
                        assert_eq!(got, (q * 10 + i) as f32);
                    }
                }
            });
        }
    });
}
