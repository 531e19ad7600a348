//! NCCL's environment variables where they mean something here, each with a `BRAID_*`
//! twin that wins: `NCCL_DEBUG` / `BRAID_DEBUG` (logging level, off by default as
//! NCCL's), `NCCL_DEBUG_SUBSYS` / `BRAID_DEBUG_SUBSYS` (which parts log: INIT, COLL,
//! P2P, NET, BOOTSTRAP, ENV, TUNING, ALLOC, ALL; `^` excludes),
//! `NCCL_DEBUG_FILE` / `BRAID_DEBUG_FILE` (`%h` host, `%p` pid),
//! `NCCL_BUFFSIZE` / `BRAID_SCRATCH_BYTES` (staging memory: NCCL's is per connection and
//! channel, Braid's plans stage through one scratch buffer per rank, which this sizes),
//! `NCCL_P2P_DISABLE` / `BRAID_P2P_DISABLE`, `NCCL_P2P_LEVEL=LOC` (no peer to peer),
//! `NCCL_MIN_NCHANNELS` = `NCCL_MAX_NCHANNELS` / `BRAID_CHANNELS` (a replica count),
//! `NCCL_ALGO` / `BRAID_ALGO` (which plans calls may use, read by the runtime's policy),
//! `NCCL_SOCKET_IFNAME` / `BRAID_SOCKET_IFNAME` (the interfaces the bootstrap listens on,
//! read by the runtime's bootstrap), `NCCL_IB_HCA` / `BRAID_IB_HCA` and `NCCL_IB_DISABLE` /
//! `BRAID_IB_DISABLE` (the RDMA ports of the network transport, read by braid-ib),
//! `NCCL_MAX_CTAS` / `BRAID_MAX_CTAS` (thread blocks per call) and `NCCL_PROTO` /
//! `BRAID_PROTO` (the protocols calls may use), both read by the policy,
//! `NCCL_NSOCKS_PERTHREAD` x `NCCL_SOCKET_NTHREADS` and `NCCL_IB_QPS_PER_CONNECTION` /
//! `BRAID_NET_STREAMS` (TCP streams or queue pairs per network connection, read by the GPU
//! backend). Every other `NCCL_*` variable that is
//! set is named once at INFO as not honoured.

use std::sync::Once;

/// The variables this library reads.
pub const HONOURED: &[&str] = &[
    "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS",
    "NCCL_DEBUG_FILE",
    "NCCL_BUFFSIZE",
    "NCCL_P2P_DISABLE",
    "NCCL_P2P_LEVEL",
    "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NCHANNELS",
    "NCCL_ALGO",
    "NCCL_SOCKET_IFNAME",
    "NCCL_IB_HCA",
    "NCCL_IB_DISABLE",
    "NCCL_MAX_CTAS",
    "NCCL_PROTO",
    "NCCL_NSOCKS_PERTHREAD",
    "NCCL_SOCKET_NTHREADS",
    "NCCL_IB_QPS_PER_CONNECTION",
    // Read by NCCL's own tools and the launchers, harmless here.
    "NCCL_NVLS_ENABLE",
];

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The `BRAID_*` variable, else its `NCCL_*` twin.
pub fn twin(braid: &str, nccl: &str) -> Option<String> {
    var(braid).or_else(|| var(nccl))
}

/// The level `NCCL_DEBUG` names, as a tracing filter.
fn level(v: Option<&str>) -> &'static str {
    match v.map(|s| s.trim().to_ascii_uppercase()).as_deref() {
        Some("TRACE") => "trace",
        Some("INFO") => "info",
        Some("WARN") | Some("VERSION") => "warn",
        Some("ERROR") => "error",
        _ => "off",
    }
}

/// The tracing targets behind one of NCCL's subsystems (`NCCL_DEBUG_SUBSYS`).
fn subsystem_targets(name: &str) -> &'static [&'static str] {
    match name {
        "INIT" => &[
            "nccl::comm",
            "braid_runtime::bootstrap",
            "braid_cuda::comm",
            "braid_cuda::clique",
        ],
        "COLL" => &[
            "braid_runtime::device_comm",
            "braid_runtime::registry",
            "braid_runtime::policy",
            "nccl::ops",
            "nccl::forward",
        ],
        "P2P" => &["nccl::ops", "nccl::forward", "braid_cuda::transport"],
        "NET" => &[
            "braid_runtime::net_fabric",
            "braid_runtime::tcp_link",
            "braid_runtime::shm_link",
        ],
        "BOOTSTRAP" => &["braid_runtime::bootstrap"],
        "ENV" => &["nccl::env", "nccl::forward"],
        "TUNING" => &[
            "braid_runtime::policy",
            "braid_runtime::registry",
            "braid_runtime::device_comm",
        ],
        "ALLOC" => &["braid_cuda::device", "braid_cuda::modules"],
        _ => &[],
    }
}

