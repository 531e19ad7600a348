//! Buffers, their sizes on each rank, and the physical locations they alias.
//!
//! Every pass that reasons about data (the sequential verifier, the dataflow graph, the
//! plan verifier, the host runtime) goes through [`Layout`], so that the aliasing rules of
//! in-place calls (dsl.md section 4) live in exactly one place.

use crate::collective::{Collective, Mode};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The three buffers every rank may own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Buf {
    In,
    Out,
    Scratch,
}

impl Buf {
    pub const ALL: [Buf; 3] = [Buf::In, Buf::Out, Buf::Scratch];

    pub fn name(self) -> &'static str {
        match self {
            Buf::In => "in",
            Buf::Out => "out",
            Buf::Scratch => "scratch",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Buf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The values of `N`, `NODES` and `G` a program is instantiated for.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Shape {
    /// Ranks.
    pub n: u32,
    /// Nodes.
    pub nodes: u32,
    /// Ranks per node, or `None` when nodes differ in size (then `G` is an error).
    pub g: Option<u32>,
}

impl Shape {
    /// One node holding all `n` ranks.
    pub fn single_node(n: u32) -> Shape {
        Shape {
            n,
            nodes: 1,
            g: Some(n),
        }
    }

    /// `nodes` nodes of `g` ranks each.
    pub fn uniform(nodes: u32, g: u32) -> Shape {
        Shape {
            n: nodes * g,
            nodes,
            g: Some(g),
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.g {
            Some(g) => write!(f, "N={} NODES={} G={}", self.n, self.nodes, g),
            None => write!(f, "N={} NODES={} G=(non-uniform)", self.n, self.nodes),
        }
    }
}

/// Index of a physical chunk location in a [`Layout`] (all ranks, all buffers, aliases
/// merged).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LocId(pub u32);

impl LocId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Sizes and aliasing of every rank's buffers for one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub collective: Collective,
    pub n: u32,
    /// `C`: chunks of the larger of `in` / `out`.
    pub chunks: u32,
    pub scratch: u32,
    pub root: Option<u32>,
    pub mode: Mode,
    /// Physical chunks per rank: the union of the three buffers with aliases merged.
    per_rank: u32,
    /// Where each buffer's region starts inside a rank's physical chunks.
    region_base: [u32; 3],
}

impl Layout {
    /// `root` must be `Some` exactly for rooted collectives; `chunks` must be a multiple of
    /// `n` for the collectives that have `K`. Alltoall has no in-place mode: asking for one
    /// gives the out-of-place layout's aliasing (none).
    pub fn new(
        collective: Collective,
        n: u32,
        chunks: u32,
        scratch: u32,
        root: Option<u32>,
        mode: Mode,
    ) -> Layout {
        let mut l = Layout {
            collective,
            n,
            chunks,
            scratch,
            root,
            mode,
            per_rank: 0,
            region_base: [0; 3],
        };
        // Physical regions: the in region holds `in`, or the aliased `out` for the
        // collectives whose in-place `out` lives inside `in`; and vice versa.
        let c = chunks;
        let k = chunks.checked_div(n).unwrap_or(0);
        let (in_phys, out_phys) = match (mode, collective) {
            (Mode::InPlace, Collective::Allreduce | Collective::Broadcast | Collective::Reduce) => {
                (c, 0) // `out` aliases `in` chunk for chunk (where both exist)
            }
            (Mode::InPlace, Collective::Allgather) => (0, c), // `in` is a slice of `out`
            (Mode::InPlace, Collective::ReduceScatter) => (c, 0), // `out` is a slice of `in`
            _ => (l.max_size(Buf::In, c, k), l.max_size(Buf::Out, c, k)),
        };
        l.region_base = [0, in_phys, in_phys + out_phys];
        l.per_rank = in_phys + out_phys + scratch;
        l
    }

    fn max_size(&self, buf: Buf, c: u32, k: u32) -> u32 {
        match (buf, self.collective) {
            (Buf::In, Collective::Allgather) => k,
            (Buf::Out, Collective::ReduceScatter) => k,
            (Buf::Scratch, _) => self.scratch,
            _ => c,
        }
    }

    /// `K = C / N`.
    pub fn k(&self) -> u32 {
        self.chunks.checked_div(self.n).unwrap_or(0)
    }

    /// Chunks of `buf` on `rank`, or `None` when the buffer does not exist there
    /// (`in` off the root for broadcast, `out` off the root for reduce).
    pub fn size(&self, buf: Buf, rank: u32) -> Option<u32> {
        let is_root = self.root == Some(rank);
        match (buf, self.collective) {
            (Buf::In, Collective::Broadcast) if !is_root => None,
            (Buf::Out, Collective::Reduce) if !is_root => None,
            _ => Some(self.max_size(buf, self.chunks, self.k())),
        }
    }

    /// Physical locations in the whole layout.
    pub fn num_locs(&self) -> usize {
        self.per_rank as usize * self.n as usize
    }

    /// The physical location of `buf[rank][chunk]`, or `None` when the buffer does not exist
    /// on that rank or `chunk` lies outside it.
    pub fn loc(&self, buf: Buf, rank: u32, chunk: u32) -> Option<LocId> {
        if rank >= self.n || chunk >= self.size(buf, rank)? {
            return None;
        }
        let (region, index) = self.canonical(buf, rank, chunk);
        let base = rank * self.per_rank + self.region_base[region.index()];
        Some(LocId(base + index))
    }

    /// Which region and index hold `buf[rank][chunk]` once aliases are merged.
    fn canonical(&self, buf: Buf, rank: u32, chunk: u32) -> (Buf, u32) {
        if self.mode != Mode::InPlace {
            return (buf, chunk);
        }
        let k = self.k();
        match (self.collective, buf) {
            (Collective::Allreduce | Collective::Broadcast | Collective::Reduce, Buf::Out) => {
                // Where `in` does not exist (broadcast off the root), `out` still lives in
                // the first region, which is sized `C` for every rank.
                (Buf::In, chunk)
            }
            (Collective::Allgather, Buf::In) => (Buf::Out, rank * k + chunk),
            (Collective::ReduceScatter, Buf::Out) => (Buf::In, rank * k + chunk),
            _ => (buf, chunk),
        }
    }

    /// The names a physical location goes by, `out` first (the name users check results
    /// in), then `in`, then `scratch`.
    pub fn names(&self, loc: LocId) -> Vec<(Buf, u32, u32)> {
        let rank = loc.0 / self.per_rank;
        let mut names = Vec::new();
        for buf in [Buf::Out, Buf::In, Buf::Scratch] {
            let Some(size) = self.size(buf, rank) else {
                continue;
            };
            // Used only to word diagnostics, so a scan is fine.
            let found = (0..size).find(|&c| self.loc(buf, rank, c) == Some(loc));
            if let Some(c) = found {
                names.push((buf, rank, c));
            }
        }
        names
    }

    /// Every location that holds an input chunk at the start, with the input it holds:
    /// `(loc, rank, chunk)` meaning the location starts as `x(rank, chunk)`.
    pub fn initial_inputs(&self) -> impl Iterator<Item = (LocId, u32, u32)> + '_ {
        (0..self.n).flat_map(move |r| {
            let size = self.size(Buf::In, r).unwrap_or(0);
            (0..size).map(move |c| (self.loc(Buf::In, r, c).expect("in range"), r, c))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allgather_in_place_in_is_a_slice_of_out() {
        let l = Layout::new(Collective::Allgather, 4, 8, 0, None, Mode::InPlace);
        assert_eq!(l.loc(Buf::In, 2, 1), l.loc(Buf::Out, 2, 5));
        assert_ne!(l.loc(Buf::In, 2, 1), l.loc(Buf::Out, 1, 5));
        assert_eq!(l.size(Buf::In, 2), Some(2));
        assert_eq!(l.loc(Buf::In, 2, 2), None);
    }

    #[test]
    fn reduce_scatter_in_place_out_is_a_slice_of_in() {
        let l = Layout::new(Collective::ReduceScatter, 4, 4, 1, None, Mode::InPlace);
        assert_eq!(l.loc(Buf::Out, 3, 0), l.loc(Buf::In, 3, 3));
        assert_eq!(l.num_locs(), 4 * (4 + 1));
    }

    #[test]
    fn out_of_place_buffers_are_distinct() {
        let l = Layout::new(Collective::Allreduce, 3, 2, 2, None, Mode::OutOfPlace);
        let mut all: Vec<_> = (0..3)
            .flat_map(|r| {
                let l = &l;
                Buf::ALL
                    .into_iter()
                    .flat_map(move |b| (0..2).map(move |c| l.loc(b, r, c).unwrap()))
            })
            .collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), l.num_locs());
    }

    #[test]
    fn rooted_buffers_exist_only_on_root() {
        let b = Layout::new(Collective::Broadcast, 4, 2, 0, Some(1), Mode::InPlace);
        assert_eq!(b.size(Buf::In, 0), None);
        assert_eq!(b.size(Buf::In, 1), Some(2));
        assert_eq!(b.loc(Buf::In, 1, 1), b.loc(Buf::Out, 1, 1));
        let r = Layout::new(Collective::Reduce, 4, 2, 1, Some(3), Mode::OutOfPlace);
        assert_eq!(r.size(Buf::Out, 0), None);
        assert_eq!(r.size(Buf::Out, 3), Some(2));
    }

    #[test]
    fn names_lists_every_alias_out_first() {
        let l = Layout::new(Collective::Allgather, 2, 4, 0, None, Mode::InPlace);
        let loc = l.loc(Buf::Out, 1, 3).unwrap();
        assert_eq!(l.names(loc), vec![(Buf::Out, 1, 3), (Buf::In, 1, 1)]);
    }
}
