//! The fleet gate's pictures. First the overview: every node by every figure, each cell the
//! figure's ratio to what was expected (the fleet's healthy level or the baseline), the bad
//! nodes first; past [`OVERVIEW_NODES`] nodes the worst [`OVERVIEW_WORST`] and one summary
//! row of the rest. Then one strip per figure: a point per node on a categorical axis (no
//! line from rank to rank: ranks are not a trend), the expected level and its tolerance band,
//! FAIL and WARN in colour; past [`STRIP_NAMED`] nodes sorted slowest first, failures named.

use std::collections::BTreeMap;

use super::table::FleetTable;
use crate::record::view::chart::{self as charts, named, Chart, Named};
use crate::record::view::loaded::Loaded;
use crate::record::Line;
use crate::verdict::Verdict;
use charts::{Cell, Heatmap, Mark, Strip, STRIP_NAMED};

/// Nodes past which the overview draws the worst and summarises the rest.
pub(crate) const OVERVIEW_NODES: usize = 64;
/// How many nodes the overview draws when it summarises.
pub(crate) const OVERVIEW_WORST: usize = 32;

/// A figure of a node: value, expected, tolerance, mark, whether it is a time.
type NodeFigure = (f64, Option<f64>, Option<f64>, Mark, bool);

/// One rank's figures by (test, figure).
#[derive(Clone)]
struct Node {
    name: String,
    mark: Mark,
    /// Why it failed or warned, from its first such row (the gate's, for a silent rank).
    why: Option<String>,
    figures: BTreeMap<(String, String), NodeFigure>,
}

/// Whether a figure in `unit` reads lower as better (a pipeline's iteration, a stall ratio).
fn is_time(unit: &str) -> bool {
    crate::record::metrics::lower_is_better(unit)
}

impl Node {
    /// The figure's ratio to what was expected, as a speed: below 1.0 is slower (a time's
    /// ratio is inverted).
    fn ratio(&self, key: &(String, String)) -> Option<f64> {
        let &(v, e, _, _, time) = self.figures.get(key)?;
        let e = e.filter(|e| *e > 0.0 && v > 0.0)?;
        Some(if time { e / v } else { v / e })
    }
    fn count(&self, m: Mark) -> usize {
        self.figures.values().filter(|f| f.3 == m).count()
    }
    fn worst_ratio(&self) -> f64 {
        self.figures
            .keys()
            .filter_map(|k| self.ratio(k))
            .fold(f64::INFINITY, f64::min)
    }
}

/// The ranks in rank order, and the (test, figure, unit) columns in the order first measured.
fn nodes(rows: &[Line<FleetTable>]) -> (Vec<Node>, Vec<(String, String, String)>) {
    let mut by_rank: BTreeMap<u32, Node> = BTreeMap::new();
    let mut columns: Vec<(String, String, String)> = Vec::new();
    for r in rows {
        let (p, f) = (&r.params, &r.figures);
        let node = by_rank.entry(p.rank).or_insert_with(|| Node {
            name: format!("r{} {}", p.rank, p.host),
            mark: Mark::Plain,
            why: None,
            figures: BTreeMap::new(),
        });
        let mark = Mark::of_verdict(f.verdict);
        if mark > node.mark {
            node.why = Some(format!("{} {}: {}", f.verdict, p.test, f.reason));
        }
        node.mark = node.mark.max(mark);
        let Some(v) = f.value.filter(|_| p.test != "inventory") else {
            continue;
        };
        let col = (p.test.clone(), p.figure.clone(), f.unit.clone());
        if !columns.iter().any(|c| c.0 == col.0 && c.1 == col.1) {
            columns.push(col);
        }
        node.figures.insert(
            (p.test.clone(), p.figure.clone()),
            (v, f.expected, f.tolerance, mark, is_time(&f.unit)),
        );
    }
    (by_rank.into_values().collect(), columns)
}

