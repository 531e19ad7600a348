//! Where each plan chunk lives in the caller's buffers for one call (dsl.md section 5),
//! for every backend: the host executor and the GPU kernels compute exactly this.
//!
//! A call's buffer holds `segments` segments of `count` elements each (N segments for the
//! buffers that carry `K`, one otherwise), laid out back to back as NCCL lays them out.
//! Each segment is cut into `per_segment` chunks of `chunk_elems` elements: the exact
//! quotient rounded up to a whole number of 16-byte vectors, so chunks start aligned
//! whenever their segment does. A segment that does not divide evenly has a short last
//! chunk, and possibly empty ones after it: their missing elements are *padding*. Padding
//! is never read from nor written to the caller's memory: a message carries every chunk
//! at its full length (both ends compute the same length), padding travels as zeros and
//! is dropped on arrival. Since a verified plan only ever moves chunk `c`'s data into
//! chunk positions that hold chunk `c` (the postcondition), padding only ever lands in
//! padding, and uneven counts need no staging copy.
//!
//! `scratch` is the communicator's own memory, of fixed size: a plan with scratch chunks
//! runs a large call in *rounds*, each over a window of `round_elems` elements of every
//! chunk, with scratch chunk `c` holding that window at `c * round_elems`. Rounds run back
//! to back like consecutive calls. Each of the plan's `replicas` takes an aligned share of
//! every round's window.

use braid_ir::Collective;

/// Bytes of the vectors copies move: chunk sizes and replica shares are whole vectors.
pub const VECTOR_BYTES: usize = 16;

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

/// Chunks per segment of a plan with `chunks` = C for `collective` on `n` ranks.
pub fn per_segment(collective: Collective, n: u32, chunks: u32) -> usize {
    if collective.has_k() {
        (chunks / n.max(1)).max(1) as usize
    } else {
        chunks.max(1) as usize
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes per element.
    pub elem: usize,
    /// Elements of one segment as the caller sees it (NCCL's count / sendcount /
    /// recvcount).
    pub count: usize,
    /// Chunks per segment.
    pub per_segment: usize,
    /// Elements of every chunk, padding included: a whole number of vectors.
    pub chunk_elems: usize,
    /// Elements of every chunk one round covers (`chunk_elems` without scratch).
    pub round_elems: usize,
    /// Replicas sharing every round's window.
    pub replicas: usize,
}

/// Where a chunk lies in the caller's buffer: its first element and how many of its
/// `chunk_elems` elements exist (the rest is padding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub valid: usize,
}

impl Geometry {
    /// The geometry of a call with NCCL's `count` on a plan of `collective` with `chunks`
    /// = C, `scratch_chunks`, run with `replicas` replicas, when the communicator's scratch
    /// memory holds `scratch_bytes`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        collective: Collective,
        n_ranks: u32,
        chunks: u32,
        scratch_chunks: u32,
        count: usize,
        elem: usize,
        replicas: u32,
        scratch_bytes: usize,
    ) -> Geometry {
        let per_segment = per_segment(collective, n_ranks, chunks);
        let unit = unit(elem);
        let chunk_elems = count.div_ceil(per_segment).div_ceil(unit) * unit;
        let round_elems = if scratch_chunks == 0 || chunk_elems == 0 {
            chunk_elems
        } else {
            let fit = scratch_bytes / (scratch_chunks as usize * elem);
            (fit / unit * unit).clamp(unit, chunk_elems)
        };
        Geometry {
            elem,
            count,
            per_segment,
            chunk_elems,
            round_elems,
            replicas: replicas.max(1) as usize,
        }
    }

    /// Elements of one vector of this element size.
    pub fn unit(&self) -> usize {
        unit(self.elem)
    }

    /// Where chunk `i` of a caller's buffer lies (its segment, then its place in it).
    pub fn span(&self, i: u32) -> Span {
        let i = i as usize;
        let (seg, pos) = (i / self.per_segment, i % self.per_segment);
        let first = pos * self.chunk_elems;
        Span {
            start: seg * self.count + first,
            valid: self.count.saturating_sub(first).min(self.chunk_elems),
        }
    }

    /// Rounds of one call: `ceil(chunk_elems / round_elems)`.
    pub fn rounds(&self) -> usize {
        if self.round_elems == 0 {
            0
        } else {
            self.chunk_elems.div_ceil(self.round_elems)
        }
    }

    /// The element range `[a, b)` of every chunk that round `r` covers.
    pub fn round_range(&self, r: usize) -> (usize, usize) {
        let a = r * self.round_elems;
        (a, (a + self.round_elems).min(self.chunk_elems))
    }

    /// The part of round `r`'s window replica `k` handles: its share of a whole round
    /// (whole vectors, as even as possible) cut to the window, so a short last round
    /// leaves some replicas less or nothing. Each replica's part sits at the same place in
    /// every round's window, and so in scratch: replicas run through the rounds
    /// independently, and no replica's round ever touches scratch another replica is
    /// still using for an earlier one.
    pub fn replica_range(&self, r: usize, k: usize) -> (usize, usize) {
        let (w0, w1) = self.round_range(r);
        let (a, b) = share(w0, w0 + self.round_elems, k, self.replicas, self.unit());
        (a.min(w1), b.min(w1))
    }

    /// Bytes of scratch one round of a plan with `scratch_chunks` chunks uses.
    pub fn scratch_bytes(&self, scratch_chunks: u32) -> usize {
        scratch_chunks as usize * self.round_elems * self.elem
    }
}

/// Elements of a 16-byte vector (1 for elements larger than that).
pub fn unit(elem: usize) -> usize {
    (VECTOR_BYTES / elem.max(1)).max(1)
}

