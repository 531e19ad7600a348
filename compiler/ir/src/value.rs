//! Symbolic values: what a chunk location holds, as a multiset of input contributions.
//!
//! `x(r, c)` is input chunk `c` of rank `r`. A location holds either nothing yet, one input
//! chunk, or a reduction of several. Reductions are stored as, per origin chunk index, a
//! bit set of contributing ranks plus a (short) list of contributions seen more than once,
//! so a 1024-rank ring costs 128 bytes a value and merging is a word-wise OR.

use crate::collective::Collective;
use crate::layout::{Buf, Layout};
use std::fmt;
use std::sync::Arc;

/// What one chunk location holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// Nothing has written it.
    Undef,
    /// Input chunk `x(rank, chunk)`, untouched by any reduction.
    Input { rank: u32, chunk: u32 },
    /// A reduction of at least two contributions.
    Sum(Arc<Contribs>),
}

/// A multiset of contributions `x(rank, chunk)`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Contribs {
    /// Sorted by chunk; each entry holds the ranks contributing that chunk at least once.
    terms: Vec<(u32, RankSet)>,
    /// Contributions present more than once (each extra copy once), capped for memory;
    /// `dup_count` counts all of them.
    dups: Vec<(u32, u32)>,
    dup_count: u64,
}

const MAX_DUPS_KEPT: usize = 8;

/// A set of ranks as a bit set.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct RankSet(Vec<u64>);

impl RankSet {
    pub fn single(rank: u32) -> RankSet {
        let mut s = RankSet(vec![0; rank as usize / 64 + 1]);
        s.0[rank as usize / 64] |= 1 << (rank % 64);
        s
    }

    pub fn all(n: u32) -> RankSet {
        let mut words = vec![u64::MAX; n as usize / 64];
        if !n.is_multiple_of(64) {
            words.push((1u64 << (n % 64)) - 1);
        }
        RankSet(words)
    }

    pub fn contains(&self, rank: u32) -> bool {
        self.0
            .get(rank as usize / 64)
            .is_some_and(|w| w & (1 << (rank % 64)) != 0)
    }

    pub fn len(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().enumerate().flat_map(|(i, &w)| {
            (0..64)
                .filter(move |b| w & (1 << b) != 0)
                .map(move |b| i as u32 * 64 + b)
        })
    }

    /// Union in place; returns the intersection (ranks that were in both).
    fn union_with(&mut self, other: &RankSet) -> RankSet {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        let mut both = vec![0; other.0.len()];
        for (i, &w) in other.0.iter().enumerate() {
            both[i] = self.0[i] & w;
            self.0[i] |= w;
        }
        RankSet(both)
    }

    fn normalized_eq(&self, other: &RankSet) -> bool {
        let n = self.0.len().max(other.0.len());
        (0..n).all(|i| self.0.get(i).unwrap_or(&0) == other.0.get(i).unwrap_or(&0))
    }
}

impl fmt::Display for RankSet {
    /// `{0-3, 5}`: runs of consecutive ranks shown as ranges.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        let mut run: Option<(u32, u32)> = None;
        for r in self.iter() {
            run = match run {
                Some((lo, hi)) if hi + 1 == r => Some((lo, r)),
                Some(done) => {
                    parts.push(done);
                    Some((r, r))
                }
                None => Some((r, r)),
            };
        }
        parts.extend(run);
        let text: Vec<String> = parts
            .iter()
            .map(|&(lo, hi)| {
                if lo == hi {
                    lo.to_string()
                } else {
                    format!("{lo}-{hi}")
                }
            })
            .collect();
        write!(f, "{{{}}}", text.join(", "))
    }
}

impl Contribs {
    fn input(rank: u32, chunk: u32) -> Contribs {
        Contribs {
            terms: vec![(chunk, RankSet::single(rank))],
            dups: Vec::new(),
            dup_count: 0,
        }
    }

    /// The multiset sum of `self` and `other`.
    fn merge(&self, other: &Contribs) -> Contribs {
        let mut out = Contribs {
            terms: Vec::with_capacity(self.terms.len() + other.terms.len()),
            dups: self.dups.clone(),
            dup_count: self.dup_count + other.dup_count,
        };
        for &d in &other.dups {
            if out.dups.len() < MAX_DUPS_KEPT {
                out.dups.push(d);
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < self.terms.len() || j < other.terms.len() {
            let a = self.terms.get(i);
            let b = other.terms.get(j);
            match (a, b) {
                (Some(a), Some(b)) if a.0 == b.0 => {
                    let mut set = a.1.clone();
                    let both = set.union_with(&b.1);
                    for r in both.iter() {
                        out.dup_count += 1;
                        if out.dups.len() < MAX_DUPS_KEPT {
                            out.dups.push((r, a.0));
                        }
                    }
                    out.terms.push((a.0, set));
                    i += 1;
                    j += 1;
                }
                (Some(a), Some(b)) if a.0 < b.0 => {
                    out.terms.push(a.clone());
                    i += 1;
                }
                (Some(a), None) => {
                    out.terms.push(a.clone());
                    i += 1;
                }
                (_, Some(b)) => {
                    out.terms.push(b.clone());
                    j += 1;
                }
                (None, None) => unreachable!(),
            }
        }
        out
    }

    /// Contributions counted more than once.
    pub fn duplicates(&self) -> u64 {
        self.dup_count
    }

    /// Whether this is exactly `{x(r, chunk) : r in ranks}`, each once.
    pub fn is_exactly(&self, chunk: u32, ranks: &RankSet) -> bool {
        self.dup_count == 0
            && self.terms.len() == 1
            && self.terms[0].0 == chunk
            && self.terms[0].1.normalized_eq(ranks)
    }
}

impl fmt::Display for Contribs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .terms
            .iter()
            .map(|(c, ranks)| format!("chunk {c} of ranks {ranks}"))
            .collect();
        write!(f, "the reduction of {}", parts.join(" + "))?;
        if self.dup_count > 0 {
            let shown: Vec<String> = self
                .dups
                .iter()
                .map(|(r, c)| format!("x({r}, {c})"))
                .collect();
            write!(
                f,
                ", with {} contribution(s) counted more than once ({}{})",
                self.dup_count,
                shown.join(", "),
                if self.dup_count as usize > shown.len() {
                    ", ..."
                } else {
                    ""
                }
            )?;
        }
        Ok(())
    }
}

