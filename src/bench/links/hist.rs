//! links_hist.csv: each row of links.csv's distribution, as the buckets of a
//! [`LogHist`] (µs, the unit of the row's summary): what `sim --from` draws a transfer's time
//! from, where the summary's percentiles would fix it to a few points.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::tables::LinksTable;
use crate::record::csv::{CsvSink, CsvTable, Line};
use crate::stats::hist::{lower_edge, LogHist};

/// `links_hist.csv`: one row per non-empty bucket of each links.csv row (joined by `case`).
#[derive(Debug, Clone)]
pub struct LinksHistTable;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HistParams {
    pub src_rank: u32,
    pub dst_rank: u32,
    pub transport: String,
    pub bytes: u64,
    pub direction: String,
    /// The bucket's index: it holds values in [lo_us, hi_us), 16 buckets to an octave.
    pub bucket: u16,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HistFigures {
    pub lo_us: f64,
    pub hi_us: f64,
    pub count: u32,
}

impl CsvTable for LinksHistTable {
    const NAME: &'static str = "links_hist";
    const WITH_STATS: bool = false;
    type Params = HistParams;
    type Figures = HistFigures;
}

/// Writes the distribution of every row of `lines` that has one.
pub fn write(dir: &Path, run_id: &str, lines: &[Line<LinksTable>]) -> Result<()> {
    let mut sink = CsvSink::<LinksHistTable>::create(&dir.join("links_hist.csv"))?;
    for l in lines {
        let Some(h) = &l.figures.hist else { continue };
        let p = &l.params;
        for &(bucket, count) in h.buckets() {
            let params = HistParams {
                src_rank: p.src_rank,
                dst_rank: p.dst_rank,
                transport: p.transport.clone(),
                bytes: p.bytes,
                direction: p.direction.clone(),
                bucket,
            };
            let figures = HistFigures {
                lo_us: lower_edge(bucket),
                hi_us: lower_edge(bucket + 1),
                count,
            };
            sink.write(&Line::new(
                run_id,
                l.lead.case.clone(),
                params,
                None,
                figures,
            ))?;
        }
    }
    Ok(())
}

/// Writes a links run's links.csv and links_hist.csv from `lines`, for tests that read one.
#[cfg(test)]
pub fn write_run(dir: &Path, lines: &[Line<LinksTable>]) -> Result<()> {
    let mut sink = CsvSink::<LinksTable>::create(&dir.join("links.csv"))?;
    for l in lines {
        sink.write(l)?;
    }
    write(dir, "run", lines)
}

/// The distributions of a links run by case, each case's rows merged: a retest that runs
/// more than once writes its case once per pass (links.csv too), each pass's buckets in
/// order, so a bucket at or below the one before starts the next pass. Empty for a run
/// written before the file was.
pub fn read(dir: &Path) -> Result<BTreeMap<String, LogHist>> {
    let path = dir.join("links_hist.csv");
    if !path.exists() {
        return Ok(BTreeMap::new());
    }
    let rows: Vec<Line<LinksHistTable>> = crate::record::read_table(&path)?;
    let mut passes: Vec<(String, Vec<(u16, u32)>)> = Vec::new();
    for r in rows {
        let pair = (r.params.bucket, r.figures.count);
        match passes.last_mut() {
            Some((case, pairs))
                if *case == r.lead.case && pairs.last().is_some_and(|p| p.0 < pair.0) =>
            {
                pairs.push(pair)
            }
            _ => passes.push((r.lead.case, vec![pair])),
        }
    }
    let mut by_case: BTreeMap<String, LogHist> = BTreeMap::new();
    for (case, pairs) in passes {
        let h = LogHist::from_buckets(pairs)
            .map_err(|e| anyhow::anyhow!("{}: case {case}: {e}", path.display()))?;
        by_case
            .entry(case)
            .and_modify(|merged| merged.merge(&h))
            .or_insert(h);
    }
    Ok(by_case)
}
