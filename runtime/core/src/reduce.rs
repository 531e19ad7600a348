//! Elementwise reduction kernels on raw byte buffers: the host backend's hot loop.
//!
//! Buffers are `&[u8]` in the host's native layout and need not be aligned to the element
//! size (a slice can start anywhere in a staging buffer), so elements are read with
//! `from_ne_bytes` on `chunks_exact`; the compiler turns that into unaligned vector loads.
//! Dispatch on the data type and operator happens once per call: each (type, op) pair is
//! its own monomorphised loop with no per-element branch.
//!
//! Arithmetic follows NCCL's device code: integers wrap; `f16` and `bf16` are widened to
//! `f32`, combined, and rounded back after every operation. Since an `f32` holds the exact
//! product of two halves and has more than twice their precision plus two bits, that gives
//! the same bits as native half-precision arithmetic (no double-rounding error).

use crate::dtype::{DType, RedOp};

/// One element type: how it is stored and how NCCL combines two of them. Arithmetic runs
/// on `Acc`, the type NCCL computes in (`f32` for the half types, else the type itself);
/// storing an `Acc` rounds it back.
trait Element {
    /// Bytes per element.
    const SIZE: usize;
    type Acc: Copy;
    /// Reads one element from exactly `SIZE` bytes.
    fn load(bytes: &[u8]) -> Self::Acc;
    /// Writes one element into exactly `SIZE` bytes.
    fn store(v: Self::Acc, bytes: &mut [u8]);
    fn sum(a: Self::Acc, b: Self::Acc) -> Self::Acc;
    fn prod(a: Self::Acc, b: Self::Acc) -> Self::Acc;
    fn min(a: Self::Acc, b: Self::Acc) -> Self::Acc;
    fn max(a: Self::Acc, b: Self::Acc) -> Self::Acc;
    /// `avg`'s final step on a sum of `n >= 2` contributions (NCCL: integers divide with
    /// truncation toward zero; floats multiply by `1/n` rounded to the element type),
    /// with its per-call constants computed once.
    fn averager(n: u32) -> impl Fn(Self::Acc) -> Self::Acc;
}

macro_rules! int_element {
    ($($t:ty => $div:ident),*) => {$(
        impl Element for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            type Acc = $t;
            #[inline(always)]
            fn load(bytes: &[u8]) -> $t {
                <$t>::from_ne_bytes(bytes.try_into().unwrap())
            }
            #[inline(always)]
            fn store(v: $t, bytes: &mut [u8]) {
                bytes.copy_from_slice(&v.to_ne_bytes());
            }
            #[inline(always)]
            fn sum(a: $t, b: $t) -> $t {
                a.wrapping_add(b)
            }
            #[inline(always)]
            fn prod(a: $t, b: $t) -> $t {
                a.wrapping_mul(b)
            }
            #[inline(always)]
            fn min(a: $t, b: $t) -> $t {
                Ord::min(a, b)
            }
            #[inline(always)]
            fn max(a: $t, b: $t) -> $t {
                Ord::max(a, b)
            }
            /// NCCL's `SumPostDiv`: the (wrapped) sum divided by `n` in the element's
            /// signedness, truncating toward zero. Widening first keeps `n` > `T::MAX` right.
            #[inline(always)]
            fn averager(n: u32) -> impl Fn($t) -> $t {
                let div = DivBy::new(n);
                move |x| div.$div(x.into()) as $t
            }
        }
    )*};
}

int_element!(i8 => signed, u8 => unsigned, i32 => signed, u32 => unsigned, i64 => signed, u64 => unsigned);

/// Division by a per-call constant `n >= 2`, truncating toward zero. Dividends below
/// `2^32` (every 8- and 32-bit element) multiply by `ceil(2^64 / n)` and keep the high
/// word: with `x < 2^32` and `n < 2^32` the error term stays below `1/n`, so the
/// quotient is exact, and it costs one multiply instead of a division per element.
#[derive(Clone, Copy)]
struct DivBy {
    n: u64,
    reciprocal: u64,
}

impl DivBy {
    fn new(n: u32) -> Self {
        debug_assert!(n >= 2);
        let n = u64::from(n);
        DivBy {
            n,
            reciprocal: u64::MAX / n + 1,
        }
    }

