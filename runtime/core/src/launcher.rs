//! Starting from a launcher's environment instead of a hand-passed [`UniqueId`]:
//! torchrun, Open MPI's `mpirun` and Slurm's `srun` each tell a process its rank and the
//! group size in environment variables; [`LaunchEnv`] reads them and
//! [`Bootstrap::from_launch_env`] builds the id every rank can compute on its own.
//!
//! Precedence when several are present: torchrun (`RANK`, `WORLD_SIZE`) over Open MPI
//! (`OMPI_COMM_WORLD_*`) over Slurm (`SLURM_PROCID`, ...), because a launcher started
//! inside another (torchrun under srun, mpirun in a Slurm allocation) sets the innermost,
//! per-process values.
//!
//! **Where rank 0 listens.** The host is `MASTER_ADDR` (for Slurm without it: the first
//! host of `SLURM_STEP_NODELIST`, where rank 0 runs under the default block
//! distribution). The port is `BRAID_BOOTSTRAP_PORT` if set, else `MASTER_PORT + 1`:
//! `MASTER_PORT` itself is normally held by PyTorch's TCPStore (torchrun's agent, or rank
//! 0's `init_process_group`), so Braid takes the next one. Rank 0 listens on the address
//! `MASTER_ADDR` names (loopback when it is `localhost` or `127.0.0.1`), falling back to
//! every interface, with a warning, only when that address is not one of its own.
//!
//! **The secret.** `BRAID_SECRET` (32 to 64 hex digits, the same on every rank) is the
//! group's secret and authenticates every connection. Without it, the secret is derived
//! from facts every rank already shares (launcher, job id, master address and port, group
//! size). Anyone who can read those can compute it, so it authenticates nobody; it does
//! keep a stale or neighbouring job from joining this group by accident. Rank 0 logs a
//! warning in that case. Set `BRAID_SECRET` (for example from the job scheduler's secret
//! store, or `openssl rand -hex 32` broadcast by the job script) on shared networks.

use crate::bootstrap::{Bootstrap, Secret, UniqueId};
use crate::error::{Result, RuntimeError};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// The launcher that set the variables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launcher {
    Torchrun,
    OpenMpi,
    Slurm,
}

/// What the launcher told this process. `Debug` redacts the secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchEnv {
    pub launcher: Launcher,
    pub rank: u32,
    pub world_size: u32,
    /// Rank among the processes on this host (picks the GPU).
    pub local_rank: Option<u32>,
    pub local_world_size: Option<u32>,
    pub master_addr: Option<String>,
    pub master_port: Option<u16>,
    /// `BRAID_BOOTSTRAP_PORT`.
    pub bootstrap_port: Option<u16>,
    /// `BRAID_SECRET`.
    pub secret: Option<Secret>,
    /// The launcher's job identifier, mixed into a derived secret.
    pub job_id: Option<String>,
}

type Vars<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The launcher whose variables `get` has (set and not blank), if any.
fn launcher_in(get: &dyn Fn(&str) -> Option<String>) -> Option<Launcher> {
    let any = |names: &[&str]| names.iter().any(|n| get(n).is_some());
    if any(&["RANK", "WORLD_SIZE"]) {
        Some(Launcher::Torchrun)
    } else if any(&["OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"]) {
        Some(Launcher::OpenMpi)
    } else if any(&["SLURM_PROCID"]) {
        Some(Launcher::Slurm)
    } else {
        None
    }
}

impl LaunchEnv {
    /// Whether a launcher's variables are in the process environment (their values may
    /// still be wrong: [`LaunchEnv::from_env`] says).
    pub fn launched() -> bool {
        launcher_in(&|n| std::env::var(n).ok().filter(|v| !v.trim().is_empty())).is_some()
    }

    /// Reads the process environment.
    pub fn from_env() -> Result<LaunchEnv> {
        Self::from_vars(&|name| std::env::var(name).ok())
    }

