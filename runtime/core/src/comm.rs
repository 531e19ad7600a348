//! The blocking communicator on host memory, shaped after NCCL's: one per rank, created
//! for all ranks of a process at once ([`Communicator::create_local`]) or one per process
//! from a bootstrap, and the collectives on Rust slices. It is the device communicator
//! ([`crate::device_comm::DeviceComm`]) over the host backend ([`HostEngine`]), with each
//! call enqueued on the rank's own [`HostStream`] and waited for: the same selection,
//! preparation and call arguments as on GPUs.

use crate::call::CallSpec;
use crate::device_comm::{DeviceComm, StatsSnapshot};
use crate::dtype::{DType, RedOp};
use crate::error::{Result, RuntimeError};
use crate::fabric::{Fabric, InProcGroup};
use crate::host_engine::{HostEngine, HostStream};
use crate::policy::Policy;
use crate::registry::Registry;
use braid_ir::{Collective, Mode};
use std::sync::Arc;
use std::time::Duration;

/// The buffers of one call. In place, the single buffer is laid out as NCCL lays it out:
/// allgather's input is this rank's block of the output, reduce-scatter's output is this
/// rank's block of the input.
pub enum Buffers<'a> {
    OutOfPlace { send: &'a [u8], recv: &'a mut [u8] },
    InPlace(&'a mut [u8]),
}

/// Default for BRAID_TIMEOUT, in seconds.
pub const DEFAULT_TIMEOUT_S: f64 = 300.0;

/// `BRAID_TIMEOUT` (seconds, fractions allowed) or the default.
pub fn timeout_from_env() -> Duration {
    let s = std::env::var("BRAID_TIMEOUT")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| *v > 0.0)
        .unwrap_or(DEFAULT_TIMEOUT_S);
    Duration::from_secs_f64(s)
}

pub struct Communicator {
    comm: DeviceComm<HostEngine>,
    stream: HostStream,
}

impl Communicator {
    /// The rank `fabric` connects, choosing plans from `registry` with the policy of the
    /// environment (`BRAID_PROTO`, `BRAID_CHANNELS`; a malformed value is ignored here
    /// with a warning, as this constructor cannot fail).
    pub fn new(
        fabric: Box<dyn Fabric>,
        registry: Arc<Registry>,
        timeout: Duration,
    ) -> Communicator {
        let policy = Policy::from_env().unwrap_or_else(|e| {
            tracing::warn!("{e}; using the default policy");
            Policy::default()
        });
        Communicator::assemble(HostEngine::new(fabric, timeout), registry, policy)
    }

    /// The communicator of `engine`, its stream's thread kept where the engine's block
    /// threads are.
    fn assemble(engine: HostEngine, registry: Arc<Registry>, policy: Policy) -> Communicator {
        let stream = HostStream::on_cpus(engine.cpus());
        Communicator {
            comm: DeviceComm::new(engine, registry, policy),
            stream,
        }
    }

    /// One communicator per rank for `n` ranks living in this process (like
    /// `ncclCommInitAll`); drive each from its own thread.
    pub fn create_local(n: u32, registry: Arc<Registry>, timeout: Duration) -> Vec<Communicator> {
        let group = InProcGroup::new(n);
        (0..n)
            .map(|r| Communicator::new(Box::new(group.member(r)), registry.clone(), timeout))
            .collect()
    }

    /// [`Communicator::create_local`] with the given selection policy instead of the
    /// environment's.
    pub fn create_local_with(
        n: u32,
        registry: Arc<Registry>,
        timeout: Duration,
        policy: Policy,
    ) -> Vec<Communicator> {
        let group = InProcGroup::new(n);
        (0..n)
            .map(|r| {
                let engine = HostEngine::new(Box::new(group.member(r)), timeout);
                Communicator::assemble(engine, registry.clone(), policy.clone())
            })
            .collect()
    }

    /// One rank of a group whose ranks live in different processes, from the unique id
    /// rank 0 created (like `ncclCommInitRank`).
    pub fn init_rank(
        id: &crate::bootstrap::UniqueId,
        rank: u32,
        n: u32,
        registry: Arc<Registry>,
        timeout: Duration,
    ) -> Result<Communicator> {
        let boot = crate::bootstrap::Bootstrap::init(id, rank, n, timeout)?;
        Ok(Communicator::with_bootstrap(
            Arc::new(boot),
            registry,
            timeout,
        ))
    }

