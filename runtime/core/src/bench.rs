//! Timing collectives the way nccl-tests does, on the host backend: per size, one call
//! checked against the reference, warm-up calls, then several runs of `iters` calls issued
//! back to back on every rank's stream between two stream markers (no waiting between
//! calls); a run's time is the slowest rank's, divided by `iters`; the median run is
//! reported. Optionally also the old host-synchronised time (each call waited for).
//! `braid perf` and the tests use it.

use crate::call::CallSpec;
use crate::comm::{Buffers, Communicator};
use crate::error::{Result, RuntimeError};
use crate::reference::{inputs, reference};
use braid_ir::{Collective, Mode, Protocol};
use braid_plan::Verified;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One size of a sweep.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub spec: CallSpec,
    pub mode: Mode,
    /// Untimed calls after the checked one.
    pub warmup: u32,
    /// Calls per timed run.
    pub iters: u32,
    /// Timed runs (the median is reported).
    pub runs: u32,
    /// Also time `iters` calls each waited for on the host.
    pub sync: bool,
    /// Seed of the generated inputs.
    pub seed: u64,
}

/// What one case measured.
#[derive(Clone, Debug)]
pub struct Measured {
    /// Bytes of the larger buffer of one rank (nccl-tests' size column).
    pub bytes: usize,
    /// Elements wrong on every rank together after the checked call.
    pub wrong: usize,
    /// Time per call of every run (the slowest rank's).
    pub runs: Vec<Duration>,
    /// Host-synchronised time per call, when asked for.
    pub sync: Option<Duration>,
    /// The plan and protocol that served the call.
    pub plan: Arc<Verified>,
    pub protocol: Protocol,
}

impl Measured {
    /// The median run's time per call.
    pub fn time(&self) -> Duration {
        median(&self.runs)
    }
}

/// The median of `v` (the mean of the middle two for an even count).
pub fn median(v: &[Duration]) -> Duration {
    let mut s = v.to_vec();
    s.sort();
    match s.len() {
        0 => Duration::ZERO,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2,
    }
}

/// One rank's buffer for `mode`: out of place the receive buffer (the input is separate),
/// in place the single buffer with the input where NCCL puts it.
pub(crate) fn rank_buffer(spec: &CallSpec, mode: Mode, rank: u32, n: u32, input: &[u8]) -> Vec<u8> {
    let sizes = spec.sizes(rank, n);
    match mode {
        Mode::OutOfPlace => vec![0xAA; sizes.recv.unwrap_or(0)],
        Mode::InPlace => {
            let mut buf = vec![0xAA; sizes.larger];
            let at = if spec.collective == Collective::Allgather {
                spec.in_place_offset(rank)
            } else {
                0
            };
            buf[at..at + input.len()].copy_from_slice(input);
            buf
        }
    }
}

/// Where a rank's result lies in its buffer.
pub(crate) fn result_of<'b>(
    spec: &CallSpec,
    mode: Mode,
    rank: u32,
    n: u32,
    buf: &'b [u8],
) -> &'b [u8] {
    let out = spec.sizes(rank, n).recv.unwrap_or(0);
    match (mode, spec.collective) {
        (Mode::InPlace, Collective::ReduceScatter) => {
            let at = spec.in_place_offset(rank);
            &buf[at..at + out]
        }
        _ => &buf[..out],
    }
}

pub(crate) fn buffers<'b>(mode: Mode, input: &'b [u8], buf: &'b mut [u8]) -> Buffers<'b> {
    match mode {
        Mode::OutOfPlace => Buffers::OutOfPlace {
            send: input,
            recv: buf,
        },
        Mode::InPlace => Buffers::InPlace(buf),
    }
}

/// What one rank measured of a case.
#[derive(Clone, Debug)]
pub struct RankMeasured {
    /// Elements of this rank's result that differ from the reference.
    pub wrong: usize,
    /// Every timed run's whole time (`iters` calls).
    pub runs: Vec<Duration>,
    /// The host-synchronised calls' whole time, when asked for.
    pub sync: Duration,
}

/// Measures `case` on one rank: `comm` is rank `rank` of `n`, `input` its input and
/// `want` its expected result. Every rank of the group must measure the same case at
/// the same time (in threads of one process, or one process per rank).
pub fn measure_rank(
    comm: &Communicator,
    case: &Case,
    input: &[u8],
    want: Option<&[u8]>,
) -> Result<RankMeasured> {
    let spec = &case.spec;
    let (rank, n) = (comm.rank(), comm.n_ranks());
    if case.mode == Mode::InPlace && spec.collective == Collective::Alltoall {
        return Err(RuntimeError::Invalid(
            "alltoall has no in-place mode".into(),
        ));
    }
    let e = spec.dtype.size();
    let mut buf = rank_buffer(spec, case.mode, rank, n, input);
    comm.call(
        spec.collective,
        buffers(case.mode, input, &mut buf),
        spec.count,
        spec.dtype,
        spec.op,
        spec.root,
    )?;
    let wrong = want.map_or(0, |w| {
        let got = result_of(spec, case.mode, rank, n, &buf);
        w.chunks(e)
            .zip(got.chunks(e))
            .filter(|(a, b)| a != b)
            .count()
    });
    if case.warmup > 0 {
        comm.timed(spec, buffers(case.mode, input, &mut buf), case.warmup)?;
    }
    let mut runs = Vec::with_capacity(case.runs as usize);
    for _ in 0..case.runs.max(1) {
        runs.push(comm.timed(spec, buffers(case.mode, input, &mut buf), case.iters)?);
    }
    let mut sync = Duration::ZERO;
    if case.sync {
        let start = Instant::now();
        for _ in 0..case.iters {
            comm.call(
                spec.collective,
                buffers(case.mode, input, &mut buf),
                spec.count,
                spec.dtype,
                spec.op,
                spec.root,
            )?;
        }
        sync = start.elapsed();
    }
    Ok(RankMeasured { wrong, runs, sync })
}

