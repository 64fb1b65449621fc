//! A result table as every reader needs it, whatever its row type: its name, its columns and a
//! loader that hands its rows back behind `Any` (the reader that knows the type downcasts).

use std::any::Any;
use std::path::Path;

use super::csv::{header, read_optional, CsvTable, DataError};

/// Rows of a table, loaded, behind `Any`.
pub type AnyRows = Box<dyn Any>;

/// One result table.
#[derive(Clone, Copy)]
pub struct TableSpec {
    /// The CSV's stem in a run folder (`CsvTable::NAME`).
    pub name: &'static str,
    pub load: fn(&Path) -> Result<Option<AnyRows>, DataError>,
    /// Its columns, in order (the header of an empty table).
    pub header: fn() -> Vec<String>,
    /// A table of a single-node bench: `plot` says when a run lacks it.
    pub single_node: bool,
}

impl TableSpec {
    pub fn of<T: CsvTable + 'static>() -> TableSpec {
        TableSpec {
            name: T::NAME,
            load: load::<T>,
            header: header::<T>,
            single_node: false,
        }
    }

    pub fn single_node(self) -> TableSpec {
        TableSpec {
            single_node: true,
            ..self
        }
    }

    /// The file in a run folder.
    pub fn file(&self) -> String {
        format!("{}.csv", self.name)
    }
}

fn load<T: CsvTable + 'static>(dir: &Path) -> Result<Option<AnyRows>, DataError> {
    Ok(read_optional::<T>(dir)?.map(|rows| Box::new(rows) as AnyRows))
}