    #[inline(always)]
    fn unsigned(self, x: u64) -> u64 {
        if x >> 32 == 0 {
            ((u128::from(x) * u128::from(self.reciprocal)) >> 64) as u64
        } else {
            x / self.n
        }
    }

    #[inline(always)]
    fn signed(self, x: i64) -> i64 {
        let q = self.unsigned(x.unsigned_abs()) as i64;
        if x < 0 {
            -q
        } else {
            q
        }
    }
}

macro_rules! float_element {
    ($($t:ty),*) => {$(
        impl Element for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            type Acc = $t;
            #[inline(always)]
            fn load(bytes: &[u8]) -> $t {
                <$t>::from_ne_bytes(bytes.try_into().unwrap())
            }
            #[inline(always)]
            fn store(v: $t, bytes: &mut [u8]) {
                bytes.copy_from_slice(&v.to_ne_bytes());
            }
            #[inline(always)]
            fn sum(a: $t, b: $t) -> $t {
                a + b
            }
            #[inline(always)]
            fn prod(a: $t, b: $t) -> $t {
                a * b
            }
            /// Like CUDA's `fminf`: a NaN loses to a number.
            #[inline(always)]
            fn min(a: $t, b: $t) -> $t {
                a.min(b)
            }
            #[inline(always)]
            fn max(a: $t, b: $t) -> $t {
                a.max(b)
            }
            /// NCCL's scale is `1.0/n` computed in double and rounded to the element type.
            #[inline(always)]
            fn averager(n: u32) -> impl Fn($t) -> $t {
                let scale = (1.0 / f64::from(n)) as $t;
                move |x| x * scale
            }
        }
    )*};
}

float_element!(f32, f64);

/// `f16`: IEEE binary16, stored as its bits; arithmetic in `f32`.
struct F16;
/// `bf16`: the top half of an `f32`; arithmetic in `f32`.
struct Bf16;

macro_rules! half_element {
    ($($t:ty: $to_f32:path, $from_f32:path);*) => {$(
        impl Element for $t {
            const SIZE: usize = 2;
            type Acc = f32;
            #[inline(always)]
            fn load(bytes: &[u8]) -> f32 {
                $to_f32(u16::from_ne_bytes(bytes.try_into().unwrap()))
            }
            #[inline(always)]
            fn store(v: f32, bytes: &mut [u8]) {
                bytes.copy_from_slice(&$from_f32(v).to_ne_bytes());
            }
            #[inline(always)]
            fn sum(a: f32, b: f32) -> f32 {
                a + b
            }
            #[inline(always)]
            fn prod(a: f32, b: f32) -> f32 {
                a * b
            }
            #[inline(always)]
            fn min(a: f32, b: f32) -> f32 {
                a.min(b)
            }
            #[inline(always)]
            fn max(a: f32, b: f32) -> f32 {
                a.max(b)
            }
            /// NCCL: `__float2half(float(1.0/n))` (likewise bf16), then a half multiply.
            #[inline(always)]
            fn averager(n: u32) -> impl Fn(f32) -> f32 {
                let scale = $to_f32($from_f32((1.0 / f64::from(n)) as f32));
                move |x| x * scale
            }
        }
    )*};
}

half_element!(
    F16: halfbits::f16_to_f32, halfbits::f32_to_f16;
    Bf16: halfbits::bf16_to_f32, halfbits::f32_to_bf16
);

/// `dst[i] = f(dst[i], src[i])` over whole elements.
#[inline(always)]
fn zip_into<T: Element>(dst: &mut [u8], src: &[u8], f: impl Fn(T::Acc, T::Acc) -> T::Acc) {
    for (d, s) in dst.chunks_exact_mut(T::SIZE).zip(src.chunks_exact(T::SIZE)) {
        T::store(f(T::load(d), T::load(s)), d);
    }
}

/// `dst[i] = f(a[i], b[i])` over whole elements.
#[inline(always)]
fn zip_pair<T: Element>(dst: &mut [u8], a: &[u8], b: &[u8], f: impl Fn(T::Acc, T::Acc) -> T::Acc) {
    let ab = a.chunks_exact(T::SIZE).zip(b.chunks_exact(T::SIZE));
    for (d, (x, y)) in dst.chunks_exact_mut(T::SIZE).zip(ab) {
        T::store(f(T::load(x), T::load(y)), d);
    }
}