    /// Reads variables through `get` (a map in tests). Fails, naming the variable, when a
    /// launcher's variables are incomplete or not numbers, or when ranks are out of range.
    pub fn from_vars(get: Vars) -> Result<LaunchEnv> {
        let get = |name: &str| {
            get(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let num = |name: &str| -> Result<Option<u32>> {
            get(name)
                .map(|v| {
                    v.parse::<u32>()
                        .map_err(|_| garbled(name, &v, "a non-negative integer"))
                })
                .transpose()
        };
        let need = |name: &str, with: &str| -> Result<u32> {
            num(name)?
                .ok_or_else(|| RuntimeError::Bootstrap(format!("{with} is set but {name} is not")))
        };
        let port = |name: &str| -> Result<Option<u16>> {
            get(name)
                .map(|v| {
                    v.parse::<u16>()
                        .ok()
                        .filter(|p| *p != 0)
                        .ok_or_else(|| garbled(name, &v, "a port (1..65535)"))
                })
                .transpose()
        };

        let (launcher, rank, world_size, local_rank, local_world_size, job_id);
        let which = launcher_in(&get);
        if which == Some(Launcher::Torchrun) {
            launcher = Launcher::Torchrun;
            rank = need("RANK", "WORLD_SIZE")?;
            world_size = need("WORLD_SIZE", "RANK")?;
            local_rank = num("LOCAL_RANK")?;
            local_world_size = num("LOCAL_WORLD_SIZE")?;
            job_id = get("TORCHELASTIC_RUN_ID");
        } else if which == Some(Launcher::OpenMpi) {
            launcher = Launcher::OpenMpi;
            rank = need("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")?;
            world_size = need("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK")?;
            local_rank = num("OMPI_COMM_WORLD_LOCAL_RANK")?;
            local_world_size = num("OMPI_COMM_WORLD_LOCAL_SIZE")?;
            job_id = get("PMIX_NAMESPACE").or_else(|| get("OMPI_MCA_ess_base_jobid"));
        } else if which == Some(Launcher::Slurm) {
            launcher = Launcher::Slurm;
            rank = need("SLURM_PROCID", "SLURM_PROCID")?;
            world_size = match num("SLURM_NTASKS")? {
                Some(n) => n,
                None => need("SLURM_NPROCS", "SLURM_PROCID (without SLURM_NTASKS)")?,
            };
            local_rank = num("SLURM_LOCALID")?;
            local_world_size = slurm_local_size(&get)?;
            job_id = get("SLURM_JOB_ID").map(|j| match get("SLURM_STEP_ID") {
                Some(s) => format!("{j}.{s}"),
                None => j,
            });
        } else {
            return Err(RuntimeError::Bootstrap(
                "no launcher environment: expected RANK and WORLD_SIZE (torchrun), \
                 OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE (Open MPI), or SLURM_PROCID and \
                 SLURM_NTASKS (Slurm)"
                    .into(),
            ));
        }
        if world_size == 0 || rank >= world_size {
            return Err(RuntimeError::Bootstrap(format!(
                "{launcher:?} gave rank {rank} of a group of {world_size}"
            )));
        }
        if let (Some(l), Some(n)) = (local_rank, local_world_size) {
            if l >= n {
                return Err(RuntimeError::Bootstrap(format!(
                    "{launcher:?} gave local rank {l} of {n} on this host"
                )));
            }
        }
        let master_addr = get("MASTER_ADDR").or_else(|| {
            let list = [
                "SLURM_STEP_NODELIST",
                "SLURM_JOB_NODELIST",
                "SLURM_NODELIST",
            ]
            .into_iter()
            .find_map(&get);
            (launcher == Launcher::Slurm)
                .then_some(list)
                .flatten()
                .and_then(|l| first_host(&l))
        });
        let secret = get("BRAID_SECRET")
            .map(|s| {
                Secret::from_hex(&s)
                    .map_err(|e| RuntimeError::Bootstrap(format!("BRAID_SECRET: {e}")))
            })
            .transpose()?;
        Ok(LaunchEnv {
            launcher,
            rank,
            world_size,
            local_rank,
            local_world_size,
            master_addr,
            master_port: port("MASTER_PORT")?,
            bootstrap_port: port("BRAID_BOOTSTRAP_PORT")?,
            secret,
            job_id,
        })
    }

    /// Where rank 0 listens: host and port as described in the module docs.
    pub fn root_endpoint(&self) -> Result<(String, u16)> {
        let host = self.master_addr.clone().ok_or_else(|| {
            RuntimeError::Bootstrap(format!(
                "{:?} launch without MASTER_ADDR: set it to rank 0's host name or IP",
                self.launcher
            ))
        })?;
        let port = match (self.bootstrap_port, self.master_port) {
            (Some(p), _) => p,
            (None, Some(m)) => m.checked_add(1).ok_or_else(|| {
                RuntimeError::Bootstrap("MASTER_PORT is 65535, so MASTER_PORT + 1 does not exist: set BRAID_BOOTSTRAP_PORT".into())
            })?,
            (None, None) => {
                return Err(RuntimeError::Bootstrap(format!(
                    "{:?} launch without MASTER_PORT or BRAID_BOOTSTRAP_PORT: set one (the same on every rank)",
                    self.launcher
                )))
            }
        };
        Ok((host, port))
    }

    /// `BRAID_SECRET`, or the derived (non-authenticating) token the module docs describe.
    fn group_secret(&self, host: &str, port: u16) -> Secret {
        if let Some(s) = self.secret {
            return s;
        }
        if self.rank == 0 {
            tracing::warn!(
                "BRAID_SECRET is not set: the bootstrap on {host}:{port} accepts anyone who knows the job's \
                 public facts; set BRAID_SECRET (32-64 hex digits, the same on every rank) to authenticate ranks"
            );
        }
        let facts = format!(
            "braid-bootstrap-v1|{:?}|{}|{host}|{port}|{}",
            self.launcher,
            self.job_id.as_deref().unwrap_or(""),
            self.world_size
        );
        let mut s = [0u8; 32];
        for (i, chunk) in s.chunks_mut(8).enumerate() {
            chunk.copy_from_slice(&fnv1a64(i as u64, facts.as_bytes()).to_le_bytes());
        }
        Secret::from_bytes(s)
    }
}

impl Bootstrap {
    /// Bootstraps the group a launcher started: rank 0 listens on every interface at
    /// the port from [`LaunchEnv::root_endpoint`], the others connect to
    /// `MASTER_ADDR:port` (retrying until rank 0 is up, within `timeout`).
    pub fn from_launch_env(env: &LaunchEnv, timeout: Duration) -> Result<Bootstrap> {
        let (host, port) = env.root_endpoint()?;
        let addr = (host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| {
                RuntimeError::Bootstrap(format!("cannot resolve MASTER_ADDR {host:?}: {e}"))
            })?
            .min_by_key(|a| a.is_ipv6())
            .ok_or_else(|| {
                RuntimeError::Bootstrap(format!("MASTER_ADDR {host:?} resolves to no address"))
            })?;
        let id = UniqueId::from_parts(addr, env.group_secret(&host, port));
        let root = if env.rank == 0 {
            Some(root_listener(addr, &host, port)?)
        } else {
            None
        };
        Bootstrap::start(
            &id,
            env.rank,
            env.world_size,
            timeout,
            Arc::new(AtomicBool::new(false)),
            root,
        )
    }
}

/// Rank 0's rendezvous socket: on the address `MASTER_ADDR` names (loopback for a
/// one-host job), so the port is not open on every interface. If that address is not
/// one of this host's (a name that resolves elsewhere, NAT), every interface, with a
/// warning.
fn root_listener(addr: SocketAddr, host: &str, port: u16) -> Result<TcpListener> {
    let hint = "(the port is MASTER_PORT + 1 unless BRAID_BOOTSTRAP_PORT is set)";
    match TcpListener::bind(addr) {
        Ok(l) => Ok(l),
        Err(e) if e.kind() == std::io::ErrorKind::AddrNotAvailable => {
            let any = if addr.is_ipv4() {
                IpAddr::V4(Ipv4Addr::UNSPECIFIED)
            } else {
                IpAddr::V6(Ipv6Addr::UNSPECIFIED)
            };
            tracing::warn!(
                "MASTER_ADDR {host:?} ({}) is not an address of this host; rank 0 listens on every interface at port {port}",
                addr.ip()
            );
            TcpListener::bind(SocketAddr::new(any, port)).map_err(|e| {
                RuntimeError::Bootstrap(format!("rank 0 cannot listen on port {port}: {e} {hint}"))
            })
        }
        Err(e) => Err(RuntimeError::Bootstrap(format!(
            "rank 0 cannot listen on {addr}: {e} {hint}"
        ))),
    }
}

fn garbled(name: &str, value: &str, want: &str) -> RuntimeError {
    RuntimeError::Bootstrap(format!("{name}={value:?} is not {want}"))
}

/// This node's task count under Slurm: `SLURM_NTASKS_PER_NODE` when it is one number,
/// else this node's entry of `SLURM_TASKS_PER_NODE` (`"2(x3),1"` = 2, 2, 2, 1), indexed
/// by `SLURM_NODEID`.
fn slurm_local_size(get: &dyn Fn(&str) -> Option<String>) -> Result<Option<u32>> {
    if let Some(n) = get("SLURM_NTASKS_PER_NODE").and_then(|v| v.parse::<u32>().ok()) {
        return Ok(Some(n));
    }
    let (Some(list), Some(node)) = (get("SLURM_TASKS_PER_NODE"), get("SLURM_NODEID")) else {
        return Ok(None);
    };
    let node: usize = node
        .parse()
        .map_err(|_| garbled("SLURM_NODEID", &node, "a non-negative integer"))?;
    let mut per_node = Vec::new();
    for item in list.split(',') {
        let (count, times) = match item.split_once("(x") {
            Some((c, t)) => (c, t.trim_end_matches(')')),
            None => (item, "1"),
        };
        let (Ok(c), Ok(t)) = (count.parse::<u32>(), times.parse::<usize>()) else {
            return Err(garbled(
                "SLURM_TASKS_PER_NODE",
                &list,
                "a Slurm task list like \"2(x3),1\"",
            ));
        };
        per_node.extend(std::iter::repeat_n(c, t));
    }
    Ok(per_node.get(node).copied())
}

/// The first host of a Slurm host list: `"gpu[07-09,12],cpu1"` → `"gpu07"`,
/// `"rack[1-2]-n[3,5]"` → `"rack1-n3"`.
fn first_host(list: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = list.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            ',' => break,
            '[' => {
                let group: String = chars.by_ref().take_while(|c| *c != ']').collect();
                out.extend(group.chars().take_while(|c| *c != ',' && *c != '-'));
            }
            c => out.push(c),
        }
    }
    (!out.is_empty()).then_some(out)
}

/// FNV-1a 64 with the seed mixed in first; deterministic across builds and platforms
/// (unlike std's hasher), which matters because every rank must derive the same value.
fn fnv1a64(seed: u64, bytes: &[u8]) -> u64 {
    seed.to_le_bytes()
        .iter()
        .chain(bytes)
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ *b as u64).wrapping_mul(0x0000_0100_0000_01b3)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_host_expands_the_first_range() {
        assert_eq!(first_host("gpu[07-09,12],cpu1").as_deref(), Some("gpu07"));
        assert_eq!(first_host("rack[1-2]-n[3,5]").as_deref(), Some("rack1-n3"));
        assert_eq!(first_host("a1,b2").as_deref(), Some("a1"));
        assert_eq!(first_host(""), None);
    }
}
