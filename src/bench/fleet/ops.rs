//! The gate's verdict in the operator's tools: each host's figures as a Prometheus textfile
//! (from the rows as judged and the ranks' inventories, kept in memory: nothing is read back
//! from the run folder), and each failed host's Slurm drain reason (its first failed figure,
//! measured against expected).

use crate::reported::Reported;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};

use super::gate::Fleet;
use super::orders::{GateOrder, GateReply, Order, Reply};
use super::rank::Row;
use super::report::{lines, Outcome};
use super::table::{self, FleetTable};
use crate::cluster::Crew;
use crate::record::csv::Line;
use crate::record::metrics::{GpuLabels, MetricFigure, Textfile};
use std::time::Instant;

/// Each rank's adapter's PCI bus id, where known.
pub type PciIds = BTreeMap<u32, Option<String>>;

/// The most rows a health-level gate's document may carry (rank 0's order is bounded).
const MAX_ROWS: usize = 100_000;

/// What a health-level gate's rank 0 hands back in its `--json` document (kept in memory by
/// `health`, never read back from the run folder): fleet.csv's rows as judged, and each
/// rank's PCI bus id.
pub fn from_summary(summary: &serde_json::Value) -> Result<(Vec<Line<FleetTable>>, PciIds)> {
    let run_id = summary
        .get("run_id")
        .and_then(|v| v.as_str())
        .context("the gate's verdict names no run")?;
    let rows = summary
        .get("rows")
        .and_then(|v| v.as_array())
        .context("the gate's verdict carries no figures")?;
    anyhow::ensure!(
        rows.len() <= MAX_ROWS,
        "the gate's verdict carries {} figures, over {MAX_ROWS}",
        rows.len()
    );
    let rows: Vec<Row> = rows
        .iter()
        .map(|r| serde_json::from_value(r.clone()))
        .collect::<std::result::Result<_, _>>()
        .context("the gate's verdict carries a figure that does not parse")?;
    let mut pci = BTreeMap::new();
    for node in summary
        .get("nodes")
        .and_then(|n| n.as_array())
        .into_iter()
        .flatten()
    {
        if let Some(rank) = node.get("rank").and_then(|r| r.as_u64()) {
            let bus = node.get("pci_bus_id").and_then(|b| b.as_str());
            pci.insert(rank as u32, bus.map(str::to_string));
        }
    }
    Ok((lines(run_id, &rows), pci))
}

/// Each host's textfile (`command`'s figures of its ranks), by host; `pci`: each rank's
/// adapter's PCI bus id, where known.
pub fn textfiles(
    pci: &PciIds,
    rows: &[Line<FleetTable>],
    command: &'static str,
    took: Duration,
) -> BTreeMap<String, Textfile> {
    let mut out: BTreeMap<String, Textfile> = BTreeMap::new();
    let finished = SystemTime::now();
    for row in rows {
        let (p, f) = (&row.params, &row.figures);
        let bus = pci.get(&p.rank).cloned().flatten();
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
        let rows = lines(&outcome.run_id, &outcome.rows);
        if self.opts.textfile.is_some() {
            self.write_textfiles(crew, &outcome.pci, &rows, took);
        }
        if self.opts.slurm {
            drain_failed(&rows, self.opts.session.quiet);
        }
    }

    fn write_textfiles(
        &self,
        crew: &mut Crew<Order, Reply>,
        pci: &PciIds,
        rows: &[crate::record::csv::Line<table::FleetTable>],
        took: Duration,
    ) {
        let roster = crew.world().roster.clone();
        let mine = roster[0].hostname.clone();
        for (host, file) in textfiles(pci, rows, "fleet", took) {
            let lowest = roster.iter().position(|r| r.hostname == host).unwrap_or(0) as u32;
            let written = match (lowest, &self.opts.textfile) {
                (_, Some(d)) if host == mine => file.write(d).into(),
                (0, _) | (_, None) => continue,
                (r, Some(_)) => {
                    let order = Order::Gate(GateOrder::Textfile(Box::new(file)));
                    match crew.order(r, order) {
                        Err(e) => Reported::failed(e.to_string()),
                        Ok(()) => {
                            match crew.hear_each(&[r], Instant::now() + TEXTFILE_WAIT).pop() {
                                Some((_, Ok(Reply::Gate(GateReply::Written(w))))) => w,
                                Some((_, Err(e))) => Reported::failed(e.to_string()),
                                _ => Reported::failed("answered out of turn"),
                            }
                        }
                    }
                }
            };
            if let Reported::Err(e) = written {
                use crate::sanitize::{console, CONSOLE_TEXT, MAX_HOSTNAME};
                let (host, e) = (console(&host, MAX_HOSTNAME), console(&e, CONSOLE_TEXT));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::fleet::table::{FleetFigures, FleetParams};

    #[test]
    fn healths_verdict_comes_from_the_document_in_memory() {
        let row = |rank: u32, verdict| {
            let p = FleetParams {
                rank,
                host: "n1".into(),
                test: "gemm".into(),
                figure: "gflops".into(),
                ..FleetParams::default()
            };
            let f = FleetFigures {
                value: Some(812.4),
                expected: Some(1650.0),
                unit: "GFLOP/s".into(),
                verdict,
                ..FleetFigures::default()
            };
            (p, f)
        };
        let rows = vec![
            row(0, crate::verdict::Verdict::Pass),
            row(1, crate::verdict::Verdict::Fail),
        ];
        // The run folder it names is not there: nothing is read from it.
        let summary = serde_json::json!({
            "run_id": "r1",
            "run_dir": "/nonexistent/r1",
            "rows": rows,
            "nodes": [{"rank": 1, "pci_bus_id": "0000:1b:00.0"}, {"rank": 0}],
        });
        let (lines, pci) = from_summary(&summary).unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1].figures, rows[1].1);
        assert_eq!(lines[1].lead.case, "r1_gemm_gflops_1");
        assert_eq!(pci[&1].as_deref(), Some("0000:1b:00.0"));
        assert_eq!(pci[&0], None);
        assert_eq!(failed_hosts(&lines), ["n1"]);
        let files = textfiles(&pci, &lines, "health", Duration::from_secs(1));
        let f = &files["n1"].figures[1];
        assert_eq!(f.gpu.pci_bus_id.as_deref(), Some("0000:1b:00.0"));
        // A document without its rows is no verdict.
        let Err(e) = from_summary(&serde_json::json!({"run_id": "r1"})) else {
            panic!("a document without rows gave a verdict");
        };
        assert!(e.to_string().contains("carries no figures"), "{e}");
    }
}
