//! Reading a run's CSVs back for plotting, with every problem named: the file, the column.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::export::csv::SCHEMA_VERSION;

#[derive(Debug, Error)]
pub enum DataError {
    #[error("{path}: cannot read: {reason}")]
    Unreadable { path: PathBuf, reason: String },
    #[error("{path}: the file is empty (no header): re-run the bench that writes it")]
    Empty { path: PathBuf },
    #[error("{path}: missing column '{column}' (written by another tool or version?)")]
    MissingColumn { path: PathBuf, column: String },
    #[error("{path}: schema_version {found} is not {expected}, which this morphbench reads: plot it with the version that wrote it")]
    Schema {
        path: PathBuf,
        found: String,
        expected: u32,
    },
    #[error("{path}: row {row}: column '{column}' holds '{value}', not a number")]
    NotNumber {
        path: PathBuf,
        row: usize,
        column: String,
        value: String,
    },
}

/// One CSV, checked for its schema version and the columns a figure needs.
pub struct Table {
    pub path: PathBuf,
    index: HashMap<String, usize>,
    rows: Vec<csv::StringRecord>,
}

/// One row of a table, read by column name.
pub struct Row<'a> {
    table: &'a Table,
    record: &'a csv::StringRecord,
    number: usize,
}

impl Table {
    /// Loads `path`, requiring `columns` (and `schema_version` on every row).
    pub fn load(path: &Path, columns: &[&str]) -> Result<Table, DataError> {
        let unreadable = |reason: String| DataError::Unreadable {
            path: path.to_path_buf(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| unreadable(e.to_string()))?;
        if text.trim().is_empty() {
            return Err(DataError::Empty {
                path: path.to_path_buf(),
            });
        }
        let mut rd = csv::Reader::from_reader(text.as_bytes());
        let headers = rd.headers().map_err(|e| unreadable(e.to_string()))?.clone();
        let index: HashMap<String, usize> = headers
            .iter()
            .enumerate()
            .map(|(i, h)| (h.to_string(), i))
            .collect();
        for c in std::iter::once(&"schema_version").chain(columns) {
            if !index.contains_key(*c) {
                return Err(DataError::MissingColumn {
                    path: path.to_path_buf(),
                    column: c.to_string(),
                });
            }
        }
        let rows = rd
            .records()
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| unreadable(e.to_string()))?;
        let v = index["schema_version"];
        if let Some(bad) = rows
            .iter()
            .find(|r| r.get(v) != Some(&SCHEMA_VERSION.to_string()[..]))
        {
            return Err(DataError::Schema {
                path: path.to_path_buf(),
                found: bad.get(v).unwrap_or("").to_string(),
                expected: SCHEMA_VERSION,
            });
        }
        Ok(Table {
            path: path.to_path_buf(),
            index,
            rows,
        })
    }

    pub fn rows(&self) -> impl Iterator<Item = Row<'_>> {
        self.rows.iter().enumerate().map(move |(i, record)| Row {
            table: self,
            record,
            number: i + 1,
        })
    }
}

impl Row<'_> {
    pub fn str(&self, column: &str) -> &str {
        self.table
            .index
            .get(column)
            .and_then(|&i| self.record.get(i))
            .unwrap_or("")
    }

    pub fn num(&self, column: &str) -> Result<f64, DataError> {
        let v = self.str(column);
        v.parse().map_err(|_| DataError::NotNumber {
            path: self.table.path.clone(),
            row: self.number,
            column: column.to_string(),
            value: v.to_string(),
        })
    }

    /// A number, or `None` for an empty cell.
    pub fn opt(&self, column: &str) -> Result<Option<f64>, DataError> {
        if self.str(column).is_empty() {
            Ok(None)
        } else {
            self.num(column).map(Some)
        }
    }
}

/// Host and adapter of a run, for titles and legends.
#[derive(Debug, Clone)]
pub struct RunLabel {
    pub host: String,
    pub adapter: String,
}

impl RunLabel {
    pub fn of(dir: &Path) -> RunLabel {
        let meta: serde_json::Value = std::fs::read(dir.join("meta.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let s = |v: &serde_json::Value| v.as_str().unwrap_or("?").to_string();
        RunLabel {
            host: s(&meta["host"]["hostname"]),
            adapter: meta["adapter"]["name"]
                .as_str()
                .map(String::from)
                .unwrap_or_else(|| "no GPU".into()),
        }
    }

    pub fn short(&self) -> String {
        format!("{} / {}", self.host, self.adapter)
    }
}
