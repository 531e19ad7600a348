//! One call as the application makes it, in NCCL's terms, and the one place where its
//! buffers become the plan's `in` and `out`: which exist on this rank, how large they
//! must be, whether the call is in place (NCCL's pointer rule), and where `in` and `out`
//! start when they share one buffer. Every backend goes through this module.

use crate::dtype::{DType, RedOp};
use crate::error::{Result, RuntimeError};
use crate::geometry::buffer_elems;
use braid_ir::{Collective, Mode};

/// One collective call: NCCL's arguments but the buffers and the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallSpec {
    pub collective: Collective,
    /// NCCL's count for this collective (sendcount for allgather, recvcount for
    /// reduce_scatter, per peer for alltoall).
    pub count: usize,
    pub dtype: DType,
    pub op: RedOp,
    /// The root of broadcast and reduce; `None` for the others.
    pub root: Option<u32>,
}

/// Which of a call's buffers exist on one rank, and their sizes in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// NCCL's send buffer: absent on the non-root ranks of broadcast.
    pub send: Option<usize>,
    /// NCCL's receive buffer: absent on the non-root ranks of reduce.
    pub recv: Option<usize>,
    /// Bytes of the larger of the two buffers of the call (what selection sizes by).
    pub larger: usize,
}

impl CallSpec {
    /// Checks what can be checked without the buffers: a root exactly for rooted
    /// collectives and inside the group.
    pub fn check(&self, n_ranks: u32) -> Result<()> {
        match (self.collective.is_rooted(), self.root) {
            (true, None) => Err(RuntimeError::Invalid(format!(
                "{} needs a root",
                self.collective
            ))),
            (true, Some(r)) if r >= n_ranks => Err(RuntimeError::Invalid(format!(
                "root {r} is not a rank of {n_ranks}"
            ))),
            (false, Some(_)) => Err(RuntimeError::Invalid(format!(
                "{} takes no root",
                self.collective
            ))),
            _ => Ok(()),
        }
    }

    /// The buffers rank `rank` of `n` has for this call.
    pub fn sizes(&self, rank: u32, n: u32) -> Sizes {
        let e = self.dtype.size();
        let (i, o) = buffer_elems(self.collective, n, self.count);
        let c = self.collective;
        let has_in = !(c == Collective::Broadcast && self.root != Some(rank));
        let has_out = !(c == Collective::Reduce && self.root != Some(rank));
        Sizes {
            send: has_in.then_some(i * e),
            recv: has_out.then_some(o * e),
            larger: i.max(o) * e,
        }
    }

    /// Bytes from the start of the single buffer of an in-place call to where the
    /// smaller of `in` / `out` starts on `rank` (NCCL: allgather's input is the rank's
    /// block of the output, reduce_scatter's output the rank's block of the input).
    pub fn in_place_offset(&self, rank: u32) -> usize {
        match self.collective {
            Collective::Allgather | Collective::ReduceScatter => {
                rank as usize * self.count * self.dtype.size()
            }
            _ => 0,
        }
    }

    /// Whether a call with NCCL's `send` and `recv` addresses is in place on `rank`, as
    /// NCCL decides it from the pointers. Ranks without one of the buffers (broadcast's
    /// non-roots, reduce's non-roots) call it out of place: their plan steps do not touch
    /// the missing buffer, so the mode changes nothing there.
    pub fn mode_of(&self, rank: u32, n: u32, send: u64, recv: u64) -> Mode {
        let s = self.sizes(rank, n);
        if s.send.is_none() || s.recv.is_none() {
            return Mode::OutOfPlace;
        }
        let off = self.in_place_offset(rank) as u64;
        let in_place = match self.collective {
            Collective::Allgather => send == recv.wrapping_add(off),
            Collective::ReduceScatter => recv == send.wrapping_add(off),
            _ => send == recv,
        };
        if in_place {
            Mode::InPlace
        } else {
            Mode::OutOfPlace
        }
    }

    /// Where the plan's `in` and `out` start for an in-place call whose one buffer starts
    /// at `base` (the larger buffer): NCCL's aliasing, the only copy of it.
    pub fn in_place_buffers(&self, rank: u32, base: u64) -> (u64, u64) {
        let off = self.in_place_offset(rank) as u64;
        match self.collective {
            Collective::Allgather => (base + off, base),
            Collective::ReduceScatter => (base, base + off),
            _ => (base, base),
        }
    }

    /// The reduction the call's collective really performs: none (`Sum`, ignored) for
    /// collectives that only move data, whatever the caller passed.
    pub fn effective_op(&self) -> RedOp {
        if self.collective.reduces() {
            self.op
        } else {
            RedOp::Sum
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(c: Collective, count: usize, root: Option<u32>) -> CallSpec {
        CallSpec {
            collective: c,
            count,
            dtype: DType::F32,
            op: RedOp::Sum,
            root,
        }
    }

    #[test]
    fn sizes_follow_nccl() {
        let s = spec(Collective::Allgather, 3, None).sizes(1, 4);
        assert_eq!((s.send, s.recv, s.larger), (Some(12), Some(48), 48));
        let b = spec(Collective::Broadcast, 5, Some(0));
        assert_eq!(b.sizes(1, 2).send, None);
        assert_eq!(b.sizes(0, 2).send, Some(20));
        let r = spec(Collective::Reduce, 5, Some(1));
        assert_eq!(r.sizes(0, 2).recv, None);
    }

    #[test]
    fn in_place_is_recognised_by_nccls_pointer_rule() {
        let ag = spec(Collective::Allgather, 3, None);
        assert_eq!(ag.mode_of(2, 4, 1000 + 24, 1000), Mode::InPlace);
        assert_eq!(ag.mode_of(2, 4, 1000, 1000), Mode::OutOfPlace);
        assert_eq!(ag.in_place_buffers(2, 1000), (1024, 1000));
        let rs = spec(Collective::ReduceScatter, 3, None);
        assert_eq!(rs.mode_of(1, 4, 1000, 1012), Mode::InPlace);
        assert_eq!(rs.in_place_buffers(1, 1000), (1000, 1012));
        let ar = spec(Collective::Allreduce, 3, None);
        assert_eq!(ar.mode_of(0, 4, 7, 7), Mode::InPlace);
        // A rank without one of the buffers is out of place whatever it passes.
        let b = spec(Collective::Broadcast, 3, Some(0));
        assert_eq!(b.mode_of(1, 2, 7, 7), Mode::OutOfPlace);
    }

    #[test]
    fn roots_are_checked() {
        assert!(spec(Collective::Broadcast, 1, None).check(2).is_err());
        assert!(spec(Collective::Broadcast, 1, Some(2)).check(2).is_err());
        assert!(spec(Collective::Allreduce, 1, Some(0)).check(2).is_err());
        assert!(spec(Collective::Reduce, 1, Some(1)).check(2).is_ok());
    }
}
