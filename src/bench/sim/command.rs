//! `morphbench sim`: a scenario from flags, a file or a measured run, placed when asked, or
//! validated against measured runs.

use super::args::SimArgs;
use super::bench::{SimBench, SimOutput};
use super::calibrate::calibrate_from;
use super::place::{self, LinkCosts};
use super::plan::SimPlan;
use super::scenario::{Occupy, OneOrMany, SimConfig, SlowLink};
use super::{measured, tail};
use crate::bench::descriptor::{parsed, FromFlags, GlobalArgs};

/// `morphbench sim`: the scenario from flags, a scenario file or a measured run (`--from`),
/// placed when asked (`--place`), or the validation of `--validate FILE`, planned as the bench
/// the suite runs into its own run folder.
pub fn plan(m: &clap::ArgMatches, g: &GlobalArgs) -> anyhow::Result<Option<FromFlags>> {
    let a: &SimArgs = &parsed(m)?;
    // With --json, standard output carries the summary alone.
    let quiet = g.quiet || g.json;
    let planned = match &a.validate {
        Some(file) => super::validate::planned(file, a.ablation)?,
        None => simulated(a, quiet)?,
    };
    Ok(Some(planned))
}

/// The scenario to simulate (from flags, a file or measured runs), planned, with the config
/// meta.json keeps.
fn simulated(a: &SimArgs, quiet: bool) -> anyhow::Result<FromFlags> {
    let mut cfg = a.config()?;
    let from = FromRuns::of(&a.from)?;
    let links = match (&from.links, a.place) {
        (Some(dir), _) => Some(sim_links(a, &mut cfg, dir, quiet)?),
        (None, true) => anyhow::bail!(
            "--place needs a links run: give --from a run folder with links.csv (run `morphbench \
             links`)"
        ),
        _ => None,
    };
    if let Some(ops) = &from.ops {
        op_times(a, &mut cfg, ops, quiet)?;
    }
    let trace = match &a.trace {
        Some(p) => Some(
            crate::record::read_input(p)
                .map_err(|e| anyhow::anyhow!("cannot read trace {}: {e}", p.display()))?,
        ),
        None => None,
    };
    let plan = SimPlan::build(&cfg, trace.as_deref())?;
    if let (Some(costs), true) = (&links, a.place) {
        // The schedules named (every one of them judged), or adaptive against 1f1b.
        let named = cfg.schedules.is_some() || cfg.schedule_file.is_some();
        best_placement(costs, &plan, named, quiet)?;
    }
    let timelines = match a.timeline.as_deref() {
        Some("none") => Vec::new(),
        Some(list) => list.split(',').map(|s| s.trim().to_string()).collect(),
        None if plan.cases.first().is_some_and(|c| c.scenario.stages <= 32) => {
            vec!["static:1f1b".into(), "adaptive".into()]
        }
        None => Vec::new(),
    };
    let output = SimOutput {
        timelines,
        width: a.width as usize,
        trace_out: a.trace_out.clone(),
        bench_reps: if a.bench { 5 } else { 0 },
        export_torch: a.export_torch()?,
    };
    Ok(FromFlags::new(
        SimBench { plan, output },
        serde_json::to_value(&cfg)?,
    ))
}

/// The run folders `--from` names, by what each gives: a links run (links.csv) the stages and
/// their links, a node run (kernels.csv) or a pipeline run (pipeline.csv) the op times. One
/// folder may give both (a links run with kernels.csv).
struct FromRuns {
    links: Option<std::path::PathBuf>,
    ops: Option<OpSource>,
}

enum OpSource {
    Node(std::path::PathBuf),
    Pipeline(std::path::PathBuf),
}

