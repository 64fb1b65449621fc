//! What the gate leaves: fleet.csv, each rank's run under `ranks/`, `drain.txt` (the failed
//! hosts as a Slurm hostlist), `fleet.json` (the summary `--json` prints), and the console's
//! table of nodes with the `scontrol` line an operator would run.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};

use super::baseline::Baseline;
use super::checks::Level;
use super::cost::{self, KeepCostTable};
use super::network::{self, LinksResult};
use super::options::{FleetOptions, Step};
use super::pipeline::{self, PipelineResult};
use super::rank::{RankOutcome, FAIL};
use super::summary::{self, FleetSummary};
use super::table::FleetTable;
use super::verdict;
use crate::cluster::hostlist;
use crate::record::csv::{CsvSink, Line};
use crate::record::run_dir::RunDir;
use crate::sanitize::{console, CONSOLE_TEXT, MAX_HOSTNAME};

/// The gate's result at rank 0.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub dir: PathBuf,
    pub run_id: String,
    /// 0 every node passed (WARNs allowed), 1 some node failed.
    pub exit_code: u8,
    /// fleet.json: what `--json` prints.
    pub summary: serde_json::Value,
    /// fleet.csv's rows as judged, kept in memory: what the textfiles and drains are made
    /// of (never read back from the run folder).
    pub rows: Vec<super::rank::Row>,
    /// Each rank's adapter's PCI bus id, where known.
    pub pci: BTreeMap<u32, Option<String>>,
}

/// fleet.csv's rows of run `run_id`, as written (each row's case names its rank, test,
/// figure and place).
pub fn lines(run_id: &str, rows: &[super::rank::Row]) -> Vec<Line<FleetTable>> {
    rows.iter()
        .enumerate()
        .map(|(i, (p, f))| {
            let case = format!("r{}_{}_{}_{i}", p.rank, p.test, p.figure);
            Line::new(run_id, case, p.clone(), None, f.clone())
        })
        .collect()
}

/// The plan, before anything runs: steps, turns and the bound on the whole gate.
pub fn plan_line(
    ranks: &[RankOutcome],
    steps: &[Step],
    opts: &FleetOptions,
    bound: Duration,
) -> String {
    let machines: std::collections::BTreeSet<&str> = ranks
        .iter()
        .filter_map(|o| o.inventory.as_ref().map(|i| i.machine_id.as_str()))
        .collect();
    format!(
        "plan: {} ({} tests a rank{}, at most {} s a rank with retests) on {} rank{} and {} machine{}: {} \
         step{} (ranks of one machine take turns on what they share){}{}; the gate ends within {:.0} s",
        opts.level,
        opts.tests().len(),
        if opts.only.is_some() { ", --only" } else { "" },
        opts.rank_bound().as_secs(),
        ranks.len(),
        if ranks.len() == 1 { "" } else { "s" },
        machines.len(),
        if machines.len() == 1 { "" } else { "s" },
        steps.len(),
        if steps.len() == 1 { "" } else { "s" },
        match opts.links() {
            Some(l) => format!(", then links ({}, {:.0} s of rounds)", l.pattern, l.deadline_s),
            None => String::new(),
        },
        match opts.pipeline() {
            Some(d) => format!(", then a short pipeline ({} s)", d.as_secs()),
            None => String::new(),
        },
        bound.as_secs_f64()
    )
}

/// The retests about to run: which figures of which ranks failed the first time.
pub fn retest_line(suspects: &BTreeMap<u32, Vec<String>>) -> String {
    let what: Vec<String> = suspects
        .iter()
        .map(|(r, tests)| format!("rank {r} ({})", console(&tests.join(", "), CONSOLE_TEXT)))
        .collect();
    format!(
        "retest: {} failed the first time, measured again before anything is blamed",
        what.join(", ")
    )
}

/// What the gate gathered at rank 0, for [`write`] to judge.
pub struct Gathered<'a> {
    pub ranks: &'a [RankOutcome],
    pub links: &'a LinksResult,
    pub pipeline: &'a PipelineResult,
    pub level: Level,
    pub baseline: Option<&'a Baseline>,
    pub profile: Option<&'a cost::Profile>,
    pub took: Duration,
}