fn into_typed<T: Element>(op: RedOp, dst: &mut [u8], src: &[u8]) {
    match op {
        RedOp::Sum | RedOp::Avg => zip_into::<T>(dst, src, T::sum),
        RedOp::Prod => zip_into::<T>(dst, src, T::prod),
        RedOp::Min => zip_into::<T>(dst, src, T::min),
        RedOp::Max => zip_into::<T>(dst, src, T::max),
    }
}

fn pair_typed<T: Element>(op: RedOp, dst: &mut [u8], a: &[u8], b: &[u8]) {
    match op {
        RedOp::Sum | RedOp::Avg => zip_pair::<T>(dst, a, b, T::sum),
        RedOp::Prod => zip_pair::<T>(dst, a, b, T::prod),
        RedOp::Min => zip_pair::<T>(dst, a, b, T::min),
        RedOp::Max => zip_pair::<T>(dst, a, b, T::max),
    }
}

fn avg_typed<T: Element>(buf: &mut [u8], n: u32) {
    let average = T::averager(n);
    for e in buf.chunks_exact_mut(T::SIZE) {
        T::store(average(T::load(e)), e);
    }
}

/// Calls `$f::<T>($args)` with `T` the Rust type of `$dtype`.
macro_rules! with_type {
    ($dtype:expr, $f:ident($($arg:expr),*)) => {
        match $dtype {
            DType::F16 => $f::<F16>($($arg),*),
            DType::Bf16 => $f::<Bf16>($($arg),*),
            DType::F32 => $f::<f32>($($arg),*),
            DType::F64 => $f::<f64>($($arg),*),
            DType::I8 => $f::<i8>($($arg),*),
            DType::U8 => $f::<u8>($($arg),*),
            DType::I32 => $f::<i32>($($arg),*),
            DType::U32 => $f::<u32>($($arg),*),
            DType::I64 => $f::<i64>($($arg),*),
            DType::U64 => $f::<u64>($($arg),*),
        }
    };
}

/// The kernels' one contract: whole elements, every operand as long as `dst`.
fn check_lens(dtype: DType, call: &str, dst: usize, operands: &[usize]) {
    assert!(
        dst.is_multiple_of(dtype.size()),
        "{call}: {dst} bytes is not a whole number of {dtype} elements"
    );
    for &len in operands {
        assert!(len == dst, "{call}: an operand has {len} bytes, dst {dst}");
    }
}

/// `dst = dst (+) src` elementwise. `Avg` accumulates as `Sum`; call [`finish_avg`] once
/// the last contribution is in.
///
/// # Panics
/// If the lengths differ or are not a multiple of `dtype.size()`.
pub fn reduce_into(dtype: DType, op: RedOp, dst: &mut [u8], src: &[u8]) {
    check_lens(dtype, "reduce_into", dst.len(), &[src.len()]);
    with_type!(dtype, into_typed(op, dst, src))
}

/// `dst = a (+) b` elementwise, sparing the copy a receive-reduce-send step would need.
/// `Avg` combines as `Sum`.
///
/// # Panics
/// If the lengths differ or are not a multiple of `dtype.size()`.
pub fn reduce_pair(dtype: DType, op: RedOp, dst: &mut [u8], a: &[u8], b: &[u8]) {
    check_lens(dtype, "reduce_pair", dst.len(), &[a.len(), b.len()]);
    with_type!(dtype, pair_typed(op, dst, a, b))
}

/// Every element of `input` times `scalar` (one element of `dtype`'s bytes), in the
/// element type's arithmetic: what NCCL's PreMulSum applies to each rank's input before
/// summing.
///
/// # Panics
/// If `scalar` is not one element or `input` not a whole number of them.
pub fn scale(dtype: DType, input: &[u8], scalar: &[u8]) -> Vec<u8> {
    check_lens(dtype, "scale", dtype.size(), &[scalar.len()]);
    check_lens(dtype, "scale", input.len(), &[]);
    let mut out = input.to_vec();
    with_type!(dtype, scale_typed(&mut out, scalar));
    out
}

fn scale_typed<T: Element>(buf: &mut [u8], scalar: &[u8]) {
    let k = T::load(scalar);
    for e in buf.chunks_exact_mut(T::SIZE) {
        T::store(T::prod(T::load(e), k), e);
    }
}

