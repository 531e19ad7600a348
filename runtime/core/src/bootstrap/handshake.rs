//! Mutual authentication of every bootstrap connection by challenge-response over the
//! group's secret; the secret itself never crosses the wire.
//!
//! ```text
//! opener   -> acceptor   Hello (64 bytes, with the opener's random nonce)
//! acceptor -> opener     nonce_a [16] | HMAC(secret, "braid-accept" | hello | nonce_a) [32]
//! opener   -> acceptor   HMAC(secret, "braid-open" | hello | nonce_a) [32]
//! ```
//!
//! The acceptor's proof covers the opener's fresh nonce (inside the hello), the
//! opener's covers the acceptor's: neither can be replayed from another connection, and
//! the two labels keep one side's proof from passing as the other's. Both are HMAC-SHA256
//! and compared in constant time. The acceptor proves itself first, so an opener never
//! sends anything derived from the secret to a stranger, and a stranger that opens a
//! connection learns one MAC over bytes it chose, which tells it nothing about the secret.

use super::io::{read_full, write_full, Wait};
use super::wire::{Hello, HELLO_LEN, NONCE_LEN};
use crate::error::{Result, RuntimeError};
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;
use std::net::TcpStream;

type HmacSha256 = Hmac<Sha256>;

const MAC_LEN: usize = 32;
const ACCEPT_LABEL: &[u8] = b"braid-accept-v2";
const OPEN_LABEL: &[u8] = b"braid-open-v2";

fn mac(
    secret: &[u8; 32],
    label: &[u8],
    hello: &[u8; HELLO_LEN],
    nonce: &[u8; NONCE_LEN],
) -> HmacSha256 {
    let mut m = HmacSha256::new_from_slice(secret).expect("HMAC takes any key length");
    m.update(label);
    m.update(hello);
    m.update(nonce);
    m
}

/// A fresh random nonce.
pub(crate) fn nonce() -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    rand::rngs::OsRng.fill_bytes(&mut n);
    n
}

/// The opener's side: sends `hello`, checks the acceptor's proof, proves itself. An
/// acceptor that does not know the secret is an error (`Bootstrap`).
pub(crate) fn open(stream: &TcpStream, secret: &[u8; 32], hello: &Hello, w: &Wait) -> Result<()> {
    let bytes = hello.encode();
    write_full(stream, &[&bytes], w)?;
    let mut reply = [0u8; NONCE_LEN + MAC_LEN];
    read_full(stream, &mut reply, w)?;
    let nonce_a: [u8; NONCE_LEN] = reply[..NONCE_LEN].try_into().expect("16 bytes");
    mac(secret, ACCEPT_LABEL, &bytes, &nonce_a)
        .verify_slice(&reply[NONCE_LEN..])
        .map_err(|_| {
            RuntimeError::Bootstrap(format!(
                "while {}: the other end does not know this group's secret (an id or BRAID_SECRET of another group?)",
                w.what
            ))
        })?;
    let proof = mac(secret, OPEN_LABEL, &bytes, &nonce_a)
        .finalize()
        .into_bytes();
    write_full(stream, &[&proof], w)
}

/// What the acceptor learned from a connection.
pub(crate) enum Accepted {
    /// The opener proved it knows the secret; its hello.
    Peer(Hello),
    /// Not a peer of this group (bad hello, wrong secret): why, for the log.
    Stranger(String),
}

/// The acceptor's side: reads the hello, proves itself, checks the opener's proof.
/// I/O failures (timeouts, closed connections) are errors; a failed proof is a
/// [`Accepted::Stranger`].
pub(crate) fn accept(stream: &TcpStream, secret: &[u8; 32], w: &Wait) -> Result<Accepted> {
    let mut bytes = [0u8; HELLO_LEN];
    read_full(stream, &mut bytes, w)?;
    let hello = match Hello::decode(&bytes) {
        Ok(h) => h,
        Err(why) => return Ok(Accepted::Stranger(why)),
    };
    let nonce_a = nonce();
    let proof = mac(secret, ACCEPT_LABEL, &bytes, &nonce_a)
        .finalize()
        .into_bytes();
    write_full(stream, &[&nonce_a, &proof], w)?;
    let mut theirs = [0u8; MAC_LEN];
    read_full(stream, &mut theirs, w)?;
    match mac(secret, OPEN_LABEL, &bytes, &nonce_a).verify_slice(&theirs) {
        Ok(()) => Ok(Accepted::Peer(hello)),
        Err(_) => Ok(Accepted::Stranger("wrong secret".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::wire::HelloKind;
    use std::net::TcpListener;
    use std::sync::atomic::AtomicBool;
    use std::time::{Duration, Instant};

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    fn hello() -> Hello {
        Hello {
            kind: HelloKind::Link,
            nonce: nonce(),
            a: 1,
            b: 0,
            tag: 7,
            addr: None,
        }
    }

    fn run(open_secret: [u8; 32], accept_secret: [u8; 32]) -> (Result<()>, Result<Accepted>) {
        let (a, b) = pair();
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let acc = s.spawn(|| {
                let w = Wait::new(
                    Instant::now() + Duration::from_secs(5),
                    &stop,
                    1,
                    "accepting",
                );
                accept(&b, &accept_secret, &w)
            });
            let w = Wait::new(Instant::now() + Duration::from_secs(5), &stop, 0, "opening");
            let opened = open(&a, &open_secret, &hello(), &w);
            drop(a); // an opener that gave up closes: the acceptor must not wait on
            (opened, acc.join().unwrap())
        })
    }

    #[test]
    fn the_same_secret_passes_both_ways() {
        let (o, a) = run([7; 32], [7; 32]);
        o.unwrap();
        assert!(matches!(a.unwrap(), Accepted::Peer(h) if h.tag == 7 && h.a == 1));
    }

    #[test]
    fn a_wrong_secret_fails_on_both_sides_without_revealing_it() {
        let (o, a) = run([7; 32], [8; 32]);
        let e = o.unwrap_err().to_string();
        assert!(e.contains("does not know this group's secret"), "{e}");
        // The opener stopped before proving itself: the acceptor saw the connection close.
        assert!(a.is_err() || matches!(a, Ok(Accepted::Stranger(_))));
    }

    #[test]
    fn the_hello_carries_no_secret() {
        let secret = [0x5a; 32];
        let h = hello().encode();
        assert!(!h.windows(8).any(|w| w == &secret[..8]));
        assert_eq!(h.len(), HELLO_LEN);
    }

    #[test]
    fn a_proof_is_bound_to_its_nonces_and_labels() {
        let h = hello().encode();
        let n = nonce();
        let s = [3u8; 32];
        let acc = mac(&s, ACCEPT_LABEL, &h, &n).finalize().into_bytes();
        let opn = mac(&s, OPEN_LABEL, &h, &n).finalize().into_bytes();
        assert_ne!(acc, opn);
        let other = mac(&s, ACCEPT_LABEL, &h, &nonce()).finalize().into_bytes();
        assert_ne!(acc, other);
    }
}
