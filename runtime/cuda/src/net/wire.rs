//! What travels on a proxied connection's stream: data frames from the sender's proxy to
//! the receiver's (one slice each: lane, sequence number, bytes, then the bytes), and
//! credits back (a lane's `tail`: slices the receiving kernel consumed). Both are 16-byte
//! headers, little-endian; every field is checked by the side that reads it, since a peer
//! is untrusted input.

/// Marks the first word of every header (its low byte is the lane).
const MAGIC: u32 = 0x4252_4400;
pub const HEADER: usize = 16;

/// A data frame's header: slice `seq` (1-based, per lane) of `bytes` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Data {
    pub lane: usize,
    pub bytes: u32,
    pub seq: u64,
}

/// A credit: the receiving kernel consumed `tail` slices of `lane`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Credit {
    pub lane: usize,
    pub tail: u64,
}

fn word(lane: usize) -> [u8; 4] {
    (MAGIC | lane as u32).to_le_bytes()
}

fn lane_of(h: &[u8; HEADER], what: &str) -> Result<usize, String> {
    let w = u32::from_le_bytes(h[..4].try_into().unwrap());
    if w & !0xff != MAGIC {
        return Err(format!("a {what} header does not start with Braid's mark"));
    }
    match (w & 0xff) as usize {
        l @ (0 | 1) => Ok(l),
        l => Err(format!(
            "a {what} names lane {l}; a connection has lanes 0 and 1"
        )),
    }
}

impl Data {
    pub fn encode(&self) -> [u8; HEADER] {
        let mut h = [0u8; HEADER];
        h[..4].copy_from_slice(&word(self.lane));
        h[4..8].copy_from_slice(&self.bytes.to_le_bytes());
        h[8..].copy_from_slice(&self.seq.to_le_bytes());
        h
    }

    pub fn decode(h: &[u8; HEADER]) -> Result<Data, String> {
        Ok(Data {
            lane: lane_of(h, "data frame")?,
            bytes: u32::from_le_bytes(h[4..8].try_into().unwrap()),
            seq: u64::from_le_bytes(h[8..].try_into().unwrap()),
        })
    }
}

impl Credit {
    pub fn encode(&self) -> [u8; HEADER] {
        let mut h = [0u8; HEADER];
        h[..4].copy_from_slice(&word(self.lane));
        h[8..].copy_from_slice(&self.tail.to_le_bytes());
        h
    }

    pub fn decode(h: &[u8; HEADER]) -> Result<Credit, String> {
        Ok(Credit {
            lane: lane_of(h, "credit")?,
            tail: u64::from_le_bytes(h[8..].try_into().unwrap()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_garbage_is_refused() {
        let d = Data {
            lane: 1,
            bytes: 4096,
            seq: 7,
        };
        assert_eq!(Data::decode(&d.encode()), Ok(d));
        let c = Credit { lane: 0, tail: 9 };
        assert_eq!(Credit::decode(&c.encode()), Ok(c));
        let mut bad = d.encode();
        bad[0] = 2;
        assert!(Data::decode(&bad).unwrap_err().contains("lane 2"));
        bad[3] = 0;
        assert!(Data::decode(&bad).unwrap_err().contains("mark"));
        assert!(Credit::decode(&[0; HEADER]).is_err());
    }
}