impl Value {
    /// `DST = a (+) b`. Both must be defined.
    pub fn reduce(a: &Value, b: &Value) -> Value {
        let a = a.contribs().expect("reduce of an undefined value");
        let b = b.contribs().expect("reduce of an undefined value");
        Value::Sum(Arc::new(a.merge(&b)))
    }

    fn contribs(&self) -> Option<Contribs> {
        match self {
            Value::Undef => None,
            Value::Input { rank, chunk } => Some(Contribs::input(*rank, *chunk)),
            Value::Sum(c) => Some((**c).clone()),
        }
    }

    pub fn is_defined(&self) -> bool {
        !matches!(self, Value::Undef)
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Undef => f.write_str("nothing (never written)"),
            Value::Input { rank, chunk } => write!(f, "x({rank}, {chunk})"),
            Value::Sum(c) => c.fmt(f),
        }
    }
}

/// What one output location must hold after the call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expected {
    /// Exactly input `x(rank, chunk)`.
    Input { rank: u32, chunk: u32 },
    /// The reduction of input chunk `chunk` over every rank, each once.
    AllRanks { chunk: u32 },
}

impl Expected {
    pub fn holds(&self, value: &Value, all: &RankSet) -> bool {
        match (self, value) {
            (Expected::Input { rank, chunk }, Value::Input { rank: r, chunk: c }) => {
                rank == r && chunk == c
            }
            (Expected::AllRanks { chunk }, Value::Input { rank, chunk: c }) => {
                // Only a one-rank "reduction" is a bare input.
                chunk == c && all.len() == 1 && all.contains(*rank)
            }
            (Expected::AllRanks { chunk }, Value::Sum(s)) => s.is_exactly(*chunk, all),
            _ => false,
        }
    }

    pub fn describe(&self, n: u32) -> String {
        match self {
            Expected::Input { rank, chunk } => format!("x({rank}, {chunk})"),
            Expected::AllRanks { chunk } => {
                format!(
                    "the reduction of chunk {chunk} of ranks {}, each once",
                    RankSet::all(n)
                )
            }
        }
    }
}

/// The postcondition of `layout`'s collective (dsl.md section 4): for every `out` location
/// that must hold something, `(rank, chunk, expected)`. Locations of `out` not listed (none
/// today) and all of `scratch` may hold anything.
pub fn postcondition(layout: &Layout) -> impl Iterator<Item = (u32, u32, Expected)> + '_ {
    let k = layout.k().max(1);
    (0..layout.n).flat_map(move |r| {
        let size = layout.size(Buf::Out, r).unwrap_or(0);
        (0..size).map(move |c| {
            let e = match layout.collective {
                Collective::Allreduce | Collective::Reduce => Expected::AllRanks { chunk: c },
                Collective::Broadcast => Expected::Input {
                    rank: layout.root.unwrap_or(0),
                    chunk: c,
                },
                Collective::Allgather => Expected::Input {
                    rank: c / k,
                    chunk: c % k,
                },
                Collective::ReduceScatter => Expected::AllRanks { chunk: r * k + c },
                Collective::Alltoall => Expected::Input {
                    rank: c / k,
                    chunk: r * k + c % k,
                },
            };
            (r, c, e)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(r: u32, c: u32) -> Value {
        Value::Input { rank: r, chunk: c }
    }

    #[test]
    fn reduction_over_all_ranks_matches_allranks() {
        let mut v = input(0, 2);
        for r in 1..130 {
            v = Value::reduce(&v, &input(r, 2));
        }
        let all = RankSet::all(130);
        assert!(Expected::AllRanks { chunk: 2 }.holds(&v, &all));
        assert!(!Expected::AllRanks { chunk: 1 }.holds(&v, &all));
        assert!(!Expected::AllRanks { chunk: 2 }.holds(&v, &RankSet::all(131)));
    }

    #[test]
    fn double_counting_is_detected_and_described() {
        let a = Value::reduce(&input(0, 0), &input(1, 0));
        let twice = Value::reduce(&a, &input(1, 0));
        let all = RankSet::all(2);
        assert!(!Expected::AllRanks { chunk: 0 }.holds(&twice, &all));
        let text = twice.to_string();
        assert!(text.contains("x(1, 0)"), "{text}");
        assert!(text.contains("more than once"), "{text}");
    }

    #[test]
    fn rank_sets_print_as_ranges() {
        let mut s = RankSet::single(0);
        for r in [1, 2, 3, 5, 64, 65] {
            s.union_with(&RankSet::single(r));
        }
        assert_eq!(s.to_string(), "{0-3, 5, 64-65}");
    }

    #[test]
    fn mixed_chunks_never_match() {
        let v = Value::reduce(&input(0, 0), &input(1, 1));
        assert!(!Expected::AllRanks { chunk: 0 }.holds(&v, &RankSet::all(2)));
        assert!(v
            .to_string()
            .contains("chunk 0 of ranks {0} + chunk 1 of ranks {1}"));
    }
}
