//! [`ShmLink`]: one direction of a connection between two ranks in different processes
//! on the same host, through a shared-memory file. It moves slices with two memory
//! copies and no system call on the fast path, where a [`TcpLink`](crate::tcp_link)
//! costs a socket round trip per slice.
//!
//! The file (under `/dev/shm` when that exists, else the temporary directory) holds a
//! single-producer single-consumer ring:
//!
//! ```text
//! offset   0  magic u64 | slots u64 | max_slice u64 | opened u64   (cache line 0)
//! offset  64  head u64   slices written; stored only by the sender  (cache line 1)
//!         72  head_waiters u64   receivers asleep until head moves
//! offset 128  tail u64   slices taken;   stored only by the receiver (cache line 2)
//!        136  tail_waiters u64   senders asleep until tail moves
//! offset 192  slot 0: len u64 | data [max_slice], padded to a multiple of 64 bytes
//!             slot 1 ...
//! ```
//!
//! `head` and `tail` only grow; slice `n` lives in slot `n % slots`. The sender writes a
//! slot only while `head - tail < slots` and publishes it with a Release store of `head`;
//! the receiver reads a slot only while `tail < head` and frees it with a Release store
//! of `tail`. Each side loads the other's counter with Acquire, so a slot's bytes are
//! always complete before the other side looks at them. The counters sit on separate
//! cache lines so that the two sides do not invalidate each other's line on every store.
//!
//! A side that finds nothing to do spins, then yields, then sleeps until the other side
//! moves the counter it waits on: on Linux in the kernel on the counter itself, woken by
//! the store that moves it (`futex.rs` has the protocol; the mover makes a system call
//! only when its `*_waiters` word says someone sleeps), so a slice that arrives while its
//! receiver sleeps costs a wake-up, not the rest of a timed sleep.
//!
//! Lifetime of the file name: the sender builds the file under a private temporary name
//! (created exclusively, mode 0600), writes the magic word last and then links it into
//! place, which fails if the name exists, so a receiver never sees a half-initialised
//! ring and nobody else's file is ever taken for one. The receiver opens the name without
//! following links, refuses a file that is not a regular file owned by this user with
//! mode 0600 and the size its header implies, maps it and unlinks the name at once; from
//! then on the ring exists only as the two mappings, and nothing is left behind in
//! `/dev/shm` whichever process dies. A sender dropped before any receiver opened the
//! ring removes the file itself.
//!
//! Names carry the job's random nonce (drawn by rank 0, sent over the authenticated
//! bootstrap), so another user on the host can neither predict a ring's name to create
//! it first nor find one to read.
//!
//! A dead peer is not detected directly (there is no socket to close): the survivor's
//! deadline or the communicator's abort flag ends its wait.

use crate::error::{Result, RuntimeError};
use crate::futex;
use crate::transport::Link;
use memmap2::MmapRaw;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The magic word: "BRAIDSM" and a layout version byte. Written last by the creator.
const MAGIC: u64 = u64::from_le_bytes(*b"BRAIDSM\x02");
/// Size of a cache line; the counters and slots are aligned to it.
const LINE: usize = 64;
const OFF_MAGIC: usize = 0;
const OFF_SLOTS: usize = 8;
const OFF_MAX_SLICE: usize = 16;
const OFF_OPENED: usize = 24;
const OFF_HEAD: usize = LINE;
const OFF_TAIL: usize = 2 * LINE;
/// How many receivers sleep until head moves (on head's line: the sender reads it after
/// every store of head, and it changes only when a receiver goes to sleep).
const OFF_HEAD_WAITERS: usize = OFF_HEAD + 8;
/// How many senders sleep until tail moves.
const OFF_TAIL_WAITERS: usize = OFF_TAIL + 8;
const HEADER: usize = 3 * LINE;
/// Bytes in front of each slot's data (its `len`).
const SLOT_LEN: usize = 8;