impl FromRuns {
    fn of(dirs: &[std::path::PathBuf]) -> anyhow::Result<FromRuns> {
        let mut from = FromRuns {
            links: None,
            ops: None,
        };
        for dir in dirs {
            let has = |f: &str| dir.join(f).exists();
            let op = match (has("kernels.csv"), has("pipeline.csv")) {
                (true, _) => Some(OpSource::Node(dir.clone())),
                (false, true) => Some(OpSource::Pipeline(dir.clone())),
                _ => None,
            };
            if !has("links.csv") && op.is_none() {
                anyhow::bail!(
                    "--from {}: not a run folder sim reads (no links.csv, kernels.csv or \
                     pipeline.csv): give a links, node or pipeline run",
                    dir.display()
                );
            }
            let twice = |what: &str| {
                anyhow::anyhow!(
                    "--from {}: a second run with {what}; give one links run and one node or \
                     pipeline run",
                    dir.display()
                )
            };
            if has("links.csv") {
                if from.links.is_some() {
                    return Err(twice("links.csv"));
                }
                from.links = Some(dir.clone());
            }
            if let Some(op) = op {
                if from.ops.is_some() {
                    return Err(twice("op times"));
                }
                from.ops = Some(op);
            }
        }
        Ok(from)
    }
}

/// tF/tB/tW (and a node run's D2H and link cost) from the op-times run; values given by flag or
/// scenario file win, and it says so.
fn op_times(a: &SimArgs, cfg: &mut SimConfig, from: &OpSource, quiet: bool) -> anyhow::Result<()> {
    let given: Vec<&str> = [
        ("tf", cfg.tf.is_some()),
        ("tb", cfg.tb.is_some()),
        ("tw", cfg.tw.is_some()),
        ("d2h-ms", cfg.d2h_ms.is_some()),
        ("link-ms", cfg.link_ms.is_some()),
    ]
    .iter()
    .filter(|(_, set)| *set)
    .map(|(name, _)| *name)
    .collect();
    let ([tf, tb, tw], note) = match from {
        OpSource::Node(dir) => {
            let cal = calibrate_from(dir, a.layers_per_stage)?;
            cfg.d2h_ms = cfg.d2h_ms.or(cal.d2h_ms);
            cfg.link_ms = cfg.link_ms.or(cal.link_ms);
            let one = OneOrMany::One;
            ([one(cal.tf_ms), one(cal.tb_ms), one(cal.tw_ms)], cal.note)
        }
        OpSource::Pipeline(dir) => {
            let (t, note, comm) = super::validate::healthy_op_times(dir)?;
            cfg.measured_healthy = super::validate::healthy_iterations(dir, &comm)?;
            // Its sends waited for their acknowledgements: so do the drawn transfers.
            for m in &mut cfg.measured_tail {
                m.sends_wait = comm == "inline";
            }
            let stages = t[0].len();
            match cfg.stages {
                Some(s) if s != stages => anyhow::bail!(
                    "--from {}: its pipeline has {stages} stages, the scenario {s}: give runs \
                     of one pipeline",
                    dir.display()
                ),
                _ => cfg.stages = Some(stages),
            }
            (t.map(OneOrMany::Many), note)
        }
    };
    if !quiet {
        println!("{note}");
        if !given.is_empty() {
            println!("given, so not calibrated: {}", given.join(", "));
        }
    }
    cfg.tf = cfg.tf.take().or(Some(tf));
    cfg.tb = cfg.tb.take().or(Some(tb));
    cfg.tw = cfg.tw.take().or(Some(tw));
    Ok(())
}

