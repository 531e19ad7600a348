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
use half::{bf16, f16};

/// One element type: how it is stored and how NCCL combines two of them.
trait Element: Copy {
    /// Bytes per element.
    const SIZE: usize;
    /// Reads one element from exactly `SIZE` bytes.
    fn load(bytes: &[u8]) -> Self;
    /// Writes one element into exactly `SIZE` bytes.
    fn store(self, bytes: &mut [u8]);
    fn sum(self, other: Self) -> Self;
    fn prod(self, other: Self) -> Self;
    fn min(self, other: Self) -> Self;
    fn max(self, other: Self) -> Self;
    /// `avg`'s final step on a sum of `n` contributions (NCCL: integers divide with
    /// truncation toward zero; floats multiply by `1/n` rounded to the element type).
    fn average(self, n: u32) -> Self;
}

macro_rules! int_element {
    ($($t:ty => $wide:ty),*) => {$(
        impl Element for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn load(bytes: &[u8]) -> Self {
                <$t>::from_ne_bytes(bytes.try_into().unwrap())
            }
            #[inline(always)]
            fn store(self, bytes: &mut [u8]) {
                bytes.copy_from_slice(&self.to_ne_bytes());
            }
            #[inline(always)]
            fn sum(self, other: Self) -> Self {
                self.wrapping_add(other)
            }
            #[inline(always)]
            fn prod(self, other: Self) -> Self {
                self.wrapping_mul(other)
            }
            #[inline(always)]
            fn min(self, other: Self) -> Self {
                Ord::min(self, other)
            }
            #[inline(always)]
            fn max(self, other: Self) -> Self {
                Ord::max(self, other)
            }
            /// NCCL's `SumPostDiv`: the (wrapped) sum divided by `n` in the element's
            /// signedness, truncating toward zero. Widening first keeps `n` > `T::MAX` right.
            #[inline(always)]
            fn average(self, n: u32) -> Self {
                (<$wide>::from(self) / <$wide>::from(n)) as $t
            }
        }
    )*};
}

int_element!(i8 => i64, u8 => u64, i32 => i64, u32 => u64, i64 => i64, u64 => u64);

macro_rules! float_element {
    ($($t:ty),*) => {$(
        impl Element for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn load(bytes: &[u8]) -> Self {
                <$t>::from_ne_bytes(bytes.try_into().unwrap())
            }
            #[inline(always)]
            fn store(self, bytes: &mut [u8]) {
                bytes.copy_from_slice(&self.to_ne_bytes());
            }
            #[inline(always)]
            fn sum(self, other: Self) -> Self {
                self + other
            }
            #[inline(always)]
            fn prod(self, other: Self) -> Self {
                self * other
            }
            /// Like CUDA's `fminf`: a NaN loses to a number.
            #[inline(always)]
            fn min(self, other: Self) -> Self {
                <$t>::min(self, other)
            }
            #[inline(always)]
            fn max(self, other: Self) -> Self {
                <$t>::max(self, other)
            }
            /// NCCL's scale is `1.0/n` computed in double and rounded to the element type.
            #[inline(always)]
            fn average(self, n: u32) -> Self {
                self * ((1.0 / f64::from(n)) as $t)
            }
        }
    )*};
}

float_element!(f32, f64);

macro_rules! half_element {
    ($($t:ty),*) => {$(
        impl Element for $t {
            const SIZE: usize = 2;
            #[inline(always)]
            fn load(bytes: &[u8]) -> Self {
                <$t>::from_bits(u16::from_ne_bytes(bytes.try_into().unwrap()))
            }
            #[inline(always)]
            fn store(self, bytes: &mut [u8]) {
                bytes.copy_from_slice(&self.to_bits().to_ne_bytes());
            }
            #[inline(always)]
            fn sum(self, other: Self) -> Self {
                <$t>::from_f32(self.to_f32() + other.to_f32())
            }
            #[inline(always)]
            fn prod(self, other: Self) -> Self {
                <$t>::from_f32(self.to_f32() * other.to_f32())
            }
            #[inline(always)]
            fn min(self, other: Self) -> Self {
                <$t>::from_f32(self.to_f32().min(other.to_f32()))
            }
            #[inline(always)]
            fn max(self, other: Self) -> Self {
                <$t>::from_f32(self.to_f32().max(other.to_f32()))
            }
            /// NCCL: `__float2half(float(1.0/n))` (likewise bf16), then a half multiply.
            #[inline(always)]
            fn average(self, n: u32) -> Self {
                let scale = <$t>::from_f32((1.0 / f64::from(n)) as f32);
                <$t>::from_f32(self.to_f32() * scale.to_f32())
            }
        }
    )*};
}

