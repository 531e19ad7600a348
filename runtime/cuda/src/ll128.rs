//! LL128's stress test and the rule that uses it. LL128 (docs/cuda.md, Protocols) puts a
//! slice's flag in the last 8 bytes of every 128-byte line and trusts that a reader who
//! sees the flag sees the line's other 120 bytes too: true only where a warp's 128-byte
//! store reaches the reader whole, which nothing in CUDA promises and which depends on
//! the link. So LL128 runs on a kind of link only after this test, run on that link, saw
//! no torn line ([`braid_cost::Ll128Verdict`]); `braid tune` runs it and keeps the
//! verdicts in the profile, and a communicator uses LL128 only where every link its ranks
//! use has a passed verdict (all ranks agreeing).

use crate::compile;
use crate::device::{enable_peer, DeviceAlloc};
use crate::error::{CudaError, Result};
use crate::modules::arch;
use braid_cost::{LinkKind, Ll128Verdict};
use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use std::sync::Arc;

/// The test kernel's source (NVRTC, like the collectives' kernels).
pub const STRESS_SOURCE: &str = include_str!("../../../kernels_templates/ll128_stress.cu");
const STRESS_ENTRY: &str = "braid_ll128_stress";
const THREADS: u32 = 256;
/// Blocks writing and blocks reading.
const WRITERS: u32 = 4;
const READERS: u32 = 4;
/// How long readers watch their lines before they call the ones that never showed the
/// last round stalled, and writers wait for the readers to start.
const TIMEOUT_NS: u64 = 10_000_000_000;
/// Line groups one reader warp watches at most (`BRAID_LL128_MAX_GROUPS`).
const MAX_GROUPS: u64 = 64;
/// Lines the test takes at most: every reader warp's groups, four lines each.
pub const MAX_LINES: u64 = READERS as u64 * (THREADS as u64 / 32) * 4 * MAX_GROUPS;

/// How hard the test pushes.
#[derive(Clone, Copy, Debug)]
pub struct Stress {
    /// 128-byte lines (a multiple of 4: a warp's store covers 4).
    pub lines: u64,
    /// Rounds written into every line.
    pub rounds: u64,
    /// The control: writers store each line's flag, then its data with a second
    /// instruction, so that a working test must see torn lines.
    pub split: bool,
}

impl Default for Stress {
    /// 4096 lines (512 KiB) x 16,000 rounds: some tens of milliseconds on an H200, long
    /// enough for each reader warp, polling its 32 groups of lines in turn, to see every
    /// line change well over the 16 times a verdict needs.
    fn default() -> Self {
        Stress {
            lines: 4096,
            rounds: 16_000,
            split: false,
        }
    }
}

/// Runs the test with writers on GPU `writer` storing into GPU `reader`'s memory and
/// readers on `reader` (the same GPU: one launch, writers and readers on different SMs).
pub fn stress(writer: usize, reader: usize, how: Stress) -> Result<Ll128Verdict> {
    if how.lines == 0 || how.lines % 4 != 0 || how.lines > MAX_LINES || how.rounds == 0 {
        return Err(CudaError::Invalid(format!(
            "LL128 stress test: {} lines (a positive multiple of 4, at most {MAX_LINES}) and \
             {} rounds (positive)",
            how.lines, how.rounds
        )));
    }
    let rc = CudaContext::new(reader)?;
    let wc = if writer == reader {
        rc.clone()
    } else {
        let w = CudaContext::new(writer)?;
        enable_peer(&w, &rc)?;
        w
    };
    let lines = DeviceAlloc::new(&rc, how.lines as usize * 128, 0)?;
    let ctl = DeviceAlloc::new(&rc, 8 * 8, 0)?;
    // Writers on another GPU wait until every reader block started (ctl[5]).
    rc.bind_to_thread()?;
    let readers_word = (READERS as u64).to_le_bytes();
    // SAFETY: `ctl` holds 8 words; word 5 is written from host memory that outlives the
    // synchronous copy.
    unsafe {
        cudarc::driver::sys::cuMemcpyHtoD_v2(
            ctl.ptr() + 40,
            readers_word.as_ptr().cast(),
            readers_word.len(),
        )
    }
    .result()?;
    let load = |ctx: &Arc<CudaContext>| -> Result<_> {
        let cubin = compile::compile(STRESS_SOURCE, &arch(ctx)?)?.cubin;
        let module = ctx.load_module(Ptx::from_binary(cubin))?;
        let f = module.load_function(STRESS_ENTRY)?;
        Ok((f, module))
    };
    let cfg = |blocks: u32| LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let (lp, cp) = (lines.ptr(), ctl.ptr());
    let (n, rounds, timeout) = (how.lines, how.rounds, TIMEOUT_NS);
    let split = if how.split { 4u32 } else { 0 };
    if writer == reader {
        let (f, _m) = load(&rc)?;
        let stream = rc.new_stream()?;
        let (w, role) = (WRITERS, split);
        let mut l = stream.launch_builder(&f);
        l.arg(&lp)
            .arg(&n)
            .arg(&rounds)
            .arg(&w)
            .arg(&role)
            .arg(&timeout)
            .arg(&cp);
        // SAFETY: the kernel touches `lines` (n x 128 bytes) and 8 words of `ctl`, both
        // live until the synchronisation below; its blocks (8 of 256 threads) are
        // resident at once on any GPU, so writers and readers overlap.
        unsafe { l.launch(cfg(WRITERS + READERS)) }?;
        stream.synchronize()?;
    } else {
        let (fr, _mr) = load(&rc)?;
        let (fw, _mw) = load(&wc)?;
        let rs = rc.new_stream()?;
        let ws = wc.new_stream()?;
        let (zero, read_role, write_role) = (0u32, 2u32, 1u32 | split);
        let mut l = rs.launch_builder(&fr);
        l.arg(&lp)
            .arg(&n)
            .arg(&rounds)
            .arg(&zero)
            .arg(&read_role)
            .arg(&timeout)
            .arg(&cp);
        // SAFETY: as above; the readers run on the GPU that holds both allocations.
        unsafe { l.launch(cfg(READERS)) }?;
        let mut l = ws.launch_builder(&fw);
        l.arg(&lp)
            .arg(&n)
            .arg(&rounds)
            .arg(&zero)
            .arg(&write_role)
            .arg(&timeout)
            .arg(&cp);
        // SAFETY: the writers store into the reader GPU's allocations through peer
        // access (enabled above); both stay live until both streams are done.
        unsafe { l.launch(cfg(WRITERS)) }?;
        ws.synchronize()?;
        rs.synchronize()?;
    }
    let words = ctl.download(8 * 8)?;
    let word = |i: usize| u64::from_le_bytes(words[8 * i..8 * i + 8].try_into().unwrap());
    if word(4) > 0 {
        return Err(CudaError::Invalid(
            "LL128 stress test: the writers never saw the readers start".into(),
        ));
    }
    Ok(Ll128Verdict {
        link: if writer == reader {
            LinkKind::SameGpu
        } else {
            LinkKind::Peer
        },
        gpus: (writer, reader),
        lines: how.lines,
        rounds: how.rounds,
        reads: word(1),
        torn: word(2),
        stalled: word(3),
    })
}