/// Busy-wait iterations before a wait starts yielding the CPU: a slice usually arrives
/// within a few microseconds when the peer is running.
const SPIN: u32 = 64;
/// `yield_now` iterations before a wait starts sleeping.
const YIELD: u32 = 64;
/// Shortest and longest sleep of a long wait; short enough that a wake-up costs little
/// latency, long enough that an idle rank does not burn a core.
const SLEEP_MIN: Duration = Duration::from_micros(50);
const SLEEP_MAX: Duration = Duration::from_micros(200);
/// Longest sleep of a wait that the other side's store wakes (Linux): how often a sleeper
/// looks at the abort flag.
#[cfg(target_os = "linux")]
const WOKEN_SLEEP_MAX: Duration = Duration::from_millis(10);
#[cfg(not(target_os = "linux"))]
const WOKEN_SLEEP_MAX: Duration = SLEEP_MAX;

/// The directory the ring files live in: `/dev/shm` (memory-backed on Linux) when it
/// exists, else the temporary directory.
pub fn shm_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// The file name of the ring that carries `channel` from rank `from` to rank `to`:
/// `braid-<job>-<from>-<to>-<channel>`, `job` being the bootstrap's random job nonce
/// (hex), so that concurrent jobs on one host never share a ring, both ends of one link
/// compute the same name without talking, and nobody outside the job can predict it.
pub fn shm_name(job: &str, from: u32, to: u32, channel: u32) -> String {
    format!("braid-{job}-{from}-{to}-{channel}")
}

/// Creates `path` for this user alone (mode 0600, not through a symbolic link), failing
/// if it exists. Shared by every file-backed transport (rings here, the CUDA backend's
/// host-staged FIFOs).
pub fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    let mut o = OpenOptions::new();
    o.read(true).write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    }
    o.open(path)
}

/// Opens an existing ring file for reading and writing, never through a symbolic link.
fn open_existing(path: &Path) -> std::io::Result<std::fs::File> {
    let mut o = OpenOptions::new();
    o.read(true).write(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NOFOLLOW);
    }
    o.open(path)
}

/// Opens a file [`private_file`] made (possibly in another process of this user's),
/// refusing anything else: see `check_owner`.
pub fn open_private(path: &Path) -> Result<std::fs::File> {
    let file = open_existing(path)?;
    check_owner(&path.display().to_string(), &file.metadata()?)?;
    Ok(file)
}

/// A file name with `prefix` and 128 random bits (hex), which nobody else can predict.
pub fn random_name(prefix: &str) -> String {
    use rand::RngCore;
    let mut b = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut b);
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{prefix}{hex}")
}

/// Refuses a ring file that is not a regular file of this user's with mode 0600: a file
/// someone else put under the name is never read or written.
fn check_owner(name: &str, meta: &std::fs::Metadata) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        if !meta.is_file() || meta.uid() != me || meta.mode() & 0o777 != 0o600 {
            return Err(RuntimeError::Bootstrap(format!(
                "shared-memory link {name}: the file is not this user's private ring                  (owner {}, mode {:o}); refusing it",
                meta.uid(),
                meta.mode() & 0o7777
            )));
        }
    }
    #[cfg(not(unix))]
    let _ = (name, meta);
    Ok(())
}

/// Which end of the ring this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Sender,
    Receiver,
}

/// One direction of a shared-memory connection; implements [`Link`].
pub struct ShmLink {
    map: MmapRaw,
    name: String,
    path: PathBuf,
    end: End,
    slots: u64,
    max_slice: usize,
    stride: usize,
    abort: Arc<AtomicBool>,
    /// The ring is single-producer single-consumer; this keeps it so even when several
    /// threads share one end.
    busy: Mutex<()>,
    /// The file's identity, so that dropping a sender never removes a newer file that
    /// reuses the name.
    file_id: Option<(u64, u64)>,
}

/// Bytes per slot: its length word and `max_slice` bytes, rounded up to a cache line.
fn stride_of(max_slice: usize) -> Option<usize> {
    let raw = max_slice.checked_add(SLOT_LEN)?;
    raw.checked_add(LINE - 1).map(|r| r / LINE * LINE)
}

/// The file size of a ring, or `None` if it overflows.
fn file_len(slots: usize, max_slice: usize) -> Option<usize> {
    stride_of(max_slice)?
        .checked_mul(slots)?
        .checked_add(HEADER)
}

