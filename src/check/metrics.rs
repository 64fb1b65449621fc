//! `check --textfile`: each judged figure and its verdict as Prometheus metrics, labelled with
//! the host and adapter of the run it came from.

use std::time::{Duration, SystemTime};

use super::figures::RunFigures;
use super::judge::Report;
use crate::record::metrics::{GpuLabels, MetricFigure, Textfile};

/// The check's figures: one series per run, bench, case and figure.
pub fn textfile(runs: &[RunFigures], report: &Report, took: Duration) -> Textfile {
    let here = crate::host::HostInfo::probe().hostname;
    let figures = report
        .outcomes
        .iter()
        .map(|o| {
            let label = runs.iter().find(|r| r.run_id == o.run_id).map(|r| &r.label);
            let adapter = label.and_then(|l| l.adapter.clone());
            let driver = label.and_then(|l| l.driver.clone()).unwrap_or_default();
            MetricFigure {
                test: o.bench.clone(),
                figure: o.figure.clone(),
                case: Some(o.case.clone()),
                value: o.value,
                // The ratio series reads higher as better: a lower-better figure has none.
                expected: o
                    .base
                    .filter(|_| o.better == super::figures::Better::Higher),
                verdict: Some(o.verdict),
                gpu: GpuLabels {
                    hostname: label.and_then(|l| l.host.clone()).unwrap_or(here.clone()),
                    gpu: None,
                    uuid: None,
                    sku: adapter.as_ref().map(|a| format!("{a} / {driver}")),
                    model_name: adapter,
                    pci_bus_id: None,
                },
            }
        })
        .collect();
    Textfile {
        command: "check".into(),
        hostname: here,
        finished: SystemTime::now(),
        took,
        figures,
    }
}
