//! `braid synth COLLECTIVE --topo TOPO`: writes a verified program for the topology. The
//! synthesizer proposes programs (rings ordered for the topology, hierarchical ones
//! across nodes, direct ones for latency); each is compiled and verified like any
//! program, then measured by checkers that read only the verified plan: its bottleneck
//! (bytes per link over the links' bandwidth) against the topology's cut lower bound,
//! and the cost model's predicted time. The best one for the objective is written.

use crate::error::CliError;
use crate::{sizes, topo_arg};
use braid_cost::bound::{bottleneck_us, cut_bound_us};
use braid_cost::{rank, Candidate, Profile, Request};
use braid_ir::{Collective, Mode};
use braid_synth::{candidates, Objective};
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ObjectiveArg {
    Bandwidth,
    Latency,
}

#[derive(Debug, Clone, clap::Args)]
pub struct SynthArgs {
    /// allgather, reduce_scatter, allreduce, broadcast or reduce.
    pub collective: String,
    #[arg(long, default_value = "nvswitch:8")]
    pub topo: String,
    /// The message size to optimise for (bytes of one rank's larger buffer): the program
    /// the cost model predicts fastest at that size, latency and bandwidth ones alike.
    #[arg(long, value_parser = sizes::parse_size, conflicts_with = "objective")]
    pub size: Option<u64>,
    /// Optimise for bandwidth (large messages; reported at 1 GiB) or latency (fewest
    /// steps; reported at 1 KiB).
    #[arg(long, value_enum)]
    pub objective: Option<ObjectiveArg>,
    /// Write the program to this file instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE.braid")]
    pub output: Option<PathBuf>,
    /// Also write the verified plan.
    #[arg(long, value_name = "PLAN.json")]
    pub plan: Option<PathBuf>,
    /// Print a JSON summary (bound, bottleneck, predicted time, the program) instead of
    /// the program.
    #[arg(long)]
    pub json: bool,
}

struct Scored {
    program: braid_synth::Program,
    plan: braid_plan::Verified,
    bottleneck_us: f64,
    link: String,
    predicted_us: f64,
    replicas: u32,
    protocol: braid_ir::Protocol,
}

#[derive(serde::Serialize)]
struct Summary<'a> {
    collective: String,
    topology: &'a str,
    size: u64,
    objective: &'a str,
    name: &'a str,
    bound_us: f64,
    bottleneck_us: f64,
    bottleneck_link: &'a str,
    predicted_us: f64,
    replicas: u32,
    protocol: &'a str,
    best_shipped: Option<Shipped>,
    candidates: Vec<(String, f64, f64)>,
    program: &'a str,
}

#[derive(serde::Serialize)]
struct Shipped {
    name: String,
    predicted_us: f64,
}

