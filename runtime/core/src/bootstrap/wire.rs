//! Byte layouts of the bootstrap protocol. All integers are little-endian.
//!
//! Every connection a rank opens (to the root when joining, to a peer for a link) starts
//! with one fixed-size [`Hello`] and the challenge-response of `handshake.rs`, in which
//! both ends prove they know the group's secret without sending it; everything after it
//! is [`Frame`]s. A connection that fails the handshake is closed without a reply.

use super::io::{read_full, write_full, Wait};
use crate::error::{Result, RuntimeError};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, TcpStream};

/// Version of the id; bumped on any incompatible change.
pub(crate) const VERSION: u16 = 1;
/// Version of the handshake (2: challenge-response, no secret on the wire).
pub(crate) const HANDSHAKE_VERSION: u16 = 2;
/// Bytes of each side's random nonce in the handshake.
pub(crate) const NONCE_LEN: usize = 16;
pub(crate) const SECRET_LEN: usize = 32;
/// An encoded socket address: family (4 or 6), 0, port, 16 address bytes (IPv4 in the
/// first 4), IPv6 scope id.
pub(crate) const ADDR_LEN: usize = 24;
/// Largest frame payload accepted; guards against allocating garbage lengths.
const MAX_FRAME: usize = 1 << 30;

pub(crate) fn put_addr(out: &mut [u8], addr: &SocketAddr) {
    out[..ADDR_LEN].fill(0);
    out[2..4].copy_from_slice(&addr.port().to_le_bytes());
    match addr {
        SocketAddr::V4(a) => {
            out[0] = 4;
            out[4..8].copy_from_slice(&a.ip().octets());
        }
        SocketAddr::V6(a) => {
            out[0] = 6;
            out[4..20].copy_from_slice(&a.ip().octets());
            out[20..24].copy_from_slice(&a.scope_id().to_le_bytes());
        }
    }
}

pub(crate) fn get_addr(b: &[u8]) -> std::result::Result<SocketAddr, String> {
    let port = u16::from_le_bytes([b[2], b[3]]);
    match b[0] {
        4 => Ok(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(b[4], b[5], b[6], b[7])),
            port,
        )),
        6 => {
            let ip: [u8; 16] = b[4..20].try_into().expect("16 bytes");
            let scope = u32::from_le_bytes(b[20..24].try_into().expect("4 bytes"));
            Ok(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(ip),
                port,
                0,
                scope,
            )))
        }
        f => Err(format!("unknown address family {f}")),
    }
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// What a connection is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HelloKind {
    /// A rank joining the group at the root: `a` = rank, `b` = n_ranks, `addr` = where
    /// the rank listens for links.
    Join = 1,
    /// A link between ranks: `a` = connecting rank, `b` = accepting rank, `tag`.
    Link = 2,
}

/// The first bytes on every connection:
/// `"BRDH" | version u16 | kind u8 | 0 u8 | nonce [16] | a u32 | b u32 | tag u64 | addr [24]`.
/// The nonce is the opener's fresh random challenge to the acceptor.
#[derive(Clone)]
pub(crate) struct Hello {
    pub kind: HelloKind,
    pub nonce: [u8; NONCE_LEN],
    pub a: u32,
    pub b: u32,
    pub tag: u64,
    pub addr: Option<SocketAddr>,
}

const HELLO_MAGIC: &[u8; 4] = b"BRDH";
pub(crate) const HELLO_LEN: usize = 64;

impl Hello {
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..4].copy_from_slice(HELLO_MAGIC);
        b[4..6].copy_from_slice(&HANDSHAKE_VERSION.to_le_bytes());
        b[6] = self.kind as u8;
        b[8..24].copy_from_slice(&self.nonce);
        b[24..28].copy_from_slice(&self.a.to_le_bytes());
        b[28..32].copy_from_slice(&self.b.to_le_bytes());
        b[32..40].copy_from_slice(&self.tag.to_le_bytes());
        if let Some(addr) = &self.addr {
            put_addr(&mut b[40..64], addr);
        }
        b
    }

    pub fn decode(b: &[u8; HELLO_LEN]) -> std::result::Result<Hello, String> {
        if &b[0..4] != HELLO_MAGIC {
            return Err("not a Braid bootstrap connection (bad magic)".into());
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != HANDSHAKE_VERSION {
            return Err(format!(
                "bootstrap handshake version {version}, expected {HANDSHAKE_VERSION}"
            ));
        }
        let kind = match b[6] {
            1 => HelloKind::Join,
            2 => HelloKind::Link,
            k => return Err(format!("unknown connection kind {k}")),
        };
        let addr = if b[40] == 0 {
            None
        } else {
            Some(get_addr(&b[40..64])?)
        };
        Ok(Hello {
            kind,
            nonce: b[8..24].try_into().expect("16 bytes"),
            a: u32_at(b, 24),
            b: u32_at(b, 28),
            tag: u64_at(b, 32),
            addr,
        })
    }
}

