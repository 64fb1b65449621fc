//! `RUN/summary.json`: what automation needs from a run in one small file (its status, where
//! it ran, and its headline figures with units), written beside meta.json when a run ends.
//! `--json` prints it instead of tables. Its layout is versioned by `schema_version` and
//! documented in results/README.md.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

use super::tables::headlines;
use crate::record::label::RunLabel;
use crate::record::view::headline::Headline;

/// Bumped whenever a field of summary.json is added, removed or renamed.
pub const SUMMARY_SCHEMA_VERSION: u32 = 3;

#[derive(Debug, Serialize)]
pub struct RunSummary {
    pub schema_version: u32,
    pub run_id: String,
    /// "complete", "failed", or "running" (interrupted).
    pub status: String,
    pub error: Option<String>,
    pub started_utc: Option<String>,
    pub finished_utc: Option<String>,
    pub host: Option<String>,
    pub adapter: Option<String>,
    pub headlines: Vec<Headline>,
    /// The busy-machine warnings (meta.json's `notes.host_load`): a bench, or a rank of a
    /// multi-rank run, measured while other processes used the machine.
    pub warnings: Vec<String>,
    /// Per bench: its table's row count and its headline figures.
    pub benches: BTreeMap<&'static str, BenchSummary>,
    /// Why the tables could not be read, when they could not.
    pub tables_error: Option<String>,
    /// A what-if run's answer (its whatif.json): blocking_slowdown, launch_slowdown, m_s, m_w,
    /// the top groups of each dimension.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whatif: Option<serde_json::Value>,
    /// A `sim --validate` run's figures (meta.json's `notes.validate`): rows, judged, the
    /// error spread, and per system.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub validate: Option<serde_json::Value>,
}

#[derive(Debug, Default, Serialize)]
pub struct BenchSummary {
    pub rows: usize,
    pub figures: Vec<Figure>,
}

#[derive(Debug, Serialize)]
pub struct Figure {
    pub what: String,
    pub value: Option<f64>,
    pub unit: &'static str,
}

/// Builds the summary of the run in `dir` from its meta.json and tables.
pub fn summarize(dir: &Path) -> RunSummary {
    let (label, heads, benches, tables_error) = match super::catalog::load(dir) {
        Ok(run) => {
            let mut benches: BTreeMap<&'static str, BenchSummary> = BTreeMap::new();
            // Each bench's own table (the one named as the bench) gives its row count.
            for t in super::catalog::specs() {
                let own = crate::bench::REGISTRY.iter().any(|d| d.name == t.name);
                if let (true, Some(rows)) = (own, (t.rows)(&run)) {
                    benches.entry(t.name).or_default().rows = rows;
                }
            }
            let heads = headlines(&run);
            for h in &heads {
                benches.entry(h.bench).or_default().figures.push(Figure {
                    what: h.what.clone(),
                    value: h.value,
                    unit: h.unit,
                });
            }
            (run.label, heads, benches, None)
        }
        Err(e) => (
            RunLabel::of(dir),
            Vec::new(),
            BTreeMap::new(),
            Some(e.to_string()),
        ),
    };
    RunSummary {
        schema_version: SUMMARY_SCHEMA_VERSION,
        run_id: label
            .run_id
            .unwrap_or_else(|| dir.file_name().unwrap_or_default().to_string_lossy().into()),
        status: label.status,
        error: label.error,
        started_utc: label.started_utc,
        finished_utc: label.finished_utc,
        host: label.host,
        adapter: label.adapter,
        headlines: heads,
        warnings: label.busy.into_iter().map(|(_, w)| w).collect(),
        benches,
        tables_error,
        whatif: read_json(&dir.join("whatif.json")),
        validate: read_json(&dir.join("meta.json"))
            .and_then(|m: serde_json::Value| m.pointer("/notes/validate").cloned()),
    }
}

/// A JSON file's value; None when it is missing or not JSON (the summary says what it can).
fn read_json(path: &Path) -> Option<serde_json::Value> {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
}

/// Writes `dir/summary.json` and returns its text.
pub fn write_summary(dir: &Path) -> Result<String> {
    let json = serde_json::to_string_pretty(&summarize(dir))?;
    let path = dir.join("summary.json");
    std::fs::write(&path, &json).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(json)
}