/// The ranks' measurements as one: wrong elements summed, each run the slowest rank's,
/// times per call.
pub fn combine(case: &Case, per_rank: &[RankMeasured]) -> (usize, Vec<Duration>, Option<Duration>) {
    let iters = case.iters.max(1);
    let mut runs = vec![Duration::ZERO; case.runs.max(1) as usize];
    let mut sync = Duration::ZERO;
    let mut wrong = 0;
    for m in per_rank {
        wrong += m.wrong;
        for (slot, t) in runs.iter_mut().zip(&m.runs) {
            *slot = (*slot).max(*t);
        }
        sync = sync.max(m.sync);
    }
    (
        wrong,
        runs.into_iter().map(|t| t / iters).collect(),
        case.sync.then(|| sync / iters),
    )
}

/// Measures `case` on `comms`, every rank of a group living in this process (one thread
/// per rank).
pub fn measure(comms: &[Communicator], case: &Case) -> Result<Measured> {
    let n = comms.len() as u32;
    let spec = &case.spec;
    if case.mode == Mode::InPlace && spec.collective == Collective::Alltoall {
        return Err(RuntimeError::Invalid(
            "alltoall has no in-place mode".into(),
        ));
    }
    let ins = inputs(
        spec.collective,
        spec.dtype,
        spec.op,
        n,
        spec.count,
        case.seed,
    );
    let want = reference(spec.collective, spec.dtype, spec.op, spec.root, &ins);
    let per_rank: Vec<Result<RankMeasured>> = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter()
            .enumerate()
            .map(|(r, comm)| {
                let (input, want) = (&ins[r], &want[r]);
                s.spawn(move || measure_rank(comm, case, input, want.as_deref()))
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(RuntimeError::Invalid("a rank panicked".into())))
            })
            .collect()
    });
    let mut all = Vec::with_capacity(per_rank.len());
    for (r, got) in per_rank.into_iter().enumerate() {
        all.push(got.map_err(|err| match err {
            RuntimeError::Invalid(m) => RuntimeError::Invalid(format!("rank {r}: {m}")),
            other => other,
        })?);
    }
    let (wrong, runs, sync) = combine(case, &all);
    let (plan, protocol) = comms[0]
        .selection(spec, case.mode)?
        .ok_or_else(|| RuntimeError::Invalid("a call of no elements has no plan".into()))?;
    Ok(Measured {
        bytes: spec.sizes(0, n).larger,
        wrong,
        runs,
        sync,
        plan,
        protocol,
    })
}

/// The best rate, in bytes per second, at which this machine copies `bytes` in memory
/// with `threads` copies running at once (each its own `bytes`), over a few repetitions:
/// the host backend's roofline for a path that every link of a call shares.
pub fn copy_rate(bytes: usize, threads: usize) -> f64 {
    let bytes = bytes.max(64);
    let threads = threads.max(1);
    let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..threads)
        .map(|_| (vec![1u8; bytes], vec![0u8; bytes]))
        .collect();
    // Enough repetitions that a small copy is timed over at least ~1 ms.
    let reps = (1 << 20) / bytes + 1;
    let best = best_of_5(|| {
        std::thread::scope(|s| {
            for (src, dst) in pairs.iter_mut() {
                s.spawn(move || {
                    for _ in 0..reps {
                        dst.copy_from_slice(src);
                        std::hint::black_box(&mut *dst);
                    }
                });
            }
        })
    });
    (bytes * threads * reps) as f64 / best
}

/// The shortest of 5 runs of `run`, in seconds.
fn best_of_5(mut run: impl FnMut()) -> f64 {
    (0..5)
        .map(|_| {
            let start = Instant::now();
            run();
            start.elapsed().as_secs_f64()
        })
        .fold(f64::MAX, f64::min)
}

/// What one thread copies per second, in bytes, through `footprint` bytes of memory: half
/// of it copied onto the other half in 256 KiB pieces, over and over, so that the copies
/// stream from the caches where the footprint fits them and from memory where it does
/// not (the cost model's `copy_scale`). The best of 5 timings of at least 64 MiB copied.
pub fn footprint_copy_rate(footprint: usize) -> f64 {
    let half = (footprint / 2).max(64);
    let piece = (256 << 10).min(half);
    let src = vec![1u8; half];
    let mut dst = vec![0u8; half];
    let reps = (64 << 20) / half + 1;
    let best = best_of_5(|| {
        for _ in 0..reps {
            for (s, d) in src.chunks(piece).zip(dst.chunks_mut(piece)) {
                d.copy_from_slice(s);
            }
            std::hint::black_box(&mut dst);
        }
    });
    (half * reps) as f64 / best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_is_the_middle_run() {
        let ms = Duration::from_millis;
        assert_eq!(median(&[ms(5), ms(1), ms(3)]), ms(3));
        assert_eq!(
            median(&[ms(4), ms(1), ms(3), ms(2)]),
            Duration::from_micros(2500)
        );
        assert_eq!(median(&[]), Duration::ZERO);
    }

    #[test]
    fn copying_has_a_positive_finite_rate() {
        let r = copy_rate(1 << 16, 2);
        assert!(r.is_finite() && r > 1e6, "{r}");
    }
}
