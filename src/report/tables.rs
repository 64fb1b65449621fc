//! The one registry of result tables. Each CSV a run folder can hold is registered once, with
//! what each reader does with it: `plot` loads it ([`crate::report::plot::Loaded`]) and draws
//! its charts, the report lists it and shows its headlines. Adding a CSV is its row type (a
//! `CsvTable`) and one line in [`tables`]; a table `check` compares is also one line in
//! [`crate::check::figures::CHECKED`].

use std::any::Any;
use std::path::Path;

use anyhow::Result;

use crate::bench::d2h::D2hTable;
use crate::bench::fleet::cost::KeepCostTable;
use crate::bench::fleet::table::FleetTable;
use crate::bench::hol::HolTable;
use crate::bench::kernels::KernelsTable;
use crate::bench::links::tables::{LinksTable, NodesTable};
use crate::bench::peak::PeakTable;
use crate::bench::pipeline::table::{PipelineTable, TimelineTable as PipelineTimelineTable};
use crate::bench::rdma::RdmaTable;
use crate::bench::sim::{SimBenchTable, SimTable, TimelineTable as SimTimelineTable};
use crate::check::CheckTable;
use crate::record::csv::{read_optional, CsvTable, DataError};
use crate::report::headlines::{self as hl, Headline};
use crate::report::plot::{self, Loaded, Named};

/// Rows of a table, loaded, behind `Any` (read back with [`Loaded::table`]).
pub type AnyRows = Box<dyn Any>;
/// Charts of one table: over every run compared (with the figures' title), or of one run.
pub enum Charts {
    Compared(fn(&[Loaded], &str) -> Result<Vec<Named>>),
    OfFirst(fn(&Loaded) -> Vec<Named>),
}

/// One result table and what each reader does with it.
pub struct Table {
    /// The CSV's stem in a run folder (`CsvTable::NAME`).
    pub name: &'static str,
    pub load: fn(&Path) -> Result<Option<AnyRows>, DataError>,
    /// Its columns, in order (the header of an empty table).
    pub header: fn() -> Vec<String>,
    /// A table of a single-node bench: `plot` says when a run lacks it.
    pub single_node: bool,
    pub headlines: Option<fn(&Loaded, &mut Vec<Headline>)>,
    pub charts: Option<Charts>,
}

