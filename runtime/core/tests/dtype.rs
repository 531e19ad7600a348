//! Data types, reduction kernels and the reference: names parse as the CLI and NCCL spell
//! them; every kernel agrees with an independent scalar model (computed in wider
//! arithmetic and rounded once) on random, unaligned data; `avg` follows NCCL; the
//! reference matches hand-computed results; and the fill makes reductions exact in every
//! order.

use braid_ir::Collective;
use braid_runtime::dtype::{DType, RedOp};
use braid_runtime::reduce::{finish_avg, reduce_into, reduce_pair};
use braid_runtime::reference::{fill_input, first_mismatch, reference};
use half::{bf16, f16};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

// ---------------------------------------------------------------------------------------
// Names

#[test]
fn short_and_nccl_names_parse() {
    for d in DType::ALL {
        assert_eq!(d.name().parse::<DType>(), Ok(d));
        assert_eq!(d.nccl_name().parse::<DType>(), Ok(d));
        assert_eq!(d.to_string(), d.name());
    }
    let nccl = [
        ("ncclFloat16", DType::F16),
        ("ncclHalf", DType::F16),
        ("ncclBfloat16", DType::Bf16),
        ("ncclFloat32", DType::F32),
        ("ncclFloat", DType::F32),
        ("ncclFloat64", DType::F64),
        ("ncclDouble", DType::F64),
        ("ncclInt8", DType::I8),
        ("ncclChar", DType::I8),
        ("ncclUint8", DType::U8),
        ("ncclInt32", DType::I32),
        ("ncclInt", DType::I32),
        ("ncclUint32", DType::U32),
        ("ncclInt64", DType::I64),
        ("ncclUint64", DType::U64),
    ];
    for (name, d) in nccl {
        assert_eq!(name.parse::<DType>(), Ok(d), "{name}");
    }
    let short: Vec<_> = DType::ALL.iter().map(|d| d.name()).collect();
    assert_eq!(
        short,
        ["f16", "bf16", "f32", "f64", "i8", "u8", "i32", "u32", "i64", "u64"]
    );
    let sizes: Vec<_> = DType::ALL.iter().map(|d| d.size()).collect();
    assert_eq!(sizes, [2, 2, 4, 8, 1, 1, 4, 4, 8, 8]);
    // ncclDataType_t values (nccl.h).
    let values: Vec<_> = DType::ALL.iter().map(|d| d.nccl_value()).collect();
    assert_eq!(values, [6, 9, 7, 8, 0, 1, 2, 3, 4, 5]);

    for (name, op) in [
        ("sum", RedOp::Sum),
        ("prod", RedOp::Prod),
        ("min", RedOp::Min),
        ("max", RedOp::Max),
        ("avg", RedOp::Avg),
        ("ncclSum", RedOp::Sum),
        ("ncclProd", RedOp::Prod),
        ("ncclMin", RedOp::Min),
        ("ncclMax", RedOp::Max),
        ("ncclAvg", RedOp::Avg),
    ] {
        assert_eq!(name.parse::<RedOp>(), Ok(op), "{name}");
    }
    for op in RedOp::ALL {
        assert_eq!(op.to_string(), op.name());
        assert_eq!(op.nccl_name().parse::<RedOp>(), Ok(op));
    }
    // ncclRedOp_t values: max (2) comes before min (3).
    let values: Vec<_> = RedOp::ALL.iter().map(|o| o.nccl_value()).collect();
    assert_eq!(values, [0, 1, 3, 2, 4]);
}