/// The test on every kind of link this process reaches: GPU 0 within itself, and from
/// each GPU to each other one that it reaches peer to peer (the first `max_pairs`).
pub fn stress_all(how: Stress, max_pairs: usize) -> Result<Vec<Ll128Verdict>> {
    let mut out = vec![stress(0, 0, how)?];
    let gpus = crate::comm::device_count();
    let mut pairs = 0;
    'all: for a in 0..gpus {
        for b in 0..gpus {
            if a == b {
                continue;
            }
            if pairs == max_pairs {
                break 'all;
            }
            let (ca, cb) = (CudaContext::new(a)?, CudaContext::new(b)?);
            if crate::comm::can_access_peer(&ca, &cb)? {
                out.push(stress(a, b, how)?);
                pairs += 1;
            }
        }
    }
    Ok(out)
}

/// The link kinds a rank's connections use: peers on its own GPU, peers on other GPUs of
/// its machine reached peer to peer. `None` where some connection can never run LL128
/// (staged through host memory, or over the network).
pub fn uses(same_gpu: bool, other_gpu: bool, p2p: bool, net: bool) -> Option<Vec<LinkKind>> {
    if net || (other_gpu && !p2p) {
        return None;
    }
    let mut v = Vec::new();
    if same_gpu {
        v.push(LinkKind::SameGpu);
    }
    if other_gpu {
        v.push(LinkKind::Peer);
    }
    Some(v)
}

/// Whether a rank whose connections use `uses` may run LL128 by `verdicts`.
pub fn allowed(verdicts: &[Ll128Verdict], uses: Option<Vec<LinkKind>>) -> bool {
    uses.is_some_and(|u| braid_cost::ll128_allowed(verdicts, &u))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(link: LinkKind, torn: u64) -> Ll128Verdict {
        Ll128Verdict {
            link,
            gpus: (0, 0),
            lines: 64,
            rounds: 100,
            reads: 64 * 50,
            torn,
            stalled: 0,
        }
    }

    #[test]
    fn ll128_runs_only_over_links_that_passed() {
        let same = verdict(LinkKind::SameGpu, 0);
        let peer_torn = verdict(LinkKind::Peer, 3);
        let v = [same.clone(), peer_torn];
        assert!(allowed(&v, uses(true, false, true, false)));
        assert!(
            !allowed(&v, uses(true, true, true, false)),
            "torn peer lines"
        );
        assert!(
            !allowed(std::slice::from_ref(&same), uses(false, true, true, false)),
            "no verdict"
        );
        assert!(!allowed(&[], uses(true, false, true, false)));
        assert!(
            !allowed(std::slice::from_ref(&same), uses(true, false, true, true)),
            "network"
        );
        assert!(
            !allowed(
                &[same.clone(), verdict(LinkKind::Peer, 0)],
                uses(true, true, false, false)
            ),
            "host-staged"
        );
        // One rank alone uses no link: nothing forbids it.
        assert!(allowed(&[], uses(false, false, true, false)));
        let few = Ll128Verdict {
            reads: 10,
            ..same.clone()
        };
        assert!(!few.passed(), "too few observations say nothing");
        let stalled = Ll128Verdict { stalled: 1, ..same };
        assert!(!stalled.passed());
    }

    #[test]
    fn the_default_test_fits_the_readers() {
        let d = Stress::default();
        assert!(d.lines <= MAX_LINES && d.lines % 4 == 0 && d.rounds > 0);
    }

    #[test]
    fn the_test_refuses_shapes_it_cannot_run() {
        for (lines, rounds) in [(0, 10), (6, 10), (8, 0), (MAX_LINES + 4, 10)] {
            let e = stress(
                0,
                0,
                Stress {
                    lines,
                    rounds,
                    split: false,
                },
            )
            .unwrap_err();
            assert!(e.to_string().contains("multiple of 4"), "{e}");
        }
    }
}
