//! The unique id (NCCL's `ncclUniqueId`, 128 bytes): where the root listens and the
//! group's secret. Rank 0 creates it, the application hands it to every rank out of band
//! (hex in an environment variable or a file, an MPI broadcast), and every connection in
//! the group authenticates with the secret it carries.
//!
//! Layout (integers little-endian):
//!
//! | bytes    | content                                                     |
//! |----------|-------------------------------------------------------------|
//! | 0..4     | magic `"BRID"`                                              |
//! | 4..6     | version (1)                                                 |
//! | 6..8     | 0                                                           |
//! | 8..32    | root address: family 4/6, 0, port, 16 address bytes, scope  |
//! | 32..64   | secret (32 random bytes from the OS)                        |
//! | 64..124  | 0                                                           |
//! | 124..128 | FNV-1a 32 of bytes 0..124, so a garbled copy is caught      |

use super::wire::{get_addr, put_addr, SECRET_LEN, VERSION};
use crate::error::{Result, RuntimeError};
use rand::RngCore;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::str::FromStr;
use std::sync::Mutex;

const ID_MAGIC: &[u8; 4] = b"BRID";
const ID_LEN: usize = 128;

/// Where the root listens when [`UniqueId::new`] is given no address: an IP
/// (`10.0.0.5`, port chosen by the OS) or `IP:PORT`.
pub const BOOTSTRAP_ADDR_VAR: &str = "BRAID_BOOTSTRAP_ADDR";

/// The group's shared secret. Its `Debug` never shows the bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Secret(pub(crate) [u8; SECRET_LEN]);

impl Secret {
    /// 32 bytes from the operating system's random source.
    pub fn random() -> Secret {
        let mut s = [0u8; SECRET_LEN];
        rand::rngs::OsRng.fill_bytes(&mut s);
        Secret(s)
    }

    pub fn from_bytes(bytes: [u8; SECRET_LEN]) -> Secret {
        Secret(bytes)
    }

    /// The secret as hex digits, as `BRAID_SECRET` takes it (for a launcher to hand to
    /// the processes it starts).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses 32 to 64 hex digits (16 to 32 bytes; shorter secrets are padded with
    /// zeros). Fewer than 16 bytes is refused as too easy to guess.
    pub fn from_hex(text: &str) -> Result<Secret> {
        let bytes = hex_decode(text.trim())
            .map_err(|e| RuntimeError::Invalid(format!("secret is not hex: {e}")))?;
        if !(16..=SECRET_LEN).contains(&bytes.len()) {
            return Err(RuntimeError::Invalid(format!(
                "secret has {} bytes; give 16 to 32 bytes (32 to 64 hex digits)",
                bytes.len()
            )));
        }
        let mut s = [0u8; SECRET_LEN];
        s[..bytes.len()].copy_from_slice(&bytes);
        Ok(Secret(s))
    }

