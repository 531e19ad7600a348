//! The one policy that decides, per call, which plan runs, on how many replicas and with
//! which wire protocol; every backend and every caller (the `braid` command, the tests,
//! applications) goes through it. With a cost model attached ([`Policy::with_model`]:
//! the communicator's topology and a profile), the model prices every candidate in every
//! replica count and protocol the backend can run and the cheapest wins
//! ([`crate::selection`]); `BRAID_SELECT=rules` (or no model) decides by rules instead:
//! the registry's plan choice (user plans first, then shipped plans in [`preference`]
//! order), replicas that grow with the message size within the thread blocks the backend
//! can spare, and LL for small messages, as NCCL chooses.
//!
//! `BRAID_PROTO` / `NCCL_PROTO` (NCCL's list syntax, `^` excludes, or `auto`) limits the
//! protocols,
//! `BRAID_CHANNELS` a replica count (like `NCCL_MIN_NCHANNELS` = `NCCL_MAX_NCHANNELS`),
//! and `BRAID_ALGO` (or `NCCL_ALGO`) limits the plans with NCCL's syntax: `ring,tree`
//! allows only plans whose names contain one of the words, `^ring` allows all others.
//! Both lists take NCCL 2.24's lists per collective (`ring;allreduce:tree`,
//! [`split_per_collective`]).

use crate::error::{Result, RuntimeError};
use crate::geometry::per_segment;
use crate::registry::Registry;
use braid_ir::{Collective, Mode, Protocol};
use braid_plan::{Plan, Verified};
use std::sync::Arc;

/// Messages up to this size prefer latency-bound algorithms.
pub const SMALL_MESSAGE: usize = 256 * 1024;

/// Shipped algorithms in order of preference for a collective, rank count and message
/// size.
pub fn preference(collective: Collective, n: u32, bytes: usize) -> &'static [&'static str] {
    let small = bytes <= SMALL_MESSAGE;
    match (collective, small) {
        // On 2 ranks the one-shot without staging (out of place only) is the fastest
        // small all-reduce and two-shot the fastest in place; on more ranks the staged
        // one-shot is, since the unstaged one's receives add up one after another
        // (docs/perf.md, 2026-12-03).
        (Collective::Allreduce, true) if n == 2 => &[
            "one_shot_oop_allreduce",
            "two_shot_allreduce",
            "one_shot_allreduce",
            "tree_allreduce",
            "ring_allreduce",
        ],
        (Collective::Allreduce, true) => &[
            "one_shot_allreduce",
            "one_shot_oop_allreduce",
            "tree_allreduce",
            "two_shot_allreduce",
            "ring_allreduce",
        ],
        (Collective::Allreduce, false) => &[
            "ring_allreduce",
            "bidirectional_ring_allreduce",
            "double_binary_tree_allreduce",
            "two_shot_allreduce",
        ],
        (Collective::Allgather, _) => &["ring_allgather", "direct_allgather"],
        (Collective::ReduceScatter, _) => &["ring_reduce_scatter", "direct_reduce_scatter"],
        (Collective::Broadcast, true) => {
            &["binomial_broadcast", "chain_broadcast", "direct_broadcast"]
        }
        (Collective::Broadcast, false) => {
            &["chain_broadcast", "binomial_broadcast", "direct_broadcast"]
        }
        (Collective::Reduce, _) => &["tree_reduce", "direct_reduce"],
        (Collective::Alltoall, _) => &["direct_alltoall", "hierarchical_alltoall"],
    }
}

/// Bytes of one rank's larger buffer per replica below which adding a replica does not
/// pay (measured on 2xH200, docs/perf.md).
pub const BYTES_PER_REPLICA: usize = 16 << 10;
/// The most replicas the size rule picks.
pub const MAX_REPLICAS: u32 = 32;
/// `auto` picks LL when each replica's share of a chunk is at most this many bytes.
pub const LL_MAX_BYTES: usize = 32 << 10;

/// What the backend can offer a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// Thread blocks one rank may keep busy at once (its share of its GPU).
    pub block_budget: u32,
    /// Whether replicas grow with the message size (GPUs) or plans run as written.
    pub size_replicas: bool,
    /// Whether the backend has the LL protocol.
    pub ll: bool,
    /// Whether it may run LL128 on every link of the communicator (its stress test
    /// passed on each: `braid_cuda::ll128`).
    pub ll128: bool,
    /// Whether the communicator's ranks run in one launch (several ranks of one process
    /// on one GPU), so that out-of-place calls read peers' `in` directly where a plan
    /// allows ([`braid_plan::direct`]): what the cost model prices.
    pub direct: bool,
    /// Whether such calls run as flat launches where every rank's plan is a flat program
    /// ([`braid_plan::flat`]): what the cost model prices them as (when its profile
    /// has a price for one).
    pub flat: bool,
}

impl Target {
    /// The host backend: plans as written, one protocol.
    pub const HOST: Target = Target {
        block_budget: u32::MAX,
        size_replicas: false,
        ll: false,
        ll128: false,
        direct: false,
        flat: false,
    };
}

