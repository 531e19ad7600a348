//! Whether a value is still needed: decides `rrs` (receive-reduce-send without storing).
//!
//! Fusing a receive-reduce with the send that forwards its result may drop the store only
//! when, in every call mode, nothing but that send reads the stored value: in program
//! order (the program's meaning), the next access to each location after the store is a
//! plain overwrite, or there is none and the location is not part of the output.

use crate::access::access;
use crate::moves::Moves;
use braid_ir::{Buf, Layout, LocId};

/// One access of a location: `(move, reads, writes)`.
type Touch = (u32, bool, bool);

/// Per location, every move touching it, in program order; one table per call mode.
pub struct Liveness {
    modes: Vec<ModeTable>,
}

struct ModeTable {
    layout: Layout,
    touches: Vec<Vec<Touch>>,
    is_out: Vec<bool>,
}

impl Liveness {
    pub fn new(moves: &Moves, layouts: &[Layout]) -> Liveness {
        let modes = layouts
            .iter()
            .map(|layout| {
                let mut touches: Vec<Vec<Touch>> = vec![Vec::new(); layout.num_locs()];
                for (m, mv) in moves.moves.iter().enumerate() {
                    for rank in mv.ranks() {
                        let a = access(mv, rank, layout);
                        let mut mark = |l: LocId, read: bool| {
                            let t = &mut touches[l.index()];
                            match t.last_mut() {
                                Some(last) if last.0 == m as u32 => {
                                    last.1 |= read;
                                    last.2 |= !read;
                                }
                                _ => t.push((m as u32, read, !read)),
                            }
                        };
                        a.reads.iter().for_each(|&l| mark(l, true));
                        a.writes.iter().for_each(|&l| mark(l, false));
                    }
                }
                let mut is_out = vec![false; layout.num_locs()];
                for r in 0..layout.n {
                    for c in 0..layout.size(Buf::Out, r).unwrap_or(0) {
                        if let Some(l) = layout.loc(Buf::Out, r, c) {
                            is_out[l.index()] = true;
                        }
                    }
                }
                ModeTable {
                    layout: layout.clone(),
                    touches,
                    is_out,
                }
            })
            .collect();
        Liveness { modes }
    }

    /// Whether what move `writer` stores in `dst` on `rank` is read by no move except
    /// `reader`, in every mode.
    pub fn dead_after(&self, writer: u32, reader: u32, rank: u32, dst: &braid_plan::Slice) -> bool {
        self.modes.iter().all(|t| {
            crate::access::locs(&t.layout, rank, *dst).all(|l| {
                let touches = &t.touches[l.index()];
                let after = touches.partition_point(|x| x.0 <= writer);
                for &(m, read, write) in &touches[after..] {
                    if m == reader && !write {
                        continue;
                    }
                    if read {
                        return false;
                    }
                    if write {
                        return true;
                    }
                }
                !t.is_out[l.index()]
            })
        })
    }
}