    /// One rank of the group `boot` joined; the application may keep using `boot` for
    /// its own agreements (in the same order on every rank), as `ncclCommSplit` does.
    pub fn with_bootstrap(
        boot: Arc<crate::bootstrap::Bootstrap>,
        registry: Arc<Registry>,
        timeout: Duration,
    ) -> Communicator {
        Communicator::new(
            Box::new(crate::net_fabric::NetFabric::new(boot)),
            registry,
            timeout,
        )
    }

    /// One rank of a group started by a launcher (torchrun, Open MPI, Slurm), from the
    /// launcher's environment variables.
    pub fn from_launch_env(registry: Arc<Registry>, timeout: Duration) -> Result<Communicator> {
        let env = crate::launcher::LaunchEnv::from_env()?;
        let boot = crate::bootstrap::Bootstrap::from_launch_env(&env, timeout)?;
        Ok(Communicator::new(
            Box::new(crate::net_fabric::NetFabric::new(boot)),
            registry,
            timeout,
        ))
    }

    pub fn rank(&self) -> u32 {
        self.comm.rank()
    }

    /// The plan that served `spec` in `mode` and the step times its last call recorded on
    /// this rank, where `BRAID_TRACE` was set when the communicator was made
    /// ([`crate::device_comm::DeviceComm::step_times`]).
    pub fn step_times(
        &self,
        spec: &CallSpec,
        mode: Mode,
    ) -> Result<Option<(Arc<braid_plan::Verified>, crate::device_comm::StepTimes)>> {
        self.comm.step_times(spec, mode)
    }

    /// [`Communicator::step_times`] of every rank of `comms` that recorded some.
    pub fn step_times_of(
        comms: &[Communicator],
        spec: &CallSpec,
        mode: Mode,
    ) -> Result<Vec<crate::device_comm::RankSteps>> {
        let mut ranks = Vec::new();
        for c in comms {
            if let Some((p, t)) = c.step_times(spec, mode)? {
                ranks.push((c.rank(), p, t));
            }
        }
        Ok(ranks)
    }

    /// This rank choosing plans by `policy` (for example one with a cost model attached);
    /// every rank of the group must be given the same one.
    pub fn with_policy(mut self, policy: Policy) -> Communicator {
        self.comm.set_policy(policy);
        self
    }

    pub(crate) fn fabric(&self) -> &dyn Fabric {
        self.comm.engine().fabric()
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.comm.engine().timeout()
    }

    pub fn n_ranks(&self) -> u32 {
        self.comm.n_ranks()
    }

    /// What this rank has set up so far (plans prepared, links, scratch).
    pub fn stats(&self) -> StatsSnapshot {
        self.comm.stats()
    }

    /// Aborts the communicator: every blocked call of every rank returns an error.
    pub fn abort(&self, reason: &str) {
        self.comm.abort(reason);
    }

    pub fn all_reduce(&self, bufs: Buffers, count: usize, dtype: DType, op: RedOp) -> Result<()> {
        self.call(Collective::Allreduce, bufs, count, dtype, op, None)
    }

    pub fn all_gather(&self, bufs: Buffers, sendcount: usize, dtype: DType) -> Result<()> {
        self.call(
            Collective::Allgather,
            bufs,
            sendcount,
            dtype,
            RedOp::Sum,
            None,
        )
    }

    pub fn reduce_scatter(
        &self,
        bufs: Buffers,
        recvcount: usize,
        dtype: DType,
        op: RedOp,
    ) -> Result<()> {
        self.call(Collective::ReduceScatter, bufs, recvcount, dtype, op, None)
    }

    pub fn broadcast(&self, bufs: Buffers, count: usize, dtype: DType, root: u32) -> Result<()> {
        self.call(
            Collective::Broadcast,
            bufs,
            count,
            dtype,
            RedOp::Sum,
            Some(root),
        )
    }

    pub fn reduce(
        &self,
        bufs: Buffers,
        count: usize,
        dtype: DType,
        op: RedOp,
        root: u32,
    ) -> Result<()> {
        self.call(Collective::Reduce, bufs, count, dtype, op, Some(root))
    }

    /// `count` is what one rank sends to one peer.
    pub fn all_to_all(
        &self,
        send: &[u8],
        recv: &mut [u8],
        count: usize,
        dtype: DType,
    ) -> Result<()> {
        self.call(
            Collective::Alltoall,
            Buffers::OutOfPlace { send, recv },
            count,
            dtype,
            RedOp::Sum,
            None,
        )
    }