/// Part `k` of `parts` of `[lo, hi)`, cut at multiples of `unit` from `lo`.
pub fn share(lo: usize, hi: usize, k: usize, parts: usize, unit: usize) -> (usize, usize) {
    let len = hi - lo;
    let units = len.div_ceil(unit);
    let at = |j: usize| lo + (j * units / parts * unit).min(len);
    (at(k), at(k + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo(c: Collective, n: u32, chunks: u32, count: usize, elem: usize) -> Geometry {
        Geometry::new(c, n, chunks, 0, count, elem, 1, 0)
    }

    #[test]
    fn allgather_chunks_follow_segments() {
        // 4 ranks, K = 2, sendcount 8 f32: chunks of 4, segment r at 8 * r.
        let g = geo(Collective::Allgather, 4, 8, 8, 4);
        assert_eq!(g.chunk_elems, 4);
        assert_eq!(g.span(0), Span { start: 0, valid: 4 });
        assert_eq!(g.span(1), Span { start: 4, valid: 4 });
        assert_eq!(
            g.span(5),
            Span {
                start: 2 * 8 + 4,
                valid: 4
            }
        );
    }

    #[test]
    fn uneven_counts_leave_padding_at_the_end_of_each_segment() {
        // allreduce, 4 chunks, 10 f32: chunks of 4 (a whole vector), 4 + 4 + 2 + 0 valid.
        let g = geo(Collective::Allreduce, 4, 4, 10, 4);
        assert_eq!(g.chunk_elems, 4);
        let valid: Vec<usize> = (0..4).map(|i| g.span(i).valid).collect();
        assert_eq!(valid, [4, 4, 2, 0]);
        assert_eq!(g.span(2).start, 8);
        // alltoall, 2 ranks, 1 chunk per segment, 3 u8 each: segments at 0 and 3.
        let g = geo(Collective::Alltoall, 2, 2, 3, 1);
        assert_eq!(g.chunk_elems, 16);
        assert_eq!(g.span(1), Span { start: 3, valid: 3 });
    }

    #[test]
    fn every_element_of_a_segment_is_in_exactly_one_chunk() {
        for count in [0usize, 1, 7, 33, 1000, 4099] {
            for per in [1u32, 3, 4, 8] {
                for elem in [1usize, 2, 4, 8] {
                    let g = geo(Collective::Allreduce, 8, per, count, elem);
                    let total: usize = (0..per).map(|i| g.span(i).valid).sum();
                    assert_eq!(total, count, "count {count} per {per} elem {elem}");
                    for i in 0..per {
                        let s = g.span(i);
                        assert!(s.valid == 0 || s.start + s.valid <= count);
                        assert_eq!(s.start % g.unit(), 0);
                    }
                }
            }
        }
    }

    #[test]
    fn replicas_take_whole_vectors_and_cover_the_range() {
        let g = Geometry::new(Collective::Allreduce, 2, 2, 0, 1000, 4, 3, 0);
        let parts: Vec<_> = (0..3).map(|k| g.replica_range(0, k)).collect();
        assert_eq!(parts[0].0, 0);
        assert_eq!(parts[2].1, 500);
        for w in parts.windows(2) {
            assert_eq!(w[0].1, w[1].0);
            assert_eq!(w[0].1 % 4, 0);
        }
        // More replicas than vectors: some get nothing.
        let g = Geometry::new(Collective::Allreduce, 2, 2, 0, 8, 4, 8, 0);
        let lens: Vec<_> = (0..8)
            .map(|k| {
                let (a, b) = g.replica_range(0, k);
                b - a
            })
            .collect();
        assert_eq!(lens.iter().sum::<usize>(), 4);
    }

    #[test]
    fn a_replica_keeps_its_place_in_every_round_window() {
        // 2 scratch chunks of f32 in 1 KiB: rounds of 128 elements; 500 per chunk, so
        // rounds of 128, 128, 128, 116; 3 replicas.
        let g = Geometry::new(Collective::Allreduce, 2, 2, 2, 1000, 4, 3, 1024);
        assert_eq!(g.rounds(), 4);
        let full: Vec<_> = (0..3).map(|k| g.replica_range(0, k)).collect();
        for r in 0..g.rounds() {
            let (w0, w1) = g.round_range(r);
            let mut covered = 0;
            for (k, &(a0, b0)) in full.iter().enumerate() {
                let (a, b) = g.replica_range(r, k);
                // The same offsets in the window as in the first round, cut at its end.
                assert_eq!(a - w0, a0.min(w1 - w0), "round {r} replica {k}");
                assert!(b - w0 <= b0, "round {r} replica {k}");
                covered += b - a;
            }
            assert_eq!(covered, w1 - w0, "round {r}");
        }
    }

    #[test]
    fn scratch_bounds_the_round_window() {
        // 2 scratch chunks of f32 in 1 KiB: 128 elements per chunk per round.
        let g = Geometry::new(Collective::Allreduce, 2, 2, 2, 1000, 4, 1, 1024);
        assert_eq!(g.chunk_elems, 500);
        assert_eq!(g.round_elems, 128);
        assert_eq!(g.rounds(), 4);
        assert_eq!(g.round_range(3), (384, 500));
        assert!(g.scratch_bytes(2) <= 1024);
        // Without scratch, one round.
        let g = Geometry::new(Collective::Allreduce, 2, 2, 0, 1000, 4, 1, 1024);
        assert_eq!((g.rounds(), g.round_elems), (1, 500));
        // A zero count has no rounds.
        assert_eq!(geo(Collective::Allreduce, 2, 2, 0, 4).rounds(), 0);
    }
}
