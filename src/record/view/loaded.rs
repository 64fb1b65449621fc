//! A run folder's tables, loaded: what every reader of a run (headlines, charts, the report)
//! is handed.

use std::collections::BTreeMap;

use crate::record::label::RunLabel;
use crate::record::{AnyRows, CsvTable, Line};

/// The tables of one run folder, by name (loaded by `report::catalog::load`).
pub struct Loaded {
    pub label: RunLabel,
    tables: BTreeMap<&'static str, AnyRows>,
}

impl Loaded {
    pub fn new(label: RunLabel, tables: BTreeMap<&'static str, AnyRows>) -> Loaded {
        Loaded { label, tables }
    }

    /// The rows of table `T`; `None` when the run did not write it.
    pub fn table<T: CsvTable + 'static>(&self) -> Option<&Vec<Line<T>>> {
        self.tables.get(T::NAME)?.downcast_ref()
    }

    /// Whether the run wrote the table named `name`.
    pub fn has(&self, name: &str) -> bool {
        self.tables.contains_key(name)
    }
}