#[cfg(unix)]
fn id_of(meta: &std::fs::Metadata) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    Some((meta.dev(), meta.ino()))
}

#[cfg(not(unix))]
fn id_of(_meta: &std::fs::Metadata) -> Option<(u64, u64)> {
    None
}

fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.starts_with('.') || name.contains(['/', '\\', '\0']) {
        return Err(RuntimeError::Invalid(format!(
            "shared-memory link name {name:?} is not a plain file name"
        )));
    }
    Ok(())
}

/// A wait that spins, then yields, then sleeps, checking the abort flag and the deadline
/// each time it stops spinning.
struct Backoff<'a> {
    n: u32,
    sleep: Duration,
    started: Instant,
    deadline: Instant,
    abort: &'a AtomicBool,
}

impl<'a> Backoff<'a> {
    fn new(abort: &'a AtomicBool, deadline: Instant) -> Self {
        Backoff {
            n: 0,
            sleep: SLEEP_MIN,
            started: Instant::now(),
            deadline,
            abort,
        }
    }

    /// Waits a little; fails on abort or when the deadline has passed.
    fn wait(&mut self, what: impl FnOnce() -> String) -> Result<()> {
        if let Some(sleep) = self.pause(what)? {
            std::thread::sleep(sleep);
            self.sleep = (self.sleep * 2).min(SLEEP_MAX);
        }
        Ok(())
    }

    /// Waits a little for `counter` (seen reading `seen`) to move: as [`Backoff::wait`],
    /// but its sleep ends as soon as the other side stores a new value with
    /// [`futex::store_and_wake`] (`waiters` is the counter's sleeper count).
    fn wait_for(
        &mut self,
        counter: &AtomicU64,
        waiters: &AtomicU64,
        seen: u64,
        what: impl FnOnce() -> String,
    ) -> Result<()> {
        if let Some(sleep) = self.pause(what)? {
            futex::wait(counter, waiters, seen, sleep);
            self.sleep = (self.sleep * 2).min(WOKEN_SLEEP_MAX);
        }
        Ok(())
    }

    /// Spins or yields, or says how long to sleep; fails on abort or when the deadline
    /// has passed.
    fn pause(&mut self, what: impl FnOnce() -> String) -> Result<Option<Duration>> {
        self.n = self.n.saturating_add(1);
        if self.n <= SPIN {
            std::hint::spin_loop();
            return Ok(None);
        }
        if self.abort.load(Ordering::SeqCst) {
            return Err(RuntimeError::Aborted(format!(
                "abort flag set while waiting for {}",
                what()
            )));
        }
        let now = Instant::now();
        if now >= self.deadline {
            return Err(RuntimeError::Timeout {
                seconds: now.duration_since(self.started).as_secs_f64(),
                what: what(),
            });
        }
        if self.n <= SPIN + YIELD {
            std::thread::yield_now();
            return Ok(None);
        }
        Ok(Some(self.sleep.min(self.deadline - now)))
    }
}