    pub fn as_bytes(&self) -> &[u8; SECRET_LEN] {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// The 128-byte id every rank of one group is started with. Always valid: it is built by
/// [`UniqueId::new`] / [`UniqueId::from_parts`] or checked by [`UniqueId::from_bytes`].
///
/// `Display` is the 256-digit hex form (it contains the secret: treat it like a
/// password); `Debug` shows only the root's address.
#[derive(Clone, PartialEq, Eq)]
pub struct UniqueId([u8; ID_LEN]);

impl UniqueId {
    pub const LEN: usize = ID_LEN;

    /// Creates an id and binds the root's listening socket, so the port in the id is
    /// already taken when the id is handed out.
    ///
    /// The address is `listen`, else `BRAID_BOOTSTRAP_ADDR`, else the first address of
    /// the interfaces `BRAID_SOCKET_IFNAME` / `NCCL_SOCKET_IFNAME` select, else, when the
    /// launcher says the job spans hosts (`LOCAL_WORLD_SIZE` < `WORLD_SIZE`), an
    /// interface as NCCL picks one (not `docker*`, not `lo`), else `127.0.0.1:0`:
    /// loopback by default, so a single-host group never listens on the network unless
    /// asked. When the address is unspecified
    /// (`0.0.0.0`, `::`), the socket listens on every interface and the id carries the
    /// address of the interface on the default route.
    ///
    /// Keep the returned [`RootListener`] alive until rank 0 of this process has called
    /// [`super::Bootstrap::init`], which takes the socket over.
    pub fn new(listen: Option<SocketAddr>) -> Result<(UniqueId, RootListener)> {
        let want = match listen {
            Some(a) => a,
            None => default_listen_addr()?,
        };
        let listener = TcpListener::bind(want)
            .map_err(|e| RuntimeError::Bootstrap(format!("cannot listen on {want}: {e}")))?;
        let bound = listener.local_addr()?;
        let advertised = if bound.ip().is_unspecified() {
            SocketAddr::new(default_route_ip(bound.is_ipv4())?, bound.port())
        } else {
            bound
        };
        let id = UniqueId::from_parts(advertised, Secret::random());
        PENDING_ROOTS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((id.clone(), listener));
        tracing::debug!(root = %advertised, "bootstrap root listening");
        Ok((id.clone(), RootListener { id }))
    }

    /// An id for a root at `addr` with a secret agreed some other way (the launcher path).
    pub fn from_parts(addr: SocketAddr, secret: Secret) -> UniqueId {
        let mut b = [0u8; ID_LEN];
        b[0..4].copy_from_slice(ID_MAGIC);
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        put_addr(&mut b[8..32], &addr);
        b[32..64].copy_from_slice(&secret.0);
        let sum = fnv1a32(&b[..124]);
        b[124..128].copy_from_slice(&sum.to_le_bytes());
        UniqueId(b)
    }

    /// Where the root listens.
    pub fn addr(&self) -> SocketAddr {
        get_addr(&self.0[8..32]).expect("validated when built")
    }

    pub fn secret(&self) -> Secret {
        Secret(self.0[32..64].try_into().expect("32 bytes"))
    }

    pub fn to_bytes(&self) -> [u8; ID_LEN] {
        self.0
    }

    /// Checks length, magic, version, checksum and address.
    pub fn from_bytes(bytes: &[u8]) -> Result<UniqueId> {
        let bad = |why: String| RuntimeError::Invalid(format!("not a Braid unique id: {why}"));
        let b: [u8; ID_LEN] = bytes
            .try_into()
            .map_err(|_| bad(format!("{} bytes, expected {ID_LEN}", bytes.len())))?;
        if &b[0..4] != ID_MAGIC {
            return Err(bad(format!(
                "bad magic {:02x?}, expected {:02x?} (\"BRID\")",
                &b[0..4],
                ID_MAGIC
            )));
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != VERSION {
            return Err(bad(format!(
                "version {version}, this build speaks {VERSION}"
            )));
        }
        let sum = u32::from_le_bytes(b[124..128].try_into().expect("4 bytes"));
        if sum != fnv1a32(&b[..124]) {
            return Err(bad(
                "checksum mismatch (the id was corrupted or truncated in transit)".into(),
            ));
        }
        get_addr(&b[8..32]).map_err(bad)?;
        Ok(UniqueId(b))
    }
}

impl fmt::Display for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UniqueId")
            .field("root", &self.addr())
            .finish_non_exhaustive()
    }
}

impl FromStr for UniqueId {
    type Err = RuntimeError;