/// Judges what was gathered, writes each of the gate's files (one writer each: fleet.csv,
/// `ranks/`, drain.txt, keep_cost.csv, fleet.json), prints the console's table unless quiet,
/// and returns the outcome.
pub fn write(dir: &RunDir, g: &Gathered, quiet: bool) -> Result<Outcome> {
    let ranks = g.ranks;
    let mut rows = verdict::judge(ranks, g.baseline);
    rows.extend(network::rows(ranks, g.links));
    rows.extend(pipeline::rows(ranks, g.pipeline));
    rows.sort_by_key(|(p, _)| p.rank);
    write_fleet_csv(dir, &rows)?;
    write_rank_files(dir, ranks)?;
    let nodes = summary::nodes(ranks, &rows);
    let failed: Vec<(u32, String)> = nodes
        .iter()
        .filter(|n| n.verdict == FAIL)
        .map(|n| (n.rank, n.host.clone()))
        .collect();
    let drain = hostlist::compress(&failed.iter().map(|(_, h)| h.clone()).collect::<Vec<_>>());
    write_drain(dir, &drain)?;
    let scontrol = (!drain.is_empty()).then(|| scontrol_line(&drain, &rows));
    let costs = keep_costs(&rows, &failed, (ranks, g.links), g.profile);
    write_keep_costs(dir, &costs)?;
    let exit_code = u8::from(!failed.is_empty());
    let (n_failed, warned, busy) = summary::counts(&nodes);
    let doc = FleetSummary {
        run_id: dir.id.clone(),
        run_dir: dir.path.clone(),
        level: g.level.to_string(),
        ranks: ranks.len(),
        failed: n_failed,
        warned,
        busy,
        drain: drain.clone(),
        scontrol: scontrol.clone(),
        nodes,
        keep_cost: summary::keep_costs(&costs),
        links: summary::links(ranks, g.links),
        pipeline: summary::pipeline(g.pipeline),
        wall_s: crate::record::csv::round(g.took.as_secs_f64(), 1),
        exit_code,
        // `health` judges its node by these, handed over in memory.
        rows: (g.level == Level::Health).then(|| rows.clone()),
    };
    let summary = write_fleet_json(dir, &doc)?;
    if !quiet {
        print_console(ranks, &doc.nodes, &drain, scontrol.as_deref(), dir, g.took);
        print_costs(&costs);
    }
    let pci = ranks
        .iter()
        .map(|o| {
            let bus = o.inventory.as_ref().and_then(|i| i.pci_bus_id.clone());
            (o.rank, bus)
        })
        .collect();
    Ok(Outcome {
        dir: dir.path.clone(),
        run_id: dir.id.clone(),
        exit_code,
        summary,
        rows,
        pci,
    })
}

/// fleet.csv: every row, judged.
fn write_fleet_csv(dir: &RunDir, rows: &[super::rank::Row]) -> Result<()> {
    let mut sink: CsvSink<FleetTable> = dir.table()?;
    for line in lines(&dir.id, rows) {
        sink.write(&line)?;
    }
    Ok(())
}

/// drain.txt: the failed hosts as a Slurm hostlist, or empty.
fn write_drain(dir: &RunDir, drain: &str) -> Result<()> {
    let text = if drain.is_empty() {
        String::new()
    } else {
        format!("{drain}\n")
    };
    std::fs::write(dir.path.join("drain.txt"), text).context("cannot write drain.txt")
}

/// fleet.json, as a JSON value (its keys sorted): what `--json` prints.
fn write_fleet_json(dir: &RunDir, doc: &FleetSummary) -> Result<serde_json::Value> {
    let value = serde_json::to_value(doc)?;
    std::fs::write(
        dir.path.join("fleet.json"),
        serde_json::to_string_pretty(&value)?,
    )?;
    Ok(value)
}

/// Each rank's own record, `ranks/rN/rank.json`: its inventory, batches, retests, failure.
fn write_rank_files(dir: &RunDir, ranks: &[RankOutcome]) -> Result<()> {
    for o in ranks {
        let folder = dir.path.join("ranks").join(format!("r{}", o.rank));
        crate::safe_fs::make_dir(&folder, &crate::safe_fs::OUT)?;
        let doc = serde_json::json!({
            "rank": o.rank,
            "host": o.host,
            "inventory": o.inventory,
            "batches": o.batches,
            "retests": o.retests,
            "failure": o.failure,
        });
        std::fs::write(
            folder.join("rank.json"),
            serde_json::to_string_pretty(&doc)?,
        )?;
    }
    Ok(())
}

/// keep_cost.csv.
fn write_keep_costs(dir: &RunDir, costs: &[cost::KeepCost]) -> Result<()> {
    let mut sink: CsvSink<KeepCostTable> = dir.table()?;
    for (i, (p, f)) in costs.iter().flatten().enumerate() {
        let case = format!("r{}_{}_{i}", p.rank, p.schedule);
        sink.write(&Line::new(&dir.id, case, p.clone(), None, f.clone()))?;
    }
    Ok(())
}

/// The confirmed slow links no node explains, as (lower rank, `hostA-hostB`, extra µs a send).
fn slow_links(ranks: &[RankOutcome], links: &LinksResult) -> Vec<(u32, String, f64)> {
    let LinksResult::Done(out) = links else {
        return Vec::new();
    };
    let host = |r: u32| ranks.get(r as usize).map_or("?", |o| o.host.as_str());
    out.slow_links
        .iter()
        .filter_map(|l| Some((l.a, format!("{}-{}", host(l.a), host(l.b)), l.extra_us?)))
        .collect()
}