/// `sim --from` a links run: the stages are its ranks in launcher order, each link costed at
/// the activation size (flags given still win). Returns the fitted costs for `--place`.
fn sim_links(
    a: &SimArgs,
    cfg: &mut SimConfig,
    dir: &std::path::Path,
    quiet: bool,
) -> anyhow::Result<LinkCosts> {
    let costs = LinkCosts::from_run(dir, None, a.activation)?;
    match cfg.stages {
        Some(s) if s != costs.ranks => anyhow::bail!(
            "{} has {} ranks, so the pipeline has {} stages: drop --stages {s}",
            dir.display(),
            costs.ranks,
            costs.ranks
        ),
        _ => cfg.stages = Some(costs.ranks),
    }
    let launcher: Vec<usize> = (0..costs.ranks).collect();
    // The wrap link's cost only where a named schedule crosses it.
    let named: Vec<crate::sim::Schedule> = cfg
        .schedules
        .iter()
        .flatten()
        .filter_map(|s| s.parse().ok())
        .collect();
    let wrap = place::crosses_wrap(&named, costs.ranks);
    if cfg.link_ms.is_none() {
        let (link_ms, slow) = costs.links_of(&launcher, wrap);
        cfg.link_ms = Some(link_ms);
        cfg.slow.extend(
            slow.into_iter()
                .filter(|(_, d)| *d > 0.0)
                // To the µs: what a ping-pong's p50 supports, and what a label can show.
                .map(|(link, delay_ms)| SlowLink {
                    link,
                    delay_ms: (delay_ms * 1e3).round() / 1e3,
                }),
        );
        cfg.occupy.extend(
            costs
                .occupancy_of(&launcher, wrap)
                .into_iter()
                .filter(|(_, ms)| *ms > 0.0)
                .map(|(link, ms)| Occupy { link, ms }),
        );
    }
    if !quiet {
        println!("{}", costs.note());
        println!("launcher order: {}", costs.describe(&launcher));
    }
    // Its tails, drawn per transfer, unless the flags or the scenario give stalls of their own.
    if cfg.stall.is_empty() {
        measured_tails(cfg, dir, &costs, quiet)?;
    }
    Ok(costs)
}

/// Each pipeline link's transfers drawn from the links run's distributions at the
/// activation's size; from a run that kept none (older than links_hist.csv), the stall share
/// and length its tail counts give.
fn measured_tails(
    cfg: &mut SimConfig,
    dir: &std::path::Path,
    costs: &LinkCosts,
    quiet: bool,
) -> anyhow::Result<()> {
    let links = measured::measured_links(dir, &costs.transport, costs.activation)?;
    let stalls = tail::from_links_run(dir, &costs.transport, costs.activation)?;
    if links.is_empty() {
        for (stall, why) in stalls {
            if !quiet {
                println!("stalls estimated from tail counts (no links_hist.csv): {why}");
            }
            cfg.stall.push(stall);
        }
        return Ok(());
    }
    // The links whose tails stalled are drawn (as before, a run without stalls has no tail
    // run); a healthy link's jitter is left out.
    for m in links {
        if !stalls.iter().any(|(s, _)| s.link == m.link) {
            continue;
        }
        if !quiet {
            println!("tail measured: {}", m.why);
        }
        cfg.measured_tail.push(m);
    }
    Ok(())
}

/// `sim --place`: the best order of ranks into stages per schedule, against the launcher's.
fn best_placement(
    costs: &LinkCosts,
    plan: &SimPlan,
    named: bool,
    quiet: bool,
) -> anyhow::Result<()> {
    let base = &plan.cases[0].scenario;
    let schedules: Vec<crate::sim::Schedule> = if named {
        plan.schedules.clone()
    } else {
        ["adaptive", "1f1b"]
            .iter()
            .map(|s| s.parse().expect("built-in schedules"))
            .collect()
    };
    let (found, exhaustive) = place::place(costs, base, plan.mem_limit, &schedules)?;
    let n = costs.ranks;
    let how = if exhaustive {
        format!(
            "exhaustive over all {} orders",
            (1..=n as u64).product::<u64>()
        )
    } else {
        "heuristic: nearest-neighbour chains over the link costs, then pairwise swaps judged by the simulator (more than 8 ranks)"
            .to_string()
    };
    let show = |o: &[usize]| {
        o.iter()
            .map(|r| format!("r{r}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    if quiet {
        return Ok(());
    }
    println!("placement of {n} ranks into stages ({how}), predicted iteration time:");
    println!(
        "  {:<14} {:<24} {:>12}   {:<24} {:>12} {:>8}",
        "schedule", "launcher order", "ms", "best order", "ms", "gain"
    );
    for p in &found {
        println!(
            "  {:<14} {:<24} {:>12.3}   {:<24} {:>12.3} {:>7.3}x",
            p.schedule,
            show(&(0..n).collect::<Vec<_>>()),
            p.launcher_ms,
            show(&p.best),
            p.best_ms,
            p.launcher_ms / p.best_ms
        );
    }
    for p in &found {
        println!("  best {} links: {}", p.schedule, costs.describe(&p.best));
    }
    Ok(())
}