    /// Parses the 256 hex digits `Display` writes (surrounding whitespace allowed).
    fn from_str(s: &str) -> Result<UniqueId> {
        let bytes = hex_decode(s.trim())
            .map_err(|e| RuntimeError::Invalid(format!("not a Braid unique id: {e}")))?;
        UniqueId::from_bytes(&bytes)
    }
}

/// Holds the root's listening socket between [`UniqueId::new`] and rank 0's
/// `Bootstrap::init` in the same process. Dropping it before then closes the socket
/// (rank 0 then binds the id's address again itself, which can race with other programs
/// for the port).
#[must_use = "dropping the RootListener closes the root's socket before rank 0 can use it"]
pub struct RootListener {
    id: UniqueId,
}

impl RootListener {
    pub fn id(&self) -> &UniqueId {
        &self.id
    }
}

impl Drop for RootListener {
    fn drop(&mut self) {
        take_root_listener(&self.id);
    }
}

/// Root sockets made by `UniqueId::new` and not yet taken by rank 0's init. Process-wide
/// like NCCL's, because the id is the only thing the application passes to init.
static PENDING_ROOTS: Mutex<Vec<(UniqueId, TcpListener)>> = Mutex::new(Vec::new());

/// Takes the socket `UniqueId::new` bound for `id`, if this process made it.
pub(crate) fn take_root_listener(id: &UniqueId) -> Option<TcpListener> {
    let mut pending = PENDING_ROOTS.lock().unwrap_or_else(|p| p.into_inner());
    let at = pending.iter().position(|(i, _)| i == id)?;
    Some(pending.swap_remove(at).1)
}

fn default_listen_addr() -> Result<SocketAddr> {
    default_listen().map(|(a, _)| a)
}

/// Where a root made by [`UniqueId::new`] without an address listens (port 0: any), and
/// why there, in words (`braid doctor` prints it).
pub fn default_listen() -> Result<(SocketAddr, String)> {
    let Ok(text) = std::env::var(BOOTSTRAP_ADDR_VAR) else {
        if let Some(ip) = super::iface::listen_ip_from_env()? {
            return Ok((
                SocketAddr::new(ip, 0),
                "the first address of the interfaces BRAID_SOCKET_IFNAME / NCCL_SOCKET_IFNAME select".into(),
            ));
        }
        if multi_node_launch() {
            // Ranks on other hosts must reach the root: an interface as NCCL picks one.
            let spec = braid_topo::ifname::IfSpec::default_rule();
            let all = super::iface::list()?;
            let what = "the interfaces a multi-node job may use (not docker*, not lo)";
            if let Ok(i) = super::iface::choose(&spec, &all, what) {
                return Ok((
                    SocketAddr::new(i.addr, 0),
                    format!("interface {}, the first that is not docker* or lo (the launcher says the job spans hosts)", i.name),
                ));
            }
        }
        return Ok((
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            "loopback: a job on one host listens on no network unless asked (BRAID_SOCKET_IFNAME, BRAID_BOOTSTRAP_ADDR)".into(),
        ));
    };
    let text = text.trim();
    let why = format!("{BOOTSTRAP_ADDR_VAR}={text}");
    if let Ok(a) = text.parse::<SocketAddr>() {
        return Ok((a, why));
    }
    match text.parse::<IpAddr>() {
        Ok(ip) => Ok((SocketAddr::new(ip, 0), why)),
        Err(_) => Err(RuntimeError::Bootstrap(format!(
            "{BOOTSTRAP_ADDR_VAR}={text:?} is neither an IP address nor IP:PORT"
        ))),
    }
}

/// Whether the launcher says the job spans several hosts (torchrun's `LOCAL_WORLD_SIZE`
/// smaller than `WORLD_SIZE`).
fn multi_node_launch() -> bool {
    let get = |v: &str| {
        std::env::var(v)
            .ok()
            .and_then(|x| x.trim().parse::<u32>().ok())
    };
    matches!((get("LOCAL_WORLD_SIZE"), get("WORLD_SIZE")), (Some(l), Some(w)) if l < w)
}

/// The local address of the interface that routes off-host: "connecting" a UDP socket
/// sends nothing but makes the kernel pick the source address. The target is a
/// documentation address (RFC 5737 / RFC 3849), never contacted.
fn default_route_ip(v4: bool) -> Result<IpAddr> {
    let (bind, probe) = if v4 {
        ("0.0.0.0:0", "192.0.2.1:9")
    } else {
        ("[::]:0", "[2001:db8::1]:9")
    };
    let found = UdpSocket::bind(bind).and_then(|s| {
        s.connect(probe)?;
        s.local_addr()
    });
    match found {
        Ok(a) if !a.ip().is_unspecified() => Ok(a.ip()),
        _ => Err(RuntimeError::Bootstrap(format!(
            "listening on all interfaces, but no default route to pick an address to advertise; \
             set {BOOTSTRAP_ADDR_VAR} to this host's IP"
        ))),
    }
}

pub(crate) fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, b| {
        (h ^ *b as u32).wrapping_mul(0x0100_0193)
    })
}

pub(crate) fn hex_decode(text: &str) -> std::result::Result<Vec<u8>, String> {
    if !text.len().is_multiple_of(2) {
        return Err(format!("{} hex digits (odd count)", text.len()));
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        b'A'..=b'F' => Ok(c - b'A' + 10),
        _ => Err(format!("{:?} is not a hex digit", c as char)),
    };
    text.as_bytes()
        .chunks(2)
        .map(|p| Ok(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}
