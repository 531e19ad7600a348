//! Where each plan chunk lives in memory for one call (dsl.md section 5).
//!
//! A call's larger buffer holds `E` elements in `segments` equal segments (N for the
//! collectives with `K`, one otherwise), each cut into `per_segment` chunks (`K` or `C`).
//! Every chunk is `chunk_elems = ceil(segment / per_segment)` elements; when the segment
//! does not divide evenly the runtime stages the call through padded buffers, so inside
//! the executor every chunk has the same length and chunks of one segment are contiguous.
//! Each of the plan's `channels` replicas takes an equal share of every chunk.

use braid_ir::Collective;

/// Element counts of a rank's `in` and `out` for NCCL's `count` argument.
pub fn buffer_elems(c: Collective, n: u32, count: usize) -> (usize, usize) {
    let n = n as usize;
    match c {
        Collective::Allreduce | Collective::Broadcast | Collective::Reduce => (count, count),
        Collective::Allgather => (count, n * count),
        Collective::ReduceScatter => (n * count, count),
        Collective::Alltoall => (n * count, n * count),
    }
}

/// NCCL's `count` for a call whose larger buffer is `bytes` long (rounded down).
pub fn count_for_bytes(c: Collective, n: u32, bytes: u64, elem: usize) -> usize {
    let elems = (bytes / elem as u64) as usize;
    if c.has_k() {
        elems / n.max(1) as usize
    } else {
        elems
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes per element.
    pub elem: usize,
    /// Elements of one segment as the user sees it (NCCL's count / sendcount / recvcount).
    pub segment: usize,
    /// Chunks per segment.
    pub per_segment: usize,
    /// Elements of every chunk (the last ones of a segment are padding when
    /// `segment % per_segment != 0`).
    pub chunk_elems: usize,
    /// Replicas sharing every chunk.
    pub replicas: usize,
}

impl Geometry {
    /// The geometry of a call with NCCL's `count` argument on a plan with `chunks` = C.
    pub fn new(
        collective: Collective,
        n_ranks: u32,
        chunks: u32,
        count: usize,
        elem: usize,
        replicas: u32,
    ) -> Geometry {
        let per_segment = if collective.has_k() {
            (chunks / n_ranks.max(1)).max(1) as usize
        } else {
            chunks.max(1) as usize
        };
        Geometry {
            elem,
            segment: count,
            per_segment,
            chunk_elems: count.div_ceil(per_segment),
            replicas: replicas.max(1) as usize,
        }
    }

    /// Whether chunks tile the user's segments exactly (no staging needed).
    pub fn exact(&self) -> bool {
        self.chunk_elems * self.per_segment == self.segment
    }

    /// Elements of one segment inside the executor's buffers.
    pub fn stride(&self) -> usize {
        self.chunk_elems * self.per_segment
    }

    /// Element offset of chunk `i` in an executor buffer.
    pub fn chunk_offset(&self, i: u32) -> usize {
        let i = i as usize;
        (i / self.per_segment) * self.stride() + (i % self.per_segment) * self.chunk_elems
    }

    /// The element range `[a, b)` of a chunk that replica `k` handles.
    pub fn replica_range(&self, k: usize) -> (usize, usize) {
        let l = self.chunk_elems;
        (k * l / self.replicas, (k + 1) * l / self.replicas)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allgather_chunks_follow_segments() {
        // 4 ranks, K = 2, sendcount 6: chunks of 3, segment r at 6 * r.
        let g = Geometry::new(Collective::Allgather, 4, 8, 6, 4, 1);
        assert!(g.exact());
        assert_eq!(g.chunk_offset(0), 0);
        assert_eq!(g.chunk_offset(1), 3);
        assert_eq!(g.chunk_offset(5), 2 * 6 + 3);
    }

    #[test]
    fn uneven_counts_pad_the_last_chunk() {
        let g = Geometry::new(Collective::Allreduce, 4, 4, 10, 4, 1);
        assert!(!g.exact());
        assert_eq!(g.chunk_elems, 3);
        assert_eq!(g.stride(), 12);
    }

    #[test]
    fn replicas_split_every_chunk() {
        let g = Geometry::new(Collective::Allreduce, 2, 2, 10, 4, 3);
        assert_eq!(g.replica_range(0), (0, 1));
        assert_eq!(g.replica_range(2), (3, 5));
    }
}