/// What a call is, as far as choosing goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Request {
    pub collective: Collective,
    pub n_ranks: u32,
    pub root: Option<u32>,
    pub mode: Mode,
    /// Bytes of the larger of the call's buffers on one rank.
    pub bytes: usize,
    /// Bytes per element.
    pub elem: usize,
}

/// The decision for one call.
#[derive(Clone, Debug)]
pub struct Choice {
    /// The plan as registered (its own `channels` may be 1).
    pub plan: Arc<Verified>,
    /// Replicas to run it with.
    pub replicas: u32,
    /// `Simple` or `Ll`.
    pub protocol: Protocol,
}

/// A list for every collective, if any, and each named collective's, in order.
pub type PerCollective<'a> = (Option<&'a str>, Vec<(Collective, &'a str)>);

/// NCCL's list syntax for `NCCL_ALGO` / `NCCL_PROTO`, per collective since NCCL 2.24:
/// `LIST[;COLLECTIVE:LIST]...`. The first list, the only one that may go without a
/// prefix, applies to every collective; each later one replaces it for the collective it
/// names (`allreduce`, `allgather`, `reducescatter` or `reduce_scatter`, `broadcast`,
/// `reduce`, `alltoall`; any case). Returns the list for every collective, if any, and
/// each named collective's, in order.
pub fn split_per_collective<'a>(var: &str, value: &'a str) -> Result<PerCollective<'a>> {
    let mut all = None;
    let mut per = Vec::new();
    for (i, entry) in value.split(';').enumerate() {
        let entry = entry.trim();
        if entry.is_empty() && i > 0 {
            continue;
        }
        match entry.split_once(':') {
            None if i == 0 => all = Some(entry),
            None => {
                return Err(RuntimeError::Invalid(format!(
                    "{var}={value}: `{entry}`: every list after the first names its collective (`allreduce:tree`)"
                )))
            }
            Some((name, list)) => {
                let key = |s: &str| s.trim().to_ascii_lowercase().replace('_', "");
                let c = Collective::ALL
                    .into_iter()
                    .find(|c| key(c.name()) == key(name))
                    .ok_or_else(|| {
                        RuntimeError::Invalid(format!(
                            "{var}={value}: `{}` is not a collective (allreduce, allgather, reducescatter, broadcast, reduce, alltoall)",
                            name.trim()
                        ))
                    })?;
                per.push((c, list.trim()));
            }
        }
    }
    Ok((all, per))
}

/// Which plans a call may use, by name, as `NCCL_ALGO` limits NCCL's algorithms: a list
/// of words, each allowing the plans whose names contain it (`ring` allows
/// `ring_allreduce` and `bidirectional_ring_allreduce`), or, after `^`, excluding them;
/// per collective in NCCL's syntax (`ring;allreduce:^ring`, [`split_per_collective`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlgoFilter {
    /// The list for collectives that have none of their own (`None`: all plans).
    all: Option<Words>,
    /// Each named collective's list (the last for a collective counts).
    per: Vec<(Collective, Words)>,
    /// The variable and value it came from, for messages.
    pub source: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Words {
    exclude: bool,
    /// The words are whole plan names (`=ring_allreduce`), not parts of them.
    exact: bool,
    words: Vec<String>,
}

impl Words {
    fn parse(var: &str, value: &str, list: &str) -> Result<Words> {
        // NCCL's list syntax, as its interface and HCA lists read it: `^` excludes,
        // then `=` makes the names exact.
        let (exclude, exact, items) = braid_topo::ifname::split_list(list);
        let words: Vec<String> = items.iter().map(|w| w.to_ascii_lowercase()).collect();
        if words.is_empty() {
            return Err(RuntimeError::Invalid(format!(
                "{var}={value}: expected algorithm names, as `ring,tree`, `^ring`, `=ring_allreduce` or `ring;allreduce:tree`"
            )));
        }
        Ok(Words {
            exclude,
            exact,
            words,
        })
    }

    fn allows(&self, plan: &str) -> bool {
        let name = plan.to_ascii_lowercase();
        let named = self.words.iter().any(|w| {
            if self.exact {
                name == *w
            } else {
                name.contains(w.as_str())
            }
        });
        named != self.exclude
    }
}

impl AlgoFilter {
    /// Parses `value` of the variable `var`.
    pub fn parse(var: &str, value: &str) -> Result<AlgoFilter> {
        let (all, per) = split_per_collective(var, value)?;
        Ok(AlgoFilter {
            all: all.map(|l| Words::parse(var, value, l)).transpose()?,
            per: per
                .into_iter()
                .map(|(c, l)| Ok((c, Words::parse(var, value, l)?)))
                .collect::<Result<_>>()?,
            source: format!("{var}={value}"),
        })
    }

