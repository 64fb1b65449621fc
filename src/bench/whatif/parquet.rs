//! The trace's parquet form (as the artifact writes it with pandas and pyarrow: snappy pages,
//! `optype` dictionary-encoded, small integers as INT32), read column by column.

use std::path::Path;

use anyhow::{bail, Context, Result};
use parquet::column::reader::{ColumnReader, ColumnReaderImpl};
use parquet::data_type::DataType;
use parquet::file::reader::{FileReader, RowGroupReader, SerializedFileReader};

use super::trace::{record, RawRecord, Record, COLUMNS};

/// Values read per call.
const BATCH: usize = 64 * 1024;

pub fn read(path: &Path) -> Result<Vec<Record>> {
    let file = std::fs::File::open(path)?;
    let reader = SerializedFileReader::new(file).context("not a readable parquet file")?;
    let schema = reader.metadata().file_metadata().schema_descr_ptr();
    let mut at = [0usize; 11];
    for (i, name) in COLUMNS.iter().enumerate() {
        at[i] = (0..schema.num_columns())
            .find(|&c| schema.column(c).name() == *name)
            .with_context(|| {
                format!(
                    "no column {name:?}: a trace has the columns {}",
                    COLUMNS.join(",")
                )
            })?;
    }
    let mut out = Vec::new();
    for g in 0..reader.num_row_groups() {
        let group = reader.get_row_group(g)?;
        let rows = usize::try_from(group.metadata().num_rows()).unwrap_or(0);
        let int = |c: usize| ints(&*group, at[c], rows, COLUMNS[c]);
        let float = |c: usize| floats(&*group, at[c], rows, COLUMNS[c]);
        let (dp, stage, rank, step) = (int(0)?, int(1)?, int(2)?, int(3)?);
        let optype = strings(&*group, at[4], rows, COLUMNS[4])?;
        let (start, duration) = (float(5)?, float(6)?);
        let (seq, mc, mb, gmc) = (int(7)?, int(8)?, int(9)?, int(10)?);
        out.reserve(rows);
        for r in 0..rows {
            let raw = RawRecord {
                dp_rank: dp[r],
                stage: stage[r],
                rank: rank[r],
                step: step[r],
                optype: optype[r].clone(),
                start: start[r],
                duration: duration[r],
                seq_id: seq[r],
                mc: mc[r],
                mb_id: mb[r],
                gmc: gmc[r],
            };
            out.push(record(&raw, &|| format!("row group {g}, row {r}"))?);
        }
    }
    Ok(out)
}

/// Every value of one column of a row group; a null is refused by name.
fn column<T: DataType>(
    mut reader: ColumnReaderImpl<T>,
    rows: usize,
    name: &str,
) -> Result<Vec<T::T>> {
    let mut values = Vec::with_capacity(rows);
    let mut defs = Vec::new();
    let mut read = 0;
    while read < rows {
        defs.clear();
        let (records, got, levels) =
            reader.read_records(BATCH.min(rows - read), Some(&mut defs), None, &mut values)?;
        if levels > got {
            bail!("column {name:?} has an empty (null) value: every op needs every column");
        }
        if records == 0 {
            break;
        }
        read += records;
    }
    if values.len() != rows {
        bail!(
            "column {name:?} has {} values for {rows} rows",
            values.len()
        );
    }
    Ok(values)
}

fn ints(group: &dyn RowGroupReader, c: usize, rows: usize, name: &str) -> Result<Vec<i64>> {
    Ok(match group.get_column_reader(c)? {
        ColumnReader::Int32ColumnReader(r) => {
            column(r, rows, name)?.into_iter().map(i64::from).collect()
        }
        ColumnReader::Int64ColumnReader(r) => column(r, rows, name)?,
        _ => bail!("column {name:?} is not an integer column"),
    })
}

fn floats(group: &dyn RowGroupReader, c: usize, rows: usize, name: &str) -> Result<Vec<f64>> {
    Ok(match group.get_column_reader(c)? {
        ColumnReader::FloatColumnReader(r) => {
            column(r, rows, name)?.into_iter().map(f64::from).collect()
        }
        ColumnReader::DoubleColumnReader(r) => column(r, rows, name)?,
        _ => bail!("column {name:?} is not a floating-point column"),
    })
}

fn strings(group: &dyn RowGroupReader, c: usize, rows: usize, name: &str) -> Result<Vec<String>> {
    match group.get_column_reader(c)? {
        ColumnReader::ByteArrayColumnReader(r) => column(r, rows, name)?
            .into_iter()
            .map(|b| {
                // Op type names are short; a long one is refused before it is copied about.
                let bytes = b.data();
                if bytes.len() > 64 {
                    bail!("column {name:?} has a value of {} bytes", bytes.len());
                }
                Ok(String::from_utf8_lossy(bytes).into_owned())
            })
            .collect(),
        _ => bail!("column {name:?} is not a text column"),
    }
}
