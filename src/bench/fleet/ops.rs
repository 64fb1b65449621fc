//! The gate's verdict in the operator's tools: each host's figures as a Prometheus textfile
//! (read back from fleet.csv and the ranks' inventories), and each failed host's Slurm drain
//! reason (its first failed figure, measured against expected).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::Result;

use super::gate::Fleet;
use super::orders::{GateOrder, GateReply, Order, Reply};
use super::report::Outcome;
use super::table::{self, FleetTable};
use crate::cluster::Crew;
use crate::record::csv::Line;
use crate::record::metrics::{GpuLabels, MetricFigure, Textfile};
use std::time::Instant;

/// fleet.csv's rows of a gate's run folder.
pub fn rows(dir: &Path) -> Result<Vec<Line<FleetTable>>> {
    Ok(crate::record::read_optional::<FleetTable>(dir)?.unwrap_or_default())
}

/// What `ranks/rN/rank.json` says of a rank's adapter: its PCI bus id, where known.
fn pci_bus_id(dir: &Path, rank: u32) -> Option<String> {
    let path = dir.join("ranks").join(format!("r{rank}")).join("rank.json");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    doc.pointer("/inventory/pci_bus_id")?
        .as_str()
        .map(str::to_string)
}

/// Each host's textfile (`command`'s figures of its ranks), by host.
pub fn textfiles(
    dir: &Path,
    rows: &[Line<FleetTable>],
    command: &'static str,
    took: Duration,
) -> BTreeMap<String, Textfile> {
    let mut pci: BTreeMap<u32, Option<String>> = BTreeMap::new();
    let mut out: BTreeMap<String, Textfile> = BTreeMap::new();
    let finished = SystemTime::now();
    for row in rows {
        let (p, f) = (&row.params, &row.figures);
        let bus = pci
            .entry(p.rank)
            .or_insert_with(|| pci_bus_id(dir, p.rank))
            .clone();
        let known = |s: &str| (!s.is_empty() && s != "?").then(|| s.to_string());
        let gpu = GpuLabels {
            hostname: p.host.clone(),
            gpu: p.local_rank,
            uuid: bus.as_deref().and_then(crate::record::metrics::nvidia_uuid),
            model_name: known(&p.adapter),
            pci_bus_id: bus,
            sku: known(&p.adapter).map(|a| format!("{a} / {}", p.driver)),
        };
        let file = out.entry(p.host.clone()).or_insert_with(|| Textfile {
            command: command.to_string(),
            hostname: p.host.clone(),
            finished,
            took,
            figures: Vec::new(),
        });
        file.figures.push(MetricFigure {
            test: p.test.clone(),
            figure: p.figure.clone(),
            case: None,
            value: f.value,
            // The ratio series reads higher as better: a lower-better figure has none.
            expected: f
                .expected
                .filter(|_| !crate::record::metrics::lower_is_better(&f.unit)),
            verdict: Some(f.verdict),
            gpu,
        });
    }
    out
}

/// The first FAIL among `host`'s rows: its drain reason.
pub fn drain_reason(rows: &[Line<FleetTable>], host: &str) -> Option<String> {
    rows.iter()
        .find(|r| r.params.host == host && r.figures.verdict == super::rank::FAIL)
        .map(|r| {
            crate::slurm::reason(
                &r.params.test,
                &r.params.figure,
                r.figures.value,
                r.figures.expected,
                &r.figures.unit,
            )
        })
}

/// The hosts with a FAIL, in order.
pub fn failed_hosts(rows: &[Line<FleetTable>]) -> Vec<String> {
    let mut hosts: Vec<String> = rows
        .iter()
        .filter(|r| r.figures.verdict == super::rank::FAIL)
        .map(|r| r.params.host.clone())
        .collect();
    hosts.sort();
    hosts.dedup();
    hosts
}

/// The most figures a host's textfile may carry (an order from rank 0 is bounded).
pub(super) const MAX_FIGURES: usize = 100_000;

impl Fleet {
    /// What the operator's tools get once the gate is judged: each host's metrics written by
    /// its lowest rank (`--textfile`), each failed host drained by rank 0 (`--slurm`). A
    /// failure here is a warning: the verdict stands.
    pub(super) fn operate(&self, crew: &mut Crew<Order, Reply>, outcome: &Outcome, took: Duration) {
        let rows = match rows(&outcome.dir) {
            Ok(rows) => rows,
            Err(e) => return eprintln!("warning: fleet.csv not read back: {e:#}"),
        };
        if self.opts.textfile.is_some() {
            self.write_textfiles(crew, &outcome.dir, &rows, took);
        }
        if self.opts.slurm {
            drain_failed(&rows, self.opts.session.quiet);
        }
    }

    fn write_textfiles(
        &self,
        crew: &mut Crew<Order, Reply>,
        dir: &std::path::Path,
        rows: &[crate::record::csv::Line<table::FleetTable>],
        took: Duration,
    ) {
        let roster = crew.world().roster.clone();
        let mine = roster[0].hostname.clone();
        for (host, file) in textfiles(dir, rows, "fleet", took) {
            let lowest = roster.iter().position(|r| r.hostname == host).unwrap_or(0) as u32;
            let written = match (lowest, &self.opts.textfile) {
                (_, Some(d)) if host == mine => file.write(d).map_err(|e| format!("{e:#}")),
                (0, _) | (_, None) => continue,
                (r, Some(_)) => {
                    let order = Order::Gate(GateOrder::Textfile(Box::new(file)));
                    match crew.order(r, order) {
                        Err(e) => Err(e.to_string()),
                        Ok(()) => {
                            match crew.hear_each(&[r], Instant::now() + TEXTFILE_WAIT).pop() {
                                Some((_, Ok(Reply::Gate(GateReply::Written(w))))) => w,
                                Some((_, Err(e))) => Err(e.to_string()),
                                _ => Err("answered out of turn".into()),
                            }
                        }
                    }
                }
            };
            if let Err(e) = written {
                eprintln!("warning: {host}'s metrics were not written: {e}");
            }
        }
    }
}

/// How long rank 0 waits for a host's textfile to be written.
const TEXTFILE_WAIT: Duration = Duration::from_secs(10);

/// Drains each failed host with its first failed figure as the reason.
fn drain_failed(rows: &[crate::record::csv::Line<table::FleetTable>], quiet: bool) {
    let scontrol = match crate::slurm::Scontrol::find() {
        Ok(s) => s,
        Err(e) => return eprintln!("warning: {e:#}"),
    };
    for host in failed_hosts(rows) {
        let reason = drain_reason(rows, &host).unwrap_or_default();
        match scontrol.drain(&host, &reason) {
            Ok(action) if !quiet => println!("slurm: {host}: {action:?}"),
            Ok(_) => {}
            Err(e) => eprintln!("warning: {host} was not drained: {e:#}"),
        }
    }
}