/// What keeping each failed node, and each slow link no node explains, would cost.
fn keep_costs(
    rows: &[super::rank::Row],
    failed: &[(u32, String)],
    (ranks, links): (&[RankOutcome], &LinksResult),
    profile: Option<&cost::Profile>,
) -> Vec<cost::KeepCost> {
    // A lossy node or link is priced by its stalls, drawn per send; the rest by their figures.
    let (node_stalls, link_stalls) = match links {
        LinksResult::Done(out) => (
            out.node_stalls.clone(),
            out.slow_links
                .iter()
                .filter_map(|l| Some(((l.a, l.b), l.stall?)))
                .collect(),
        ),
        _ => (Default::default(), std::collections::BTreeMap::new()),
    };
    let host = |r: u32| ranks.get(r as usize).map_or("?", |o| o.host.as_str());
    let (lossy, rest): (Vec<_>, Vec<_>) = failed
        .iter()
        .cloned()
        .partition(|(r, _)| node_stalls.contains_key(r));
    let mut costs = cost::estimate(rows, &rest, ranks.len(), profile);
    for (r, h) in &lossy {
        let stall = node_stalls[r];
        costs.push(cost::estimate_lossy(
            (*r, h, "node"),
            stall,
            ranks.len(),
            profile,
        ));
    }
    let mut priced = std::collections::BTreeSet::new();
    for (&(a, b), &stall) in &link_stalls {
        let hosts = format!("{}-{}", host(a), host(b));
        costs.push(cost::estimate_lossy(
            (a, &hosts, "link"),
            stall,
            ranks.len(),
            profile,
        ));
        priced.insert(hosts);
    }
    let slow: Vec<(u32, String, f64)> = slow_links(ranks, links)
        .into_iter()
        .filter(|(_, hosts, _)| !priced.contains(hosts))
        .collect();
    costs.extend(cost::estimate_links(&slow, ranks.len(), profile));
    // A schedule the model could not estimate is a row of keep_cost.csv with its cause, and
    // said here, quiet or not.
    for c in &costs {
        for (schedule, e) in cost::failures(c) {
            let what = c.first().map_or("?", |(p, _)| p.host.as_str());
            eprintln!(
                "warning: no keep cost for {} with {}: {}",
                console(what, CONSOLE_TEXT),
                console(schedule, CONSOLE_TEXT),
                console(e, CONSOLE_TEXT)
            );
        }
    }
    costs
}

/// What keeping each failed node would cost, as the simulator estimates it.
fn print_costs(costs: &[cost::KeepCost]) {
    let Some((p, _)) = costs.first().and_then(|c| c.first()) else {
        return;
    };
    println!(
        "cost of keeping them (the simulator: a {}-stage pipeline of this fleet's nodes, the node \
         as stage {}, the default stage times or --profile's, Megatron's 1F1B and PipeMorph's \
         runtimes; keep_cost.csv):",
        p.stages, p.stage
    );
    for c in costs {
        println!("  {}", console(&cost::line(c), CONSOLE_TEXT));
    }
}

/// The line an operator would run to drain the failed hosts (`--slurm` runs it per host):
/// the first failed figure as the reason, with the `[morphbench]` prefix other tools match.
fn scontrol_line(drain: &str, rows: &[super::rank::Row]) -> String {
    let reason = rows
        .iter()
        .find(|(_, f)| f.verdict == FAIL)
        .map(|(p, f)| crate::slurm::reason(&p.test, &p.figure, f.value, f.expected, &f.unit))
        .unwrap_or_else(|| format!("{} fleet FAIL", crate::slurm::REASON_PREFIX));
    crate::slurm::drain_line(drain, &reason)
}

fn print_console(
    ranks: &[RankOutcome],
    nodes: &[summary::NodeSummary],
    drain: &str,
    scontrol: Option<&str>,
    dir: &RunDir,
    took: Duration,
) {
    // Peers' host names and reasons, control characters escaped.
    let host = |h: &str| console(h, MAX_HOSTNAME).into_owned();
    let width = nodes
        .iter()
        .map(|n| host(&n.host).len())
        .max()
        .unwrap_or(4)
        .max(4);
    println!("rank  {:width$}  verdict  why", "host");
    for n in nodes {
        let why = n
            .reasons
            .iter()
            .find(|r| r.starts_with(n.verdict.as_str()))
            .cloned()
            .unwrap_or_default();
        println!(
            "{:<4}  {:width$}  {:<7}  {}",
            n.rank,
            host(&n.host),
            n.verdict,
            console(&why, CONSOLE_TEXT)
        );
    }
    let mut busy: BTreeMap<&str, String> = BTreeMap::new();
    for o in ranks.iter().filter(|o| o.busy()) {
        busy.insert(&o.host, o.busy_reason());
    }
    for (h, why) in busy {
        println!(
            "warning: {} was {} during its tests: its figures are left out of the fleet's level",
            host(h),
            console(&why, CONSOLE_TEXT)
        );
    }
    match scontrol {
        Some(line) => {
            println!(
                "drain: {} (drain.txt); to drain them:\n  {}",
                console(drain, CONSOLE_TEXT),
                console(line, CONSOLE_TEXT)
            );
        }
        None => println!("drain: none"),
    }
    let failed = nodes.iter().filter(|n| n.verdict == FAIL).count();
    println!(
        "fleet: {failed} of {} ranks FAIL in {:.1} s -> {}",
        nodes.len(),
        took.as_secs_f64(),
        dir.path.join("fleet.csv").display()
    );
}
