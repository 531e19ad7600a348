//! What a run is checked against: deterministic inputs whose reductions are exact, NCCL's
//! semantics for each collective computed directly from every rank's input, and an exact
//! comparison that names the first wrong element.
//!
//! ## Why exact comparison works
//!
//! A plan may reduce contributions in any order and any grouping, and floating-point
//! addition is not associative. [`fill_input`] therefore chooses values for which every
//! partial result of every order is exactly representable, so all orders give the same
//! bits and a single wrong contribution (missing, doubled, misplaced) shows:
//!
//! * `sum`/`avg` on floats: `k * 2^-q` with `|k| <= (2^p - 1) / n` for `p` significand
//!   bits (f16 11, bf16 8, f32 24, f64 53), so any partial sum is an integer below `2^p`
//!   times `2^-q`. Exact for `n < 2^p` ranks (bf16: up to 255).
//! * `prod` on floats: each element's factors are `+-1` on most ranks, `2` on one rank,
//!   `1/2` on one rank and `m * 2^s` (`m` odd, at most 31; `|s| <= 4`) on one rank, the
//!   ranks picked per element by a hash all ranks agree on. Partial products need at most
//!   5 significand bits and stay within `[2^-5, 2^10)`: exact even in f16 and bf16, for
//!   any number of ranks.
//! * `min`/`max` on floats: any finite values (the result is one of them); `-0.0` is never
//!   produced, so ties are bit-identical.
//! * integers: uniformly random bits (odd ones for `prod`, so products do not collapse to
//!   0). Wrapping `+` and `*` are associative and commutative, so any order agrees.
//!
//! `avg` is the sum followed by [`finish_avg`], one rounding of an exact value.

use crate::dtype::{DType, RedOp};
use crate::reduce::{finish_avg, reduce_into};
use braid_ir::Collective;
use half::{bf16, f16};