    /// Whether a plan of this name may serve calls of `collective`.
    pub fn allows(&self, collective: Collective, plan: &str) -> bool {
        let rule = self
            .per
            .iter()
            .rev()
            .find(|(c, _)| *c == collective)
            .map(|(_, w)| w)
            .or(self.all.as_ref());
        rule.is_none_or(|w| w.allows(plan))
    }
}

/// The knobs of the policy (from the environment, or set by a program).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// A protocol every call uses (`None` or `Auto`: the plan's, `auto` by size).
    pub protocol: Option<Protocol>,
    /// The protocol list excludes LL128 (`NCCL_PROTO=^LL128`, or a list without it): no
    /// call runs LL128, even where its stress test passed.
    pub no_ll128: bool,
    /// Simple or LL, where the protocol list excludes it and keeps the other two
    /// (`NCCL_PROTO=^LL`, `^Simple`): calls choose between those, and plans that ask
    /// for the excluded one run the other of Simple and LL.
    pub excluded: Option<Protocol>,
    /// Collectives whose protocols the list names apart (`NCCL_PROTO=LL,Simple;allreduce:^LL`):
    /// each one's rule in place of the fields above (the last entry for a collective
    /// counts).
    pub protocol_per: Vec<(Collective, ProtocolRule)>,
    /// A replica count every call uses.
    pub replicas: Option<u32>,
    /// The plans calls may use (`None`: all).
    pub algo: Option<AlgoFilter>,
    /// The cost model that chooses (`None`: the rules).
    pub model: Option<crate::selection::ModelRef>,
    /// `BRAID_SELECT=rules`: never attach a model.
    pub rules_only: bool,
    /// Thread blocks one rank's call may use (`BRAID_MAX_CTAS` / `NCCL_MAX_CTAS`), in
    /// place of the backend's budget: lower to leave multiprocessors to the
    /// application's kernels, higher where the GPU has nothing else to run.
    pub max_blocks: Option<u32>,
}

/// The most thread blocks `BRAID_MAX_CTAS` may grant one rank's call.
pub const MAX_CTAS: u32 = 1024;

/// A value of `BRAID_MAX_CTAS` / `NCCL_MAX_CTAS` (read as variable `var`).
pub fn parse_max_ctas(var: &str, v: &str) -> Result<u32> {
    match v.trim().parse::<u32>() {
        Ok(n) if (1..=MAX_CTAS).contains(&n) => Ok(n),
        _ => Err(RuntimeError::Invalid(format!(
            "{var}={v}: expected a thread-block count from 1 to {MAX_CTAS}"
        ))),
    }
}

impl Policy {
    /// `BRAID_PROTO`, `BRAID_CHANNELS`, `BRAID_ALGO` / `NCCL_ALGO`, `BRAID_SELECT` and
    /// `BRAID_MAX_CTAS` / `NCCL_MAX_CTAS`.
    pub fn from_env() -> Result<Policy> {
        Self::from_vars(&|n| std::env::var(n).ok())
    }

    /// [`Policy::from_env`] with the variables read through `get` (a map in tests).
    pub fn from_vars(get: &dyn Fn(&str) -> Option<String>) -> Result<Policy> {
        let var = |n: &str| get(n).filter(|v| !v.trim().is_empty());
        let proto = match (var("BRAID_PROTO"), var("NCCL_PROTO")) {
            (Some(v), _) => Some(("BRAID_PROTO", v)),
            (None, Some(v)) => Some(("NCCL_PROTO", v)),
            (None, None) => None,
        };
        let (mut all_rule, mut protocol_per) = (ProtocolRule::default(), Vec::new());
        if let Some((name, v)) = &proto {
            let (all, per) = split_per_collective(name, v)?;
            if let Some(list) = all {
                all_rule = ProtocolRule::parse(name, list)?;
            }
            for (c, list) in per {
                protocol_per.push((c, ProtocolRule::parse(name, list)?));
            }
        }
        let ProtocolRule {
            protocol,
            excluded,
            no_ll128,
        } = all_rule;
        let replicas = var("BRAID_CHANNELS")
            .map(|v| match v.trim().parse::<u32>() {
                Ok(c) if (1..=MAX_REPLICAS * 2).contains(&c) => Ok(c),
                _ => Err(RuntimeError::Invalid(format!(
                    "BRAID_CHANNELS={v}: expected a replica count from 1 to {}",
                    MAX_REPLICAS * 2
                ))),
            })
            .transpose()?;
        let algo = match (var("BRAID_ALGO"), var("NCCL_ALGO")) {
            (Some(v), _) => Some(AlgoFilter::parse("BRAID_ALGO", &v)?),
            (None, Some(v)) => Some(AlgoFilter::parse("NCCL_ALGO", &v)?),
            (None, None) => None,
        };
        let rules_only = match var("BRAID_SELECT").as_deref().map(str::trim) {
            None | Some("model") => false,
            Some("rules") => true,
            Some(other) => {
                return Err(RuntimeError::Invalid(format!(
                    "BRAID_SELECT={other}: expected model or rules"
                )))
            }
        };
        let max_blocks = match (var("BRAID_MAX_CTAS"), var("NCCL_MAX_CTAS")) {
            (Some(v), _) => Some(parse_max_ctas("BRAID_MAX_CTAS", &v)?),
            (None, Some(v)) => Some(parse_max_ctas("NCCL_MAX_CTAS", &v)?),
            (None, None) => None,
        };
        Ok(Policy {
            protocol,
            no_ll128,
            excluded,
            protocol_per,
            replicas,
            algo,
            model: None,
            rules_only,
            max_blocks,
        })
    }

