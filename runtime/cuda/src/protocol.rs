//! Which wire protocol a call uses. A plan's `protocol` header asks for one; `auto` (the
//! default) lets the runtime choose per call from the message size, as NCCL does:
//! LL's flags-in-every-line costs half the bandwidth but saves a fence and a counter
//! round trip per slice, which is what small messages pay for.
//!
//! `BRAID_PROTO=simple|ll` overrides every plan (like `NCCL_PROTO`). LL128 is not
//! implemented: it relies on 128-byte stores reaching the peer in order, which we have not
//! shown for these links; a plan asking for it runs Simple (logged at INFO).

use crate::codegen::Wire;
use crate::error::{CudaError, Result};
use crate::layout::CallShape;
use braid_ir::Protocol;

/// `auto` picks LL when each replica's share of a chunk is at most this many bytes.
pub const LL_MAX_BYTES: usize = 32 << 10;

/// The protocol requested through `BRAID_PROTO`, if any.
pub fn from_env() -> Result<Option<Protocol>> {
    match std::env::var("BRAID_PROTO") {
        Err(_) => Ok(None),
        Ok(v) => parse(&v).map(Some),
    }
}

fn parse(v: &str) -> Result<Protocol> {
    match v.trim().to_ascii_lowercase().as_str() {
        "simple" => Ok(Protocol::Simple),
        "ll" => Ok(Protocol::Ll),
        "ll128" => Ok(Protocol::Ll128),
        "auto" | "" => Ok(Protocol::Auto),
        other => Err(CudaError::Invalid(format!(
            "BRAID_PROTO={other}: expected simple, ll, ll128 or auto"
        ))),
    }
}

/// The wire for one call of `shape`'s plan: `requested` (from the environment) or the
/// plan's protocol, `auto` resolved from the size of one replica's share of a chunk.
pub fn choose(shape: &CallShape, requested: Option<Protocol>, host_fifo: bool) -> Wire {
    let protocol = match requested {
        Some(p) if p != Protocol::Auto => p,
        _ => shape.plan.protocol,
    };
    let ll = match protocol {
        Protocol::Ll => true,
        Protocol::Simple => false,
        Protocol::Ll128 => {
            tracing::info!(
                plan = %shape.plan.name,
                "protocol ll128 is not implemented on this backend; using simple"
            );
            false
        }
        Protocol::Auto => {
            let g = shape.geometry();
            let share = g.chunk_elems.div_ceil(shape.plan.channels.max(1) as usize) * shape.elem;
            share <= LL_MAX_BYTES
        }
    };
    Wire { ll, host_fifo }
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_ir::Mode;
    use braid_plan::Plan;

    fn plan(protocol: Protocol) -> Plan {
        let mut p = Plan::from_json(include_str!(
            "../../../tests/plans/good/exchange_allgather_2.json"
        ))
        .unwrap();
        p.protocol = protocol;
        p
    }

    fn shape(p: &Plan, count: usize) -> CallShape<'_> {
        CallShape {
            plan: p,
            elem: 4,
            count,
            mode: Mode::OutOfPlace,
        }
    }

    #[test]
    fn auto_uses_ll_for_small_shares_only() {
        let p = plan(Protocol::Auto);
        assert!(choose(&shape(&p, 1024), None, false).ll);
        assert!(!choose(&shape(&p, 16 << 20), None, false).ll);
        // More replicas make each share smaller.
        let mut q = plan(Protocol::Auto);
        q.channels = 64;
        assert!(choose(&shape(&q, (LL_MAX_BYTES / 4) * 32), None, false).ll);
    }

    #[test]
    fn plan_and_environment_requests_win_over_size() {
        let p = plan(Protocol::Simple);
        assert!(!choose(&shape(&p, 4), None, false).ll);
        assert!(choose(&shape(&p, 16 << 20), Some(Protocol::Ll), false).ll);
        let p = plan(Protocol::Ll);
        assert!(choose(&shape(&p, 16 << 20), None, true).ll);
        assert!(choose(&shape(&p, 4), None, true).host_fifo);
        // auto from the environment defers to the plan.
        assert!(
            !choose(
                &shape(&plan(Protocol::Simple), 4),
                Some(Protocol::Auto),
                false
            )
            .ll
        );
        // ll128 falls back to simple.
        assert!(!choose(&shape(&plan(Protocol::Ll128), 4), None, false).ll);
    }

    #[test]
    fn env_values_parse_or_are_refused() {
        assert_eq!(parse("LL").unwrap(), Protocol::Ll);
        assert_eq!(parse(" simple ").unwrap(), Protocol::Simple);
        assert!(parse("fast")
            .unwrap_err()
            .to_string()
            .contains("BRAID_PROTO=fast"));
    }
}
