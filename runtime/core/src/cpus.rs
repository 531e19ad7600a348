//! Where a rank's threads run, where asked (`BRAID_CPU_AFFINITY=1`).
//!
//! Left to the scheduler, the threads of several ranks on few cores wander between them:
//! a wake-up may land a thread on the core of the thread it is about to wait for, and
//! away from its data. On a two-core machine, 4 ranks as processes over shared memory
//! took 182-261 µs for a reduce-scatter of 512 B so, and 111-132 µs with each rank's
//! threads kept on one core. Side by side, every call of 4 ranks ran 1.0-1.9x faster
//! bound, over shared memory and TCP alike, bar a few of 16 MiB (down to 0.87x); but an
//! 8-rank broadcast of 16 MiB took 1.25-1.66x as long, and the cost model, calibrated
//! bound, prices bound calls worse (2026-12-07, docs/perf.md). So it is the user's
//! choice, as `mpirun --bind-to` is: with `BRAID_CPU_AFFINITY=1` the host
//! backend keeps every thread of a rank (its block threads and its stream's) on the
//! rank's share of the CPUs the process may use, the ranks of a host taking them in
//! turn, in contiguous groups where there are more CPUs than ranks. Even then it binds
//! only where nothing else did (the process may use every online CPU: a launcher's or
//! `taskset`'s binding is kept as it is).

/// The CPUs of `allowed` (sorted) that rank `local` of `locals` on this host takes: a
/// contiguous share where there are at least as many CPUs as ranks, else one CPU, the
/// ranks going round them. `None` where there is nothing to choose (one CPU, or no such
/// rank).
pub(crate) fn share(allowed: &[usize], local: u32, locals: u32) -> Option<Vec<usize>> {
    let (m, k, i) = (allowed.len(), locals as usize, local as usize);
    if m < 2 || k == 0 || i >= k {
        return None;
    }
    Some(if m >= k {
        allowed[i * m / k..(i + 1) * m / k].to_vec()
    } else {
        vec![allowed[i % m]]
    })
}

/// Whether `BRAID_CPU_AFFINITY`'s `value` asks for binding: `1`, `on`, `true` do; `0`,
/// `off`, `false` do not; anything else is an error that says what is taken.
pub(crate) fn asked(value: &str) -> Result<bool, String> {
    match value.trim() {
        "1" | "on" | "true" => Ok(true),
        "0" | "off" | "false" => Ok(false),
        v => Err(format!(
            "BRAID_CPU_AFFINITY={v:?} is neither 1 (on, true) nor 0 (off, false); threads are left unbound"
        )),
    }
}

/// What `BRAID_CPU_AFFINITY` (`value`) and the process's CPUs say for rank `local` of
/// `locals`: its share ([`share`]) where binding is asked for ([`asked`]) and the process
/// may use every online CPU (`allowed` of `online`), else `None`.
pub(crate) fn placement(
    value: Option<&str>,
    allowed: &[usize],
    online: usize,
    local: u32,
    locals: u32,
) -> Option<Vec<usize>> {
    let on = value.is_some_and(|v| asked(v).unwrap_or(false));
    if !on || allowed.len() < online {
        return None;
    }
    share(allowed, local, locals)
}

/// [`placement`] from the environment and the process's CPU mask.
fn from_env(local: u32, locals: u32) -> Option<Vec<usize>> {
    let value = std::env::var("BRAID_CPU_AFFINITY").ok()?;
    placement(Some(&value), &allowed()?, online(), local, locals)
}

/// The CPUs this rank's threads should run on (rank `local` of `locals` on this host);
/// `None` to leave them be.
pub(crate) fn for_rank(local: u32, locals: u32) -> Option<Vec<usize>> {
    if let Err(e) = std::env::var("BRAID_CPU_AFFINITY").map_or(Ok(false), |v| asked(&v)) {
        tracing::warn!("{e}");
    }
    let cpus = from_env(local, locals);
    if let Some(c) = &cpus {
        tracing::debug!("rank {local} of {locals} on this host: its threads on CPUs {c:?}");
    }
    cpus
}

