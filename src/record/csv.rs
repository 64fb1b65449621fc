//! CSV tables, typed. Every table starts with `schema_version,run_id,bench,case` ([`Leading`]),
//! then the bench's parameters, then (in most tables) the statistics block ([`Stats`]), then
//! the bench's figures. Each table is one [`CsvTable`]: its parameter and figure structs are
//! the single place its columns are named, and both the writer ([`CsvSink`]) and every reader
//! ([`read_table`]) go through them. Rows are flushed one by one, so an interrupted run keeps
//! whole rows.

use std::fs::File;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::stats::Summary;

/// Bumped whenever a column is removed, renamed or changes meaning in any table. A column
/// added later is named in its table's [`CsvTable::ADDED`] instead, so files written before it
/// stay readable (the column reads as empty).
pub const SCHEMA_VERSION: u32 = 1;

/// One CSV file: its name and the structs that hold its columns.
pub trait CsvTable {
    /// The file is `<NAME>.csv` and the `bench` column holds `NAME`.
    const NAME: &'static str;
    /// Whether the statistics block sits between the parameters and the figures.
    const WITH_STATS: bool;
    /// Columns after the leading four. `Default` gives the header of an empty table.
    type Params: Serialize + DeserializeOwned + Default;
    /// Columns after the statistics block (or after the parameters without one).
    type Figures: Serialize + DeserializeOwned + Default;
    /// Columns added after the table first shipped: a file without them is read with them
    /// empty (each must be an `Option`).
    const ADDED: &'static [&'static str] = &[];
    /// Numeric columns that may hold negative values (every other number must be >= 0).
    const SIGNED: &'static [&'static str] = &[];
    /// Checks a row read back beyond its cells' types (ranges that bound what readers
    /// allocate); returns the column and the reason.
    fn check(_line: &Line<Self>) -> Result<(), (&'static str, String)>
    where
        Self: Sized,
    {
        Ok(())
    }
}

/// The largest magnitude a numeric cell may hold: far beyond any figure (1e15 µs is 31 years),
/// small enough that sums over a whole table stay finite.
pub const MAX_CELL: f64 = 1e15;
/// The largest table a reader loads.
pub const MAX_TABLE_BYTES: u64 = 512 << 20;

/// The four columns every table starts with.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Leading {
    pub schema_version: u32,
    pub run_id: String,
    pub bench: String,
    pub case: String,
}

/// The statistics block: a [`Summary`] as CSV columns, in µs unless named otherwise.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub n: usize,
    pub mean_us: f64,
    pub stddev_us: f64,
    pub min_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    pub cv: f64,
    pub ci95_lo_us: f64,
    pub ci95_hi_us: f64,
}

impl From<&Summary> for Stats {
    fn from(s: &Summary) -> Stats {
        let r = |x: f64| round(x, 3);
        Stats {
            n: s.n,
            mean_us: r(s.mean),
            stddev_us: r(s.stddev),
            min_us: r(s.min),
            p50_us: r(s.p50),
            p90_us: r(s.p90),
            p99_us: r(s.p99),
            p999_us: r(s.p999),
            max_us: r(s.max),
            cv: round(s.cv, 5),
            ci95_lo_us: r(s.ci95_lo),
            ci95_hi_us: r(s.ci95_hi),
        }
    }
}

/// One row of table `T`, as written and as read back.
#[derive(Debug, Clone)]
pub struct Line<T: CsvTable> {
    pub lead: Leading,
    pub params: T::Params,
    /// `Some` exactly when `T::WITH_STATS`.
    pub stats: Option<Stats>,
    pub figures: T::Figures,
}

impl<T: CsvTable> Line<T> {
    /// A row of `T` for `case` in run `run_id`.
    pub fn new(
        run_id: &str,
        case: impl Into<String>,
        params: T::Params,
        stats: Option<&Summary>,
        figures: T::Figures,
    ) -> Line<T> {
        Line {
            lead: Leading {
                schema_version: SCHEMA_VERSION,
                run_id: run_id.to_string(),
                bench: T::NAME.to_string(),
                case: case.into(),
            },
            params,
            stats: stats.map(Stats::from),
            figures,
        }
    }

