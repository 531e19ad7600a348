//! `BRAID_DEBUG=WARN|INFO|TRACE` (like NCCL_DEBUG): user-facing logs on stderr through
//! tracing. Unset means warnings only. `BRAID_DEBUG_SUBSYS` narrows to targets, using
//! tracing's filter syntax (for example `braid_runtime=trace`).

use tracing_subscriber::EnvFilter;

pub fn init() {
    let level = std::env::var("BRAID_DEBUG").unwrap_or_else(|_| "WARN".into());
    let level = match level.to_ascii_uppercase().as_str() {
        "TRACE" => "trace",
        "DEBUG" => "debug",
        "INFO" => "info",
        "ERROR" => "error",
        "OFF" | "NONE" => "off",
        _ => "warn",
    };
    let filter = match std::env::var("BRAID_DEBUG_SUBSYS") {
        Ok(s) if !s.is_empty() => EnvFilter::new(s),
        _ => EnvFilter::new(level),
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(true)
        .without_time()
        .try_init();
}