/// Turns a sum of `n` contributions into their average, as NCCL's `ncclAvg` defines it:
/// integers divide the wrapped sum by `n`, truncating toward zero (`SumPostDiv`); floats
/// multiply by `1/n` rounded to the element type (`f16`/`bf16`: through `f32`, as
/// `__float2half(float(1.0/n))`). NCCL multiplies each input before summing instead;
/// for floats that can differ in the last bits (nccl-tests allows 2 ulp for `avg`), and
/// dsl.md fixes Braid's rule as scaling the sum once at the end.
///
/// # Panics
/// If `n` is 0 or `buf` is not a whole number of elements.
pub fn finish_avg(dtype: DType, buf: &mut [u8], n: u32) {
    assert!(n > 0, "finish_avg: n must be at least 1");
    check_lens(dtype, "finish_avg", buf.len(), &[]);
    if n > 1 {
        with_type!(dtype, avg_typed(buf, n))
    }
}

/// Conversions between the 16-bit float formats and `f32`, written as selects the compiler
/// vectorises inside the kernels: the `half` crate's scalar conversions detect the CPU at
/// run time on every call and were several times slower here (bf16 about 5x, f16 about 2x;
/// f16 remains the slowest type on a baseline x86-64 build, which lacks F16C). All round
/// to nearest, ties to even, as CUDA's `__float2half_rn` and `__float2bfloat16_rn` do.
mod halfbits {
    /// binary16 bits to `f32`, exactly.
    #[inline(always)]
    pub fn f16_to_f32(h: u16) -> f32 {
        let h = u32::from(h);
        let sign = (h & 0x8000) << 16;
        let exp = h & 0x7c00;
        let man = h & 0x03ff;
        let bits = if exp == 0x7c00 {
            // Infinity or NaN: all-ones exponent, payload kept.
            0x7f80_0000 | (man << 13)
        } else if exp == 0 {
            // Zero or subnormal: man * 2^-24, exact in f32 (man < 2^10).
            (man as f32 * (1.0 / 16_777_216.0)).to_bits()
        } else {
            // Normal: rebias the exponent from 15 to 127.
            ((h & 0x7fff) << 13) + ((127 - 15) << 23)
        };
        f32::from_bits(sign | bits)
    }

    /// `f32` to binary16 bits, rounding to nearest even; NaNs stay NaN (quiet, payload's
    /// top bits kept), overflow gives infinity.
    #[inline(always)]
    pub fn f32_to_f16(f: f32) -> u16 {
        let x = f.to_bits();
        let sign = (x >> 16) & 0x8000;
        let a = x & 0x7fff_ffff;
        let bits = if a > 0x7f80_0000 {
            0x7e00 | ((a >> 13) & 0x03ff)
        } else if a >= 0x4780_0000 {
            // |f| >= 2^16 (or infinite): beyond the largest half even after rounding.
            0x7c00
        } else if a < 0x3880_0000 {
            // |f| < 2^-14, a subnormal half: adding 0.5 puts the f32 ulp at 2^-24, the
            // subnormal spacing, so the FPU's own rounding does round-to-nearest-even.
            (f32::from_bits(a) + 0.5).to_bits() - 0.5f32.to_bits()
        } else {
            // Normal: drop 13 mantissa bits rounding to nearest even (a carry into the
            // exponent is the right answer, up to infinity), then rebias 127 -> 15.
            let rounded = a + 0x0fff + ((a >> 13) & 1);
            (rounded >> 13) - ((127 - 15) << 10)
        };
        (sign | bits) as u16
    }

    /// bfloat16 bits to `f32`, exactly: they are its top half.
    #[inline(always)]
    pub fn bf16_to_f32(h: u16) -> f32 {
        f32::from_bits(u32::from(h) << 16)
    }

    /// `f32` to bfloat16 bits, rounding to nearest even; NaNs stay NaN (quiet).
    #[inline(always)]
    pub fn f32_to_bf16(f: f32) -> u16 {
        let x = f.to_bits();
        if x & 0x7fff_ffff > 0x7f80_0000 {
            ((x >> 16) | 0x0040) as u16
        } else {
            ((x + 0x7fff + ((x >> 16) & 1)) >> 16) as u16
        }
    }
}