/// Whether this process's host ranks keep their threads on their CPUs (asked for, and
/// the process free to use every online CPU): what a profile measured here describes.
pub fn binds_threads() -> bool {
    from_env(0, 1).is_some()
}

/// The CPUs the calling thread may run on, sorted.
#[cfg(target_os = "linux")]
pub(crate) fn allowed() -> Option<Vec<usize>> {
    // SAFETY: `set` is a plain bit set that sched_getaffinity fills; its size is passed.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        Some(
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect(),
        )
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn allowed() -> Option<Vec<usize>> {
    None
}

/// The CPUs online.
fn online() -> usize {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sysconf has no preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        if n > 0 {
            return n as usize;
        }
    }
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Keeps the calling thread on `cpus`; false where the system refused (the thread then
/// runs where it may, as before).
#[cfg(target_os = "linux")]
pub(crate) fn bind_current(cpus: &[usize]) -> bool {
    // SAFETY: `set` is a plain bit set built with the CPU_* helpers within its size,
    // which is passed; pid 0 is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn bind_current(_cpus: &[usize]) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_take_contiguous_shares_or_go_round_few_cpus() {
        let cpus: Vec<usize> = (0..16).collect();
        assert_eq!(share(&cpus, 0, 8), Some(vec![0, 1]));
        assert_eq!(share(&cpus, 7, 8), Some(vec![14, 15]));
        assert_eq!(share(&cpus, 1, 3), Some(vec![5, 6, 7, 8, 9]));
        // Every CPU is someone's, and no two ranks share one.
        let all: Vec<usize> = (0..3).flat_map(|i| share(&cpus, i, 3).unwrap()).collect();
        assert_eq!(all, cpus);
        // Fewer CPUs than ranks: one each, in turn.
        let two = [0, 1];
        let taken: Vec<Vec<usize>> = (0..4).map(|i| share(&two, i, 4).unwrap()).collect();
        assert_eq!(taken, vec![vec![0], vec![1], vec![0], vec![1]]);
        // The CPUs are the allowed ones, not their positions.
        assert_eq!(share(&[3, 5, 8, 9], 1, 2), Some(vec![8, 9]));
        // Nothing to choose.
        assert_eq!(share(&[4], 0, 2), None);
        assert_eq!(share(&cpus, 2, 2), None);
        assert_eq!(share(&cpus, 0, 0), None);
    }

    #[test]
    fn binding_is_asked_for_and_never_over_a_process_bound_already() {
        let cpus: Vec<usize> = (0..4).collect();
        for on in ["1", "on", "true", " 1 "] {
            assert_eq!(
                placement(Some(on), &cpus, 4, 1, 2),
                Some(vec![2, 3]),
                "{on:?}"
            );
        }
        for off in [None, Some("0"), Some("off"), Some("yes please")] {
            assert_eq!(placement(off, &cpus, 4, 1, 2), None, "{off:?}");
        }
        // A launcher (or taskset) gave the process 4 of 8 online CPUs: kept as it is.
        assert_eq!(placement(Some("1"), &cpus, 8, 1, 2), None);
        // A value that is neither is refused by name, and binds nothing.
        assert_eq!(asked(" on "), Ok(true));
        assert_eq!(asked("false"), Ok(false));
        let err = asked("yes please").unwrap_err();
        assert!(
            err.contains("BRAID_CPU_AFFINITY=\"yes please\" is neither 1")
                && err.contains("left unbound"),
            "{err}"
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_bound_thread_runs_on_its_cpus_only() {
        let all = allowed().expect("the process's CPUs");
        let first = all[0];
        let seen = std::thread::spawn(move || {
            assert!(bind_current(&[first]));
            allowed()
        })
        .join()
        .unwrap();
        assert_eq!(seen, Some(vec![first]));
        // Binding a spawned thread leaves the others as they were.
        assert_eq!(allowed(), Some(all));
    }
}
