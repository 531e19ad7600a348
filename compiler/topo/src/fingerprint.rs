//! A short stable identity for a topology, for plans to record what they were
//! compiled for.

use crate::Topology;

impl Topology {
    /// 16 hex digits: the 64-bit FNV-1a hash of [`Topology::to_text`]. Equal
    /// topologies have equal fingerprints whatever their names or the order
    /// their file listed things in; any change to a vertex, link or number
    /// changes it. FNV-1a is written out here (not a library hash) so the value
    /// never changes with a dependency or a Rust release.
    pub fn fingerprint(&self) -> String {
        format!("{:016x}", fnv1a64(self.to_text().as_bytes()))
    }
}

/// 64-bit FNV-1a (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}
