//! Sizes on the command line: `8`, `64K`, `1M`, `1G`, `1T` (powers of 1024), what one
//! comes to for a call (whole elements, whole blocks per rank), and whether this machine
//! has the host memory a run of that size needs, checked before anything is allocated.
//!
//! A size is the bytes of the larger of a rank's send and receive buffers. A call moves
//! whole elements, and for allgather, reduce_scatter and alltoall whole elements per rank,
//! so a size that is not a multiple of that *granule* runs rounded down to one, and a
//! notice on stderr says which size runs; a size smaller than one granule is refused (it
//! would be a call with nothing to do).

use crate::error::CliError;
use braid_ir::Collective;
use braid_runtime::dtype::DType;
use std::num::IntErrorKind;

/// Parses `8`, `64K`, `1M`, `1G`, `1T` (case-insensitive suffix), refusing values that do
/// not fit in 64 bits.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return Err(format!("`{s}`: the suffix must be K, M, G or T")),
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    let too_large = || format!("`{s}` is too large (a size is at most 2^64 - 1 bytes)");
    let n: u64 = num
        .parse()
        .map_err(|e: std::num::ParseIntError| match e.kind() {
            IntErrorKind::PosOverflow => too_large(),
            _ => format!("`{s}` is not a size (examples: 8, 64K, 1M, 1G)"),
        })?;
    n.checked_mul(mult).ok_or_else(too_large)
}

/// A count argument (`--iters`, `-n`, `--channels`) that must be at least 1.
pub fn parse_positive(s: &str) -> Result<u32, String> {
    let n: u32 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a whole number"))?;
    if n == 0 {
        return Err("must be at least 1".into());
    }
    Ok(n)
}

