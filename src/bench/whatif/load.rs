//! Reading a trace file: parquet (told by its magic bytes) or CSV, size-capped before a byte
//! of it is parsed.

use std::path::Path;

use anyhow::{bail, Context, Result};

use super::trace::{record, RawRecord, Record, COLUMNS};

/// The largest trace read unless `--max-trace-mb` says otherwise.
pub const DEFAULT_MAX_TRACE_MB: u64 = 4096;

/// Reads a trace (parquet by its magic bytes, else CSV), refusing one over `max_mb`. A CSV
/// with a `case` column (pipeline_trace.csv) holds several cases: `case` picks one.
pub fn read(path: &Path, max_mb: u64, case: Option<&str>) -> Result<Vec<Record>> {
    let meta = std::fs::metadata(path)
        .with_context(|| format!("--trace {}: cannot read it", path.display()))?;
    if meta.len() > max_mb.saturating_mul(1 << 20) {
        bail!(
            "--trace {}: {} MB, over the cap of {max_mb} MB: give --max-trace-mb to read a larger \
             trace, or --steps to analyse fewer steps of a smaller export",
            path.display(),
            meta.len() >> 20
        );
    }
    let mut magic = [0u8; 4];
    let is_parquet = {
        use std::io::Read;
        let mut f = std::fs::File::open(path)?;
        f.read(&mut magic)? == 4 && &magic == b"PAR1"
    };
    let records = if is_parquet {
        super::parquet::read(path)
    } else {
        read_csv(path, case)
    }
    .with_context(|| format!("--trace {}", path.display()))?;
    if records.is_empty() {
        bail!("--trace {}: no ops in it", path.display());
    }
    Ok(records)
}

fn read_csv(path: &Path, case: Option<&str>) -> Result<Vec<Record>> {
    let mut reader = csv::ReaderBuilder::new().from_path(path)?;
    let headers = reader.headers()?.clone();
    let case_at = headers.iter().position(|h| h == "case");
    let mut cases = std::collections::BTreeSet::new();
    let mut at = [0usize; 11];
    for (i, name) in COLUMNS.iter().enumerate() {
        at[i] = headers.iter().position(|h| h == *name).with_context(|| {
            format!(
                "no column {name:?}: a trace has the columns {}",
                COLUMNS.join(",")
            )
        })?;
    }
    let mut out = Vec::new();
    let mut row = csv::StringRecord::new();
    let mut line = 1usize;
    while reader.read_record(&mut row)? {
        line += 1;
        if let Some(c) = case_at.and_then(|i| row.get(i)) {
            if cases.len() < 1000 {
                cases.insert(c.to_string());
            }
            if case.is_some_and(|want| want != c) {
                continue;
            }
        }
        let where_ = || format!("line {line}");
        let cell = |i: usize| row.get(at[i]).unwrap_or("").trim();
        let int = |i: usize| -> Result<i64> {
            let c = cell(i);
            // pandas writes integers of a float column as "3.0".
            c.parse::<i64>()
                .or_else(|_| match c.parse::<f64>() {
                    Ok(f) if f.fract() == 0.0 && f.abs() < 1e15 => Ok(f as i64),
                    _ => Err(()),
                })
                .map_err(|_| {
                    anyhow::anyhow!(
                        "{}: {} = {:?} is not an integer",
                        where_(),
                        COLUMNS[i],
                        crate::sanitize::console(c, 64)
                    )
                })
        };
        let float = |i: usize| -> Result<f64> {
            cell(i).parse::<f64>().map_err(|_| {
                anyhow::anyhow!(
                    "{}: {} = {:?} is not a number",
                    where_(),
                    COLUMNS[i],
                    crate::sanitize::console(cell(i), 64)
                )
            })
        };
        let raw = RawRecord {
            dp_rank: int(0)?,
            stage: int(1)?,
            rank: int(2)?,
            step: int(3)?,
            optype: cell(4).to_string(),
            start: float(5)?,
            duration: float(6)?,
            seq_id: int(7)?,
            mc: int(8)?,
            mb_id: int(9)?,
            gmc: int(10)?,
        };
        out.push(record(&raw, &where_)?);
    }
    let list = || {
        cases
            .iter()
            .map(|c| crate::sanitize::console(c, 80).into_owned())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (case, case_at) {
        (Some(want), None) => bail!("--case {want:?}: this trace has no case column"),
        (Some(want), Some(_)) if !cases.contains(want) => {
            bail!(
                "--case {want:?} is not in this trace; its cases: {}",
                list()
            )
        }
        (None, Some(_)) if cases.len() > 1 => {
            bail!(
                "this trace holds {} cases: pick one with --case ({})",
                cases.len(),
                list()
            )
        }
        _ => Ok(out),
    }
}
