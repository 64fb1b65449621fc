//! The result tables as the report walks them: their headlines, gathered for a run, and the
//! CSV columns page generated from them. Each table, with its headlines, charts and check
//! figures, comes from its bench's descriptor ([`crate::report::catalog`]).

use crate::record::view::headline::Headline;
use crate::record::view::loaded::Loaded;

/// The run's headlines, bench by bench.
pub fn headlines(run: &Loaded) -> Vec<Headline> {
    let mut out = Vec::new();
    for t in crate::report::catalog::specs() {
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
    for t in crate::report::catalog::specs() {
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
    "<!-- generated from the benches' descriptors by src/report/tables.rs: do not edit by hand -->";
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
        for t in crate::report::catalog::specs() {
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
    fn check_compares_the_measured_tables_and_the_report_has_their_views() {
        // Each comes from its bench's descriptor: a descriptor that lost one is caught here.
        let checked: Vec<&str> = crate::check::figures::checked()
            .iter()
            .map(|c| c.0)
            .collect();
        let measured = ["peak", "kernels", "d2h", "hol", "rdma", "links", "nodes"];
        assert!(measured.iter().all(|m| checked.contains(m)), "{checked:?}");
        // Predictions are not compared.
        assert!(!checked.iter().any(|c| c.starts_with("sim")), "{checked:?}");
        let with = |f: fn(&crate::record::TableSpec) -> bool| -> Vec<&str> {
            crate::report::catalog::specs()
                .iter()
                .filter(|t| f(t))
                .map(|t| t.name)
                .collect()
        };
        let headlined = with(|t| t.headlines.is_some());
        let charted = with(|t| t.charts.is_some());
        for name in [
            "kernels", "d2h", "hol", "rdma", "sim", "links", "pipeline", "fleet",
        ] {
            assert!(
                headlined.contains(&name) && charted.contains(&name),
                "{name}"
            );
        }
        assert!(headlined.contains(&"peak"), "{headlined:?}");
    }

    #[test]
    fn every_table_is_registered_once() {
        let names: Vec<&str> = crate::report::catalog::specs()
            .iter()
            .map(|t| t.name)
            .collect();
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
