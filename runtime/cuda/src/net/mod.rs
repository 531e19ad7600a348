//! The network transport: connections whose two ends are on different hosts (or every
//! connection, with `BRAID_NET_FORCE=1`, so that two processes, or two ranks of one
//! process, on one machine exercise it). Each end has its FIFO in pinned host memory of
//! its own process; the sending kernel writes into its side's FIFO exactly as into a
//! peer's, and a proxy on each side (`proxy.rs`) carries the slices over a TCP stream
//! into the receiving side's FIFO and the credits back. The kernels run the same code and
//! protocols as on every other transport; a sending end only also states each slice's
//! size (`program::NET`).
//!
//! Streams come from the bootstrap's authenticated links (`connect_link` /
//! `accept_link`, on the interface `NCCL_SOCKET_IFNAME` / `BRAID_SOCKET_IFNAME` chose), or
//! from a loopback pair when both ends are in this process.

pub mod fifo;
pub mod health;
pub mod proxy;
pub mod rdma;
pub mod wire;

use crate::device::HostAlloc;
use fifo::FifoMemory;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::Arc;

// SAFETY: `host` addresses `len` bytes of pinned, page-aligned memory owned by the value
// until it drops; Rust code only reaches it through raw pointers and atomics.
unsafe impl FifoMemory for HostAlloc {
    fn host(&self) -> *mut u8 {
        self.host_ptr()
    }
    fn len(&self) -> usize {
        self.len_bytes()
    }
}

/// Bootstrap link tags of network connections: this bit, the stream's index and the
/// connection's channel (the host backend's links use the bare channel).
pub const TAG: u64 = 1 << 62;

/// The bootstrap link tag of stream `k` of the network connection on `channel`.
pub fn tag(channel: u32, k: u32) -> u64 {
    TAG | u64::from(k) << 32 | u64::from(channel)
}

/// Most TCP streams per connection.
pub const MAX_STREAMS: u32 = 16;

/// Variable `name`'s count, 1 to [`MAX_STREAMS`] (`None`: unset or empty).
fn count_var(var: &impl Fn(&str) -> Option<String>, name: &str) -> Result<Option<u32>, String> {
    match var(name) {
        Some(v) if !v.trim().is_empty() => v
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=MAX_STREAMS).contains(n))
            .map(Some)
            .ok_or_else(|| format!("{name}={v}: expected a count from 1 to {MAX_STREAMS}")),
        _ => Ok(None),
    }
}

/// TCP streams per network connection: `BRAID_NET_STREAMS`, else NCCL's
/// `NCCL_NSOCKS_PERTHREAD` x `NCCL_SOCKET_NTHREADS` (each 1 when unset), 1 to
/// [`MAX_STREAMS`]. `var` reads a variable.
pub fn streams_from(var: impl Fn(&str) -> Option<String>) -> Result<u32, String> {
    if let Some(n) = count_var(&var, "BRAID_NET_STREAMS")? {
        return Ok(n);
    }
    let socks = count_var(&var, "NCCL_NSOCKS_PERTHREAD")?.unwrap_or(1);
    let threads = count_var(&var, "NCCL_SOCKET_NTHREADS")?.unwrap_or(1);
    let n = socks * threads;
    if n > MAX_STREAMS {
        return Err(format!(
            "NCCL_NSOCKS_PERTHREAD={socks} x NCCL_SOCKET_NTHREADS={threads}: at most \
             {MAX_STREAMS} streams per connection"
        ));
    }
    Ok(n)
}

/// Queue pairs per RDMA connection: `BRAID_NET_STREAMS`, else NCCL's
/// `NCCL_IB_QPS_PER_CONNECTION`, else 1; 1 to [`MAX_STREAMS`].
pub fn qps_from(var: impl Fn(&str) -> Option<String>) -> Result<u32, String> {
    match count_var(&var, "BRAID_NET_STREAMS")? {
        Some(n) => Ok(n),
        None => Ok(count_var(&var, "NCCL_IB_QPS_PER_CONNECTION")?.unwrap_or(1)),
    }
}

/// What carries the network connections.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NetTransport {
    /// RDMA queue pairs when every rank opens an RDMA port (`NCCL_IB_HCA`, not
    /// `NCCL_IB_DISABLE`), else TCP streams.
    #[default]
    Auto,
    /// TCP streams.
    Socket,
    /// RDMA queue pairs, or an error saying why there are none.
    Ib,
    /// The software RDMA device inside the process (every rank in one process): the
    /// queue-pair transport's logic on a machine without RDMA hardware.
    SoftRdma,
}