    /// What the backend offers (`target`) as this policy allows it: its block limit
    /// applied (a call still gets one replica of its plan however many blocks that
    /// takes), and no LL128 where the protocol list excludes it.
    pub fn target(&self, target: Target) -> Target {
        let target = Target {
            ll128: target.ll128 && !self.no_ll128,
            ..target
        };
        match self.max_blocks {
            Some(m) if target.size_replicas => Target {
                block_budget: m,
                ..target
            },
            _ => target,
        }
    }

    /// The protocol every call of `collective` uses, where the protocol list forces one
    /// (`None` or `Auto`: the plan's).
    pub fn protocol_of(&self, collective: Collective) -> Option<Protocol> {
        self.protocol_rule(collective).protocol
    }

    /// Whether the protocol list keeps LL128 from calls of `collective`.
    pub fn no_ll128_of(&self, collective: Collective) -> bool {
        self.protocol_rule(collective).no_ll128
    }

    /// Simple or LL, where the protocol list keeps it from calls of `collective` while
    /// allowing the other two.
    pub fn excluded_of(&self, collective: Collective) -> Option<Protocol> {
        self.protocol_rule(collective).excluded
    }

    fn protocol_rule(&self, collective: Collective) -> ProtocolRule {
        self.protocol_per
            .iter()
            .rev()
            .find(|(c, _)| *c == collective)
            .map_or(
                ProtocolRule {
                    protocol: self.protocol,
                    excluded: self.excluded,
                    no_ll128: self.no_ll128,
                },
                |&(_, r)| r,
            )
    }

    /// This policy choosing by the cost model on `topo` with `profile` (unless
    /// `BRAID_SELECT=rules` asked for the rules).
    pub fn with_model(
        mut self,
        topo: braid_topo::Topology,
        profile: braid_cost::Profile,
    ) -> Policy {
        if !self.rules_only {
            self.model = Some(crate::selection::ModelRef(Arc::new(
                crate::selection::Model::new(topo, profile),
            )));
        }
        self
    }

    /// The plan, replicas and protocol for `req` on `target`.
    pub fn choose(&self, registry: &Registry, req: &Request, target: &Target) -> Result<Choice> {
        let mut target = self.target(*target);
        target.ll128 &= !self.no_ll128_of(req.collective);
        let target = &target;
        match &self.model {
            Some(m) => crate::selection::choose(self, &m.0, registry, req, target),
            None => self.choose_by_rules(registry, req, target),
        }
    }

    /// [`Policy::choose`] by the rules alone.
    pub fn choose_by_rules(
        &self,
        registry: &Registry,
        req: &Request,
        target: &Target,
    ) -> Result<Choice> {
        let plan = match &self.algo {
            None => registry.select(req.collective, req.n_ranks, req.root, req.mode, req.bytes)?,
            Some(f) => registry.select_with(
                req.collective,
                req.n_ranks,
                req.root,
                req.mode,
                req.bytes,
                Some(f),
            )?,
        };
        let replicas = self.replicas_for(&plan, req.bytes, target);
        let protocol = self.protocol_for(&plan, req, replicas, target);
        Ok(Choice {
            plan,
            replicas,
            protocol,
        })
    }

    /// Replicas: forced, or the plan's own count, or (GPUs) by size.
    pub fn replicas_for(&self, plan: &Plan, bytes: usize, target: &Target) -> u32 {
        if let Some(r) = self.replicas {
            return r;
        }
        if plan.channels != 1 || !target.size_replicas {
            return plan.channels.max(1);
        }
        replicas(plan, bytes, target.block_budget)
    }

    /// The protocol: forced, or the plan's, `auto` resolved by the size of one replica's
    /// share of a chunk. A backend without LL runs everything Simple.
    pub fn protocol_for(
        &self,
        plan: &Plan,
        req: &Request,
        replicas: u32,
        target: &Target,
    ) -> Protocol {
        let asked = match self.protocol_of(req.collective) {
            Some(p) if p != Protocol::Auto => p,
            _ => plan.protocol,
        };
        let excluded = self.excluded_of(req.collective);
        let ll = match asked {
            Protocol::Ll128 if target.ll128 => return Protocol::Ll128,
            // The list keeps one of Simple and LL out: the other.
            _ if excluded == Some(Protocol::Ll) => false,
            _ if excluded == Some(Protocol::Simple) => true,
            Protocol::Ll => true,
            Protocol::Simple => false,
            Protocol::Ll128 => {
                tracing::debug!(
                    plan = %plan.name,
                    "ll128 has not passed its stress test on this communicator's links; using simple"
                );
                false
            }
            Protocol::Auto => {
                let per = per_segment(req.collective, req.n_ranks, plan.chunks);
                let elems = req.bytes / req.elem.max(1);
                let seg = if req.collective.has_k() {
                    elems / req.n_ranks.max(1) as usize
                } else {
                    elems
                };
                let share = seg.div_ceil(per).div_ceil(replicas.max(1) as usize) * req.elem;
                share <= LL_MAX_BYTES
            }
        };
        if ll && target.ll {
            Protocol::Ll
        } else {
            Protocol::Simple
        }
    }
}