    /// Runs one collective and waits for it. `count` is NCCL's count argument for that
    /// collective. After a failure the communicator is unusable, as NCCL's is after an
    /// asynchronous error: every later call returns the first error.
    pub fn call(
        &self,
        collective: Collective,
        bufs: Buffers,
        count: usize,
        dtype: DType,
        op: RedOp,
        root: Option<u32>,
    ) -> Result<()> {
        let spec = CallSpec {
            collective,
            count,
            dtype,
            op,
            root,
        };
        self.submit(&spec, bufs, 1).map(|_| ())
    }

    /// Runs the same call `iters` times back to back on this rank's stream, with no
    /// waiting between the calls, and returns the stream's time from just before the first
    /// to just after the last (markers the stream itself records, as CUDA events do on a
    /// GPU): how nccl-tests times a collective. Every rank of the group must make the
    /// same `timed` call. The buffers' contents after it are those of the last call.
    pub fn timed(&self, spec: &CallSpec, bufs: Buffers, iters: u32) -> Result<Duration> {
        self.submit(spec, bufs, iters)
    }

    /// The plan and protocol that serve `spec` in `mode`, as a call would get them.
    pub fn selection(
        &self,
        spec: &CallSpec,
        mode: braid_ir::Mode,
    ) -> Result<Option<(Arc<braid_plan::Verified>, braid_ir::Protocol)>> {
        self.comm.selection(spec, mode)
    }

    /// Enqueues `iters` calls of `spec` between two stream markers and waits for them.
    fn submit(&self, spec: &CallSpec, bufs: Buffers, iters: u32) -> Result<Duration> {
        if let Some(r) = self.comm.async_error() {
            return Err(RuntimeError::Aborted(r));
        }
        let (rank, n) = (self.rank(), self.n_ranks());
        spec.check(n)?;
        let sizes = spec.sizes(rank, n);
        check_lengths(&bufs, spec, rank, sizes)?;
        let (send, recv) = match bufs {
            Buffers::OutOfPlace { send, recv } => (send.as_ptr() as u64, recv.as_mut_ptr() as u64),
            Buffers::InPlace(buf) => {
                let (input, output) = spec.in_place_buffers(rank, buf.as_mut_ptr() as u64);
                (input, output)
            }
        };
        let marks: Arc<std::sync::Mutex<[Option<std::time::Instant>; 2]>> = Arc::default();
        let mark = |i: usize| {
            let marks = marks.clone();
            self.stream.enqueue(move || {
                marks.lock().unwrap()[i] = Some(std::time::Instant::now());
                Ok(())
            });
        };
        mark(0);
        let mut enqueued = Ok(());
        for _ in 0..iters {
            // SAFETY: the buffers were checked to hold the call's sizes, are borrowed for
            // this whole function, and every call has finished when `synchronize` returns.
            enqueued = unsafe { self.comm.enqueue(spec, send, recv, &self.stream) };
            if enqueued.is_err() {
                break;
            }
        }
        mark(1);
        let done = self.stream.synchronize();
        enqueued?;
        // A failed call leaves its error with the engine: like NCCL after an
        // asynchronous error, the communicator is unusable now.
        done?;
        let m = marks.lock().unwrap();
        match (m[0], m[1]) {
            (Some(a), Some(b)) => Ok(b - a),
            _ => Err(RuntimeError::Invalid(
                "the stream skipped its time markers".into(),
            )),
        }
    }
}

fn check_lengths(
    bufs: &Buffers,
    spec: &CallSpec,
    rank: u32,
    sizes: crate::call::Sizes,
) -> Result<()> {
    let c = spec.collective;
    let short = |what: &str, have: usize, need: usize| {
        RuntimeError::Invalid(format!(
            "{c} on rank {rank}: the {what} buffer has {have} bytes, the call needs {need}"
        ))
    };
    match bufs {
        Buffers::OutOfPlace { send, recv } => {
            if let Some(need) = sizes.send.filter(|&need| send.len() < need) {
                return Err(short("send", send.len(), need));
            }
            if let Some(need) = sizes.recv.filter(|&need| recv.len() < need) {
                return Err(short("receive", recv.len(), need));
            }
        }
        Buffers::InPlace(buf) => {
            if c == Collective::Alltoall {
                return Err(RuntimeError::Invalid(
                    "alltoall has no in-place mode".into(),
                ));
            }
            let need = sizes.larger;
            if buf.len() < need {
                return Err(short("in-place", buf.len(), need));
            }
        }
    }
    Ok(())
}