half_element!(f16, bf16);

/// `dst[i] = f(dst[i], src[i])` over whole elements.
#[inline(always)]
fn zip_into<T: Element>(dst: &mut [u8], src: &[u8], f: impl Fn(T, T) -> T) {
    for (d, s) in dst.chunks_exact_mut(T::SIZE).zip(src.chunks_exact(T::SIZE)) {
        f(T::load(d), T::load(s)).store(d);
    }
}

/// `dst[i] = f(a[i], b[i])` over whole elements.
#[inline(always)]
fn zip_pair<T: Element>(dst: &mut [u8], a: &[u8], b: &[u8], f: impl Fn(T, T) -> T) {
    let ab = a.chunks_exact(T::SIZE).zip(b.chunks_exact(T::SIZE));
    for (d, (x, y)) in dst.chunks_exact_mut(T::SIZE).zip(ab) {
        f(T::load(x), T::load(y)).store(d);
    }
}

fn into_typed<T: Element>(op: RedOp, dst: &mut [u8], src: &[u8]) {
    match op {
        RedOp::Sum | RedOp::Avg => zip_into(dst, src, T::sum),
        RedOp::Prod => zip_into(dst, src, T::prod),
        RedOp::Min => zip_into(dst, src, T::min),
        RedOp::Max => zip_into(dst, src, T::max),
    }
}

fn pair_typed<T: Element>(op: RedOp, dst: &mut [u8], a: &[u8], b: &[u8]) {
    match op {
        RedOp::Sum | RedOp::Avg => zip_pair(dst, a, b, T::sum),
        RedOp::Prod => zip_pair(dst, a, b, T::prod),
        RedOp::Min => zip_pair(dst, a, b, T::min),
        RedOp::Max => zip_pair(dst, a, b, T::max),
    }
}

fn avg_typed<T: Element>(buf: &mut [u8], n: u32) {
    for e in buf.chunks_exact_mut(T::SIZE) {
        T::load(e).average(n).store(e);
    }
}

/// Calls `$f::<T>($args)` with `T` the Rust type of `$dtype`.
macro_rules! with_type {
    ($dtype:expr, $f:ident($($arg:expr),*)) => {
        match $dtype {
            DType::F16 => $f::<f16>($($arg),*),
            DType::Bf16 => $f::<bf16>($($arg),*),
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

fn check_len(dtype: DType, what: &str, len: usize, expected: usize) {
    assert!(
        len == expected,
        "{what}: {len} bytes, expected {expected} (same length as dst)"
    );
    assert!(
        len % dtype.size() == 0,
        "{what}: {len} bytes is not a whole number of {dtype} elements"
    );
}

/// `dst = dst (+) src` elementwise. `Avg` accumulates as `Sum`; call [`finish_avg`] once
/// the last contribution is in.
///
/// # Panics
/// If the lengths differ or are not a multiple of `dtype.size()`.
pub fn reduce_into(dtype: DType, op: RedOp, dst: &mut [u8], src: &[u8]) {
    check_len(dtype, "reduce_into src", src.len(), dst.len());
    check_len(dtype, "reduce_into dst", dst.len(), dst.len());
    with_type!(dtype, into_typed(op, dst, src))
}

/// `dst = a (+) b` elementwise, sparing the copy a receive-reduce-send step would need.
/// `Avg` combines as `Sum`.
///
/// # Panics
/// If the lengths differ or are not a multiple of `dtype.size()`.
pub fn reduce_pair(dtype: DType, op: RedOp, dst: &mut [u8], a: &[u8], b: &[u8]) {
    check_len(dtype, "reduce_pair a", a.len(), dst.len());
    check_len(dtype, "reduce_pair b", b.len(), dst.len());
    check_len(dtype, "reduce_pair dst", dst.len(), dst.len());
    with_type!(dtype, pair_typed(op, dst, a, b))
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
    check_len(dtype, "finish_avg buf", buf.len(), buf.len());
    with_type!(dtype, avg_typed(buf, n))
}