impl ShmLink {
    /// Creates the ring `name` (see [`shm_name`]) with `slots` slots of up to `max_slice`
    /// bytes and returns its sending end. A stale file of the same name is replaced.
    /// `abort` ends any blocked `send` with [`RuntimeError::Aborted`].
    pub fn create_sender(
        name: &str,
        slots: usize,
        max_slice: usize,
        abort: Arc<AtomicBool>,
    ) -> Result<ShmLink> {
        check_name(name)?;
        if slots == 0 {
            return Err(RuntimeError::Invalid(format!(
                "shared-memory link {name} needs at least one slot"
            )));
        }
        let len = file_len(slots, max_slice).ok_or_else(|| {
            RuntimeError::Invalid(format!(
                "shared-memory link {name}: {slots} slots of {max_slice} bytes overflow"
            ))
        })?;
        let dir = shm_dir();
        let path = dir.join(name);
        // Build under a private name and link it into place, so that an opener sees either
        // no file or a complete one, and a stale mapping of an old file is never truncated.
        static BUILDS: AtomicU64 = AtomicU64::new(0);
        let build = BUILDS.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{name}.{}.{build}.tmp", std::process::id()));
        let built = (|| -> Result<(MmapRaw, Option<(u64, u64)>)> {
            let file = private_file(&tmp)?;
            file.set_len(len as u64)?;
            // Populated now (every page made resident at connection time), so that no
            // call pays the ring's first page faults and memory does not creep up as
            // the slots are first used.
            let map = memmap2::MmapOptions::new().populate().map_raw(&file)?;
            let id = id_of(&file.metadata()?);
            Ok((map, id))
        })();
        let (map, file_id) = match built {
            Ok(x) => x,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
        };
        let link = ShmLink {
            map,
            name: name.to_string(),
            path: path.clone(),
            end: End::Sender,
            slots: slots as u64,
            max_slice,
            stride: stride_of(max_slice).expect("checked by file_len"),
            abort,
            busy: Mutex::new(()),
            file_id,
        };
        // The file is fresh (zeroed), but store every word explicitly, then the magic
        // word last with Release: an opener that Acquire-loads the magic sees the rest.
        link.word(OFF_SLOTS).store(slots as u64, Ordering::Relaxed);
        link.word(OFF_MAX_SLICE)
            .store(max_slice as u64, Ordering::Relaxed);
        link.word(OFF_OPENED).store(0, Ordering::Relaxed);
        link.word(OFF_HEAD).store(0, Ordering::Relaxed);
        link.word(OFF_TAIL).store(0, Ordering::Relaxed);
        link.word(OFF_HEAD_WAITERS).store(0, Ordering::Relaxed);
        link.word(OFF_TAIL_WAITERS).store(0, Ordering::Relaxed);
        link.word(OFF_MAGIC).store(MAGIC, Ordering::Release);
        // Publish: a link fails if the name exists (a stale ring of a dead job with the
        // same nonce cannot exist; anything else there is not ours to replace).
        let published = std::fs::hard_link(&tmp, &path);
        let _ = std::fs::remove_file(&tmp);
        if let Err(e) = published {
            return Err(RuntimeError::Bootstrap(format!(
                "shared-memory link {name}: cannot publish {}: {e}",
                path.display()
            )));
        }
        Ok(link)
    }

