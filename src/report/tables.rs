//! What each reader does with a result table: `plot` draws its charts, the report shows its
//! headlines. The tables themselves come from the benches' descriptors
//! ([`crate::report::catalog`]); a table with nothing here is still loaded, listed and
//! documented. A table `check` compares is one line in [`crate::check::figures::CHECKED`].

use anyhow::Result;

use crate::record::TableSpec;
use crate::report::headlines::{self as hl, Headline};
use crate::report::plot::{self, Loaded, Named};

/// Charts of one table: over every run compared (with the figures' title), or of one run.
pub enum Charts {
    Compared(fn(&[Loaded], &str) -> Result<Vec<Named>>),
    OfFirst(fn(&Loaded) -> Vec<Named>),
}

/// A table's headlines, added to the run's.
pub type HeadlinesOf = fn(&Loaded, &mut Vec<Headline>);

/// One result table and what each reader does with it.
pub struct Table {
    pub spec: TableSpec,
    pub headlines: Option<HeadlinesOf>,
    pub charts: Option<Charts>,
}

impl std::ops::Deref for Table {
    type Target = TableSpec;
    fn deref(&self) -> &TableSpec {
        &self.spec
    }
}

/// The headlines and charts of the tables that have them, by table name.
fn views(name: &str) -> (Option<HeadlinesOf>, Option<Charts>) {
    use Charts::{Compared, OfFirst};
    match name {
        "peak" => (Some(hl::peak), None),
        "kernels" => (
            Some(hl::kernels),
            Some(Compared(plot::kernel_and_roofline_charts)),
        ),
        "d2h" => (Some(hl::d2h), Some(Compared(plot::d2h_charts))),
        "hol" => (Some(hl::hol), Some(Compared(plot::hol_charts))),
        "rdma" => (Some(hl::rdma), Some(Compared(plot::rdma_charts))),
        "sim" => (Some(hl::sim), Some(Compared(plot::sim_charts))),
        "links" => (Some(hl::links), Some(OfFirst(plot::links_charts))),
        "pipeline" => (Some(hl::pipeline), Some(OfFirst(plot::pipeline_charts))),
        "fleet" => (Some(hl::fleet), Some(OfFirst(plot::fleet_charts))),
        _ => (None, None),
    }
}

/// Every result table, in the order the report lists them and draws their figures.
pub fn tables() -> Vec<Table> {
    crate::report::catalog::specs()
        .into_iter()
        .map(|spec| {
            let (headlines, charts) = views(spec.name);
            Table {
                spec,
                headlines,
                charts,
            }
        })
        .collect()
}

/// The run's headlines, bench by bench.
pub fn headlines(run: &Loaded) -> Vec<Headline> {
    let mut out = Vec::new();
    for t in tables() {
        if let Some(f) = t.headlines {
            f(run, &mut out);
        }
    }
    out
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