/// `BRAID_PROTO`'s values.
pub fn parse_protocol(v: &str) -> Result<Protocol> {
    match v.trim().to_ascii_lowercase().as_str() {
        "simple" => Ok(Protocol::Simple),
        "ll" => Ok(Protocol::Ll),
        "ll128" => Ok(Protocol::Ll128),
        "auto" | "" => Ok(Protocol::Auto),
        other => Err(RuntimeError::Invalid(format!(
            "BRAID_PROTO={other}: expected simple, ll, ll128 or auto"
        ))),
    }
}

/// What a protocol list says for the calls it covers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProtocolRule {
    /// The protocol every call uses (`None` or `Auto`: the plan's).
    pub protocol: Option<Protocol>,
    /// Simple or LL, excluded while the other two are allowed.
    pub excluded: Option<Protocol>,
    /// LL128 not allowed.
    pub no_ll128: bool,
}

impl ProtocolRule {
    /// The rule of one list of `BRAID_PROTO` / `NCCL_PROTO` (`LL,Simple`, `^LL`, `auto`).
    pub fn parse(var: &str, list: &str) -> Result<ProtocolRule> {
        let set = protocol_set(var, list)?;
        Ok(ProtocolRule {
            protocol: parse_protocols(var, list)?,
            excluded: match set {
                [true, false, true] => Some(Protocol::Ll),
                [false, true, true] => Some(Protocol::Simple),
                _ => None,
            },
            no_ll128: !set[2],
        })
    }
}

/// `BRAID_PROTO` / `NCCL_PROTO` (read as variable `var`): `auto` (by size), or NCCL's
/// list of the protocols calls may use (`LL,Simple`; `^LL128` all but these; any case),
/// as the policy's forced protocol: both of Simple and LL allowed is `None` (the plan's
/// own, `auto` by size, LL128 among them where [`protocol_set`] allows it and its
/// stress test passed), one of them forces it, except that Simple and LL128 without LL
/// is `None` too, and so are LL and LL128 without Simple (the call chooses between
/// the two: [`ProtocolRule::excluded`]), `LL128`
/// alone asks for LL128 (which runs Simple where the stress test did not pass).
pub fn parse_protocols(var: &str, v: &str) -> Result<Option<Protocol>> {
    if v.trim().eq_ignore_ascii_case("auto") {
        return Ok(Some(Protocol::Auto));
    }
    Ok(match protocol_set(var, v)? {
        [true, true, _] => None,
        // Two of the three with LL128: the call chooses (`ProtocolRule::excluded` keeps
        // the third out).
        [true, false, true] | [false, true, true] => None,
        [true, false, false] => Some(Protocol::Simple),
        [false, true, _] => Some(Protocol::Ll),
        [false, false, true] => Some(Protocol::Ll128),
        [false, false, false] => {
            return Err(RuntimeError::Invalid(format!(
                "{var}={v} allows no protocol"
            )))
        }
    })
}

/// Which of Simple, LL and LL128 a value of `BRAID_PROTO` / `NCCL_PROTO` allows (`auto`:
/// all).
pub fn protocol_set(var: &str, v: &str) -> Result<[bool; 3]> {
    let text = v.trim();
    if text.eq_ignore_ascii_case("auto") {
        return Ok([true; 3]);
    }
    let (exclude, list) = match text.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let mut named = [false; 3];
    for word in list.split(',').map(str::trim) {
        let i = match word.to_ascii_lowercase().as_str() {
            "simple" => 0,
            "ll" => 1,
            "ll128" => 2,
            _ => {
                return Err(RuntimeError::Invalid(format!(
                    "{var}={v}: `{word}` is not a protocol (LL, LL128, Simple; `^` excludes; or \
                     auto)"
                )))
            }
        };
        named[i] = true;
    }
    Ok(named.map(|n| n != exclude))
}

/// Thread blocks one replica of `plan` takes on its busiest rank (at least 1).
pub fn blocks_per_replica(plan: &Plan) -> u32 {
    plan.ranks
        .iter()
        .map(|r| r.blocks.len() as u32)
        .max()
        .unwrap_or(1)
        .max(1)
}

