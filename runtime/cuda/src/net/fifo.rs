//! A proxied connection end's FIFO memory as the proxy sees it: the layout the kernel
//! uses (`clique::lanes`), two lanes (Simple, then LL), each a header (`head` at byte 0,
//! the slice sizes at 8.., `tail` at 128) and its slots. Every access the proxy makes
//! goes through here: counters and sizes as atomics (the GPU writes them concurrently),
//! slots as raw addresses that only the byte-moving calls of `proxy.rs` touch.

use crate::clique::{lane_len, LANE_HEADER, TAIL_AT};
use crate::kernel::Lane;
use crate::kernel::{LL_SLOT_BYTES, SIMPLE_SLOT_BYTES};
use crate::program::NET_MAX_SLOTS;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Host memory a FIFO lives in.
///
/// # Safety
/// `host()` must address `len()` bytes, 128-byte aligned, that stay allocated and mapped
/// for as long as the value lives, and that Rust code never holds references to (only
/// the kernels, the proxy's atomics and raw copies touch them).
pub unsafe trait FifoMemory: Send + Sync {
    fn host(&self) -> *mut u8;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Bytes of a connection's FIFO (both lanes) with `slots` slots per lane.
pub fn fifo_len(slots: u32) -> usize {
    lane_len(Lane::Simple, slots) + lane_len(Lane::Ll, slots)
}

/// Bytes of one slot of `lane` (0 Simple, 1 LL).
pub fn slot_bytes(lane: usize) -> usize {
    if lane == 0 {
        SIMPLE_SLOT_BYTES
    } else {
        LL_SLOT_BYTES
    }
}

#[derive(Clone)]
pub struct Fifo {
    mem: Arc<dyn FifoMemory>,
    slots: u32,
}

impl Fifo {
    /// The FIFO of `slots` slots per lane in `mem`, after checking that it fits.
    pub fn new(mem: Arc<dyn FifoMemory>, slots: u32) -> Result<Fifo, String> {
        if slots == 0 || slots > NET_MAX_SLOTS {
            return Err(format!(
                "a network connection has 1 to {NET_MAX_SLOTS} slots per lane, not {slots}"
            ));
        }
        if mem.len() < fifo_len(slots) || (mem.host() as usize) % 128 != 0 {
            return Err(format!(
                "{} bytes at {:p} cannot hold a FIFO of {slots} slots ({} bytes, 128-byte aligned)",
                mem.len(),
                mem.host(),
                fifo_len(slots)
            ));
        }
        Ok(Fifo { mem, slots })
    }

    pub fn slots(&self) -> u32 {
        self.slots
    }

    fn lane_at(&self, lane: usize) -> usize {
        if lane == 0 {
            0
        } else {
            lane_len(Lane::Simple, self.slots)
        }
    }

    fn word(&self, at: usize) -> &AtomicU64 {
        assert!(at % 8 == 0 && at + 8 <= self.mem.len());
        // SAFETY: in bounds and aligned (checked; the base is 128-aligned), valid while
        // `self.mem` lives (FifoMemory's contract); only ever accessed atomically here.
        unsafe { &*(self.mem.host().add(at) as *const AtomicU64) }
    }

    /// Slices the sending kernel published (bumped by the kernel at a send end, by the
    /// proxy at a receive end).
    pub fn head(&self, lane: usize) -> &AtomicU64 {
        self.word(self.lane_at(lane))
    }

    /// Slices the receiving kernel consumed (bumped by the kernel at a receive end, by
    /// the proxy at a send end).
    pub fn tail(&self, lane: usize) -> &AtomicU64 {
        self.word(self.lane_at(lane) + TAIL_AT as usize)
    }

    /// The byte count the sending kernel wrote for slot `slot`.
    pub fn size(&self, lane: usize, slot: u32) -> &AtomicU64 {
        assert!(slot < self.slots);
        self.word(self.lane_at(lane) + 8 * (1 + slot as usize))
    }

    /// The address of slot `slot` of `lane`, with its length: for raw copies only.
    pub fn slot(&self, lane: usize, slot: u32) -> (*mut u8, usize) {
        assert!(slot < self.slots && lane < 2);
        let at = self.lane_at(lane) + LANE_HEADER + slot as usize * slot_bytes(lane);
        debug_assert!(at + slot_bytes(lane) <= self.mem.len());
        // SAFETY: `at` is inside the allocation (checked against fifo_len in `new`).
        (unsafe { self.mem.host().add(at) }, slot_bytes(lane))
    }
}

impl Fifo {
    /// Slices the sending kernel published on `lane` beyond the `done` already taken
    /// (`None`: nothing new), checked against the credits returned so far, which the
    /// kernel may run ahead of by at most a FIFO. `credited` is read after `head`: a
    /// credit that arrives in between lets the kernel publish more, so the count read
    /// before `head` could be too old and fail a kernel that kept to the credits.
    pub fn published(
        &self,
        lane: usize,
        done: u64,
        credited: &AtomicU64,
    ) -> Result<Option<u64>, String> {
        let head = self.head(lane).load(Ordering::Acquire);
        if head <= done {
            return Ok(None);
        }
        let credited = credited.load(Ordering::Acquire);
        if head > credited + u64::from(self.slots) {
            return Err(format!(
                "the sending kernel published slice {head} of lane {lane} with only {credited} \
                 credited and {} slots",
                self.slots
            ));
        }
        Ok(Some(head))
    }

    /// Where slice `seq` (1-based) of `bytes` bytes arriving from the peer on `lane` goes,
    /// after checking that it fits its slot (LL slices are whole 16-byte lines) and that
    /// the receiving kernel has freed that slot (the peer kept to the credits).
    pub fn admit(&self, lane: usize, seq: u64, bytes: usize) -> Result<*mut u8, String> {
        if bytes > slot_bytes(lane) || (lane == 1 && bytes % 16 != 0) {
            return Err(format!(
                "a slice of {bytes} bytes on lane {lane} (slots hold {})",
                slot_bytes(lane)
            ));
        }
        let n = u64::from(self.slots);
        let consumed = self.tail(lane).load(Ordering::Acquire);
        if (seq - 1).saturating_sub(consumed) >= n {
            return Err(format!(
                "slice {seq} arrived on lane {lane} while the kernel has consumed {consumed} \
                 of {n} slots: the sender ignored the credits"
            ));
        }
        Ok(self.slot(lane, ((seq - 1) % n) as u32).0)
    }

    /// Slices up to `seq` of `lane` are in their slots: Simple slices are announced by
    /// `head` (after a fence: the GPU reads the bytes once it sees `head`); LL lines carry
    /// their flags.
    pub fn arrived(&self, lane: usize, seq: u64) {
        if lane == 0 {
            std::sync::atomic::fence(Ordering::SeqCst);
            self.head(lane).store(seq, Ordering::Release);
        }
    }

    /// Slice `seq` (1-based) of `lane` as the sending kernel announced it: its address and
    /// byte count, checked against its slot (LL slices are whole 16-byte lines).
    pub fn announced(&self, lane: usize, seq: u64) -> Result<(*mut u8, u32), String> {
        let slot = ((seq - 1) % u64::from(self.slots)) as u32;
        let bytes = self.size(lane, slot).load(Ordering::Relaxed);
        let (at, cap) = self.slot(lane, slot);
        if bytes > cap as u64 || (lane == 1 && bytes % 16 != 0) {
            return Err(format!(
                "the sending kernel announced a slice of {bytes} bytes on lane {lane} (slots \
                 hold {cap})"
            ));
        }
        Ok((at, bytes as u32))
    }
}
