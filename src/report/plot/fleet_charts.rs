//! The fleet gate's chart: each figure across the nodes (one point per rank), the fleet's
//! expected level as a reference, and the failed and warned ranks marked with their verdict.

#[allow(unused_imports)]
use super::*;
use crate::bench::fleet::table::FleetTable;

pub(crate) fn fleet_charts(run: &Loaded) -> Vec<Named> {
    let Some(rows) = run.table::<FleetTable>() else {
        return Vec::new();
    };
    // (test, figure, unit) -> [(rank, value, expected, verdict)]
    type Point = (f64, f64, Option<f64>, String);
    let mut by: BTreeMap<(String, String, String), Vec<Point>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.params.test != "inventory") {
        let (p, f) = (&r.params, &r.figures);
        let Some(v) = f.value else { continue };
        by.entry((p.test.clone(), p.figure.clone(), f.unit.clone()))
            .or_default()
            .push((f64::from(p.rank), v, f.expected, f.verdict.clone()));
    }
    let mut out = Vec::new();
    for ((test, figure, unit), pts) in by {
        let mut chart = LineChart::new(
            format!("{test} {figure} across the fleet — {}", run.label.short()),
            "rank",
            &unit,
            (false, false),
        );
        let expected: Points = pts.iter().filter_map(|p| Some((p.0, p.2?))).collect();
        if !expected.is_empty() {
            chart.series.push(Series {
                label: "expected (the fleet's healthy level, or the baseline)".into(),
                points: sorted(expected),
                reference: true,
                ..Default::default()
            });
        }
        chart.series.push(Series {
            label: format!("{test} {figure}"),
            points: sorted(pts.iter().map(|p| (p.0, p.1)).collect()),
            marked: pts
                .iter()
                .filter(|p| p.3 == "FAIL" || p.3 == "WARN")
                .map(|p| (p.0, p.1, format!(" r{} {}", p.0, p.3)))
                .collect(),
            ..Default::default()
        });
        push_lines(
            &mut out,
            &format!("fleet_{test}_{figure}"),
            &format!(
                "{test} {figure} of every rank against what was expected, FAIL and WARN marked"
            ),
            chart,
        );
    }
    out
}
