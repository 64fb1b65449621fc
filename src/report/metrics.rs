//! `run --textfile`: a run's headline figures as Prometheus metrics, named by bench and unit
//! (`morphbench_d2h_gbps`, `morphbench_kernels_gflops`), each headline a `case`. A run judges
//! nothing, so it has no verdict series; `check --textfile` gives those.

use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::Result;

use super::tables::headlines;
use crate::record::metrics::{slug, GpuLabels, MetricFigure, Textfile};

/// A unit as the end of a metric's name.
pub fn unit_name(unit: &str) -> String {
    match unit {
        "GB/s" => "gbps".into(),
        "GFLOP/s" => "gflops".into(),
        "µs" | "us" => "us".into(),
        "op/s" => "ops_per_s".into(),
        "x" => "ratio".into(),
        "%" => "pct".into(),
        "" => "value".into(),
        other => slug(other),
    }
}

/// The run in `dir`'s headlines with a value.
pub fn run_textfile(dir: &Path, took: Duration) -> Result<Textfile> {
    let run = super::catalog::load(dir)?;
    let label = &run.label;
    let here = crate::host::HostInfo::probe().hostname;
    let hostname = label.host.clone().unwrap_or(here);
    let gpu = GpuLabels {
        hostname: hostname.clone(),
        gpu: None,
        uuid: None,
        model_name: label.adapter.clone(),
        pci_bus_id: None,
        sku: label
            .adapter
            .as_ref()
            .map(|a| format!("{a} / {}", label.driver.clone().unwrap_or_default())),
    };
    let figures = headlines(&run)
        .into_iter()
        .filter(|h| h.value.is_some())
        .map(|h| MetricFigure {
            test: h.bench.to_string(),
            figure: unit_name(h.unit),
            case: Some(h.what),
            value: h.value,
            expected: None,
            verdict: None,
            gpu: gpu.clone(),
        })
        .collect();
    Ok(Textfile {
        command: "run".into(),
        hostname,
        finished: SystemTime::now(),
        took,
        figures,
    })
}
