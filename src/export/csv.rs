//! CSV tables. Every table starts with `schema_version,run_id,bench,case`, then the bench's
//! parameters, then the summary statistics, then the bench's tail (throughput, timer, ...).
//! Each row is flushed as soon as it is written, so an interrupted run keeps whole rows.

use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};

use crate::stats::{Summary, SUMMARY_COLUMNS};

/// Bumped whenever a column is added, removed or renamed in any table.
pub const SCHEMA_VERSION: u32 = 1;

pub const LEADING_COLUMNS: [&str; 4] = ["schema_version", "run_id", "bench", "case"];

/// The column layout of one table: parameters, optional statistics, tail.
pub struct Schema {
    pub params: &'static [&'static str],
    pub with_stats: bool,
    pub tail: &'static [&'static str],
}

impl Schema {
    pub fn header(&self) -> Vec<&'static str> {
        let mut h: Vec<&'static str> = LEADING_COLUMNS.to_vec();
        h.extend_from_slice(self.params);
        if self.with_stats {
            h.extend_from_slice(&SUMMARY_COLUMNS);
        }
        h.extend_from_slice(self.tail);
        h
    }
}

/// One row under construction, in column order.
pub struct Record(Vec<String>);

impl Record {
    pub fn new(run_id: &str, bench: &str, case: &str) -> Record {
        Record(vec![
            SCHEMA_VERSION.to_string(),
            run_id.to_string(),
            bench.to_string(),
            case.to_string(),
        ])
    }
    pub fn push(mut self, value: impl ToString) -> Record {
        self.0.push(value.to_string());
        self
    }
    pub fn push_opt(self, value: Option<impl ToString>) -> Record {
        match value {
            Some(v) => self.push(v),
            None => self.push(""),
        }
    }
    pub fn stats(mut self, s: &Summary) -> Record {
        self.0.extend(s.fields());
        self
    }
    pub fn values(&self) -> &[String] {
        &self.0
    }
}

/// A table on disk that is appended to row by row.
pub struct CsvSink {
    writer: ::csv::Writer<File>,
    columns: usize,
    path: PathBuf,
}

impl CsvSink {
    pub fn create(path: &Path, schema: &Schema) -> Result<CsvSink> {
        let header = schema.header();
        let file =
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        let mut writer = ::csv::Writer::from_writer(file);
        writer.write_record(&header)?;
        writer.flush()?;
        Ok(CsvSink {
            writer,
            columns: header.len(),
            path: path.to_path_buf(),
        })
    }

    pub fn write(&mut self, record: Record) -> Result<()> {
        ensure!(
            record.0.len() == self.columns,
            "internal error: row for {} has {} values for {} columns",
            self.path.display(),
            record.0.len(),
            self.columns
        );
        self.writer.write_record(&record.0)?;
        self.writer.flush()?;
        Ok(())
    }
}

/// Formats a float for CSV keeping at least four significant digits.
pub fn num(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.2}")
    } else if x.abs() >= 0.01 || x == 0.0 {
        format!("{x:.4}")
    } else {
        format!("{x:.4e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_column_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv");
        let schema = Schema {
            params: &["size"],
            with_stats: true,
            tail: &["gbps", "timer"],
        };
        let mut sink = CsvSink::create(&path, &schema).unwrap();
        let s = Summary::of(&[1.0, 2.0, 3.0]).unwrap();
        sink.write(
            Record::new("r1", "t", "c1")
                .push(64)
                .stats(&s)
                .push("1.5")
                .push("gpu"),
        )
        .unwrap();
        // A short row is refused, never written.
        assert!(sink.write(Record::new("r1", "t", "c2").push(1)).is_err());
        let mut rd = ::csv::Reader::from_path(&path).unwrap();
        let headers: Vec<String> = rd.headers().unwrap().iter().map(String::from).collect();
        assert_eq!(
            &headers[..5],
            &["schema_version", "run_id", "bench", "case", "size"]
        );
        assert_eq!(&headers[5..17], &SUMMARY_COLUMNS.map(String::from));
        assert_eq!(&headers[17..], &["gbps", "timer"]);
        let rows: Vec<::csv::StringRecord> = rd.records().map(|r| r.unwrap()).collect();
        assert_eq!(rows.len(), 1);
        assert_eq!(&rows[0][0], SCHEMA_VERSION.to_string().as_str());
        assert_eq!(&rows[0][5], "3");
        assert_eq!(&rows[0][18], "gpu");
    }
}
