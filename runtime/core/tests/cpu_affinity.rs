//! `BRAID_CPU_AFFINITY=1`: every thread the host backend starts for a rank (its block
//! threads and its stream's) stays on the rank's share of the CPUs, the ranks' shares
//! apart; and without it nothing is bound. Each case sets the variable for the whole
//! process, so this binary holds one test, which runs the two in turn.

use braid_ir::Collective;
use braid_library::Library;
use braid_plan::Verified;
use braid_runtime::call::CallSpec;
use braid_runtime::comm::Buffers;
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::reference::{first_mismatch, inputs, reference};
use braid_runtime::registry::{PlanProvider, Registry};
use braid_runtime::Communicator;
use braid_topo::Topology;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

struct Lib(Library);

impl PlanProvider for Lib {
    fn plans(&self, c: Collective, root: Option<u32>) -> Vec<Arc<Verified>> {
        self.0.plans(c, root)
    }
}

/// A `Cpus_allowed_list` ("0-3,6") as CPUs.
fn cpu_list(s: &str) -> BTreeSet<usize> {
    let mut out = BTreeSet::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.parse::<usize>().unwrap()..=b.parse().unwrap()),
            None => {
                out.insert(part.parse().unwrap());
            }
        }
    }
    out
}

/// The CPUs each of this process's threads named `name` may run on (the kernel keeps
/// a thread's first 15 bytes of name).
fn threads_named(name: &str) -> Vec<BTreeSet<usize>> {
    let name = &name[..name.len().min(15)];
    let mut out = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let status = std::fs::read_to_string(t.path().join("status")).unwrap();
        let list = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap();
        out.push(cpu_list(list));
    }
    out
}

/// Two ranks in this process run an all-reduce right; the communicators are returned
/// so their threads stay alive for the caller to look at.
fn two_ranks_run() -> Vec<Communicator> {
    let lib = Library::new(Topology::from_arg("nvswitch:2").unwrap());
    let reg = Arc::new(Registry::new().with_provider(Box::new(Lib(lib))));
    let comms = Communicator::create_local(2, reg, Duration::from_secs(60));
    let spec = CallSpec {
        collective: Collective::Allreduce,
        count: 4099,
        dtype: DType::F32,
        op: RedOp::Sum,
        root: None,
    };
    let ins = inputs(spec.collective, spec.dtype, spec.op, 2, spec.count, 3);
    let want = reference(spec.collective, spec.dtype, spec.op, None, &ins);
    std::thread::scope(|s| {
        for (r, c) in comms.iter().enumerate() {
            let (ins, want) = (&ins, &want);
            s.spawn(move || {
                let mut recv = vec![0u8; spec.count * 4];
                c.timed(
                    &spec,
                    Buffers::OutOfPlace {
                        send: &ins[r],
                        recv: &mut recv,
                    },
                    3,
                )
                .unwrap();
                let w = want[r].as_ref().unwrap();
                assert_eq!(first_mismatch(spec.dtype, w, &recv), None, "rank {r}");
            });
        }
    });
    comms
}

#[test]
fn asked_for_each_ranks_threads_stay_on_its_cpus_else_none_are_bound() {
    if !cfg!(target_os = "linux") {
        eprintln!("skipped: CPU binding is Linux's");
        return;
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let allowed = cpu_list(
        status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap(),
    );
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .map(|s| cpu_list(&s).len())
        .unwrap_or(0);
    if allowed.len() < 2 || allowed.len() < online {
        eprintln!(
            "skipped: this process may use {} of {online} online CPUs (binding needs two, \
             and stays off where the process is bound already)",
            allowed.len()
        );
        return;
    }

    // Unasked, every thread may run anywhere the process may.
    let comms = two_ranks_run();
    let blocks = threads_named("braid-block");
    assert!(!blocks.is_empty(), "no block threads");
    assert!(blocks.iter().all(|c| *c == allowed), "{blocks:?}");
    drop(comms);

    // Asked: rank 0 the first half of the CPUs, rank 1 the second.
    std::env::set_var("BRAID_CPU_AFFINITY", "1");
    let comms = two_ranks_run();
    let cpus: Vec<usize> = allowed.iter().copied().collect();
    let half = cpus.len() / 2;
    let shares = [
        cpus[..half].iter().copied().collect::<BTreeSet<_>>(),
        cpus[half..].iter().copied().collect::<BTreeSet<_>>(),
    ];
    for name in ["braid-block", "braid-host-stream"] {
        let seen = threads_named(name);
        assert!(
            seen.iter().all(|c| shares.contains(c)),
            "{name}: {seen:?} against {shares:?}"
        );
        for share in &shares {
            assert!(
                seen.contains(share),
                "{name}: no thread on {share:?}: {seen:?}"
            );
        }
    }
    drop(comms);
}
