//! The memory-ordering arguments of Braid's producer/consumer protocols, checked by
//! loom over every interleaving (and every weak-memory outcome loom models):
//!
//! * the shared-memory ring (`shm_link.rs`): the sender writes a slot, then stores
//!   `head` with Release; the receiver loads `head` with Acquire, reads the slot, then
//!   stores `tail` with Release; the sender loads `tail` with Acquire before reusing a
//!   slot;
//! * the kernels' FIFO flags (`braid_kernel.cuh`, Simple protocol): the same shape with
//!   fences, as the GPU code writes it: data stores, a (system) fence, a relaxed store of
//!   `head`; on the other side a relaxed load of `head`, then the data;
//! * the ring's wake-up (`futex.rs`): a waiter that counts itself before it looks and a
//!   mover that looks for waiters after it stores, a SeqCst fence on each side (below,
//!   `wake`).
//!
//! Each model sends a few values through a two-slot ring and checks that they arrive
//! whole and in order; loom's cells report any access to a slot not ordered against the
//! other side's. A model with the orderings taken away must fail, so the checks can.

use loom::cell::UnsafeCell;
use loom::sync::atomic::{fence, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

const SLOTS: u64 = 2;
const MESSAGES: u64 = 3;

struct Ring {
    head: AtomicU64,
    tail: AtomicU64,
    /// Each slot: a message of two words (a value and its check), written separately.
    slots: Vec<(UnsafeCell<u64>, UnsafeCell<u64>)>,
}

impl Ring {
    fn new() -> Ring {
        Ring {
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            slots: (0..SLOTS)
                .map(|_| (UnsafeCell::new(0), UnsafeCell::new(0)))
                .collect(),
        }
    }
}

/// How the two sides publish and observe the counters.
#[derive(Clone, Copy)]
enum Order {
    /// Release stores and Acquire loads (the ring).
    AcquireRelease,
    /// Relaxed counters with explicit fences (the kernel's flags).
    Fences,
    /// Nothing: must be caught.
    Broken,
}

fn publish(c: &AtomicU64, v: u64, o: Order) {
    match o {
        Order::AcquireRelease => c.store(v, Ordering::Release),
        Order::Fences => {
            fence(Ordering::Release);
            c.store(v, Ordering::Relaxed)
        }
        Order::Broken => c.store(v, Ordering::Relaxed),
    }
}

fn observe(c: &AtomicU64, o: Order) -> u64 {
    match o {
        Order::AcquireRelease => c.load(Ordering::Acquire),
        Order::Fences => {
            let v = c.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            v
        }
        Order::Broken => c.load(Ordering::Relaxed),
    }
}

fn model(o: Order) {
    loom::model(move || {
        let ring = Arc::new(Ring::new());
        let tx = ring.clone();
        let sender = thread::spawn(move || {
            for m in 1..=MESSAGES {
                let head = m - 1;
                while head - observe(&tx.tail, o) >= SLOTS {
                    thread::yield_now();
                }
                let (value, check) = &tx.slots[(head % SLOTS) as usize];
                value.with_mut(|p| unsafe { *p = m });
                check.with_mut(|p| unsafe { *p = m * 7 });
                publish(&tx.head, head + 1, o);
            }
        });
        for m in 1..=MESSAGES {
            let tail = m - 1;
            while observe(&ring.head, o) <= tail {
                thread::yield_now();
            }
            let (value, check) = &ring.slots[(tail % SLOTS) as usize];
            let v = value.with(|p| unsafe { *p });
            let c = check.with(|p| unsafe { *p });
            assert_eq!(
                (v, c),
                (m, m * 7),
                "message {m} arrived torn or out of order"
            );
            publish(&ring.tail, tail + 1, o);
        }
        sender.join().unwrap();
    });
}

#[test]
fn the_shared_memory_ring_is_race_free() {
    model(Order::AcquireRelease);
}

#[test]
fn the_kernel_fifo_flags_are_race_free() {
    model(Order::Fences);
}

#[test]
fn a_ring_without_ordering_is_caught() {
    let caught =
        std::panic::catch_unwind(|| model(Order::Broken)).expect_err("a race went unnoticed");
    let text = caught
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| caught.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(
        text.contains("Causality violation") || text.contains("torn"),
        "{text}"
    );
}

/// The shared-memory ring's wake-up (`futex.rs`): a waiter counts itself in `waiters`,
/// then looks at the counter and sleeps if it has not moved; the mover stores the counter,
/// then wakes the sleepers if `waiters` says there are any. The kernel's futex is modelled
/// by a lock and a condition variable: a sleeper checks the word under the lock and a
/// wake-up takes the lock, as the kernel's hash bucket does. A lost wake-up leaves the
/// waiter asleep forever, which loom reports as a deadlock.
mod wake {
    use loom::sync::atomic::{fence, AtomicU64, Ordering};
    use loom::sync::{Arc, Condvar, Mutex};
    use loom::thread;

    struct Word {
        counter: AtomicU64,
        waiters: AtomicU64,
        bucket: Mutex<()>,
        sleepers: Condvar,
    }

    impl Word {
        fn sleep_on(&self, seen: u64) {
            let g = self.bucket.lock().unwrap();
            if self.counter.load(Ordering::Relaxed) == seen {
                drop(self.sleepers.wait(g).unwrap());
            }
        }

        fn wake_all(&self) {
            let _g = self.bucket.lock().unwrap();
            self.sleepers.notify_all();
        }
    }

    pub fn model(fenced: bool) {
        loom::model(move || {
            let w = Arc::new(Word {
                counter: AtomicU64::new(0),
                waiters: AtomicU64::new(0),
                bucket: Mutex::new(()),
                sleepers: Condvar::new(),
            });
            let mover = {
                let w = w.clone();
                thread::spawn(move || {
                    w.counter.store(1, Ordering::Release);
                    if fenced {
                        fence(Ordering::SeqCst);
                    }
                    if w.waiters.load(Ordering::Relaxed) > 0 {
                        w.wake_all();
                    }
                })
            };
            // The waiter: as `futex::wait` inside the ring's loop, but one sleep only (no
            // timeout): it must be woken or find the counter moved.
            if w.counter.load(Ordering::Acquire) == 0 {
                w.waiters.fetch_add(1, Ordering::Relaxed);
                if fenced {
                    fence(Ordering::SeqCst);
                }
                if w.counter.load(Ordering::Relaxed) == 0 {
                    w.sleep_on(0);
                }
                w.waiters.fetch_sub(1, Ordering::Relaxed);
            }
            mover.join().unwrap();
        });
    }
}

#[test]
fn the_shared_memory_rings_wake_up_is_never_lost() {
    wake::model(true);
}

#[test]
fn a_wake_up_without_the_fences_is_caught_lost() {
    let caught =
        std::panic::catch_unwind(|| wake::model(false)).expect_err("a lost wake-up went unnoticed");
    let text = caught
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| caught.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(text.to_lowercase().contains("deadlock"), "{text}");
}
