//! Sleeping until a counter in memory shared between processes moves: the waiting half of
//! the shared-memory ring (`shm_link.rs`). On Linux a waiter sleeps in the kernel on the
//! counter's word (a futex, not private to the process, so a peer process that maps the
//! same file wakes it) and the side that moves the counter wakes it at once; elsewhere the
//! waiter sleeps for its timeout and looks again.
//!
//! The protocol that makes a wake-up impossible to miss, with `waiters` a word beside the
//! counter:
//!
//! ```text
//! waiter                                   mover
//! waiters += 1                             counter = new        (Release)
//! fence(SeqCst)                            fence(SeqCst)
//! if counter == seen
//!     sleep while the counter's word       if waiters > 0
//!     still reads seen (checked by the         wake every sleeper on the word
//!     kernel as it goes to sleep)
//! waiters -= 1
//! ```
//!
//! Either the waiter's load sees the new counter (it does not sleep) or the mover's load
//! sees the waiter (it wakes it); and a wake-up that comes before the waiter is asleep
//! finds the word changed, which the kernel checks under its own lock before sleeping.
//! The mover pays one fence per move and a system call only when someone sleeps.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::Duration;

/// Sleeps until `counter` no longer reads `seen`, [`store_and_wake`] moves it, or `timeout`
/// has passed, whichever comes first (a spurious return is possible: the caller looks
/// again). `waiters` counts the sleepers for [`store_and_wake`].
pub(crate) fn wait(counter: &AtomicU64, waiters: &AtomicU64, seen: u64, timeout: Duration) {
    waiters.fetch_add(1, Ordering::SeqCst);
    // Pairs with the mover's fence: of two SeqCst fences one comes first, so either this
    // load sees the mover's store or the mover's load sees this increment.
    fence(Ordering::SeqCst);
    if counter.load(Ordering::Relaxed) == seen {
        sleep_on(counter, seen, timeout);
    }
    waiters.fetch_sub(1, Ordering::SeqCst);
}

/// Stores `value` into `counter` (Release) and wakes whoever [`wait`]s on it.
pub(crate) fn store_and_wake(counter: &AtomicU64, waiters: &AtomicU64, value: u64) {
    counter.store(value, Ordering::Release);
    fence(Ordering::SeqCst);
    if waiters.load(Ordering::Relaxed) > 0 {
        wake_all(counter);
    }
}

/// The counter's low 32 bits: the word a futex compares.
#[cfg(target_os = "linux")]
fn low_word(counter: &AtomicU64) -> *const u32 {
    let p = counter as *const AtomicU64 as *const u32;
    if cfg!(target_endian = "little") {
        p
    } else {
        p.wrapping_add(1)
    }
}

#[cfg(target_os = "linux")]
fn sleep_on(counter: &AtomicU64, seen: u64, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: the word is 4-byte aligned inside a live AtomicU64 that outlives the call;
    // FUTEX_WAIT only reads it (atomically, in the kernel) and sleeps; the timespec lives
    // on this stack for the call. The result is ignored: a wake-up, a timeout, a signal or
    // a word that had already changed all send the caller back to look at the counter.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            low_word(counter),
            libc::FUTEX_WAIT,
            seen as u32,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

#[cfg(target_os = "linux")]
fn wake_all(counter: &AtomicU64) {
    // SAFETY: as in `sleep_on`; FUTEX_WAKE touches no memory, it only wakes sleepers
    // queued on the word's address.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            low_word(counter),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn sleep_on(_counter: &AtomicU64, _seen: u64, timeout: Duration) {
    std::thread::sleep(timeout);
}

#[cfg(not(target_os = "linux"))]
fn wake_all(_counter: &AtomicU64) {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_waiter_on_a_moved_counter_returns_without_sleeping() {
        let (c, w) = (AtomicU64::new(5), AtomicU64::new(0));
        let t = Instant::now();
        wait(&c, &w, 4, Duration::from_secs(10));
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        assert_eq!(
            w.load(Ordering::SeqCst),
            0,
            "the waiter left its count behind"
        );
    }

    #[test]
    fn a_waiter_nobody_wakes_returns_at_its_timeout() {
        let (c, w) = (AtomicU64::new(7), AtomicU64::new(0));
        let t = Instant::now();
        wait(&c, &w, 7, Duration::from_millis(30));
        let e = t.elapsed();
        assert!(e >= Duration::from_millis(25), "returned after {e:?}");
        assert_eq!(w.load(Ordering::SeqCst), 0);
    }

    /// A sleeper with a timeout of a minute is woken by the store: the test would take
    /// a minute per round (and fail its bound) if the wake-up were missed.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_store_wakes_a_sleeper_long_before_its_timeout() {
        for round in 0..20u64 {
            let c = Arc::new(AtomicU64::new(round));
            let w = Arc::new(AtomicU64::new(0));
            let t = Instant::now();
            let sleeper = {
                let (c, w) = (c.clone(), w.clone());
                std::thread::spawn(move || {
                    while c.load(Ordering::Acquire) == round {
                        wait(&c, &w, round, Duration::from_secs(60));
                    }
                })
            };
            // Sometimes before the sleeper is asleep, sometimes after.
            if round % 2 == 1 {
                while w.load(Ordering::SeqCst) == 0 {
                    std::thread::yield_now();
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            store_and_wake(&c, &w, round + 1);
            sleeper.join().unwrap();
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "round {round}: the sleeper was not woken ({:?})",
                t.elapsed()
            );
        }
    }
}
