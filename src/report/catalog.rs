//! Every result table a run folder can hold: the benches' (from their descriptors, in the
//! registry's order) and `check`'s, and a run folder loaded with them. What each reader takes
//! from a table (headlines, charts, check figures) comes with it from its bench.

use std::collections::BTreeMap;
use std::path::Path;

use crate::record::label::RunLabel;
use crate::record::view::loaded::Loaded;
use crate::record::{DataError, TableSpec};

/// The tables, benches' first.
pub fn specs() -> Vec<TableSpec> {
    crate::bench::REGISTRY
        .iter()
        .flat_map(|d| (d.tables)())
        .chain(std::iter::once(TableSpec::of::<crate::check::CheckTable>()))
        .collect()
}

/// Every table of the run in `dir` that it wrote (a damaged one is an error naming it).
pub fn load(dir: &Path) -> Result<Loaded, DataError> {
    let mut tables = BTreeMap::new();
    for t in specs() {
        if let Some(rows) = (t.load)(dir)? {
            tables.insert(t.name, rows);
        }
    }
    Ok(Loaded::new(RunLabel::of(dir), tables))
}