/// splitmix64's output function: a cheap, well-mixed hash of a counter.
fn mix(z: u64) -> u64 {
    let z = z.wrapping_add(GAMMA);
    let z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// A random stream in which element `i` is computed directly (splitmix64 at position
/// `i`), so a value depends only on (seed, stream, index), never on the buffer's length.
/// Streams `0..2^32` are ranks; [`SHARED`] is the one every rank reads to agree on
/// per-element choices.
#[derive(Clone, Copy)]
struct Stream(u64);

const SHARED: u64 = u64::MAX;

impl Stream {
    fn new(seed: u64, id: u64) -> Self {
        Stream(mix(seed ^ mix(id)))
    }

    fn at(self, i: usize) -> u64 {
        mix(self.0.wrapping_add((i as u64).wrapping_mul(GAMMA)))
    }
}

/// A uniformly random integer in `[-k, k]`.
fn centered(h: u64, k: u64) -> f64 {
    (h % (2 * k + 1)) as f64 - k as f64
}

/// The values rank `rank` contributes, by element index, for a float type (module docs).
fn float_values(dtype: DType, op: RedOp, rank: u32, n: u32, seed: u64) -> impl Fn(usize) -> f64 {
    // Significand bits with the hidden one; 2^-q keeps values fractional but far from
    // every type's subnormal range.
    let (p, q) = match dtype {
        DType::F16 => (11, 2),
        DType::Bf16 => (8, 1),
        DType::F32 => (24, 8),
        _ => (53, 16),
    };
    let unit = 0.5f64.powi(q);
    let full = (1u64 << p) - 1;
    let k = match op {
        RedOp::Sum | RedOp::Avg => (full / u64::from(n)).max(1),
        _ => full,
    };
    let (own, shared) = (
        Stream::new(seed, u64::from(rank)),
        Stream::new(seed, SHARED),
    );
    let (rank, n) = (u64::from(rank), u64::from(n));
    move |i| {
        let h = own.at(i);
        if op != RedOp::Prod {
            return centered(h, k) * unit;
        }
        let g = shared.at(i);
        let (twice, half, special) = (g % n, (g >> 20) % n, (g >> 40) % n);
        let mut v = if h & 1 == 0 { 1.0 } else { -1.0 };
        if rank == twice {
            v *= 2.0;
        }
        if rank == half {
            v *= 0.5;
        }
        if rank == special {
            let m = ((h >> 1) % 16) * 2 + 1;
            let s = ((h >> 8) % 9) as i32 - 4;
            v *= m as f64 * 2f64.powi(s);
        }
        v
    }
}

/// Fills `buf` with rank `rank`'s input for a call on `n_ranks` ranks: deterministic in
/// (`seed`, `rank`, element index), and chosen so that the reduction over all ranks is
/// exact and identical in every order (module docs). Non-reducing collectives can use any
/// `op`; the values are just as distinct.
///
/// # Panics
/// If `n_ranks` is 0 or `buf` is not a whole number of elements.
pub fn fill_input(dtype: DType, op: RedOp, rank: u32, n_ranks: u32, seed: u64, buf: &mut [u8]) {
    assert!(n_ranks > 0, "fill_input: n_ranks must be at least 1");
    let size = dtype.size();
    assert!(
        buf.len().is_multiple_of(size),
        "fill_input: {} bytes is not a whole number of {dtype}",
        buf.len()
    );
    let chunks = buf.chunks_exact_mut(size).enumerate();
    let float = float_values(dtype, op, rank, n_ranks, seed);
    let own = Stream::new(seed, u64::from(rank));
    let odd = u64::from(op == RedOp::Prod);
    let bits = |i| own.at(i) | odd;
    // Every float value is exactly representable, so these conversions do not round.
    match dtype {
        DType::F16 => {
            chunks.for_each(|(i, c)| c.copy_from_slice(&f16::from_f64(float(i)).to_ne_bytes()))
        }
        DType::Bf16 => {
            chunks.for_each(|(i, c)| c.copy_from_slice(&bf16::from_f64(float(i)).to_ne_bytes()))
        }
        DType::F32 => chunks.for_each(|(i, c)| c.copy_from_slice(&(float(i) as f32).to_ne_bytes())),
        DType::F64 => chunks.for_each(|(i, c)| c.copy_from_slice(&float(i).to_ne_bytes())),
        DType::I8 | DType::U8 => {
            chunks.for_each(|(i, c)| c.copy_from_slice(&(bits(i) as u8).to_ne_bytes()))
        }
        DType::I32 | DType::U32 => {
            chunks.for_each(|(i, c)| c.copy_from_slice(&(bits(i) as u32).to_ne_bytes()))
        }
        DType::I64 | DType::U64 => {
            chunks.for_each(|(i, c)| c.copy_from_slice(&bits(i).to_ne_bytes()))
        }
    }
}

/// The reduction of every rank's buffer, in rank order (exact inputs make the order moot).
fn reduce_all(dtype: DType, op: RedOp, inputs: &[Vec<u8>]) -> Vec<u8> {
    let mut acc = inputs[0].clone();
    for input in &inputs[1..] {
        reduce_into(dtype, op, &mut acc, input);
    }
    if op == RedOp::Avg {
        finish_avg(dtype, &mut acc, inputs.len() as u32);
    }
    acc
}

/// Every rank's send buffer for a call of `collective` with NCCL count `count`, filled
/// by [`fill_input`] with `seed`.
pub fn inputs(
    collective: Collective,
    dtype: DType,
    op: RedOp,
    n_ranks: u32,
    count: usize,
    seed: u64,
) -> Vec<Vec<u8>> {
    let (in_elems, _) = crate::geometry::buffer_elems(collective, n_ranks, count);
    (0..n_ranks)
        .map(|r| {
            let mut b = vec![0u8; in_elems * dtype.size()];
            fill_input(dtype, op, r, n_ranks, seed, &mut b);
            b
        })
        .collect()
}

/// Every rank's expected output under NCCL's semantics, from every rank's input bytes
/// (`inputs[r]` is rank `r`'s send buffer; all the same length). Counts follow NCCL:
///
/// * allreduce, reduce, broadcast: input and output hold `count` elements;
/// * reduce_scatter: input `N * recvcount`, output `recvcount`, rank `r` gets block `r`;
/// * allgather: input `sendcount`, output `N * sendcount`;
/// * alltoall: input and output `N * count`; `out[r]` block `p` is `in[p]` block `r`.
///
/// Broadcast reads only the root's input. Reduce yields `None` on non-root ranks, whose
/// receive buffers NCCL leaves untouched. `op` is ignored by non-reducing collectives.
///
/// # Panics
/// If `inputs` is empty, lengths disagree or do not split into `N` blocks of whole
/// elements, or a rooted collective has no root or one out of range.
pub fn reference(
    collective: Collective,
    dtype: DType,
    op: RedOp,
    root: Option<u32>,
    inputs: &[Vec<u8>],
) -> Vec<Option<Vec<u8>>> {
    let n = inputs.len();
    assert!(n > 0, "reference: no ranks");
    let root_rank = || {
        let r = root.unwrap_or_else(|| panic!("reference: {} needs a root", collective.name()));
        assert!(
            (r as usize) < n,
            "reference: root {r} out of range for {n} ranks"
        );
        r as usize
    };
    if collective == Collective::Broadcast {
        return vec![Some(inputs[root_rank()].clone()); n];
    }
    let len = inputs[0].len();
    assert!(
        inputs.iter().all(|b| b.len() == len),
        "reference: ranks' input lengths differ"
    );
    assert!(
        len.is_multiple_of(dtype.size()),
        "reference: {len} bytes is not a whole number of {dtype}"
    );
    let splits = matches!(collective, Collective::ReduceScatter | Collective::Alltoall);
    assert!(
        !splits || len.is_multiple_of(n * dtype.size()),
        "reference: {len} bytes do not split into {n} blocks of {dtype}"
    );
    let block = len / n;
    match collective {
        Collective::Allreduce => vec![Some(reduce_all(dtype, op, inputs)); n],
        Collective::Reduce => {
            let root = root_rank();
            let mut out = vec![None; n];
            out[root] = Some(reduce_all(dtype, op, inputs));
            out
        }
        Collective::ReduceScatter => {
            let full = reduce_all(dtype, op, inputs);
            full.chunks_exact(block).map(|b| Some(b.to_vec())).collect()
        }
        Collective::Allgather => vec![Some(inputs.concat()); n],
        Collective::Alltoall => (0..n)
            .map(|r| {
                Some(
                    inputs
                        .iter()
                        .flat_map(|i| &i[r * block..(r + 1) * block])
                        .copied()
                        .collect(),
                )
            })
            .collect(),
        Collective::Broadcast => unreachable!("handled above"),
    }
}

/// One element, printed for a mismatch report (floats also as raw bits, so `-0.0`/`0.0`
/// and NaN payloads are told apart).
pub fn format_element(dtype: DType, bytes: &[u8]) -> String {
    if bytes.len() != dtype.size() {
        return format!("<{} bytes>", bytes.len());
    }
    macro_rules! int {
        ($t:ty) => {
            <$t>::from_ne_bytes(bytes.try_into().unwrap()).to_string()
        };
    }
    macro_rules! float {
        ($t:ty, $bits:ty) => {{
            let v = <$t>::from_ne_bytes(bytes.try_into().unwrap());
            let bits = <$bits>::from_ne_bytes(bytes.try_into().unwrap());
            format!("{v:?} (0x{bits:0w$x})", w = 2 * bytes.len())
        }};
    }
    match dtype {
        DType::F16 => float!(f16, u16),
        DType::Bf16 => float!(bf16, u16),
        DType::F32 => float!(f32, u32),
        DType::F64 => float!(f64, u64),
        DType::I8 => int!(i8),
        DType::U8 => int!(u8),
        DType::I32 => int!(i32),
        DType::U32 => int!(u32),
        DType::I64 => int!(i64),
        DType::U64 => int!(u64),
    }
}

/// The first element where `actual` differs from `expected`, bit for bit: its index, the
/// expected value and the actual one. An element present in only one buffer (lengths
/// differ) counts as a mismatch and prints as `<missing>`.
pub fn first_mismatch(
    dtype: DType,
    expected: &[u8],
    actual: &[u8],
) -> Option<(usize, String, String)> {
    if expected == actual {
        return None;
    }
    let size = dtype.size();
    let elems = expected.len().max(actual.len()).div_ceil(size);
    fn element(buf: &[u8], i: usize, size: usize) -> Option<&[u8]> {
        let end = ((i + 1) * size).min(buf.len());
        buf.get(i * size..end).filter(|e| !e.is_empty())
    }
    let show =
        |e: Option<&[u8]>| e.map_or_else(|| "<missing>".to_string(), |e| format_element(dtype, e));
    (0..elems).find_map(|i| {
        let (e, a) = (element(expected, i, size), element(actual, i, size));
        (e != a).then(|| (i, show(e), show(a)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_each_ranks_fill_sized_for_the_send_buffer() {
        // Allgather with count 5 on 3 ranks: each sends 5 elements.
        let v = inputs(Collective::Allgather, DType::I32, RedOp::Sum, 3, 5, 9);
        assert_eq!(v.len(), 3);
        for (r, b) in v.iter().enumerate() {
            assert_eq!(b.len(), 5 * 4);
            let mut want = vec![0u8; 20];
            fill_input(DType::I32, RedOp::Sum, r as u32, 3, 9, &mut want);
            assert_eq!(b, &want);
        }
        // Reduce-scatter sends N x count.
        let v = inputs(Collective::ReduceScatter, DType::F16, RedOp::Max, 2, 3, 1);
        assert!(v.iter().all(|b| b.len() == 2 * 3 * 2));
    }
}