/// The tracing filter for a level and an `NCCL_DEBUG_SUBSYS` value: the level for the
/// subsystems named (all when none or `ALL`), warnings from everything else.
fn filter(level: &str, subsys: Option<&str>) -> String {
    let list = subsys
        .map(|s| s.trim().to_ascii_uppercase())
        .unwrap_or_default();
    if level == "off" || list.is_empty() || list == "ALL" {
        return level.to_string();
    }
    let (exclude, names) = match list.strip_prefix('^') {
        Some(rest) => (true, rest.to_string()),
        None => (false, list),
    };
    let quiet = if matches!(level, "error") {
        "error"
    } else {
        "warn"
    };
    let mut directives = vec![if exclude { level } else { quiet }.to_string()];
    for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        for t in subsystem_targets(name) {
            directives.push(format!("{t}={}", if exclude { quiet } else { level }));
        }
    }
    directives.join(",")
}

/// `NCCL_BUFFSIZE` as the size of each rank's scratch, when `BRAID_SCRATCH_BYTES` is unset.
pub fn buffsize() -> Result<Option<usize>, String> {
    if var("BRAID_SCRATCH_BYTES").is_some() {
        return Ok(None);
    }
    let Some(v) = var("NCCL_BUFFSIZE") else {
        return Ok(None);
    };
    match v.trim().parse::<usize>() {
        Ok(b) if b >= 1 << 16 => Ok(Some(b)),
        _ => Err(format!(
            "NCCL_BUFFSIZE={v}: Braid needs a byte count of at least 65536"
        )),
    }
}

/// `NCCL_DEBUG_FILE`'s name with `%h` and `%p` filled in.
pub fn debug_file_name(pattern: &str, host: &str, pid: u32) -> String {
    pattern.replace("%h", host).replace("%p", &pid.to_string())
}

static LOGGING: Once = Once::new();

/// Starts logging once per process (never replacing a subscriber the application has).
pub fn init_logging() {
    LOGGING.call_once(|| {
        let filter = filter(
            level(twin("BRAID_DEBUG", "NCCL_DEBUG").as_deref()),
            twin("BRAID_DEBUG_SUBSYS", "NCCL_DEBUG_SUBSYS").as_deref(),
        );
        let builder = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_target(true)
            .without_time();
        let file = twin("BRAID_DEBUG_FILE", "NCCL_DEBUG_FILE").and_then(|p| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| "host".into());
            std::fs::File::create(debug_file_name(&p, &host, std::process::id())).ok()
        });
        let _ = match file {
            Some(f) => builder
                .with_ansi(false)
                .with_writer(std::sync::Mutex::new(f))
                .try_init(),
            None => {
                use std::io::IsTerminal;
                let ansi = std::io::stderr().is_terminal();
                builder
                    .with_ansi(ansi)
                    .with_writer(std::io::stderr)
                    .try_init()
            }
        };
        for (k, _) in std::env::vars() {
            if k.starts_with("NCCL_") && !HONOURED.contains(&k.as_str()) {
                tracing::info!("{k} is set; Braid does not honour it (docs/pytorch.md)");
            }
        }
    });
}

/// Whether connections must avoid peer to peer.
pub fn p2p_disabled() -> bool {
    if twin("BRAID_P2P_DISABLE", "NCCL_P2P_DISABLE").is_some_and(|v| !matches!(v.trim(), "0")) {
        return true;
    }
    var("NCCL_P2P_LEVEL").is_some_and(|v| v.trim().eq_ignore_ascii_case("LOC") || v.trim() == "0")
}

/// A replica count every call uses, if one is asked for.
pub fn channels() -> Option<u32> {
    if let Some(v) = var("BRAID_CHANNELS") {
        return v.trim().parse().ok();
    }
    let min = var("NCCL_MIN_NCHANNELS").and_then(|v| v.trim().parse::<u32>().ok());
    let max = var("NCCL_MAX_NCHANNELS").and_then(|v| v.trim().parse::<u32>().ok());
    match (min, max) {
        (Some(a), Some(b)) if a == b && a > 0 => Some(a),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_file_names() {
        assert_eq!(level(None), "off");
        assert_eq!(level(Some("info")), "info");
        assert_eq!(level(Some("WARN")), "warn");
        assert_eq!(
            debug_file_name("/tmp/nccl.%h.%p.log", "n1", 42),
            "/tmp/nccl.n1.42.log"
        );
    }

    #[test]
    fn subsystems_pick_targets() {
        assert_eq!(filter("info", None), "info");
        assert_eq!(filter("info", Some("ALL")), "info");
        assert_eq!(filter("off", Some("INIT")), "off");
        let f = filter("info", Some("init,ENV"));
        assert!(f.starts_with("warn,nccl::comm=info,"), "{f}");
        assert!(f.contains("nccl::env=info"), "{f}");
        assert!(!f.contains("device_comm"), "{f}");
        let f = filter("info", Some("^COLL"));
        assert!(
            f.starts_with("info,") && f.contains("braid_runtime::device_comm=warn"),
            "{f}"
        );
        // Every directive parses.
        for s in [
            "INIT,COLL,P2P,NET,BOOTSTRAP,ENV,TUNING,ALLOC",
            "^INIT",
            "NOPE",
        ] {
            tracing_subscriber::EnvFilter::try_new(filter("trace", Some(s))).unwrap();
        }
    }
}