/// How many of `ratios` fall within 10% of expected, within 10-25%, and further.
fn spread(ratios: &[f64]) -> (usize, usize, usize) {
    let off = |r: f64| (1.0 - r).abs().max((1.0 - 1.0 / r.max(1e-12)).abs());
    let near = ratios.iter().filter(|r| off(**r) <= 0.10).count();
    let mid = ratios
        .iter()
        .filter(|r| off(**r) > 0.10 && off(**r) <= 0.25)
        .count();
    (near, mid, ratios.len() - near - mid)
}

/// A cell per figure of each drawn node (`nodes` in row order): its ratio to expected and its
/// mark; "—" where nothing was expected.
fn ratio_cells(nodes: &[Node], keys: &[(String, String)]) -> Vec<Cell> {
    let mut cells = Vec::new();
    for (row, node) in nodes.iter().enumerate() {
        for (col, key) in keys.iter().enumerate() {
            let Some(&(_, _, _, mark, _)) = node.figures.get(key) else {
                continue;
            };
            let ratio = node.ratio(key).unwrap_or(f64::NAN);
            let text = if ratio.is_finite() {
                format!("{ratio:.2}x")
            } else {
                "—".to_string()
            };
            cells.push(Cell {
                row,
                col,
                ratio,
                text,
                mark,
            });
        }
    }
    cells
}

/// Why each node with no figure (it went silent, or failed before measuring) has an empty
/// row, by row, cut to 110 characters.
fn silent_notes(nodes: &[Node]) -> Vec<(usize, String)> {
    nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.figures.is_empty())
        .filter_map(|(i, n)| {
            let why = n.why.as_ref()?;
            let short: String = why.chars().take(110).collect();
            Some((
                i,
                if short.len() < why.len() {
                    format!("{short}…")
                } else {
                    short
                },
            ))
        })
        .collect()
}

/// Every node by every figure as a heatmap of ratios to expected, the bad nodes first.
fn overview(run: &Loaded, mut nodes: Vec<Node>, columns: &[(String, String, String)]) -> Named {
    // The bad first: failed, then warned, then by their worst ratio.
    nodes.sort_by(|a, b| {
        (b.mark, b.count(Mark::Fail), b.count(Mark::Warn))
            .cmp(&(a.mark, a.count(Mark::Fail), a.count(Mark::Warn)))
            .then(a.worst_ratio().total_cmp(&b.worst_ratio()))
    });
    let keys: Vec<(String, String)> = columns.iter().map(|c| (c.0.clone(), c.1.clone())).collect();
    let total = nodes.len();
    let rest = if total > OVERVIEW_NODES {
        nodes.split_off(OVERVIEW_WORST)
    } else {
        Vec::new()
    };
    let mut cells = ratio_cells(&nodes, &keys);
    let mut rows: Vec<(String, Mark)> = nodes.iter().map(|n| (n.name.clone(), n.mark)).collect();
    let row_notes = silent_notes(&nodes);
    let mut note = None;
    if !rest.is_empty() {
        let row = rows.len();
        rows.push((format!("{} others (worst)", rest.len()), Mark::Plain));
        let (band, words) = summary_band(&rest, &keys, row);
        cells.extend(band);
        note = Some(words);
    }
    let cols: Vec<(String, Mark)> = keys
        .iter()
        .map(|k| {
            let worst = nodes
                .iter()
                .chain(&rest)
                .filter_map(|n| n.figures.get(k).map(|f| f.3))
                .max()
                .unwrap_or_default();
            (format!("{} {}", k.0, k.1), worst)
        })
        .collect();
    let shown = if rest.is_empty() {
        format!("{total} nodes")
    } else {
        format!("the worst {OVERVIEW_WORST} of {total} nodes")
    };
    named(
        "fleet_overview",
        "every node by every figure, each the ratio to what was expected, the bad nodes first",
        Chart::Heatmap(Heatmap {
            title: format!("The fleet at a glance: {shown} — {}", run.label.short()),
            row_label: "node, worst first".into(),
            col_label: "test and figure".into(),
            rows,
            cols,
            cells,
            key: "Cell: measured / expected (the fleet's healthy level, or the baseline) as a \
                  speed: below 1x is slower (a time's ratio is inverted)."
                .into(),
            marks: vec![
                (Mark::Fail, Verdict::Fail.to_string()),
                (Mark::Warn, Verdict::Warn.to_string()),
            ],
            note,
            row_notes,
        }),
    )
}