/// A size as the command line writes it: `1T`, `64K`, `1000` (the largest suffix that
/// divides it exactly).
pub fn show(bytes: u64) -> String {
    for (suffix, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        if bytes != 0 && bytes.trailing_zeros() >= shift {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// Bytes as `1.5 GiB`.
pub fn human(bytes: u128) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Bytes of the larger buffer of the smallest call with something to do: one element, or
/// one element per rank for the collectives whose buffers hold one block per rank.
pub fn granule(collective: Collective, n: u32, dtype: DType) -> u64 {
    let e = dtype.size() as u64;
    if collective.has_k() {
        e * u64::from(n.max(1))
    } else {
        e
    }
}

/// What a requested size comes to for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fitted {
    /// NCCL's count (elements per rank block).
    pub count: u64,
    /// Bytes of the larger buffer that the call actually has.
    pub bytes: u64,
}

/// The call `asked` bytes (given as `flag`, for messages) comes to, refusing a size
/// smaller than one granule (exit 2).
pub fn fit(
    flag: &str,
    asked: u64,
    collective: Collective,
    n: u32,
    dtype: DType,
) -> Result<Fitted, CliError> {
    let g = granule(collective, n, dtype);
    let e = dtype.size();
    let t = dtype.name();
    if asked < g {
        return Err(CliError::Usage(if collective.has_k() {
            format!(
                "error: {flag} {asked}: {collective} on {n} ranks needs at least one {t} element \
                 ({e} bytes) per rank, {g} bytes in all; give {flag} {g} or more"
            )
        } else {
            format!(
                "error: {flag} {asked}: one {t} element is {e} bytes, and a call needs at \
                 least one; give {flag} {g} or more"
            )
        }));
    }
    let count = asked / g;
    Ok(Fitted {
        count,
        bytes: count * g,
    })
}

/// The one-line notice for a size that runs rounded down, or `None` when it runs as asked.
pub fn rounding_notice(
    flag: &str,
    asked: u64,
    fitted: &Fitted,
    collective: Collective,
    n: u32,
    dtype: DType,
) -> Option<String> {
    (fitted.bytes != asked).then(|| {
        let g = granule(collective, n, dtype);
        let t = dtype.name();
        let why = if collective.has_k() {
            format!("{collective} on {n} ranks moves whole {t} elements per rank: a multiple of {g} bytes")
        } else {
            format!("a whole number of {t} elements: a multiple of {g} bytes")
        };
        format!(
            "note: {flag} {asked} runs as {} bytes ({why})",
            fitted.bytes
        )
    })
}

/// Host memory (bytes) that `braid run` or `perf` on the host backend needs for one call of
/// `count` on `n` ranks in one process: every rank's input, its expected result, its
/// receive buffer (the larger buffer in place) and, in place, the copy of its result that
/// is compared. The CUDA backend keeps the same inputs and references on the host.
/// Returns `(total, largest single buffer)`; u128, so no size overflows.
pub fn host_need(collective: Collective, n: u32, count: u64, dtype: DType) -> (u128, u128) {
    let (input, output) = buffers(collective, n, count, dtype);
    let largest = input.max(output);
    (u128::from(n) * (input + largest + 2 * output), largest)
}

/// Host memory one process of `braid rank` needs: it generates every rank's input and
/// computes every rank's reference (to check its own), plus its receive buffer.
pub fn rank_need(collective: Collective, n: u32, count: u64, dtype: DType) -> (u128, u128) {
    let (input, output) = buffers(collective, n, count, dtype);
    (
        u128::from(n) * (input + output) + 2 * output,
        input.max(output),
    )
}

/// Bytes of one rank's send and receive buffers.
fn buffers(collective: Collective, n: u32, count: u64, dtype: DType) -> (u128, u128) {
    let block = u128::from(count) * dtype.size() as u128;
    let all = block * u128::from(n);
    match collective {
        Collective::Allreduce | Collective::Broadcast | Collective::Reduce => (block, block),
        Collective::Allgather => (block, all),
        Collective::ReduceScatter => (all, block),
        Collective::Alltoall => (all, all),
    }
}

/// `MemAvailable` of /proc/meminfo, in bytes (None where there is no such file).
pub fn mem_available() -> Option<u128> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available(&text)
}

fn parse_mem_available(meminfo: &str) -> Option<u128> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u128 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Refuses, before anything is allocated, a run whose buffers cannot exist (exit 2: no
/// machine has that much memory) or do not fit in this machine's available memory (exit
/// 3). `what` names the size asked (`--size 1T`), `how` says what needs the memory.
pub fn check_memory(
    what: &str,
    how: &str,
    (need, largest): (u128, u128),
    available: Option<u128>,
) -> Result<(), CliError> {
    // One buffer must be addressable (Rust caps allocations at isize::MAX bytes).
    if largest > isize::MAX as u128 || need > u128::from(u64::MAX) {
        return Err(CliError::Usage(format!(
            "error: {what}: one buffer would be {}, more than any machine can allocate; \
             give a smaller size",
            human(largest)
        )));
    }
    match available {
        Some(avail) if need > avail => Err(CliError::Runtime(format!(
            "error: {what}: {how} needs about {} of host memory, but this machine has {} \
             available (MemAvailable in /proc/meminfo); give a smaller size",
            human(need),
            human(avail)
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_are_powers_of_1024() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        assert!(parse_size("1X").is_err());
        assert!(parse_size("K").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn sizes_past_64_bits_are_refused_not_wrapped() {
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
        assert!(parse_size("18446744073709551616")
            .unwrap_err()
            .contains("too large"));
        assert!(parse_size("16777216T").unwrap_err().contains("too large"));
        assert_eq!(parse_size("16777215T"), Ok(16777215 << 40));
    }

    #[test]
    fn sizes_show_as_written() {
        assert_eq!(show(1 << 40), "1T");
        assert_eq!(show(3 << 10), "3K");
        assert_eq!(show(1000), "1000");
        assert_eq!(show(0), "0");
        for s in ["8", "64K", "1M", "1G", "2T", "1000"] {
            assert_eq!(show(parse_size(s).unwrap()), s);
        }
    }

    #[test]
    fn counts_must_be_positive() {
        assert_eq!(parse_positive("3"), Ok(3));
        assert_eq!(parse_positive("0").unwrap_err(), "must be at least 1");
        assert!(parse_positive("-1").is_err());
    }

    #[test]
    fn sizes_round_down_to_whole_elements_per_rank() {
        let f = fit("--size", 1000, Collective::Allgather, 8, DType::F32).unwrap();
        assert_eq!(
            f,
            Fitted {
                count: 31,
                bytes: 992
            }
        );
        let note = rounding_notice("--size", 1000, &f, Collective::Allgather, 8, DType::F32);
        assert_eq!(
            note.unwrap(),
            "note: --size 1000 runs as 992 bytes (allgather on 8 ranks moves whole f32 \
             elements per rank: a multiple of 32 bytes)"
        );
        let f = fit("--size", 1024, Collective::Allreduce, 8, DType::F32).unwrap();
        assert_eq!(
            f,
            Fitted {
                count: 256,
                bytes: 1024
            }
        );
        assert!(
            rounding_notice("--size", 1024, &f, Collective::Allreduce, 8, DType::F32).is_none()
        );
        let small = fit("--size", 1, Collective::Allreduce, 8, DType::F32).unwrap_err();
        assert_eq!(small.exit_code(), 2);
        assert!(
            small.to_string().contains("give --size 4 or more"),
            "{small}"
        );
        let small = fit("-b", 16, Collective::Alltoall, 8, DType::F32).unwrap_err();
        assert!(small.to_string().contains("give -b 32 or more"), "{small}");
    }

    #[test]
    fn memory_is_checked_before_allocating() {
        // 1 TiB allreduce on 8 ranks: 8 x 4 TiB buffers.
        let need = host_need(Collective::Allreduce, 8, 1 << 38, DType::F32);
        assert_eq!(need, (32 << 40, 1 << 40));
        let e = check_memory("--size 1T", "allreduce", need, Some(16 << 30)).unwrap_err();
        assert_eq!(e.exit_code(), 3);
        assert!(
            e.to_string().contains("32.0 TiB") && e.to_string().contains("16.0 GiB"),
            "{e}"
        );
        assert!(check_memory("--size 1M", "allreduce", (64 << 20, 1 << 20), Some(1 << 30)).is_ok());
        // No machine holds a 16 EiB buffer.
        let huge = host_need(Collective::Alltoall, 8, u64::MAX / 4, DType::F32);
        let e = check_memory("--size 16E", "alltoall", huge, None).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert_eq!(
            parse_mem_available("MemTotal: 10 kB\nMemAvailable:    2048 kB\n"),
            Some(2 << 20)
        );
    }
}