pub fn run(args: &SynthArgs) -> Result<String, CliError> {
    let collective = Collective::from_name(&args.collective).ok_or_else(|| {
        CliError::Usage(format!("error: unknown collective `{}`", args.collective))
    })?;
    if !braid_synth::SUPPORTED.contains(&collective) {
        return Err(CliError::Usage(format!(
            "error: braid synth writes allgather, reduce_scatter, allreduce, broadcast, reduce and alltoall, not {collective}"
        )));
    }
    let topo = topo_arg::load(&args.topo)?;
    let n = topo.n_ranks();
    if n < 2 {
        return Err(CliError::Usage(format!(
            "error: --topo {}: synthesis needs at least 2 ranks",
            args.topo
        )));
    }
    let objectives: Vec<Objective> = match (args.size, args.objective) {
        (Some(_), _) => vec![Objective::Bandwidth, Objective::Latency],
        (None, Some(ObjectiveArg::Latency)) => vec![Objective::Latency],
        (None, _) => vec![Objective::Bandwidth],
    };
    let size = args.size.unwrap_or(match args.objective {
        Some(ObjectiveArg::Latency) => 1 << 10,
        _ => 1 << 30,
    });
    let granule = sizes::granule(collective, n, braid_runtime::dtype::DType::F32);
    if size < granule {
        return Err(CliError::Usage(format!(
            "error: --size {size}: {collective} on {n} ranks needs at least {granule} bytes (one f32 per rank)"
        )));
    }
    let profile = Profile::default();
    // Rooted collectives are written for every root and reported for root 0.
    let root = collective.is_rooted().then_some(0);
    let req = Request {
        collective,
        root,
        mode: Mode::OutOfPlace,
        bytes: size,
        elem: 4,
        direct: false,
        ll128: false,
        excluded: None,
    };
    let mut scored: Vec<Scored> = Vec::new();
    for obj in &objectives {
        for program in candidates(collective, &topo, *obj)
            .map_err(|e| CliError::Usage(format!("error: {e}")))?
        {
            // The synthesizer's output is an ordinary program: checked, lowered and
            // verified; a failure here is a synthesizer bug and says so.
            let mut plans = braid_library::compile_file(
                &format!("{}.braid", program.name),
                &program.text,
                &topo,
            )
            .map_err(|e| {
                CliError::Runtime(format!(
                    "error: a synthesized program failed to compile (a bug in braid synth):\n{e}"
                ))
            })?;
            // The plan for root 0 (rooted programs compile once per root, in order).
            let plan = plans.remove(0);
            let (bottleneck, link) = bottleneck_us(&plan, &topo, size, 4);
            let ranked = rank(
                &[Candidate {
                    plan: &plan,
                    origin: "synthesized".into(),
                }],
                &topo,
                &profile,
                &req,
            );
            let best = &ranked[0];
            let predicted = *best
                .result
                .as_ref()
                .map_err(|e| CliError::Runtime(format!("error: {e}")))?;
            scored.push(Scored {
                replicas: best.replicas,
                protocol: best.protocol,
                program,
                plan,
                bottleneck_us: bottleneck,
                link,
                predicted_us: predicted,
            });
        }
    }
    let pick = |a: &Scored, b: &Scored| -> std::cmp::Ordering {
        if args.size.is_none() && args.objective != Some(ObjectiveArg::Latency) {
            a.bottleneck_us
                .total_cmp(&b.bottleneck_us)
                .then(a.predicted_us.total_cmp(&b.predicted_us))
        } else {
            a.predicted_us.total_cmp(&b.predicted_us)
        }
    };
    let best = scored
        .iter()
        .min_by(|a, b| pick(a, b))
        .expect("at least one candidate");
    let (bound, cut) = cut_bound_us(&topo, collective, size);
    // The best shipped plan at this size, for comparison.
    let library = braid_library::Library::new(topo.clone());
    let shipped = library.plans(collective, root);
    let cands: Vec<Candidate> = shipped
        .iter()
        .map(|p| Candidate {
            plan: p,
            origin: "shipped".into(),
        })
        .collect();
    let best_shipped = rank(&cands, &topo, &profile, &req)
        .into_iter()
        .find_map(|r| {
            r.result.ok().map(|t| Shipped {
                name: r.name,
                predicted_us: t,
            })
        });
    if let Some(path) = &args.plan {
        crate::output::write_atomically(path, &best.plan.to_json_pretty())?;
    }
    let objective = match (args.size, args.objective) {
        (Some(_), _) => "size",
        (None, Some(ObjectiveArg::Latency)) => "latency",
        _ => "bandwidth",
    };
    eprintln!(
        "note: {} for {collective} on {} ({n} ranks) at {size} bytes: bottleneck {:.2} us on {} against a cut lower bound of {:.2} us (cut of ranks {}), {:.3}x; predicted {:.2} us (x{} {}){}",
        best.program.name,
        args.topo,
        best.bottleneck_us,
        best.link,
        bound,
        cut.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(","),
        if bound > 0.0 { best.bottleneck_us / bound } else { 1.0 },
        best.predicted_us,
        best.replicas,
        best.protocol.name(),
        best_shipped.as_ref().map_or(String::new(), |s| format!("; best shipped plan: {} at {:.2} us", s.name, s.predicted_us))
    );
    // The bottleneck is the ideal; the cost model also counts what one thread block moves
    // and per-step costs. Say so when it expects another candidate to be faster.
    if objective == "bandwidth" {
        if let Some(f) = scored
            .iter()
            .filter(|c| c.predicted_us < best.predicted_us * 0.95)
            .min_by(|a, b| a.predicted_us.total_cmp(&b.predicted_us))
        {
            eprintln!(
                "note: the cost model predicts {} faster ({:.2} us; its bottleneck {:.2} us), counting per-block limits and per-step costs; `--size {size}` chooses by the prediction",
                f.program.name, f.predicted_us, f.bottleneck_us
            );
        }
    }
    if args.json {
        let s = Summary {
            collective: collective.to_string(),
            topology: &args.topo,
            size,
            objective,
            name: &best.program.name,
            bound_us: bound,
            bottleneck_us: best.bottleneck_us,
            bottleneck_link: &best.link,
            predicted_us: best.predicted_us,
            replicas: best.replicas,
            protocol: best.protocol.name(),
            best_shipped,
            candidates: scored
                .iter()
                .map(|c| (c.program.name.clone(), c.bottleneck_us, c.predicted_us))
                .collect(),
            program: &best.program.text,
        };
        if let Some(path) = &args.output {
            crate::output::write_atomically(path, &best.program.text)?;
        }
        return Ok(serde_json::to_string_pretty(&s).expect("a summary serialises") + "\n");
    }
    match &args.output {
        Some(path) => {
            crate::output::write_atomically(path, &best.program.text)?;
            Ok(String::new())
        }
        None => Ok(best.program.text.clone()),
    }
}
