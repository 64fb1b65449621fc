//! Every result table a run folder can hold: the benches' (from their descriptors, in the
//! registry's order) and `check`'s. What each reader does with a table is
//! [`crate::report::tables`]'s business; this list is only what there is to load.

use crate::record::TableSpec;

/// The tables, benches' first.
pub fn specs() -> Vec<TableSpec> {
    crate::bench::REGISTRY
        .iter()
        .flat_map(|d| (d.tables)())
        .chain(std::iter::once(TableSpec::of::<crate::check::CheckTable>()))
        .collect()
}