/// `BRAID_NET_FORCE`: unset, empty or `0`: only connections between hosts go over the
/// network; `1` (or any other flag value): every connection, over [`NetTransport::Auto`];
/// `socket`, `ib`, `soft-rdma`: every connection, over that transport.
pub fn parse_force(value: Option<&str>) -> (bool, NetTransport) {
    match value.map(str::trim) {
        None | Some("" | "0") => (false, NetTransport::Auto),
        Some("socket") => (true, NetTransport::Socket),
        Some("ib") => (true, NetTransport::Ib),
        Some("soft-rdma") => (true, NetTransport::SoftRdma),
        Some(_) => (true, NetTransport::Auto),
    }
}

/// The RDMA device network connections use under `t` (`None`: TCP streams), the port
/// nearest the GPU `near` names where there are several, or why the one asked for
/// cannot be had.
pub fn rdma_device(
    t: NetTransport,
    near: braid_ib::open::Near,
) -> Result<Option<Arc<dyn braid_ib::rdma::Device>>, String> {
    match t {
        NetTransport::Socket => Ok(None),
        NetTransport::SoftRdma => Ok(Some(Arc::new(braid_ib::soft::SoftDevice::process()))),
        NetTransport::Ib => braid_ib::open::open_near(near)
            .map(Some)
            .map_err(|e| format!("BRAID_NET_FORCE=ib: {e}")),
        NetTransport::Auto => match braid_ib::open::open_near(near) {
            Ok(d) => Ok(Some(d)),
            Err(why) => {
                tracing::info!("network connections over TCP: no RDMA device ({why})");
                Ok(None)
            }
        },
    }
}

/// Which connections go over the network.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetMap {
    /// `BRAID_NET_FORCE=1`: every connection.
    pub force: bool,
    /// Each rank's host (an index into the distinct hosts), when known.
    pub hosts: Vec<u32>,
    /// TCP streams per connection (`BRAID_NET_STREAMS`; 0 counts as 1).
    pub streams: u32,
    /// Queue pairs per RDMA connection (`BRAID_NET_STREAMS`; 0 counts as 1).
    pub qps: u32,
}

impl NetMap {
    /// Whether the connection from `a` to `b` goes over the network.
    pub fn between(&self, a: u32, b: u32) -> bool {
        if self.force {
            return true;
        }
        match (self.hosts.get(a as usize), self.hosts.get(b as usize)) {
            (Some(x), Some(y)) => x != y,
            _ => false,
        }
    }

    /// Whether any connection goes over the network (FIFOs in host memory then).
    pub fn any(&self) -> bool {
        self.force || self.hosts.iter().any(|h| Some(h) != self.hosts.first())
    }

    /// Hosts from each rank's host identity (as [`host_identity`] gives it).
    pub fn from_identities(force: bool, ids: &[String]) -> NetMap {
        let mut seen: Vec<&str> = Vec::new();
        let hosts = ids
            .iter()
            .map(|id| match seen.iter().position(|s| *s == id) {
                Some(i) => i as u32,
                None => {
                    seen.push(id);
                    seen.len() as u32 - 1
                }
            })
            .collect();
        NetMap {
            force,
            hosts,
            streams: 1,
            qps: 1,
        }
    }
}

/// What tells this machine from others: its host name and boot id (two containers of one
/// machine share the boot id and, usually, GPUs and shared memory).
pub fn host_identity() -> String {
    let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string());
    let name = read("/proc/sys/kernel/hostname").unwrap_or_default();
    let boot = read("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    format!("{name}/{boot}")
}

/// Two connected streams on the loopback interface, for a connection with both ends in
/// this process.
pub fn loopback_pair() -> std::io::Result<(TcpStream, TcpStream)> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let a = TcpStream::connect(l.local_addr()?)?;
    let (b, _) = l.accept()?;
    Ok((a, b))
}