/// One figure on every node: in rank order, or past [`STRIP_NAMED`] nodes slowest first.
fn figure_strip(
    run: &Loaded,
    nodes: &[Node],
    (test, figure, unit): &(String, String, String),
) -> Option<Named> {
    let key = (test.clone(), figure.clone());
    let mut have: Vec<&Node> = nodes
        .iter()
        .filter(|n| n.figures.contains_key(&key))
        .collect();
    if have.is_empty() {
        return None;
    }
    let sorted = have.len() > STRIP_NAMED;
    if sorted {
        // Slowest first: by the ratio as a speed (a time's inverted), then by value.
        have.sort_by(|a, b| {
            let r = |n: &Node| n.ratio(&key).unwrap_or(f64::INFINITY);
            r(a).total_cmp(&r(b))
                .then(a.figures[&key].0.total_cmp(&b.figures[&key].0))
        });
    }
    let mut strip = Strip {
        title: format!("{test} {figure} on every node — {}", run.label.short()),
        x_label: if sorted {
            format!("{} nodes, slowest first", have.len())
        } else {
            "node".into()
        },
        y_label: unit.clone(),
        categories: have.iter().map(|n| n.name.clone()).collect(),
        expected_label: "expected: the fleet's healthy level, or the baseline".into(),
        ..Default::default()
    };
    for (i, n) in have.iter().enumerate() {
        let (v, e, tol, mark, _) = n.figures[&key];
        strip.points.push((i, v, mark));
        if let Some(e) = e {
            // Symmetric as a ratio, so it reaches the tolerance on the slow side of a rate
            // (below) and of a time (above) alike.
            let t = tol.unwrap_or(0.0).clamp(0.0, 0.95);
            strip.expected.push((i, e, e * (1.0 - t), e / (1.0 - t)));
        }
    }
    Some(named(
        &format!("fleet_{test}_{figure}"),
        &format!("{test} {figure} of every node against what was expected, FAIL and WARN marked"),
        Chart::Strip(strip),
    ))
}

pub fn fleet_charts(run: &Loaded) -> Vec<Named> {
    let Some(rows) = run.table::<FleetTable>() else {
        return Vec::new();
    };
    let (nodes, columns) = nodes(rows);
    if nodes.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    if !columns.is_empty() {
        out.push(overview(run, nodes.clone(), &columns));
    }
    out.extend(columns.iter().filter_map(|c| figure_strip(run, &nodes, c)));
    out
}

/// The summary row of the nodes not drawn (`row`): each figure's worst ratio among them, and
/// a line counting their figures by how far from expected and their FAILs and WARNs.
fn summary_band(rest: &[Node], keys: &[(String, String)], row: usize) -> (Vec<Cell>, String) {
    let mut cells = Vec::new();
    for (col, key) in keys.iter().enumerate() {
        let worst = rest
            .iter()
            .filter_map(|n| n.ratio(key))
            .fold(f64::INFINITY, f64::min);
        if worst.is_finite() {
            let text = format!("≥{worst:.2}x");
            cells.push(Cell {
                row,
                col,
                ratio: worst,
                text,
                mark: Mark::Plain,
            });
        }
    }
    let all: Vec<f64> = rest
        .iter()
        .flat_map(|n| keys.iter().filter_map(|k| n.ratio(k)))
        .collect();
    let (near, mid, far) = spread(&all);
    let count = |m: Mark| rest.iter().filter(|n| n.mark == m).count();
    let words = format!(
        "The other {} nodes' {} figures: {near} within 10% of expected, {mid} 10-25% off, \
         {far} further; {} of those nodes FAIL, {} WARN (fleet.csv has each).",
        rest.len(),
        all.len(),
        count(Mark::Fail),
        count(Mark::Warn)
    );
    (cells, words)
}