    /// The statistics block; tables with one always have it.
    pub fn stats(&self) -> &Stats {
        self.stats
            .as_ref()
            .expect("read_table fills stats for tables WITH_STATS")
    }

    fn write_to<W: std::io::Write>(&self, w: &mut ::csv::Writer<W>) -> ::csv::Result<()> {
        match &self.stats {
            Some(s) => w.serialize((&self.lead, &self.params, s, &self.figures)),
            None => w.serialize((&self.lead, &self.params, &self.figures)),
        }
    }

    /// The row's cells as written to a file: serialized as [`Line::write_to`] does, then each
    /// cell through [`crate::sanitize::csv_cell`], so no string of any table (a peer's
    /// hostname, an adapter's name, an error) reaches a spreadsheet as a formula. Numbers
    /// and ordinary strings come out byte for byte as serialized.
    fn neutral_record(&self) -> ::csv::Result<::csv::StringRecord> {
        let mut w = ::csv::WriterBuilder::new()
            .has_headers(false)
            .from_writer(Vec::new());
        self.write_to(&mut w)?;
        let bytes = w.into_inner().map_err(|e| e.into_error())?;
        let mut rd = ::csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(&bytes[..]);
        let mut raw = ::csv::StringRecord::new();
        rd.read_record(&mut raw)?;
        Ok(raw.iter().map(crate::sanitize::csv_cell).collect())
    }
}

/// The header of table `T`, from the field names of its structs.
pub fn header<T: CsvTable>() -> Vec<String> {
    let blank: Line<T> = Line {
        lead: Leading::default(),
        params: Default::default(),
        stats: T::WITH_STATS.then(Stats::default),
        figures: Default::default(),
    };
    let mut w = ::csv::Writer::from_writer(Vec::new());
    blank.write_to(&mut w).expect("row structs are flat");
    let bytes = w.into_inner().expect("writing to memory");
    let mut rd = ::csv::Reader::from_reader(&bytes[..]);
    let h = rd.headers().expect("a header was written");
    h.iter().map(String::from).collect()
}

/// Rounds to `decimals` places, for tidy CSV cells.
pub fn round(x: f64, decimals: i32) -> f64 {
    let p = 10f64.powi(decimals);
    let r = (x * p).round() / p;
    if r.is_finite() {
        r
    } else {
        x
    }
}

/// Rounds to `digits` significant digits (0 and non-finite values unchanged).
pub fn sig(x: f64, digits: i32) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    round(x, digits - 1 - x.abs().log10().floor() as i32)
}

/// Keeps at least four significant digits: 2 decimals from 100 up, 4 below, and 4
/// significant digits under 0.01.
pub fn sig4(x: f64) -> f64 {
    let a = x.abs();
    if a >= 100.0 {
        round(x, 2)
    } else if a >= 0.01 || x == 0.0 || !x.is_finite() {
        round(x, 4)
    } else {
        sig(x, 4)
    }
}

/// A table on disk that is appended to row by row.
pub struct CsvSink<T: CsvTable> {
    writer: ::csv::Writer<File>,
    path: PathBuf,
    table: PhantomData<T>,
}

impl<T: CsvTable> CsvSink<T> {
    /// Replaces `dir`'s table with `lines`, atomically (a crash leaves the file as it was).
    pub fn rewrite(dir: &Path, lines: &[Line<T>]) -> Result<()> {
        let tmp = dir.join(format!(".{}.csv.tmp", T::NAME));
        {
            let mut sink = CsvSink::<T>::create(&tmp)?;
            for l in lines {
                sink.write(l)?;
            }
        }
        std::fs::rename(&tmp, dir.join(format!("{}.csv", T::NAME)))?;
        Ok(())
    }

