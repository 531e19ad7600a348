//! Where each rank's buffers live for one call, in the executor's (staged) layout, and
//! how user data moves in and out of it: the same geometry and staging as the host
//! backend (`braid_runtime::comm`), so both run a plan on identical memory.
//!
//! Every rank gets one device allocation for `in`/`out` (two out of place, one in place,
//! aliased exactly as NCCL aliases them) and one for `scratch`. Chunk `i` of a buffer
//! starts at element `i * chunk_elems`: a segment's chunks are contiguous and a padded
//! segment is `per_segment * chunk_elems` long, so the kernel needs only `chunk_elems`.

use braid_ir::{Collective, Mode};
use braid_plan::Plan;
use braid_runtime::geometry::Geometry;
use braid_runtime::selfcheck::buffer_elems;

/// One rank's buffers for one call, in bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankLayout {
    /// Bytes of the data allocation (both buffers out of place, the one buffer in place).
    pub data_len: usize,
    /// Byte offset of `in` and of `out` inside the data allocation.
    pub in_at: usize,
    pub out_at: usize,
    /// Lengths of `in`, `out` and `scratch` as the plan sees them (0: absent).
    pub len: [usize; 3],
}

/// The call's shape: plan, element size, NCCL count and mode.
#[derive(Clone, Copy, Debug)]
pub struct CallShape<'a> {
    pub plan: &'a Plan,
    pub elem: usize,
    pub count: usize,
    pub mode: Mode,
}

impl CallShape<'_> {
    pub fn geometry(&self) -> Geometry {
        let p = self.plan;
        Geometry::new(
            p.collective,
            p.n_ranks,
            p.chunks,
            self.count,
            self.elem,
            p.channels,
        )
    }

    fn has_in(&self, rank: u32) -> bool {
        !(self.plan.collective == Collective::Broadcast && self.plan.root != Some(rank))
    }

    fn has_out(&self, rank: u32) -> bool {
        !(self.plan.collective == Collective::Reduce && self.plan.root != Some(rank))
    }

    /// Segments of `in` and of `out` (N for the buffers with K, else 1).
    fn segments(&self) -> (usize, usize) {
        let (c, n) = (self.plan.collective, self.plan.n_ranks as usize);
        let seg_in = if c.has_k() && c != Collective::Allgather {
            n
        } else {
            1
        };
        let seg_out = if c.has_k() && c != Collective::ReduceScatter {
            n
        } else {
            1
        };
        (seg_in, seg_out)
    }

    /// The layout of rank `rank` (mirrors `Communicator::call_inner`).
    pub fn rank_layout(&self, rank: u32) -> RankLayout {
        let g = self.geometry();
        let chunk_bytes = g.chunk_elems * self.elem;
        let stride = g.stride() * self.elem;
        let in_len = if self.has_in(rank) {
            self.plan.in_chunks as usize * chunk_bytes
        } else {
            0
        };
        let out_len = if self.has_out(rank) {
            self.plan.out_chunks as usize * chunk_bytes
        } else {
            0
        };
        let scratch = self.plan.scratch_chunks as usize * chunk_bytes;
        let r = rank as usize;
        let (data_len, in_at, out_at) = match self.mode {
            Mode::OutOfPlace => (in_len + out_len, 0, in_len),
            Mode::InPlace => match self.plan.collective {
                Collective::Allgather => (out_len, r * stride, 0),
                Collective::ReduceScatter => (in_len, 0, r * stride),
                _ => (in_len.max(out_len), 0, 0),
            },
        };
        RankLayout {
            data_len,
            in_at,
            out_at,
            len: [in_len, out_len, scratch],
        }
    }

    /// The data allocation's initial bytes for rank `rank` from its user input (NCCL's
    /// send buffer, `in` elements of the call): staged into padded segments, placed where
    /// an in-place call keeps it. Bytes the input does not cover are 0xAA, as the host
    /// self-check fills receive buffers.
    pub fn stage_in(&self, rank: u32, input: &[u8]) -> Vec<u8> {
        let l = self.rank_layout(rank);
        let g = self.geometry();
        let (seg, stride) = (self.count * self.elem, g.stride() * self.elem);
        let mut data = vec![0xAAu8; l.data_len];
        if l.len[0] == 0 {
            return data;
        }
        let (seg_in, _) = self.segments();
        for j in 0..seg_in {
            let at = l.in_at + j * stride;
            data[at..at + seg].copy_from_slice(&input[j * seg..(j + 1) * seg]);
        }
        data
    }

    /// Rank `rank`'s result (NCCL's receive buffer, `out` elements of the call) from the
    /// data allocation after the run; `None` where the rank has no output.
    pub fn unstage_out(&self, rank: u32, data: &[u8]) -> Option<Vec<u8>> {
        let l = self.rank_layout(rank);
        if l.len[1] == 0 {
            return None;
        }
        let g = self.geometry();
        let (seg, stride) = (self.count * self.elem, g.stride() * self.elem);
        let (_, seg_out) = self.segments();
        let mut out = Vec::with_capacity(seg_out * seg);
        for j in 0..seg_out {
            let at = l.out_at + j * stride;
            out.extend_from_slice(&data[at..at + seg]);
        }
        Some(out)
    }

    /// Bytes of NCCL's send buffer for this call.
    pub fn input_bytes(&self) -> usize {
        buffer_elems(self.plan.collective, self.plan.n_ranks, self.count).0 * self.elem
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> Plan {
        Plan::from_json(include_str!(
            "../../../tests/plans/good/exchange_allgather_2.json"
        ))
        .unwrap()
    }

    #[test]
    fn out_of_place_allgather_has_both_buffers() {
        let p = fixture();
        let s = CallShape {
            plan: &p,
            elem: 4,
            count: 3,
            mode: Mode::OutOfPlace,
        };
        let l = s.rank_layout(1);
        assert_eq!(l.len, [12, 24, 0]);
        assert_eq!((l.data_len, l.in_at, l.out_at), (36, 0, 12));
    }

    #[test]
    fn in_place_allgather_input_is_its_block_of_the_output() {
        let p = fixture();
        let s = CallShape {
            plan: &p,
            elem: 1,
            count: 3,
            mode: Mode::InPlace,
        };
        let l = s.rank_layout(1);
        assert_eq!((l.data_len, l.in_at, l.out_at), (6, 3, 0));
        let data = s.stage_in(1, &[7, 8, 9]);
        assert_eq!(data, [0xAA, 0xAA, 0xAA, 7, 8, 9]);
        assert_eq!(s.unstage_out(1, &data).unwrap(), data);
    }
}