#[test]
fn unknown_names_are_refused_with_the_valid_ones_listed() {
    for bad in [
        "F32",
        "float",
        "ncclfloat16",
        "NCCLFLOAT",
        "ncclFloat8e4m3",
        "f 32",
        "",
    ] {
        let err = bad.parse::<DType>().unwrap_err().to_string();
        for d in DType::ALL {
            assert!(
                err.contains(d.name()) && err.contains(d.nccl_name()),
                "{err}"
            );
        }
        assert!(
            err.contains("ncclHalf") && err.contains(&format!("'{bad}'")),
            "{err}"
        );
    }
    for bad in ["Sum", "ncclsum", "mean", "ncclPreMulSum"] {
        let err = bad.parse::<RedOp>().unwrap_err().to_string();
        for op in RedOp::ALL {
            assert!(
                err.contains(op.name()) && err.contains(op.nccl_name()),
                "{err}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// An independent scalar model of every (type, op)

/// Rounds `x` to nearest-even in a binary format with `p` significand bits, minimum
/// normal exponent `emin` and largest finite value `max`. Written from the definition,
/// with no shared code with the kernels' conversions.
fn round_to_format(x: f64, p: i32, emin: i32, max: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let exp = ((x.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    let ulp = 2f64.powi(exp.max(emin) - (p - 1));
    let y = (x / ulp).round_ties_even() * ulp;
    if y.abs() > max {
        f64::INFINITY.copysign(x)
    } else {
        y
    }
}

fn round_f16(x: f64) -> f16 {
    f16::from_f64(round_to_format(x, 11, -14, 65504.0))
}

fn round_bf16(x: f64) -> bf16 {
    bf16::from_f64(round_to_format(x, 8, -126, bf16::MAX.to_f64()))
}

trait Model: Copy + std::fmt::Debug {
    const DTYPE: DType;
    fn read(b: &[u8]) -> Self;
    fn write(self, out: &mut Vec<u8>);
    /// Random bits, excluding NaN, infinities and `-0.0` (whose `min`/`max` against
    /// `+0.0` is unspecified).
    fn random(rng: &mut StdRng) -> Self;
    fn combine(op: RedOp, a: Self, b: Self) -> Self;
    fn average(self, n: u32) -> Self;
}

macro_rules! int_model {
    ($($t:ty, $d:expr, $wide:ty);*) => {$(
        impl Model for $t {
            const DTYPE: DType = $d;
            fn read(b: &[u8]) -> Self {
                <$t>::from_ne_bytes(b.try_into().unwrap())
            }
            fn write(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_ne_bytes());
            }
            fn random(rng: &mut StdRng) -> Self {
                rng.gen()
            }
            fn combine(op: RedOp, a: Self, b: Self) -> Self {
                let (x, y) = (<$wide>::from(a), <$wide>::from(b));
                match op {
                    RedOp::Sum | RedOp::Avg => (x + y) as $t,
                    RedOp::Prod => (x * y) as $t,
                    RedOp::Min => if y < x { b } else { a },
                    RedOp::Max => if y > x { b } else { a },
                }
            }
            fn average(self, n: u32) -> Self {
                (<$wide>::from(self) / <$wide>::from(n)) as $t
            }
        }
    )*};
}

int_model!(
    i8, DType::I8, i128; u8, DType::U8, u128; i32, DType::I32, i128;
    u32, DType::U32, u128; i64, DType::I64, i128; u64, DType::U64, u128
);

/// Floats are modelled in `f64`, where the sum and product of two elements are exact (or,
/// for far-apart bf16 sums, rounded with enough spare bits that rounding again is
/// harmless), then rounded once to the element type.
macro_rules! float_model {
    ($($t:ty, $d:expr, $from_bits:expr, $to_f64:expr, $round:expr, $scale:expr);*) => {$(
        impl Model for $t {
            const DTYPE: DType = $d;
            fn read(b: &[u8]) -> Self {
                <$t>::from_ne_bytes(b.try_into().unwrap())
            }
            fn write(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_ne_bytes());
            }
            fn random(rng: &mut StdRng) -> Self {
                loop {
                    let v: $t = $from_bits(rng);
                    if v == <$t>::from_f64(0.0) {
                        return <$t>::from_f64(0.0);
                    }
                    if $to_f64(v).is_finite() {
                        return v;
                    }
                }
            }
            fn combine(op: RedOp, a: Self, b: Self) -> Self {
                let (x, y) = ($to_f64(a), $to_f64(b));
                match op {
                    RedOp::Sum | RedOp::Avg => $round(x + y),
                    RedOp::Prod => $round(x * y),
                    RedOp::Min => if y < x { b } else { a },
                    RedOp::Max => if y > x { b } else { a },
                }
            }
            /// NCCL's scale: `1.0/n` in double, rounded to the element type (halves: via
            /// float, as `__float2half(float(1.0/n))`).
            fn average(self, n: u32) -> Self {
                let scale: f64 = $scale(1.0 / f64::from(n));
                $round($to_f64(self) * scale)
            }
        }
    )*};
}

trait FromF64 {
    fn from_f64(v: f64) -> Self;
}
impl FromF64 for f32 {
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}
impl FromF64 for f64 {
    fn from_f64(v: f64) -> Self {
        v
    }
}

float_model!(
    f16, DType::F16, |r: &mut StdRng| f16::from_bits(r.gen()), |v: f16| v.to_f64(),
        round_f16, |s: f64| round_f16(f64::from(s as f32)).to_f64();
    bf16, DType::Bf16, |r: &mut StdRng| bf16::from_bits(r.gen()), |v: bf16| v.to_f64(),
        round_bf16, |s: f64| round_bf16(f64::from(s as f32)).to_f64();
    f32, DType::F32, |r: &mut StdRng| f32::from_bits(r.gen()), f64::from,
        |x: f64| x as f32, |s: f64| f64::from(s as f32);
    f64, DType::F64, |r: &mut StdRng| f64::from_bits(r.gen()), |v: f64| v,
        |x: f64| x, |s: f64| s
);

fn random_elems<T: Model>(rng: &mut StdRng, n: usize) -> Vec<T> {
    (0..n).map(|_| T::random(rng)).collect()
}

fn to_bytes<T: Model>(v: &[T]) -> Vec<u8> {
    let mut out = Vec::new();
    v.iter().for_each(|x| x.write(&mut out));
    out
}

/// Copies `bytes` into a fresh buffer at byte offset `offset`, so the kernels see a slice
/// that is misaligned for the element type.
fn placed(bytes: &[u8], offset: usize) -> Vec<u8> {
    let mut buf = vec![0xa5; offset];
    buf.extend_from_slice(bytes);
    buf.extend_from_slice(&[0x5a; 3]);
    buf
}

fn assert_bytes_eq(dtype: DType, what: &str, expected: &[u8], actual: &[u8]) {
    if let Some((i, e, a)) = first_mismatch(dtype, expected, actual) {
        panic!("{what}: element {i}: expected {e}, got {a}");
    }
}

fn check_kernels<T: Model>(seed: u64) {
    let dtype = T::DTYPE;
    let size = dtype.size();
    let mut rng = StdRng::seed_from_u64(seed);
    for count in [0, 1, 7, 33, 1000] {
        for op in RedOp::ALL {
            let a: Vec<T> = random_elems(&mut rng, count);
            let b: Vec<T> = random_elems(&mut rng, count);
            let expected: Vec<T> = a
                .iter()
                .zip(&b)
                .map(|(&x, &y)| T::combine(op, x, y))
                .collect();
            let expected = to_bytes(&expected);
            let (ab, bb) = (to_bytes(&a), to_bytes(&b));
            let len = count * size;
            for (oa, ob) in [(0, 0), (1, 0), (0, 3), (size + 1, 1), (3, 5)] {
                let what = format!("{dtype} {op} n={count} offsets {oa},{ob}");
                let mut dst = placed(&ab, oa);
                let src = placed(&bb, ob);
                reduce_into(dtype, op, &mut dst[oa..oa + len], &src[ob..ob + len]);
                assert_bytes_eq(
                    dtype,
                    &format!("reduce_into {what}"),
                    &expected,
                    &dst[oa..oa + len],
                );
                assert_eq!(dst[..oa], vec![0xa5; oa], "{what}: wrote before the slice");
                assert_eq!(dst[oa + len..], [0x5a; 3], "{what}: wrote past the slice");

                let (x, y) = (placed(&ab, ob), placed(&bb, oa));
                let mut out = placed(&vec![0; len], oa);
                reduce_pair(
                    dtype,
                    op,
                    &mut out[oa..oa + len],
                    &x[ob..ob + len],
                    &y[oa..oa + len],
                );
                assert_bytes_eq(
                    dtype,
                    &format!("reduce_pair {what}"),
                    &expected,
                    &out[oa..oa + len],
                );
                assert_eq!(out[oa + len..], [0x5a; 3], "{what}: wrote past the slice");
            }
        }
        for n in [
            1,
            2,
            3,
            7,
            8,
            16,
            100,
            255,
            256,
            1000,
            65535,
            1 << 31,
            u32::MAX,
        ] {
            let a: Vec<T> = random_elems(&mut rng, count);
            let expected: Vec<T> = a
                .iter()
                .map(|&x| if n == 1 { x } else { x.average(n) })
                .collect();
            let mut buf = placed(&to_bytes(&a), 1);
            finish_avg(dtype, &mut buf[1..1 + count * size], n);
            let what = format!("finish_avg {dtype} n={n}");
            assert_bytes_eq(
                dtype,
                &what,
                &to_bytes(&expected),
                &buf[1..1 + count * size],
            );
        }
    }
}

#[test]
fn kernels_agree_with_the_scalar_model_on_unaligned_random_data() {
    check_kernels::<f16>(1);
    check_kernels::<bf16>(2);
    check_kernels::<f32>(3);
    check_kernels::<f64>(4);
    check_kernels::<i8>(5);
    check_kernels::<u8>(6);
    check_kernels::<i32>(7);
    check_kernels::<u32>(8);
    check_kernels::<i64>(9);
    check_kernels::<u64>(10);
}

/// Every finite half against a spread of partners: covers each exponent, subnormals,
/// overflow to infinity and every rounding position of the f32 -> half conversion.
fn exhaustive_half<T: Model + Plain>() {
    let all: Vec<u8> = (0..=u16::MAX).flat_map(|b| b.to_ne_bytes()).collect();
    let xs: Vec<T> = all
        .chunks_exact(2)
        .map(T::read)
        .filter(|x| x.plain())
        .collect();
    let mut rng = StdRng::seed_from_u64(11);
    let partners: Vec<T> = random_elems(&mut rng, 12);
    let xb = to_bytes(&xs);
    for op in [RedOp::Sum, RedOp::Prod, RedOp::Min] {
        for &y in &partners {
            let expected: Vec<T> = xs.iter().map(|&x| T::combine(op, x, y)).collect();
            let mut dst = xb.clone();
            reduce_into(T::DTYPE, op, &mut dst, &to_bytes(&vec![y; xs.len()]));
            let what = format!("{} {op} with {y:?}", T::DTYPE);
            assert_bytes_eq(T::DTYPE, &what, &to_bytes(&expected), &dst);
        }
    }
}

/// Finite and not `-0.0`: the values whose results the model pins down.
trait Plain {
    fn plain(&self) -> bool;
}
impl Plain for f16 {
    fn plain(&self) -> bool {
        self.is_finite() && self.to_bits() != 0x8000
    }
}
impl Plain for bf16 {
    fn plain(&self) -> bool {
        self.is_finite() && self.to_bits() != 0x8000
    }
}

#[test]
fn half_types_round_like_native_half_arithmetic_exhaustively() {
    exhaustive_half::<f16>();
    exhaustive_half::<bf16>();
}

#[test]
fn nan_and_infinity_survive_the_half_types() {
    for (dtype, nan, inf, max) in [
        (
            DType::F16,
            f16::NAN.to_bits(),
            f16::INFINITY.to_bits(),
            f16::MAX.to_bits(),
        ),
        (
            DType::Bf16,
            bf16::NAN.to_bits(),
            bf16::INFINITY.to_bits(),
            bf16::MAX.to_bits(),
        ),
    ] {
        let bytes = |v: &[u16]| -> Vec<u8> { v.iter().flat_map(|x| x.to_ne_bytes()).collect() };
        let mut dst = bytes(&[nan, inf, max, inf]);
        reduce_into(
            dtype,
            RedOp::Sum,
            &mut dst,
            &bytes(&[0, 0, max, inf | 0x8000]),
        );
        let out: Vec<u16> = dst
            .chunks_exact(2)
            .map(|c| u16::from_ne_bytes([c[0], c[1]]))
            .collect();
        let is_nan = |b: u16| b & 0x7fff > inf;
        assert!(is_nan(out[0]), "{dtype}: NaN + 0 = {:#x}", out[0]);
        assert_eq!(out[1], inf, "{dtype}: inf + 0");
        assert_eq!(out[2], inf, "{dtype}: max + max overflows to inf");
        assert!(is_nan(out[3]), "{dtype}: inf + -inf = {:#x}", out[3]);
    }
}

// ---------------------------------------------------------------------------------------
// avg, as NCCL defines it

fn avg_of<T: Model>(values: &[T], n: u32) -> Vec<T> {
    let mut buf = to_bytes(values);
    finish_avg(T::DTYPE, &mut buf, n);
    buf.chunks_exact(T::DTYPE.size()).map(T::read).collect()
}

#[test]
fn integer_avg_truncates_the_wrapped_sum_toward_zero() {
    assert_eq!(
        avg_of(&[-7i32, 7, i32::MIN, i32::MAX], 2),
        [-3, 3, i32::MIN / 2, i32::MAX / 2]
    );
    assert_eq!(avg_of(&[-128i8, 127, -1], 3), [-42, 42, 0]);
    assert_eq!(avg_of(&[-128i8, 127], 256), [0, 0]);
    assert_eq!(
        avg_of(&[i64::MIN, -5, u32::MAX as i64 * 3], 3),
        [i64::MIN / 3, -1, u32::MAX as i64]
    );
    assert_eq!(
        avg_of(&[u64::MAX, 1 << 40], 7),
        [u64::MAX / 7, (1 << 40) / 7]
    );
    assert_eq!(avg_of(&[u32::MAX, 5], u32::MAX), [1, 0]);

    // The average of 250 and 10 over u8 is taken of the wrapped sum, 4, as NCCL does.
    let mut acc = vec![250u8];
    reduce_into(DType::U8, RedOp::Avg, &mut acc, &[10]);
    finish_avg(DType::U8, &mut acc, 2);
    assert_eq!(acc, [2]);
}

#[test]
fn float_avg_multiplies_by_the_reciprocal_rounded_to_the_element_type() {
    // f16(1/3) = 0.333251953125: 2047 * that = 682.17 -> 682, where 2047/3 would give 682.5.
    assert_eq!(avg_of(&[f16::from_f32(2047.0)], 3), [f16::from_f32(682.0)]);
    // bf16(1/3) = 0.333984375: 254 * that = 84.83 -> 85, where 254/3 would give 84.5.
    assert_eq!(avg_of(&[bf16::from_f32(254.0)], 3), [bf16::from_f32(85.0)]);
    let third = (1.0f64 / 3.0) as f32;
    assert_eq!(
        avg_of(&[3.0f32, 1.0, 7.0], 3),
        [3.0 * third, third, 7.0 * third]
    );
    assert_eq!(avg_of(&[3.0f64, 1.0], 3), [3.0 * (1.0 / 3.0), 1.0 / 3.0]);
    assert_eq!(avg_of(&[-6.5f32, 0.0], 1), [-6.5, 0.0]);
    assert_eq!(avg_of(&[24.0f32], 8), [3.0]);
}

// ---------------------------------------------------------------------------------------
// The reference, against hand-computed results (3 ranks, i32)

fn i32s(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

fn outputs(out: Vec<Option<Vec<u8>>>) -> Vec<Option<Vec<i32>>> {
    out.into_iter()
        .map(|o| {
            o.map(|b| {
                b.chunks_exact(4)
                    .map(|c| i32::from_ne_bytes(c.try_into().unwrap()))
                    .collect()
            })
        })
        .collect()
}

/// `in[r][j] = 10 r + j`, 6 elements per rank.
fn six_per_rank() -> Vec<Vec<u8>> {
    (0..3)
        .map(|r| i32s(&(0..6).map(|j| 10 * r + j).collect::<Vec<_>>()))
        .collect()
}

#[test]
fn reference_reducing_collectives() {
    let ins = six_per_rank();
    let sums = vec![30, 33, 36, 39, 42, 45];
    let all = |v: Vec<i32>| vec![Some(v); 3];
    let refr = |c, op, root| outputs(reference(c, DType::I32, op, root, &ins));
    assert_eq!(
        refr(Collective::Allreduce, RedOp::Sum, None),
        all(sums.clone())
    );
    assert_eq!(
        refr(Collective::Allreduce, RedOp::Avg, None),
        all(vec![10, 11, 12, 13, 14, 15])
    );
    assert_eq!(
        refr(Collective::Allreduce, RedOp::Min, None),
        all(vec![0, 1, 2, 3, 4, 5])
    );
    assert_eq!(
        refr(Collective::Allreduce, RedOp::Max, None),
        all(vec![20, 21, 22, 23, 24, 25])
    );
    let prods = (0..6).map(|j| j * (10 + j) * (20 + j)).collect();
    assert_eq!(
        refr(Collective::Reduce, RedOp::Prod, Some(1)),
        vec![None, Some(prods), None]
    );
    assert_eq!(
        refr(Collective::Reduce, RedOp::Sum, Some(0)),
        vec![Some(sums), None, None]
    );
    assert_eq!(
        refr(Collective::ReduceScatter, RedOp::Sum, None),
        vec![Some(vec![30, 33]), Some(vec![36, 39]), Some(vec![42, 45])]
    );
    assert_eq!(
        refr(Collective::ReduceScatter, RedOp::Max, None),
        vec![Some(vec![20, 21]), Some(vec![22, 23]), Some(vec![24, 25])]
    );
}

#[test]
fn reference_data_movement_collectives() {
    let ins = six_per_rank();
    assert_eq!(
        outputs(reference(
            Collective::Alltoall,
            DType::I32,
            RedOp::Sum,
            None,
            &ins
        )),
        vec![
            Some(vec![0, 1, 10, 11, 20, 21]),
            Some(vec![2, 3, 12, 13, 22, 23]),
            Some(vec![4, 5, 14, 15, 24, 25]),
        ]
    );
    let two: Vec<Vec<u8>> = (0..3).map(|r| i32s(&[10 * r, 10 * r + 1])).collect();
    assert_eq!(
        outputs(reference(
            Collective::Allgather,
            DType::I32,
            RedOp::Sum,
            None,
            &two
        )),
        vec![Some(vec![0, 1, 10, 11, 20, 21]); 3]
    );
    // Only the root's send buffer matters for broadcast.
    let root_only = vec![Vec::new(), Vec::new(), i32s(&[7, 8, 9])];
    assert_eq!(
        outputs(reference(
            Collective::Broadcast,
            DType::I32,
            RedOp::Sum,
            Some(2),
            &root_only
        )),
        vec![Some(vec![7, 8, 9]); 3]
    );
}

#[test]
fn reference_float_avg_and_single_rank() {
    let ins: Vec<Vec<u8>> = [[1.0f32, -2.0], [2.0, 4.0], [3.0, 0.5], [6.0, 1.5]]
        .iter()
        .map(|v| v.iter().flat_map(|x| x.to_ne_bytes()).collect())
        .collect();
    let out = reference(Collective::Allreduce, DType::F32, RedOp::Avg, None, &ins);
    let want: Vec<u8> = [3.0f32, 1.0].iter().flat_map(|x| x.to_ne_bytes()).collect();
    assert_eq!(out, vec![Some(want); 4]);
    let one = vec![i32s(&[5, -5])];
    for c in Collective::ALL {
        let root = matches!(c, Collective::Broadcast | Collective::Reduce).then_some(0);
        assert_eq!(
            reference(c, DType::I32, RedOp::Avg, root, &one),
            vec![Some(i32s(&[5, -5]))],
            "{c:?}"
        );
    }
}

#[test]
#[should_panic(expected = "needs a root")]
fn reference_rooted_collective_without_root_panics() {
    reference(
        Collective::Reduce,
        DType::I32,
        RedOp::Sum,
        None,
        &six_per_rank(),
    );
}

#[test]
#[should_panic(expected = "do not split")]
fn reference_reduce_scatter_needs_whole_blocks() {
    reference(
        Collective::ReduceScatter,
        DType::I32,
        RedOp::Sum,
        None,
        &[i32s(&[1, 2, 3]), i32s(&[1, 2, 3])],
    );
}

// ---------------------------------------------------------------------------------------
// first_mismatch

#[test]
fn first_mismatch_names_the_element_and_both_values() {
    let a = i32s(&[1, 2, 3, 4]);
    assert_eq!(first_mismatch(DType::I32, &a, &a), None);
    let b = i32s(&[1, 2, -3, 5]);
    assert_eq!(
        first_mismatch(DType::I32, &a, &b),
        Some((2, "3".into(), "-3".into()))
    );
    let (z, nz) = (0.0f32.to_ne_bytes(), (-0.0f32).to_ne_bytes());
    let (i, e, g) = first_mismatch(DType::F32, &z, &nz).unwrap();
    assert_eq!(
        (i, e.as_str(), g.as_str()),
        (0, "0.0 (0x00000000)", "-0.0 (0x80000000)")
    );
    let h = |v: f32| f16::from_f32(v).to_ne_bytes().to_vec();
    let (_, e, g) = first_mismatch(DType::F16, &h(1.5), &h(2.0)).unwrap();
    assert_eq!((e.as_str(), g.as_str()), ("1.5 (0x3e00)", "2.0 (0x4000)"));
    assert_eq!(
        first_mismatch(DType::I32, &a, &a[..8]),
        Some((2, "3".into(), "<missing>".into()))
    );
    assert_eq!(
        first_mismatch(DType::U8, &[], &[7]),
        Some((0, "<missing>".into(), "7".into()))
    );
}

// ---------------------------------------------------------------------------------------
// fill_input: exact and order-independent

fn filled(dtype: DType, op: RedOp, n: u32, seed: u64, count: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|r| {
            let mut buf = vec![0; count * dtype.size()];
            fill_input(dtype, op, r, n, seed, &mut buf);
            buf
        })
        .collect()
}

fn as_f64(dtype: DType, b: &[u8]) -> f64 {
    match dtype {
        DType::F16 => f16::from_ne_bytes(b.try_into().unwrap()).to_f64(),
        DType::Bf16 => bf16::from_ne_bytes(b.try_into().unwrap()).to_f64(),
        DType::F32 => f64::from(f32::from_ne_bytes(b.try_into().unwrap())),
        DType::F64 => f64::from_ne_bytes(b.try_into().unwrap()),
        _ => unreachable!(),
    }
}

/// The reduction of `inputs` taken in `order`, one contribution at a time.
fn sequential(dtype: DType, op: RedOp, inputs: &[Vec<u8>], order: &[usize]) -> Vec<u8> {
    let mut acc = inputs[order[0]].clone();
    for &r in &order[1..] {
        reduce_into(dtype, op, &mut acc, &inputs[r]);
    }
    acc
}

/// The reduction as a tree: pairs combined with `reduce_pair`, then pairs of pairs.
fn tree(dtype: DType, op: RedOp, inputs: &[Vec<u8>]) -> Vec<u8> {
    let mut level: Vec<Vec<u8>> = inputs.to_vec();
    while level.len() > 1 {
        level = level
            .chunks(2)
            .map(|p| match p {
                [a, b] => {
                    let mut out = vec![0; a.len()];
                    reduce_pair(dtype, op, &mut out, a, b);
                    out
                }
                [a] => a.clone(),
                _ => unreachable!(),
            })
            .collect();
    }
    level.pop().unwrap()
}

#[test]
fn fill_gives_exact_order_independent_reductions_up_to_16_ranks() {
    let count = 97;
    let mut rng = StdRng::seed_from_u64(99);
    for dtype in DType::ALL {
        for op in RedOp::ALL {
            for n in [1u32, 2, 3, 4, 5, 7, 8, 11, 13, 16] {
                let seed = 0x5eed + u64::from(n);
                let inputs = filled(dtype, op, n, seed, count);
                let expected = reference(Collective::Allreduce, dtype, op, None, &inputs)[0]
                    .clone()
                    .unwrap();
                let mut shuffled: Vec<usize> = (0..n as usize).collect();
                shuffled.shuffle(&mut rng);
                let reversed: Vec<usize> = (0..n as usize).rev().collect();
                let mut orders = vec![
                    ("reversed", sequential(dtype, op, &inputs, &reversed)),
                    ("shuffled", sequential(dtype, op, &inputs, &shuffled)),
                    ("tree", tree(dtype, op, &inputs)),
                ];
                if op == RedOp::Avg {
                    orders.iter_mut().for_each(|(_, b)| finish_avg(dtype, b, n));
                }
                for (how, got) in &orders {
                    let what = format!("{dtype} {op} n={n} {how}");
                    assert_bytes_eq(dtype, &what, &expected, got);
                }
                if dtype.is_float() && op != RedOp::Avg {
                    check_exact(dtype, op, &inputs, &expected, n);
                }
            }
        }
    }
}

/// The float result equals the mathematically exact reduction (computed in `f64`, where
/// the fill's values and all their partial results are exact too).
fn check_exact(dtype: DType, op: RedOp, inputs: &[Vec<u8>], result: &[u8], n: u32) {
    let size = dtype.size();
    let mut distinct = std::collections::BTreeSet::new();
    for (i, got) in result.chunks_exact(size).enumerate() {
        let vals = inputs
            .iter()
            .map(|b| as_f64(dtype, &b[i * size..(i + 1) * size]));
        let exact = match op {
            RedOp::Sum => vals.sum(),
            RedOp::Prod => vals.product(),
            RedOp::Min => vals.fold(f64::INFINITY, f64::min),
            RedOp::Max => vals.fold(f64::NEG_INFINITY, f64::max),
            RedOp::Avg => unreachable!(),
        };
        assert_eq!(
            as_f64(dtype, got),
            exact,
            "{dtype} {op} n={n} element {i} is not exact"
        );
        distinct.insert(exact.to_bits());
    }
    // The values exercise the type, rather than collapsing to a handful of results.
    assert!(
        distinct.len() >= 6,
        "{dtype} {op} n={n}: only {} distinct results",
        distinct.len()
    );
}

#[test]
fn fill_is_deterministic_and_differs_by_rank_and_seed() {
    for dtype in DType::ALL {
        for op in RedOp::ALL {
            let a = filled(dtype, op, 4, 1, 64);
            assert_eq!(a, filled(dtype, op, 4, 1, 64), "{dtype} {op}");
            assert_ne!(a, filled(dtype, op, 4, 2, 64), "{dtype} {op}: seed ignored");
            assert_ne!(a[0], a[1], "{dtype} {op}: ranks equal");
            // A prefix of a longer buffer is the same data: element i depends only on i.
            let long = filled(dtype, op, 4, 1, 100);
            assert_eq!(a[3][..], long[3][..a[3].len()], "{dtype} {op}");
        }
    }
}

#[test]
fn integer_prod_fill_does_not_collapse_to_zero() {
    for dtype in [DType::I8, DType::U8, DType::I32, DType::U64] {
        let inputs = filled(dtype, RedOp::Prod, 16, 3, 50);
        let out = reference(Collective::Allreduce, dtype, RedOp::Prod, None, &inputs)[0]
            .clone()
            .unwrap();
        for e in out.chunks_exact(dtype.size()) {
            let v = match e.len() {
                1 => u64::from(e[0]),
                4 => u64::from(u32::from_ne_bytes(e.try_into().unwrap())),
                _ => u64::from_ne_bytes(e.try_into().unwrap()),
            };
            assert_eq!(v & 1, 1, "{dtype}: a product of odd values is odd");
        }
    }
}