/// Replicas for a call of `plan` moving `bytes` (one rank's larger buffer) when a rank may
/// use `budget` thread blocks: a power of two, at least 1, one per [`BYTES_PER_REPLICA`],
/// at most [`MAX_REPLICAS`] (and what the plan verifier's channel bound allows the plan),
/// and never more blocks than the budget.
pub fn replicas(plan: &Plan, bytes: usize, budget: u32) -> u32 {
    let fit = (budget / blocks_per_replica(plan)).max(1);
    let want = (bytes / BYTES_PER_REPLICA).clamp(1, u32::MAX as usize) as u32;
    let cap = want
        .min(MAX_REPLICAS)
        .min(fit)
        .min(braid_cost::max_replicas(plan));
    // Largest power of two not above `cap`.
    1 << (31 - cap.leading_zeros())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(blocks: usize, protocol: Protocol) -> Plan {
        let mut p = Plan::from_json(include_str!(
            "../../../tests/plans/good/exchange_allgather_2.json"
        ))
        .unwrap();
        let b = p.ranks[0].blocks[0].clone();
        p.ranks[0].blocks = vec![b; blocks];
        p.protocol = protocol;
        p
    }

    const GPU: Target = Target {
        block_budget: 99,
        size_replicas: true,
        ll: true,
        ll128: false,
        direct: false,
        flat: false,
    };

    fn req(bytes: usize) -> Request {
        Request {
            collective: Collective::Allgather,
            n_ranks: 2,
            root: None,
            mode: Mode::OutOfPlace,
            bytes,
            elem: 4,
        }
    }

    #[test]
    fn replicas_grow_with_size_in_powers_of_two_within_the_budget() {
        let p = plan(1, Protocol::Auto);
        assert_eq!(replicas(&p, 8, 99), 1);
        assert_eq!(replicas(&p, BYTES_PER_REPLICA * 3, 99), 2);
        assert_eq!(replicas(&p, BYTES_PER_REPLICA * 16 + 1, 99), 16);
        assert_eq!(replicas(&p, 1 << 30, 99), MAX_REPLICAS);
        assert_eq!(replicas(&plan(8, Protocol::Auto), 1 << 30, 99), 8);
        assert_eq!(replicas(&plan(8, Protocol::Auto), 1 << 30, 10), 1);
        assert_eq!(replicas(&plan(5, Protocol::Auto), 1 << 30, 99), 16);
    }

    #[test]
    fn forced_and_plan_replicas_win_and_the_host_runs_plans_as_written() {
        let p = plan(1, Protocol::Auto);
        let forced = Policy {
            replicas: Some(3),
            ..Policy::default()
        };
        assert_eq!(forced.replicas_for(&p, 1 << 30, &GPU), 3);
        assert_eq!(
            Policy::default().replicas_for(&p, 1 << 30, &Target::HOST),
            1
        );
        let mut q = p.clone();
        q.channels = 4;
        assert_eq!(Policy::default().replicas_for(&q, 8, &GPU), 4);
    }

    #[test]
    fn auto_uses_ll_for_small_shares_only_and_requests_win() {
        let d = Policy::default();
        let p = plan(1, Protocol::Auto);
        assert_eq!(d.protocol_for(&p, &req(8 << 10), 1, &GPU), Protocol::Ll);
        assert_eq!(
            d.protocol_for(&p, &req(64 << 20), 1, &GPU),
            Protocol::Simple
        );
        // More replicas make each share smaller.
        assert_eq!(d.protocol_for(&p, &req(1 << 20), 32, &GPU), Protocol::Ll);
        let simple = plan(1, Protocol::Simple);
        assert_eq!(d.protocol_for(&simple, &req(8), 1, &GPU), Protocol::Simple);
        let force_ll = Policy {
            protocol: Some(Protocol::Ll),
            ..d.clone()
        };
        assert_eq!(
            force_ll.protocol_for(&simple, &req(1 << 30), 1, &GPU),
            Protocol::Ll
        );
        // auto from the environment defers to the plan; ll128 runs only where the
        // backend's links passed its stress test, else Simple; a backend without LL never
        // gets it.
        let auto = Policy {
            protocol: Some(Protocol::Auto),
            ..d.clone()
        };
        assert_eq!(
            auto.protocol_for(&simple, &req(8), 1, &GPU),
            Protocol::Simple
        );
        let ll128 = plan(1, Protocol::Ll128);
        assert_eq!(d.protocol_for(&ll128, &req(8), 1, &GPU), Protocol::Simple);
        let verified = Target { ll128: true, ..GPU };
        assert_eq!(
            d.protocol_for(&ll128, &req(8), 1, &verified),
            Protocol::Ll128
        );
        let force_ll128 = Policy {
            protocol: Some(Protocol::Ll128),
            ..d.clone()
        };
        assert_eq!(
            force_ll128.protocol_for(&simple, &req(1 << 20), 1, &verified),
            Protocol::Ll128
        );
        assert_eq!(
            force_ll128.protocol_for(&simple, &req(1 << 20), 1, &GPU),
            Protocol::Simple
        );
        // A protocol list without LL128 keeps a plan that asks for it on Simple.
        let no_ll128 = Policy {
            no_ll128: true,
            ..d.clone()
        };
        assert_eq!(
            no_ll128.protocol_for(&ll128, &req(8), 1, &no_ll128.target(verified)),
            Protocol::Simple
        );
        assert_eq!(
            force_ll.protocol_for(&simple, &req(8), 1, &Target::HOST),
            Protocol::Simple
        );
    }

    #[test]
    fn algorithm_filters_take_nccl_syntax() {
        use Collective::{Allgather, Allreduce, Broadcast, ReduceScatter};
        let only = AlgoFilter::parse("NCCL_ALGO", "Ring,tree").unwrap();
        assert!(
            only.allows(Allreduce, "ring_allreduce")
                && only.allows(Allreduce, "bidirectional_ring_allreduce")
        );
        assert!(
            only.allows(Allreduce, "double_binary_tree_allreduce")
                && !only.allows(Allreduce, "one_shot_allreduce")
        );
        let not = AlgoFilter::parse("BRAID_ALGO", "^ring").unwrap();
        assert!(
            !not.allows(Allreduce, "ring_allreduce") && not.allows(Allreduce, "tree_allreduce")
        );
        assert!(AlgoFilter::parse("BRAID_ALGO", " ^ , ").is_err());
        // `=`: whole names, as in NCCL's interface lists.
        let exact = AlgoFilter::parse("BRAID_ALGO", "=ring_allreduce,tree_allreduce").unwrap();
        assert!(
            exact.allows(Allreduce, "Ring_Allreduce") && exact.allows(Allreduce, "tree_allreduce")
        );
        assert!(
            !exact.allows(Allreduce, "bidirectional_ring_allreduce")
                && !exact.allows(Allreduce, "double_binary_tree_allreduce")
        );
        let not_exact = AlgoFilter::parse("BRAID_ALGO", "^=ring_allreduce").unwrap();
        assert!(
            !not_exact.allows(Allreduce, "ring_allreduce")
                && not_exact.allows(Allreduce, "bidirectional_ring_allreduce")
        );
        // Per collective (NCCL 2.24): the first list for all, later ones replace it for
        // the collective they name; the last for a collective counts.
        let per = AlgoFilter::parse(
            "NCCL_ALGO",
            "ring;AllReduce:tree;reducescatter:^ring;allreduce:^tree,ring",
        )
        .unwrap();
        assert!(
            per.allows(Allgather, "ring_allgather") && !per.allows(Allgather, "direct_allgather")
        );
        assert!(
            per.allows(Allreduce, "two_shot_allreduce") && !per.allows(Allreduce, "tree_allreduce")
        );
        assert!(!per.allows(ReduceScatter, "ring_reduce_scatter"));
        assert!(per.allows(ReduceScatter, "direct_reduce_scatter"));
        // Only collectives named: the others may use every plan.
        let named = AlgoFilter::parse("NCCL_ALGO", "broadcast:chain").unwrap();
        assert!(named.allows(Allreduce, "one_shot_allreduce"));
        assert!(!named.allows(Broadcast, "direct_broadcast"));
        // A later list without its collective, or a collective that does not exist.
        let e = AlgoFilter::parse("NCCL_ALGO", "ring;tree")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("every list after the first names its collective"),
            "{e}"
        );
        let e = AlgoFilter::parse("NCCL_ALGO", "ring;allreduc:tree")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`allreduc` is not a collective"), "{e}");
    }

    #[test]
    fn protocol_lists_take_nccl_syntax_per_collective() {
        use Collective::{Allgather, Allreduce, Broadcast};
        let vars = |v: &'static str| move |n: &str| (n == "NCCL_PROTO").then(|| v.to_string());
        let p = Policy::from_vars(&vars("LL,Simple;allreduce:^LL")).unwrap();
        assert_eq!(p.protocol_of(Allgather), None);
        assert!(p.no_ll128_of(Allgather));
        // All but LL for the all-reduce: Simple and LL128 to choose from.
        assert_eq!(p.protocol_of(Allreduce), None);
        assert_eq!(p.excluded_of(Allreduce), Some(Protocol::Ll));
        assert!(!p.no_ll128_of(Allreduce) && p.excluded_of(Allgather).is_none());
        // "Everything but LL128, but only LL128 for allreduce".
        let p = Policy::from_vars(&vars("^LL128;allreduce:LL128")).unwrap();
        assert!(p.no_ll128_of(Broadcast) && !p.no_ll128_of(Allreduce));
        assert_eq!(p.protocol_of(Allreduce), Some(Protocol::Ll128));
        // The forced protocol reaches the choice for that collective only.
        let simple = plan(2, Protocol::Auto);
        let small = |c| Request {
            collective: c,
            ..req(8)
        };
        let p = Policy::from_vars(&vars("allreduce:Simple")).unwrap();
        assert_eq!(
            p.protocol_for(&simple, &small(Allreduce), 1, &GPU),
            Protocol::Simple
        );
        assert_eq!(
            p.protocol_for(&simple, &small(Allgather), 1, &GPU),
            Protocol::Ll
        );
        // Without LL the rules run a small call Simple, and a plan that asks for LL too.
        let p = Policy::from_vars(&vars("^LL")).unwrap();
        assert_eq!(
            p.protocol_for(&simple, &small(Allgather), 1, &GPU),
            Protocol::Simple
        );
        assert_eq!(
            p.protocol_for(&plan(2, Protocol::Ll), &small(Allgather), 1, &GPU),
            Protocol::Simple
        );
        // Without Simple, LL however large the call, and for a plan that asks for Simple.
        let p = Policy::from_vars(&vars("^Simple")).unwrap();
        let large = Request {
            bytes: 1 << 30,
            ..small(Allgather)
        };
        assert_eq!(p.protocol_for(&simple, &large, 1, &GPU), Protocol::Ll);
        assert_eq!(
            p.protocol_for(&plan(2, Protocol::Simple), &large, 1, &GPU),
            Protocol::Ll
        );
        // (A backend without LL runs Simple whatever the list says.)
        assert_eq!(
            p.protocol_for(&simple, &large, 1, &Target::HOST),
            Protocol::Simple
        );
        assert!(Policy::from_vars(&vars("LL;allreduce:fast")).is_err());
    }

    #[test]
    fn the_block_limit_replaces_the_backends_budget() {
        let p = plan(2, Protocol::Auto);
        let limited = Policy {
            max_blocks: Some(8),
            ..Policy::default()
        };
        let t = limited.target(GPU);
        assert_eq!(t.block_budget, 8);
        assert_eq!(limited.replicas_for(&p, 1 << 30, &t), 4);
        let wide = Policy {
            max_blocks: Some(200),
            ..Policy::default()
        };
        assert_eq!(
            wide.replicas_for(&p, 1 << 30, &wide.target(GPU)),
            MAX_REPLICAS
        );
        assert_eq!(Policy::default().replicas_for(&p, 1 << 30, &GPU), 32);
        // Fewer blocks than one replica takes: one replica still runs.
        let one = Policy {
            max_blocks: Some(1),
            ..Policy::default()
        };
        assert_eq!(one.replicas_for(&p, 1 << 30, &one.target(GPU)), 1);
        // The host runs plans as written: nothing to limit.
        assert_eq!(limited.target(Target::HOST), Target::HOST);
        assert_eq!(parse_max_ctas("NCCL_MAX_CTAS", " 16 ").unwrap(), 16);
        for bad in ["0", "-1", "lots", "1025"] {
            let e = parse_max_ctas("BRAID_MAX_CTAS", bad)
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("BRAID_MAX_CTAS={bad}")), "{e}");
        }
    }

    #[test]
    fn protocol_lists_take_nccls_syntax() {
        let p = |v: &str| parse_protocols("NCCL_PROTO", v);
        assert_eq!(p("LL,Simple").unwrap(), None);
        assert_eq!(p("simple").unwrap(), Some(Protocol::Simple));
        // Simple and LL128: no protocol forced, LL kept out by the rule.
        assert_eq!(p("^LL").unwrap(), None);
        assert_eq!(
            ProtocolRule::parse("NCCL_PROTO", "^ll").unwrap(),
            ProtocolRule {
                protocol: None,
                excluded: Some(Protocol::Ll),
                no_ll128: false
            }
        );
        assert_eq!(p("Simple,LL").unwrap(), None);
        assert!(ProtocolRule::parse("NCCL_PROTO", "Simple,LL")
            .unwrap()
            .excluded
            .is_none());
        assert_eq!(p("^simple,ll128").unwrap(), Some(Protocol::Ll));
        // LL and LL128 (all but Simple): the call chooses between them.
        assert_eq!(p("LL, LL128").unwrap(), None);
        assert_eq!(
            ProtocolRule::parse("NCCL_PROTO", "^Simple")
                .unwrap()
                .excluded,
            Some(Protocol::Simple)
        );
        assert_eq!(p("^LL128").unwrap(), None);
        assert_eq!(p("LL128").unwrap(), Some(Protocol::Ll128));
        assert_eq!(p(" Auto ").unwrap(), Some(Protocol::Auto));
        let e = p("LL,fast").unwrap_err().to_string();
        assert!(
            e.contains("NCCL_PROTO=LL,fast") && e.contains("`fast`"),
            "{e}"
        );
        let e = p("^LL,Simple,LL128").unwrap_err().to_string();
        assert!(e.contains("allows no protocol"), "{e}");
    }

    #[test]
    fn env_values_parse_or_are_refused() {
        assert_eq!(parse_protocol("LL").unwrap(), Protocol::Ll);
        assert_eq!(parse_protocol(" simple ").unwrap(), Protocol::Simple);
        assert!(parse_protocol("fast")
            .unwrap_err()
            .to_string()
            .contains("BRAID_PROTO=fast"));
    }
}
