//! What every proxied connection end keeps about itself, whatever carries it: its name,
//! whether it is closing or failed, and the hook that aborts the communicator when it
//! fails (once, and never while closing).

use super::fifo::Fifo;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Called once with the reason when the connection breaks.
pub type OnFail = Arc<dyn Fn(String) + Send + Sync>;

pub struct Health {
    /// "0->1 channel 2 (sending end)", for messages.
    pub what: String,
    on_fail: OnFail,
    stop: AtomicBool,
    failed: AtomicBool,
}

impl Health {
    pub fn new(what: String, on_fail: OnFail) -> Health {
        Health {
            what,
            on_fail,
            stop: AtomicBool::new(false),
            failed: AtomicBool::new(false),
        }
    }

    /// Reports `why` (naming the connection) unless the end is closing or already failed.
    pub fn fail(&self, why: String) {
        if self.stopped() || self.failed.swap(true, Ordering::AcqRel) {
            return;
        }
        let why = format!("network connection {}: {why}", self.what);
        tracing::warn!("{why}");
        (self.on_fail)(why);
    }

    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Closes the end: a send end (`sent`: its FIFO and the slices forwarded per lane)
    /// first waits until everything its kernel published went out, the connection
    /// failed, or `timeout` passed; then its threads stop.
    pub fn close(&self, timeout: Duration, sent: Option<(&Fifo, &[AtomicU64; 2])>) {
        if let Some((fifo, out)) = sent {
            let deadline = Instant::now() + timeout;
            let done = || {
                (0..2)
                    .all(|l| out[l].load(Ordering::Acquire) >= fifo.head(l).load(Ordering::Acquire))
            };
            while !self.failed() && Instant::now() < deadline && !done() {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        self.stop.store(true, Ordering::Release);
    }
}