    /// Creates the file and writes the header, so even a table without rows names its columns.
    pub fn create(path: &Path) -> Result<CsvSink<T>> {
        // A link planted where the table goes is not followed (a run folder is root's, but a
        // table may be written again into one another process could reach).
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let mut writer = ::csv::WriterBuilder::new()
            .has_headers(false)
            .from_writer(file);
        writer.write_record(header::<T>())?;
        writer.flush()?;
        Ok(CsvSink {
            writer,
            path: path.to_path_buf(),
            table: PhantomData,
        })
    }

    pub fn write(&mut self, line: &Line<T>) -> Result<()> {
        anyhow::ensure!(
            line.stats.is_some() == T::WITH_STATS,
            "internal error: a row of {} {} a statistics block",
            self.path.display(),
            if T::WITH_STATS { "lacks" } else { "has" }
        );
        let cannot = || format!("cannot write a row to {}", self.path.display());
        let record = line.neutral_record().with_context(cannot)?;
        self.writer.write_record(&record).with_context(cannot)?;
        self.writer.flush()?;
        Ok(())
    }
}

/// Every iteration's sample of a bench (`<bench>_samples.csv`, with `--raw`).
pub struct SamplesTable;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SampleParams {
    pub timer: String,
    pub iteration: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SampleFigures {
    pub sample_us: f64,
}

impl CsvTable for SamplesTable {
    const NAME: &'static str = "samples";
    const WITH_STATS: bool = false;
    type Params = SampleParams;
    type Figures = SampleFigures;
}

impl CsvSink<SamplesTable> {
    /// Writes one row per sample of `case`.
    pub fn samples(
        &mut self,
        run_id: &str,
        bench: &str,
        case: &str,
        timer: &str,
        samples: &[f64],
    ) -> Result<()> {
        for (i, &x) in samples.iter().enumerate() {
            let mut line = Line::<SamplesTable>::new(
                run_id,
                case,
                SampleParams {
                    timer: timer.to_string(),
                    iteration: i as u64,
                },
                None,
                SampleFigures {
                    sample_us: round(x, 3),
                },
            );
            line.lead.bench = bench.to_string();
            self.write(&line)?;
        }
        Ok(())
    }
}

#[derive(Debug, Error)]
pub enum DataError {
    #[error("{path}: cannot read: {reason}")]
    Unreadable { path: PathBuf, reason: String },
    #[error("{path}: the file is empty (no header): re-run the bench that writes it")]
    Empty { path: PathBuf },
    #[error("{path}: missing column '{column}' (written by another tool or version?)")]
    MissingColumn { path: PathBuf, column: String },
    #[error("{path}: schema_version {found} is not {expected}, which this morphbench reads: read it with the version that wrote it")]
    Schema {
        path: PathBuf,
        found: String,
        expected: u32,
    },
    #[error("{path}: row {row}: column '{column}' holds '{value}': {reason}")]
    BadCell {
        path: PathBuf,
        row: usize,
        column: String,
        value: String,
        reason: String,
    },
}

/// Reads every row of table `T` from `path`, checking the header, each row's
/// `schema_version`, and each cell; an error names the file, the row and the column.
pub fn read_table<T: CsvTable>(path: &Path) -> Result<Vec<Line<T>>, DataError> {
    let unreadable = |reason: String| DataError::Unreadable {
        path: path.to_path_buf(),
        reason,
    };
    let bytes = super::read_capped(path, MAX_TABLE_BYTES).map_err(|e| unreadable(e.to_string()))?;
    let text = String::from_utf8(bytes).map_err(|e| unreadable(e.to_string()))?;
    if text.trim().is_empty() {
        return Err(DataError::Empty {
            path: path.to_path_buf(),
        });
    }
    let mut rd = ::csv::Reader::from_reader(text.as_bytes());
    let headers = rd.headers().map_err(|e| unreadable(e.to_string()))?.clone();
    for column in header::<T>() {
        if !headers.iter().any(|h| h == column) && !T::ADDED.contains(&column.as_str()) {
            return Err(DataError::MissingColumn {
                path: path.to_path_buf(),
                column,
            });
        }
    }
    let mut out = Vec::new();
    for (i, record) in rd.records().enumerate() {
        let row = i + 1;
        let record = record.map_err(|e| unreadable(format!("row {row}: {e}")))?;
        let cell = |e: ::csv::Error| bad_cell(path, row, &headers, &record, e);
        check_numbers::<T>(path, row, &headers, &record)?;
        let lead: Leading = record.deserialize(Some(&headers)).map_err(cell)?;
        if lead.schema_version != SCHEMA_VERSION {
            return Err(DataError::Schema {
                path: path.to_path_buf(),
                found: lead.schema_version.to_string(),
                expected: SCHEMA_VERSION,
            });
        }
        let line = Line {
            lead,
            params: record.deserialize(Some(&headers)).map_err(cell)?,
            stats: if T::WITH_STATS {
                Some(record.deserialize(Some(&headers)).map_err(cell)?)
            } else {
                None
            },
            figures: record.deserialize(Some(&headers)).map_err(cell)?,
        };
        if let Err((column, reason)) = T::check(&line) {
            let i = headers.iter().position(|h| h == column);
            return Err(DataError::BadCell {
                path: path.to_path_buf(),
                row,
                column: column.to_string(),
                value: i.and_then(|i| record.get(i)).unwrap_or("").to_string(),
                reason,
            });
        }
        out.push(line);
    }
    Ok(out)
}

/// Every cell that reads as a number must be finite, within [`MAX_CELL`], and not negative
/// unless its column is one of `T::SIGNED` (or the confidence bound `ci95_lo_us`).
fn check_numbers<T: CsvTable>(
    path: &Path,
    row: usize,
    headers: &::csv::StringRecord,
    record: &::csv::StringRecord,
) -> Result<(), DataError> {
    for (column, value) in headers.iter().zip(record.iter()) {
        let Ok(x) = value.trim().parse::<f64>() else {
            continue;
        };
        let reason = if !x.is_finite() {
            "not a finite number"
        } else if x.abs() > MAX_CELL {
            "out of range (magnitude over 1e15)"
        } else if x < 0.0 && column != "ci95_lo_us" && !T::SIGNED.contains(&column) {
            "negative, which this column never is"
        } else {
            continue;
        };
        return Err(DataError::BadCell {
            path: path.to_path_buf(),
            row,
            column: column.to_string(),
            value: value.to_string(),
            reason: reason.to_string(),
        });
    }
    Ok(())
}

/// Turns a cell's deserialization error into one that names the column and the value.
fn bad_cell(
    path: &Path,
    row: usize,
    headers: &::csv::StringRecord,
    record: &::csv::StringRecord,
    e: ::csv::Error,
) -> DataError {
    let (column, value, reason) = match e.kind() {
        ::csv::ErrorKind::Deserialize { err, .. } => {
            // An enum's error carries no field: the cell is the one holding the unknown
            // variant it names.
            let unknown = err.kind().to_string();
            let named = unknown
                .strip_prefix("unknown variant `")
                .and_then(|r| r.split_once('`'))
                .and_then(|(v, _)| record.iter().position(|cell| cell == v));
            let field = err.field().map(|f| f as usize).or(named);
            (
                field
                    .and_then(|f| headers.get(f))
                    .unwrap_or("?")
                    .to_string(),
                field.and_then(|f| record.get(f)).unwrap_or("").to_string(),
                err.kind().to_string(),
            )
        }
        other => ("?".into(), String::new(), format!("{other:?}")),
    };
    if column == "schema_version" {
        return DataError::Schema {
            path: path.to_path_buf(),
            found: value,
            expected: SCHEMA_VERSION,
        };
    }
    DataError::BadCell {
        path: path.to_path_buf(),
        row,
        column,
        value,
        reason,
    }
}

/// Reads table `T` from a run folder, or `None` when the run did not write it.
pub fn read_optional<T: CsvTable>(dir: &Path) -> Result<Option<Vec<Line<T>>>, DataError> {
    let path = dir.join(format!("{}.csv", T::NAME));
    if !path.exists() {
        return Ok(None);
    }
    read_table::<T>(&path).map(Some)
}

#[cfg(test)]
#[path = "csv_tests.rs"]
mod tests;
