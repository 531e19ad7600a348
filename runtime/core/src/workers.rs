//! A rank's block threads, kept from call to call. The host executor runs every block of
//! a call at once on a thread of its own (blocks wait on each other and on their links,
//! as a GPU's thread blocks do, so they cannot share threads); spawning those threads on
//! every call cost about 33 µs each on a two-core machine, most of a small call's time.
//! [`Workers::run_all`] hands the blocks to threads parked from earlier calls instead,
//! and starts more only when a call has more blocks than any before it.
//!
//! The tasks borrow the call's data (the plan, the buffers' views), like scoped threads:
//! `run_all` returns only after every task has finished, panicked ones included, which
//! is what makes handing them to longer-lived threads sound.

use std::any::Any;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

type Task = Box<dyn FnOnce() + Send + 'static>;

struct Worker {
    tx: mpsc::Sender<Task>,
    handle: JoinHandle<()>,
}

impl Worker {
    /// A thread kept on `cpus` where given (`cpus.rs`: `BRAID_CPU_AFFINITY`).
    fn spawn(cpus: Option<Arc<[usize]>>) -> Worker {
        let (tx, rx) = mpsc::channel::<Task>();
        let handle = std::thread::Builder::new()
            .name("braid-block".into())
            .spawn(move || {
                if let Some(c) = cpus {
                    crate::cpus::bind_current(&c);
                }
                for task in rx {
                    task();
                }
            })
            .expect("spawn a block thread");
        Worker { tx, handle }
    }
}

/// Counts finished tasks and keeps the first panic's payload.
#[derive(Default)]
struct Finished {
    count: Mutex<(usize, Option<Box<dyn Any + Send>>)>,
    changed: Condvar,
}

/// Threads that run a call's blocks, parked between calls.
#[derive(Default)]
pub struct Workers {
    idle: Mutex<Vec<Worker>>,
    /// The CPUs the threads run on, where they are kept on some (`cpus.rs`:
    /// `BRAID_CPU_AFFINITY`).
    cpus: Option<Arc<[usize]>>,
}

impl Workers {
    pub fn new() -> Workers {
        Workers::default()
    }

    /// Threads kept on `cpus` (each thread may run on any of them).
    pub fn on_cpus(cpus: Vec<usize>) -> Workers {
        Workers {
            idle: Mutex::default(),
            cpus: Some(cpus.into()),
        }
    }

    /// The CPUs the threads are kept on, if any.
    pub fn cpus(&self) -> Option<Arc<[usize]>> {
        self.cpus.clone()
    }

    /// Runs every task at once, each on a thread of its own, and returns when all have
    /// finished; a task's panic is raised again here after the others finished.
    pub fn run_all<'a>(&self, tasks: Vec<Box<dyn FnOnce() + Send + 'a>>) {
        let n = tasks.len();
        let mut mine: Vec<Worker> = {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            let keep = idle.len().saturating_sub(n);
            idle.split_off(keep)
        };
        while mine.len() < n {
            mine.push(Worker::spawn(self.cpus.clone()));
        }
        let finished = Arc::new(Finished::default());
        for (task, w) in tasks.into_iter().zip(&mine) {
            let f = finished.clone();
            let wrapped: Box<dyn FnOnce() + Send + 'a> = Box::new(move || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task));
                let mut c = f.count.lock().unwrap_or_else(|p| p.into_inner());
                c.0 += 1;
                if let Err(p) = r {
                    c.1.get_or_insert(p);
                }
                // Only the last wakes the caller: on few cores a wake-up per block cost
                // the caller's thread as many trips through the scheduler.
                if c.0 == n {
                    f.changed.notify_all();
                }
            });
            // SAFETY: only the lifetime changes. The task runs before this function
            // returns: the loop below waits until all `n` tasks reported that they
            // finished (a panicking task reports too, after `catch_unwind`), and a task
            // that could not be handed to its thread is run here instead. So nothing the
            // task borrows for `'a` is used after `'a` ends.
            let wrapped: Task =
                unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + 'a>, Task>(wrapped) };
            if let Err(mpsc::SendError(task)) = w.tx.send(wrapped) {
                // The thread is gone (it never panics: tasks are caught); run it here.
                task();
            }
        }
        let panic = {
            let mut c = finished.count.lock().unwrap_or_else(|p| p.into_inner());
            while c.0 < n {
                c = finished.changed.wait(c).unwrap_or_else(|p| p.into_inner());
            }
            c.1.take()
        };
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(mine);
        if let Some(p) = panic {
            std::panic::resume_unwind(p);
        }
    }

    /// Threads parked now.
    pub fn parked(&self) -> usize {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        let idle = std::mem::take(self.idle.get_mut().unwrap_or_else(|p| p.into_inner()));
        for w in idle {
            drop(w.tx);
            let _ = w.handle.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;

    #[test]
    fn every_task_runs_at_once_and_threads_are_kept() {
        let w = Workers::new();
        let sum = AtomicUsize::new(0);
        for round in 0..3 {
            // The tasks meet at a barrier: they only finish if all run at the same time.
            let barrier = Barrier::new(5);
            let tasks: Vec<Box<dyn FnOnce() + Send + '_>> = (0..5)
                .map(|i| {
                    let (b, s) = (&barrier, &sum);
                    Box::new(move || {
                        b.wait();
                        s.fetch_add(i + round, Ordering::SeqCst);
                    }) as Box<dyn FnOnce() + Send + '_>
                })
                .collect();
            w.run_all(tasks);
            assert_eq!(w.parked(), 5);
        }
        assert_eq!(sum.load(Ordering::SeqCst), 3 * 10 + 5 * 3);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn threads_kept_on_cpus_run_there() {
        let first = crate::cpus::allowed().expect("the process's CPUs")[0];
        let w = Workers::on_cpus(vec![first]);
        let seen = Mutex::new(Vec::new());
        for _ in 0..2 {
            let tasks: Vec<Box<dyn FnOnce() + Send + '_>> = (0..3)
                .map(|_| {
                    let seen = &seen;
                    Box::new(move || seen.lock().unwrap().push(crate::cpus::allowed()))
                        as Box<dyn FnOnce() + Send + '_>
                })
                .collect();
            w.run_all(tasks);
        }
        let seen = seen.into_inner().unwrap();
        assert_eq!(seen.len(), 6);
        assert!(
            seen.iter().all(|c| c.as_deref() == Some(&[first][..])),
            "{seen:?}"
        );
    }

    #[test]
    fn a_panicking_task_is_raised_after_the_others_finish() {
        let w = Workers::new();
        let done = AtomicUsize::new(0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let d = &done;
            w.run_all(vec![
                Box::new(|| panic!("block failed")),
                Box::new(move || {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    d.fetch_add(1, Ordering::SeqCst);
                }),
            ]);
        }));
        assert!(r.is_err());
        assert_eq!(done.load(Ordering::SeqCst), 1);
        // Both threads survive for the next call.
        assert_eq!(w.parked(), 2);
    }
}
