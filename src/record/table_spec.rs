//! A result table as every reader needs it, whatever its row type: its name, its columns, a
//! loader that hands its rows back behind `Any` (the reader that knows the type downcasts),
//! and what the readers take from it: its headlines, its charts and the figures `check`
//! compares (each the bench's own function, given with the table in its descriptor).

use std::any::Any;
use std::path::Path;

use super::csv::{header, read_optional, CsvTable, DataError};
use super::view::chart::Named;
use super::view::figure::{add, figures_in, AddFigures, Checked, FiguresIn};
use super::view::headline::Headline;
use super::view::loaded::Loaded;

/// Rows of a table, loaded, behind `Any`.
pub type AnyRows = Box<dyn Any>;

/// A table's headlines, added to the run's.
pub type HeadlinesOf = fn(&Loaded, &mut Vec<Headline>);

/// Charts of one table: over every run compared (with the figures' title), or of one run.
#[derive(Clone, Copy)]
pub enum Charts {
    Compared(fn(&[Loaded], &str) -> anyhow::Result<Vec<Named>>),
    OfFirst(fn(&Loaded) -> Vec<Named>),
}

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
    /// Its rows in a loaded run (`None`: the run did not write it).
    pub rows: fn(&Loaded) -> Option<usize>,
    /// Its headlines in the report, if it has any.
    pub headlines: Option<HeadlinesOf>,
    /// Its charts in `plot`, if it has any.
    pub charts: Option<Charts>,
    /// How `check` reads its figures from a run folder, if it is compared.
    pub checked: Option<AddFigures>,
    /// The same figures from a loaded run (the report's noisy rows).
    pub figures: Option<FiguresIn>,
}

impl TableSpec {
    pub fn of<T: CsvTable + 'static>() -> TableSpec {
        TableSpec {
            name: T::NAME,
            load: load::<T>,
            header: header::<T>,
            single_node: false,
            rows: rows::<T>,
            headlines: None,
            charts: None,
            checked: None,
            figures: None,
        }
    }

    /// The table with its headlines.
    pub fn headlines(self, headlines: HeadlinesOf) -> TableSpec {
        TableSpec {
            headlines: Some(headlines),
            ..self
        }
    }

    /// The table with its charts.
    pub fn charts(self, charts: Charts) -> TableSpec {
        TableSpec {
            charts: Some(charts),
            ..self
        }
    }

    /// A table `check` compares, its figures as `T` gives them ([`Checked`]).
    pub fn compared<T: Checked + 'static>() -> TableSpec {
        TableSpec {
            checked: Some(add::<T>),
            figures: Some(figures_in::<T>),
            ..TableSpec::of::<T>()
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

fn rows<T: CsvTable + 'static>(run: &Loaded) -> Option<usize> {
    run.table::<T>().map(Vec::len)
}

fn load<T: CsvTable + 'static>(dir: &Path) -> Result<Option<AnyRows>, DataError> {
    Ok(read_optional::<T>(dir)?.map(|rows| Box::new(rows) as AnyRows))
}