    /// Opens the receiving end of ring `name`, waiting until its sender has created it.
    /// Once mapped, the file name is removed: both ends now hold the memory, so nothing
    /// is left in the directory even if a process dies later. Fails with
    /// [`RuntimeError::Timeout`] at `deadline`, [`RuntimeError::Aborted`] on abort, and
    /// [`RuntimeError::Bootstrap`] if the file is not a ring of this version.
    pub fn open_receiver(name: &str, abort: Arc<AtomicBool>, deadline: Instant) -> Result<ShmLink> {
        check_name(name)?;
        let path = shm_dir().join(name);
        let mut backoff = Backoff::new(&abort, deadline);
        let (file, map) = loop {
            match open_existing(&path) {
                Ok(file) => {
                    let meta = file.metadata()?;
                    check_owner(name, &meta)?;
                    let len = meta.len();
                    if len >= HEADER as u64 {
                        let map = memmap2::MmapOptions::new().populate().map_raw(&file)?;
                        // SAFETY: the mapping is page-aligned and at least HEADER long.
                        let magic = unsafe { &*(map.as_mut_ptr() as *const AtomicU64) };
                        match magic.load(Ordering::Acquire) {
                            MAGIC => break (file, map),
                            0 => {}
                            other => {
                                return Err(RuntimeError::Bootstrap(format!(
                                    "shared-memory link {name}: file has magic {other:#018x}, \
                                     expected {MAGIC:#018x}"
                                )))
                            }
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
            backoff.wait(|| format!("the sender to create shared-memory link {name}"))?;
        };
        let mut link = ShmLink {
            map,
            name: name.to_string(),
            path: path.clone(),
            end: End::Receiver,
            slots: 0,
            max_slice: 0,
            stride: 0,
            abort,
            busy: Mutex::new(()),
            file_id: None,
        };
        let slots = link.word(OFF_SLOTS).load(Ordering::Relaxed);
        let max_slice = link.word(OFF_MAX_SLICE).load(Ordering::Relaxed);
        let expected = usize::try_from(slots)
            .ok()
            .zip(usize::try_from(max_slice).ok())
            .and_then(|(s, m)| file_len(s, m).map(|len| (s, m, len)));
        match expected {
            Some((s, m, len)) if s > 0 && len == link.map.len() => {
                link.slots = slots;
                link.max_slice = m;
                link.stride = stride_of(m).expect("checked by file_len");
            }
            _ => {
                return Err(RuntimeError::Bootstrap(format!(
                    "shared-memory link {name}: header says {slots} slots of {max_slice} \
                     bytes, which is not the {} byte file",
                    link.map.len()
                )))
            }
        }
        // Unlink the name, but only if it still names the file we mapped.
        let ours = id_of(&file.metadata()?);
        let named = std::fs::metadata(&path).ok().and_then(|m| id_of(&m));
        if ours.is_none() || ours == named {
            let _ = std::fs::remove_file(&path);
        }
        link.word(OFF_OPENED).store(1, Ordering::Release);
        Ok(link)
    }

    /// The ring's name.
    /// Waits until the receiver has opened the ring and taken every slice sent so far
    /// (no-op on the receiving end). A sender must do this before it goes away: dropped
    /// before the receiver opened the ring, it removes the file and the data with it.
    pub fn flush(&self, deadline: Instant) -> Result<()> {
        if self.end != End::Sender {
            return Ok(());
        }
        let head = self.word(OFF_HEAD).load(Ordering::Relaxed);
        let mut backoff = Backoff::new(&self.abort, deadline);
        let what = || {
            format!(
                "the receiver to take everything sent on shared-memory link {}",
                self.name
            )
        };
        while self.word(OFF_OPENED).load(Ordering::Acquire) == 0 {
            backoff.wait(what)?;
        }
        loop {
            let tail = self.word(OFF_TAIL).load(Ordering::Acquire);
            if tail == head {
                return Ok(());
            }
            backoff.wait_for(self.word(OFF_TAIL), self.word(OFF_TAIL_WAITERS), tail, what)?;
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Slots in the ring: how many slices a sender may have in flight.
    pub fn slots(&self) -> usize {
        self.slots as usize
    }

    /// The longest slice the ring carries.
    pub fn max_slice(&self) -> usize {
        self.max_slice
    }

    /// The header word at byte offset `off`.
    fn word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off & 7 == 0 && off + 8 <= HEADER);
        // SAFETY: the mapping starts page-aligned and is at least HEADER bytes long (the
        // creator sized it, the opener checked), so `off` (a multiple of 8 below HEADER)
        // is in bounds and 8-aligned, which is all `AtomicU64` needs: it has the layout of
        // `u64`, and any bit pattern is valid. The reference cannot outlive `self`, which
        // owns the mapping. Every process touches these words only through atomics, so
        // concurrent access from the peer is not a data race. (Rust's memory model speaks
        // of one program, but lock-free atomics are address-free, so they synchronise two
        // processes mapping the same memory just as they do two threads.)
        unsafe { &*(self.map.as_mut_ptr().add(off) as *const AtomicU64) }
    }

    /// The start of slot `n % slots` (its length word, then its data).
    fn slot(&self, n: u64) -> *mut u8 {
        let idx = (n % self.slots) as usize;
        // SAFETY: idx < slots, and the mapping holds HEADER + slots * stride bytes
        // (checked at open), so the slot lies inside it.
        unsafe { self.map.as_mut_ptr().add(HEADER + idx * self.stride) }
    }

    fn wrong_end(&self, op: &str) -> RuntimeError {
        RuntimeError::Invalid(format!(
            "{op} on the {:?} end of shared-memory link {}",
            self.end, self.name
        ))
    }
}

impl Link for ShmLink {
    fn send(&self, slice: &[u8], deadline: Instant) -> Result<()> {
        if self.end != End::Sender {
            return Err(self.wrong_end("send"));
        }
        if slice.len() > self.max_slice {
            return Err(RuntimeError::Invalid(format!(
                "slice of {} bytes exceeds the {} byte slots of shared-memory link {}",
                slice.len(),
                self.max_slice,
                self.name
            )));
        }
        let _one = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        // Only this end stores head, so Relaxed reads back our own value.
        let head = self.word(OFF_HEAD).load(Ordering::Relaxed);
        let mut backoff = Backoff::new(&self.abort, deadline);
        // Acquire pairs with the receiver's Release of tail: once we see the slot freed,
        // the receiver has finished reading it.
        loop {
            let tail = self.word(OFF_TAIL).load(Ordering::Acquire);
            if head.wrapping_sub(tail) < self.slots {
                break;
            }
            backoff.wait_for(
                self.word(OFF_TAIL),
                self.word(OFF_TAIL_WAITERS),
                tail,
                || format!("a free slot in shared-memory link {}", self.name),
            )?;
        }
        let slot = self.slot(head);
        // SAFETY: the slot is in bounds (see `slot`) with room for the length word and
        // max_slice >= slice.len() bytes; the length word is 8-aligned (HEADER and stride
        // are multiples of 64). By the protocol above the receiver does not touch this
        // slot until we publish it with the store of head below.
        unsafe {
            (slot as *mut u64).write(slice.len() as u64);
            std::ptr::copy_nonoverlapping(slice.as_ptr(), slot.add(SLOT_LEN), slice.len());
        }
        futex::store_and_wake(
            self.word(OFF_HEAD),
            self.word(OFF_HEAD_WAITERS),
            head.wrapping_add(1),
        );
        Ok(())
    }

    fn recv(&self, buf: &mut [u8], deadline: Instant) -> Result<()> {
        if self.end != End::Receiver {
            return Err(self.wrong_end("recv"));
        }
        let _one = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        // Only this end stores tail.
        let tail = self.word(OFF_TAIL).load(Ordering::Relaxed);
        let mut backoff = Backoff::new(&self.abort, deadline);
        // Acquire pairs with the sender's Release of head: the slot's bytes are complete.
        while self.word(OFF_HEAD).load(Ordering::Acquire) == tail {
            backoff.wait_for(
                self.word(OFF_HEAD),
                self.word(OFF_HEAD_WAITERS),
                tail,
                || format!("a slice on shared-memory link {}", self.name),
            )?;
        }
        let slot = self.slot(tail);
        // SAFETY: as in `send`; the sender does not reuse this slot until we store tail.
        let len = unsafe { (slot as *const u64).read() };
        let result = if len != buf.len() as u64 {
            Err(RuntimeError::Mismatch(format!(
                "shared-memory link {}: the sender sent a slice of {len} bytes where the \
                 receiver expected {}",
                self.name,
                buf.len()
            )))
        } else {
            // len == buf.len() <= max_slice: a length word beyond max_slice (a corrupt
            // peer) cannot make us read past the slot.
            if buf.len() > self.max_slice {
                return Err(RuntimeError::Invalid(format!(
                    "shared-memory link {}: slice length {len} exceeds the slot size {}",
                    self.name, self.max_slice
                )));
            }
            // SAFETY: the slot holds len <= max_slice data bytes (bounds as in `send`).
            unsafe {
                std::ptr::copy_nonoverlapping(slot.add(SLOT_LEN), buf.as_mut_ptr(), buf.len())
            };
            Ok(())
        };
        // The slice is consumed either way, as with the in-process link.
        futex::store_and_wake(
            self.word(OFF_TAIL),
            self.word(OFF_TAIL_WAITERS),
            tail.wrapping_add(1),
        );
        result
    }
}

impl Drop for ShmLink {
    /// A sender whose receiver never opened the ring removes the file, so that an
    /// abandoned link leaves nothing in `/dev/shm` (best effort: it is removed only if
    /// the name still names this ring's file).
    fn drop(&mut self) {
        if self.end != End::Sender || self.word(OFF_OPENED).load(Ordering::Acquire) != 0 {
            return;
        }
        let named = std::fs::metadata(&self.path).ok().and_then(|m| id_of(&m));
        if named.is_some() && named == self.file_id {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
