//! The verbs a queue-pair transport needs, as one interface: a reliable connected queue
//! pair with its completion queue, memory registration, RDMA writes (with or without an
//! immediate value), zero-length receives for those immediates, and completions.
//! Implementations: [`crate::soft::SoftDevice`], a software device inside the process (the
//! test double CI runs the transport against, faithful to what RC queue pairs guarantee:
//! writes land in order and before their immediate's completion, a write outside the
//! target's registered memory fails, an immediate with no receive posted fails as a
//! "receiver not ready"), and, with the `verbs` feature, `verbs_qp` over
//! libibverbs.

use std::fmt;

/// An error of the verbs layer, already in words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RdmaError(pub String);

impl fmt::Display for RdmaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RdmaError {}

pub type Result<T> = std::result::Result<T, RdmaError>;

/// Keys of a registered memory region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrKeys {
    /// For local scatter/gather entries.
    pub lkey: u32,
    /// For the peer's RDMA writes into it.
    pub rkey: u32,
}

/// What the peer needs to connect to a queue pair: its number, the port's LID and GID,
/// the first packet sequence number. Travels as [`Endpoint::BYTES`] bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub qpn: u32,
    pub lid: u16,
    pub gid: [u8; 16],
    pub psn: u32,
}

impl Endpoint {
    pub const BYTES: usize = 26;

    pub fn encode(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[..4].copy_from_slice(&self.qpn.to_le_bytes());
        b[4..6].copy_from_slice(&self.lid.to_le_bytes());
        b[6..22].copy_from_slice(&self.gid);
        b[22..].copy_from_slice(&self.psn.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<Endpoint> {
        if b.len() != Self::BYTES {
            return Err(RdmaError(format!(
                "a queue pair endpoint is {} bytes, not {}",
                Self::BYTES,
                b.len()
            )));
        }
        Ok(Endpoint {
            qpn: u32::from_le_bytes(b[..4].try_into().unwrap()),
            lid: u16::from_le_bytes(b[4..6].try_into().unwrap()),
            gid: b[6..22].try_into().unwrap(),
            psn: u32::from_le_bytes(b[22..].try_into().unwrap()) & 0xff_ffff,
        })
    }
}

/// A finished work request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The id the request was posted with.
    pub wr_id: u64,
    /// `Err` with the reason when the request failed (the queue pair is then in error and
    /// every later request fails too).
    pub status: std::result::Result<(), String>,
    /// A receive that an immediate consumed: the immediate, and the bytes its write
    /// carried. `None` for the completion of a write this side posted.
    pub recv: Option<(u32, u32)>,
}

/// One reliable connected queue pair, its completion queue and its protection domain.
pub trait QueuePair: Send + Sync {
    /// This side's endpoint, for the peer's [`QueuePair::connect`].
    fn endpoint(&self) -> Endpoint;

    /// Connects to the peer's queue pair (ready to send and to receive).
    fn connect(&self, remote: &Endpoint) -> Result<()>;

    /// Registers `len` bytes at `addr` for local use and for the peer's writes.
    ///
    /// # Safety
    /// The range must stay allocated until the queue pair is dropped, and the caller must
    /// accept that the peer may write any byte of it at any time.
    unsafe fn register(&self, addr: *mut u8, len: usize) -> Result<MrKeys>;

    /// Posts an RDMA write of `len` bytes from `local` (inside a region registered with
    /// `lkey`) to `remote` (inside the peer's region of `rkey`), with an immediate value
    /// that consumes one of the peer's receives when `imm` is given. Its completion
    /// carries `wr_id`.
    ///
    /// # Safety
    /// The local bytes must stay unchanged until the completion.
    #[allow(clippy::too_many_arguments)]
    unsafe fn write(
        &self,
        wr_id: u64,
        local: *const u8,
        len: u32,
        lkey: u32,
        remote: u64,
        rkey: u32,
        imm: Option<u32>,
    ) -> Result<()>;

    /// Posts a zero-length receive, which one immediate of the peer consumes.
    fn post_recv(&self, wr_id: u64) -> Result<()>;

    /// Appends the completions that are ready (none is fine) to `out`.
    fn poll(&self, out: &mut Vec<Completion>) -> Result<()>;
}

/// Where queue pairs come from: an opened device port.
pub trait Device: Send + Sync {
    /// The device and port, for messages (`mlx5_0:1`, `soft`).
    fn name(&self) -> String;
    /// A new queue pair with room for `depth` outstanding requests each way.
    fn queue_pair(&self, depth: u32) -> Result<Box<dyn QueuePair>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_round_trip_and_a_wrong_length_is_refused() {
        let e = Endpoint {
            qpn: 0x1234,
            lid: 7,
            gid: [9; 16],
            psn: 0xabcdef,
        };
        assert_eq!(Endpoint::decode(&e.encode()), Ok(e));
        assert!(Endpoint::decode(&e.encode()[1..]).is_err());
    }
}