/// Frame kinds after the hello.
pub(crate) mod kind {
    /// Root → joiner: the listening address of every rank (`n × ADDR_LEN`), then the
    /// job's nonce (`NONCE_LEN`).
    pub const WELCOME: u8 = 1;
    /// Either way: the request is refused; payload is a UTF-8 reason.
    pub const REFUSED: u8 = 2;
    /// Member → root: one rank's part of a control operation.
    pub const OP: u8 = 3;
    /// Root → member: the result of a control operation.
    pub const RESULT: u8 = 4;
    /// Root → member: the operation (or the join) failed; payload from `encode_error`.
    pub const ERROR: u8 = 5;
    /// Accepting rank → connecting rank: the link is accepted.
    pub const LINK_OK: u8 = 6;
    /// Either way on the control star: still alive (empty; see `liveness.rs`).
    pub const HEARTBEAT: u8 = 7;
    /// Either way on the control star: leaving cleanly (empty).
    pub const GOODBYE: u8 = 8;
}

/// `kind u8 | seq u64 | len u32 | payload [len]`.
pub(crate) struct Frame {
    pub kind: u8,
    pub seq: u64,
    pub payload: Vec<u8>,
}

impl Frame {
    pub fn new(kind: u8, seq: u64, payload: Vec<u8>) -> Frame {
        Frame { kind, seq, payload }
    }

    pub fn write(&self, stream: &TcpStream, w: &Wait) -> Result<()> {
        if self.payload.len() > MAX_FRAME {
            return Err(RuntimeError::Invalid(format!(
                "{} bytes while {}: bootstrap messages are limited to {MAX_FRAME} bytes",
                self.payload.len(),
                w.what
            )));
        }
        let mut head = [0u8; 13];
        head[0] = self.kind;
        head[1..9].copy_from_slice(&self.seq.to_le_bytes());
        head[9..13].copy_from_slice(&(self.payload.len() as u32).to_le_bytes());
        write_full(stream, &[&head, &self.payload], w)
    }

    pub fn read(stream: &TcpStream, w: &Wait) -> Result<Frame> {
        let mut head = [0u8; 13];
        read_full(stream, &mut head, w)?;
        let len = u32_at(&head, 9) as usize;
        if len > MAX_FRAME {
            return Err(RuntimeError::Bootstrap(format!(
                "frame of {len} bytes while {}: corrupt stream",
                w.what
            )));
        }
        let mut payload = vec![0u8; len];
        read_full(stream, &mut payload, w)?;
        Ok(Frame {
            kind: head[0],
            seq: u64_at(&head, 1),
            payload,
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.payload).into_owned()
    }
}

/// Encodes an error for an `ERROR` frame: `code u8 | peer u32 | seconds f64 | text`.
pub(crate) fn encode_error(e: &RuntimeError) -> Vec<u8> {
    let (code, peer, seconds, text) = match e {
        RuntimeError::PeerFailed { peer, reason } => (0u8, *peer, 0.0, reason.clone()),
        RuntimeError::Mismatch(m) => (1, 0, 0.0, m.clone()),
        RuntimeError::Timeout { seconds, what } => (2, 0, *seconds, what.clone()),
        RuntimeError::Aborted(m) => (3, 0, 0.0, m.clone()),
        other => (4, 0, 0.0, other.to_string()),
    };
    let mut b = vec![code];
    b.extend_from_slice(&peer.to_le_bytes());
    b.extend_from_slice(&seconds.to_le_bytes());
    b.extend_from_slice(text.as_bytes());
    b
}

/// Decodes an `ERROR` frame from the root into the same kind of error, so every rank
/// reports the failure the root saw (which peer died, which call mismatched).
pub(crate) fn decode_error(b: &[u8]) -> RuntimeError {
    if b.len() < 13 {
        return RuntimeError::Bootstrap("malformed error report from rank 0".into());
    }
    let peer = u32_at(b, 1);
    let seconds = f64::from_le_bytes(b[5..13].try_into().expect("8 bytes"));
    let text = format!("{} (reported by rank 0)", String::from_utf8_lossy(&b[13..]));
    match b[0] {
        0 => RuntimeError::PeerFailed { peer, reason: text },
        1 => RuntimeError::Mismatch(text),
        2 => RuntimeError::Timeout {
            seconds,
            what: text,
        },
        3 => RuntimeError::Aborted(text),
        _ => RuntimeError::Bootstrap(text),
    }
}