impl Table {
    fn of<T: CsvTable + 'static>() -> Table {
        Table {
            name: T::NAME,
            load: load::<T>,
            header: crate::record::csv::header::<T>,
            single_node: false,
            headlines: None,
            charts: None,
        }
    }
    fn single_node(self) -> Table {
        Table {
            single_node: true,
            ..self
        }
    }
    fn headlines(self, f: fn(&Loaded, &mut Vec<Headline>)) -> Table {
        Table {
            headlines: Some(f),
            ..self
        }
    }
    fn charts(self, c: Charts) -> Table {
        Table {
            charts: Some(c),
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

/// Every result table, in the order the report lists them and draws their figures.
pub fn tables() -> Vec<Table> {
    use Charts::{Compared, OfFirst};
    vec![
        Table::of::<PeakTable>().single_node().headlines(hl::peak),
        Table::of::<KernelsTable>()
            .single_node()
            .headlines(hl::kernels)
            .charts(Compared(plot::kernel_and_roofline_charts)),
        Table::of::<D2hTable>()
            .single_node()
            .headlines(hl::d2h)
            .charts(Compared(plot::d2h_charts)),
        Table::of::<HolTable>()
            .single_node()
            .headlines(hl::hol)
            .charts(Compared(plot::hol_charts)),
        Table::of::<RdmaTable>()
            .single_node()
            .headlines(hl::rdma)
            .charts(Compared(plot::rdma_charts)),
        Table::of::<SimTable>()
            .single_node()
            .headlines(hl::sim)
            .charts(Compared(plot::sim_charts)),
        Table::of::<SimTimelineTable>(),
        Table::of::<SimBenchTable>(),
        Table::of::<crate::bench::sim::tail::SimTailTable>(),
        Table::of::<CheckTable>(),
        Table::of::<LinksTable>()
            .headlines(hl::links)
            .charts(OfFirst(plot::links_charts)),
        Table::of::<NodesTable>(),
        Table::of::<PipelineTable>()
            .headlines(hl::pipeline)
            .charts(OfFirst(plot::pipeline_charts)),
        Table::of::<PipelineTimelineTable>(),
        Table::of::<FleetTable>()
            .headlines(hl::fleet)
            .charts(OfFirst(plot::fleet_charts)),
        Table::of::<KeepCostTable>(),
    ]
}

/// The CSV columns page's generated part ([`COLUMNS_PAGE`]): every registered table's
/// columns, in order, as the writer writes them.
pub fn columns_block() -> String {
    let mut out = String::from("| file | columns |\n|---|---|\n");
    for t in tables() {
        let cols: Vec<String> = (t.header)().iter().map(|c| format!("`{c}`")).collect();
        out.push_str(&format!("| `{}` | {} |\n", t.file(), cols.join(", ")));
    }
    out
}

/// The reference page of CSV columns, whose table of columns is [`columns_block`] (a test
/// fails when they differ; `MORPHBENCH_WRITE_DOCS=1` rewrites it).
pub const COLUMNS_PAGE: &str = "docs/csv-columns.md";
/// The lines around the generated part of [`COLUMNS_PAGE`].
pub const GENERATED_BEGIN: &str =
    "<!-- generated from the table registry (src/report/tables.rs): do not edit by hand -->";
pub const GENERATED_END: &str = "<!-- end of the generated part -->";

/// Files a run folder may hold beside its tables, listed in the report after them.
pub const OTHER_FILES: &[&str] = &["pipeline_trace.json", "meta.json"];

#[cfg(test)]
mod tests {
    use super::*;

    /// A table's prose section: from its `**NAME.csv**` line to the next table's or heading.
    fn section<'a>(page: &'a str, file: &str) -> Option<&'a str> {
        let start = page.find(&format!("**{file}**"))?;
        let rest = &page[start + file.len() + 4..];
        let end = rest
            .find("\n**")
            .into_iter()
            .chain(rest.find("\n#"))
            .chain(rest.find(GENERATED_BEGIN))
            .min()
            .unwrap_or(rest.len());
        Some(&rest[..end])
    }

    #[test]
    fn the_csv_columns_page_is_the_registrys() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(COLUMNS_PAGE);
        let page = std::fs::read_to_string(&path).unwrap();
        let generated = format!("{GENERATED_BEGIN}\n\n{}\n{GENERATED_END}", columns_block());
        let (Some(a), Some(b)) = (page.find(GENERATED_BEGIN), page.find(GENERATED_END)) else {
            panic!(
                "{COLUMNS_PAGE} lacks its generated part ({GENERATED_BEGIN} ... {GENERATED_END})"
            );
        };
        let now = &page[a..b + GENERATED_END.len()];
        if now != generated {
            if std::env::var_os("MORPHBENCH_WRITE_DOCS").is_some() {
                let page = page.replacen(now, &generated, 1);
                std::fs::write(&path, page).unwrap();
            } else {
                panic!(
                    "{COLUMNS_PAGE}'s columns differ from the registry's: rerun with \
                     MORPHBENCH_WRITE_DOCS=1 to rewrite them\nexpected:\n{generated}"
                );
            }
        }
        // Every table has its prose, which names each of its own columns.
        let shared = ["schema_version", "run_id", "bench", "case"];
        let stats = crate::record::csv::header::<crate::bench::sim::SimBenchTable>();
        let mut missing = Vec::new();
        for t in tables() {
            let Some(prose) = section(&page, &t.file()) else {
                missing.push(format!("{}: no **{}** section", t.name, t.file()));
                continue;
            };
            for c in (t.header)() {
                let in_stats =
                    stats.contains(&c) && c.ends_with("_us") || ["n", "cv"].contains(&c.as_str());
                if !shared.contains(&c.as_str()) && !in_stats && !prose.contains(&format!("`{c}`"))
                {
                    missing.push(format!("{}: `{c}`", t.file()));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "columns the page does not describe:\n{}",
            missing.join("\n")
        );
    }

    #[test]
    fn every_table_check_compares_is_registered() {
        let names: Vec<&str> = tables().iter().map(|t| t.name).collect();
        for (checked, _) in crate::check::figures::CHECKED {
            assert!(names.contains(checked), "{checked} missing from {names:?}");
        }
    }

    #[test]
    fn every_table_is_registered_once() {
        let names: Vec<&str> = tables().iter().map(|t| t.name).collect();
        let unique: std::collections::BTreeSet<&str> = names.iter().copied().collect();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        for expected in ["peak", "kernels", "links", "nodes", "pipeline", "sim_bench"] {
            assert!(
                names.contains(&expected),
                "{expected} missing from {names:?}"
            );
        }
    }
}
