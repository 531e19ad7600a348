//! How many replicas (channel sets) a call gets when the plan does not say: a replica is
//! one thread block per plan block, each on its share of every chunk, so more replicas
//! put more multiprocessors (and NVLink bandwidth) to work on large messages while small
//! ones stay on few blocks, which synchronise less. NCCL scales its channel count with the
//! message size in the same spirit.

use braid_plan::Plan;

/// Bytes of one rank's larger buffer per replica below which adding a replica does not
/// pay (measured on 2xH200, docs/perf.md).
pub const BYTES_PER_REPLICA: usize = 16 << 10;
/// The most replicas [`replicas`] picks.
pub const MAX_REPLICAS: u32 = 32;

/// Replicas for a call of `plan` moving `bytes` (one rank's larger buffer) on GPUs with
/// `multiprocessors` SMs: a power of two, at least 1, one per [`BYTES_PER_REPLICA`], at
/// most [`MAX_REPLICAS`], and never more thread blocks than three quarters of the SMs
/// (every block of a rank must be resident at once, and the rest of the GPU stays usable).
pub fn replicas(plan: &Plan, bytes: usize, multiprocessors: u32) -> u32 {
    let blocks = plan
        .ranks
        .iter()
        .map(|r| r.blocks.len() as u32)
        .max()
        .unwrap_or(1)
        .max(1);
    let fit = (multiprocessors * 3 / 4 / blocks).max(1);
    let want = (bytes / BYTES_PER_REPLICA).max(1) as u32;
    let cap = want.min(MAX_REPLICAS).min(fit);
    // Largest power of two not above `cap`.
    1 << (31 - cap.leading_zeros())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(blocks: usize) -> Plan {
        let mut p = Plan::from_json(include_str!(
            "../../../tests/plans/good/exchange_allgather_2.json"
        ))
        .unwrap();
        let b = p.ranks[0].blocks[0].clone();
        p.ranks[0].blocks = vec![b; blocks];
        p
    }

    #[test]
    fn grows_with_size_in_powers_of_two_up_to_a_cap() {
        let p = plan(1);
        assert_eq!(replicas(&p, 8, 132), 1);
        assert_eq!(replicas(&p, BYTES_PER_REPLICA * 3, 132), 2);
        assert_eq!(replicas(&p, BYTES_PER_REPLICA * 16, 132), 16);
        assert_eq!(replicas(&p, BYTES_PER_REPLICA * 16 + 1, 132), 16);
        assert_eq!(replicas(&p, 1 << 30, 132), MAX_REPLICAS);
    }

    #[test]
    fn never_more_blocks_than_half_the_sms() {
        assert_eq!(replicas(&plan(8), 1 << 30, 132), 8);
        assert_eq!(replicas(&plan(8), 1 << 30, 10), 1);
        assert_eq!(replicas(&plan(3), 1 << 30, 132), 32);
        assert_eq!(replicas(&plan(5), 1 << 30, 132), 16);
    }
}