/// How long one TCP stream on the loopback interface takes to carry `bytes`, timed as
/// the calls are: `iters` messages back to back, the last one acknowledged, the time per
/// message, the median of `runs` such runs. The network transport's roofline on a
/// machine whose ranks all talk over loopback (`BRAID_NET_FORCE`).
pub fn stream_time(bytes: usize, iters: u32, runs: u32) -> std::io::Result<std::time::Duration> {
    use std::io::{Read, Write};
    let (iters, runs) = (iters.max(1) as usize, runs.max(1) as usize);
    let (mut a, mut b) = loopback_pair()?;
    a.set_nodelay(true)?;
    b.set_nodelay(true)?;
    let per_run = (bytes * iters).max(1);
    let reader = std::thread::spawn(move || -> std::io::Result<()> {
        let mut buf = vec![0u8; 1 << 20];
        for _ in 0..runs {
            // An empty message is one byte on the wire, so that each run has an end.
            let mut left = per_run;
            while left > 0 {
                let n = b.read(&mut buf[..left.min(1 << 20)])?;
                if n == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                left -= n;
            }
            b.write_all(&[1])?;
        }
        Ok(())
    });
    let chunk = vec![0x5au8; bytes.clamp(1, 1 << 20)];
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = std::time::Instant::now();
        if bytes == 0 {
            a.write_all(&[0])?;
        }
        for _ in 0..iters {
            let mut left = bytes;
            while left > 0 {
                let n = left.min(chunk.len());
                a.write_all(&chunk[..n])?;
                left -= n;
            }
        }
        let mut ack = [0u8; 1];
        a.read_exact(&mut ack)?;
        times.push(t.elapsed() / iters as u32);
    }
    reader.join().expect("the reader thread")?;
    times.sort();
    Ok(times[times.len() / 2])
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn connections_between_hosts_or_all_when_forced() {
        let ids: Vec<String> = ["a", "a", "b", "b"].map(String::from).to_vec();
        let m = NetMap::from_identities(false, &ids);
        assert_eq!(m.hosts, vec![0, 0, 1, 1]);
        assert!(!m.between(0, 1));
        assert!(m.between(1, 2));
        assert!(m.any());
        let one = NetMap::from_identities(false, &ids[..2]);
        assert!(!one.any() && !one.between(0, 1));
        let forced_map = NetMap::from_identities(true, &ids[..2]);
        assert!(forced_map.any() && forced_map.between(0, 1));
        assert!(host_identity().contains('/'));
    }

    #[test]
    fn the_stream_and_queue_pair_counts_come_from_braid_or_nccl_variables() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|p| p.0 == k).map(|p| p.1.to_string())
        };
        assert_eq!(streams_from(env(&[])), Ok(1));
        assert_eq!(streams_from(env(&[("BRAID_NET_STREAMS", " 4 ")])), Ok(4));
        assert_eq!(
            streams_from(env(&[
                ("NCCL_NSOCKS_PERTHREAD", "4"),
                ("NCCL_SOCKET_NTHREADS", "2")
            ])),
            Ok(8)
        );
        assert_eq!(qps_from(env(&[])), Ok(1));
        assert_eq!(qps_from(env(&[("NCCL_IB_QPS_PER_CONNECTION", "4")])), Ok(4));
        assert_eq!(
            qps_from(env(&[
                ("BRAID_NET_STREAMS", "2"),
                ("NCCL_IB_QPS_PER_CONNECTION", "4")
            ])),
            Ok(2)
        );
        assert!(qps_from(env(&[("NCCL_IB_QPS_PER_CONNECTION", "99")]))
            .unwrap_err()
            .contains("NCCL_IB_QPS_PER_CONNECTION=99"));
        // Braid's variable wins over NCCL's.
        assert_eq!(
            streams_from(env(&[
                ("BRAID_NET_STREAMS", "2"),
                ("NCCL_SOCKET_NTHREADS", "3")
            ])),
            Ok(2)
        );
        for bad in [
            &[("BRAID_NET_STREAMS", "0")][..],
            &[("BRAID_NET_STREAMS", "17")],
            &[("BRAID_NET_STREAMS", "many")],
            &[
                ("NCCL_NSOCKS_PERTHREAD", "8"),
                ("NCCL_SOCKET_NTHREADS", "4"),
            ],
        ] {
            let why = streams_from(env(bad)).unwrap_err();
            assert!(why.contains(bad[0].0), "{why}");
        }
    }

    #[test]
    fn the_force_variable_names_the_transport() {
        assert_eq!(parse_force(None), (false, NetTransport::Auto));
        assert_eq!(parse_force(Some(" 0")), (false, NetTransport::Auto));
        assert_eq!(parse_force(Some("1")), (true, NetTransport::Auto));
        assert_eq!(parse_force(Some("socket")), (true, NetTransport::Socket));
        assert_eq!(parse_force(Some("ib")), (true, NetTransport::Ib));
        assert_eq!(
            parse_force(Some("soft-rdma")),
            (true, NetTransport::SoftRdma)
        );
        assert!(rdma_device(NetTransport::Socket, Default::default())
            .unwrap()
            .is_none());
        assert_eq!(
            rdma_device(NetTransport::SoftRdma, Default::default())
                .unwrap()
                .unwrap()
                .name(),
            "soft-rdma"
        );
    }

    #[test]
    fn the_loopback_stream_is_timed_per_run() {
        let small = stream_time(4096, 10, 3).unwrap();
        let big = stream_time(64 << 20, 2, 3).unwrap();
        assert!(stream_time(0, 5, 2).unwrap() > std::time::Duration::ZERO);
        assert!(small > std::time::Duration::ZERO);
        assert!(big > small, "{big:?} {small:?}");
    }
}
