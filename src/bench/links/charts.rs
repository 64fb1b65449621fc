//! A links run's pictures, every link coloured by its ratio to its healthy level (the lower
//! median of its group: transport, size, direction, locality and hop class, as the flags
//! judge it), so a healthy link is one colour and a slow one another whatever the absolute
//! speed of its round. Up to [`LINKS_HEATMAP_RANKS`] ranks, rank-by-rank heatmaps; beyond, one
//! strip per transport of each node's links (their spread and median), slowest nodes first,
//! the blamed nodes named.

use super::blame::slow_nodes;
use super::flag::SLOW_THRESHOLD;
use super::tables::{link_verdicts, matrix_rows, why_has, LinksTable};
use crate::record::view::chart::{self as charts, named, Chart, Named};
use crate::record::view::loaded::Loaded;
use crate::record::Line;
use charts::{Cell, Heatmap, Mark, Strip};

/// The most ranks drawn as a matrix: past it a cell is a few pixels and names are thinned
/// to one in ten.
pub(crate) const LINKS_HEATMAP_RANKS: usize = 64;

const KEY: &str = "Cell: the link's speed against its healthy level (the lower median of the \
                   links of its size, direction and hop class). Below 1x is slower. Blank: a \
                   pair the pattern did not measure.";

/// A link's ratio to its healthy level: below 1.0 slower (its slowdown, inverted).
fn ratio(l: &Line<LinksTable>) -> Option<f64> {
    l.figures
        .slowdown
        .filter(|s| *s > 0.0 && s.is_finite())
        .map(|s| 1.0 / s)
}

fn flagged(l: &Line<LinksTable>) -> bool {
    l.figures.flagged == Some(true)
}

/// A link's tail against its healthy level: the lower median of its group's p99s over its
/// own p99 (below 1.0 a longer tail), for the runs that kept tails (`stalls` set).
fn tail_ratios(rows: &[Line<LinksTable>]) -> Vec<Option<f64>> {
    let key = |l: &Line<LinksTable>| {
        (
            l.params.transport.clone(),
            l.params.bytes,
            l.params.direction.clone(),
            l.figures.hop_class.clone(),
        )
    };
    // Each group's healthy p99, computed once.
    let mut p99s: std::collections::BTreeMap<_, Vec<f64>> = Default::default();
    for l in rows {
        p99s.entry(key(l)).or_default().push(l.stats().p99_us);
    }
    let healthy: std::collections::BTreeMap<_, f64> = p99s
        .into_iter()
        .map(|(k, v)| (k, crate::stats::robust::lower_median(&v)))
        .collect();
    rows.iter()
        .map(|l| {
            l.figures.stalls?;
            let healthy = healthy[&key(l)];
            let own = l.stats().p99_us;
            (own > 0.0 && healthy > 0.0).then(|| healthy / own)
        })
        .collect()
}

/// Whether a row was flagged on its tail.
fn stalled(l: &Line<LinksTable>) -> bool {
    flagged(l) && why_has(l, "tail")
}

pub fn links_charts(run: &Loaded) -> Vec<Named> {
    let Some(all) = run.table::<LinksTable>() else {
        return Vec::new();
    };
    // The matrix itself: a retest's row would overwrite its link's cell.
    let rows = &matrix_rows(all);
    let n = rows
        .iter()
        .map(|l| l.params.src_rank.max(l.params.dst_rank) as usize + 1)
        .max()
        .unwrap_or(0);
    if n < 2 {
        return Vec::new();
    }
    let blamed: Vec<u32> = slow_nodes(&link_verdicts(all))
        .iter()
        .map(|s| s.rank)
        .collect();
    let mut names = vec![String::new(); n];
    for l in rows {
        let p = &l.params;
        names[p.src_rank as usize] = format!("r{} {}", p.src_rank, p.src_host);
        names[p.dst_rank as usize] = format!("r{} {}", p.dst_rank, p.dst_host);
    }
    for (i, name) in names.iter_mut().enumerate() {
        if name.is_empty() {
            *name = format!("r{i}");
        }
    }
    let note = (!blamed.is_empty()).then(|| {
        let list: Vec<&str> = blamed.iter().map(|&r| names[r as usize].as_str()).collect();
        format!("Slow node (its links blame it): {}", list.join(", "))
    });
    let mut transports: Vec<&str> = rows.iter().map(|l| l.params.transport.as_str()).collect();
    transports.sort();
    transports.dedup();
    let ctx = Ctx {
        run,
        rows,
        names: &names,
        blamed: &blamed,
        note,
    };
    let medians: Vec<Option<f64>> = rows.iter().map(ratio).collect();
    let tails = tail_ratios(rows);
    let mut out = Vec::new();
    for t in transports {
        if n <= LINKS_HEATMAP_RANKS {
            out.extend(heatmaps(&ctx, t));
            out.extend(tail_heatmap(&ctx, t, &tails));
        } else {
            let median = StripOf {
                ratios: &medians,
                flag: flagged,
                stem: "links_nodes",
                what: "typical time",
            };
            out.extend(node_strip(&ctx, t, &median));
            if tails.iter().any(Option::is_some) {
                let tail = StripOf {
                    ratios: &tails,
                    flag: stalled,
                    stem: "links_tails_nodes",
                    what: "p99",
                };
                out.extend(node_strip(&ctx, t, &tail));
            }
        }
    }
    out
}

struct Ctx<'a> {
    run: &'a Loaded,
    rows: &'a [Line<LinksTable>],
    names: &'a [String],
    /// The ranks the links blame.
    blamed: &'a [u32],
    note: Option<String>,
}

impl Ctx<'_> {
    /// A blamed node is marked FAIL.
    fn node_mark(&self, rank: usize) -> Mark {
        if self.blamed.contains(&(rank as u32)) {
            Mark::Fail
        } else {
            Mark::Plain
        }
    }

    fn sizes(&self, t: &str, dir: &str) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .rows
            .iter()
            .filter(|l| l.params.transport == t && l.params.direction == dir)
            .map(|l| l.params.bytes)
            .collect();
        v.sort();
        v.dedup();
        v
    }

    fn heatmap(
        &self,
        title: String,
        (row_label, col_label): (&str, &str),
        cells: Vec<Cell>,
    ) -> Heatmap {
        let names: Vec<(String, Mark)> = self
            .names
            .iter()
            .enumerate()
            .map(|(i, s)| (s.clone(), self.node_mark(i)))
            .collect();
        Heatmap {
            title: format!("{title} — {}", self.run.label.short()),
            row_label: row_label.into(),
            col_label: col_label.into(),
            rows: names.clone(),
            cols: names.into_iter().map(|(s, m)| (short(&s), m)).collect(),
            cells,
            key: KEY.into(),
            marks: vec![(Mark::Fail, "flagged slow (confirmed by its retests)".into())],
            note: self.note.clone(),
            row_notes: Vec::new(),
        }
    }
}

/// A column's name: the rank alone (the row of the same rank names its host).
fn short(name: &str) -> String {
    name.split(' ').next().unwrap_or(name).to_string()
}

fn cell(row: usize, col: usize, l: &Line<LinksTable>) -> Option<Cell> {
    let r = ratio(l)?;
    Some(Cell {
        row,
        col,
        ratio: r,
        text: format!("{r:.2}x"),
        mark: if flagged(l) { Mark::Fail } else { Mark::Plain },
    })
}

/// Per transport: p50 latency at the smallest and the largest ping-pong size, one-way
/// bandwidth at the largest stream size.
fn heatmaps(ctx: &Ctx, t: &str) -> Vec<Named> {
    let of = |dir: &str, bytes: u64| -> Vec<&Line<LinksTable>> {
        ctx.rows
            .iter()
            .filter(|l| {
                l.params.transport == t && l.params.direction == dir && l.params.bytes == bytes
            })
            .collect()
    };
    let lat = ctx.sizes(t, "pingpong");
    let mut picks: Vec<u64> = lat.first().into_iter().chain(lat.last()).copied().collect();
    picks.dedup();
    let mut out = Vec::new();
    for bytes in picks {
        // A ping-pong is one figure per pair: both cells of the pair show it.
        let cells: Vec<Cell> = of("pingpong", bytes)
            .into_iter()
            .flat_map(|l| {
                let (a, b) = (l.params.src_rank as usize, l.params.dst_rank as usize);
                [cell(a, b, l), cell(b, a, l)]
            })
            .flatten()
            .collect();
        let size = crate::units::human_bytes(bytes);
        out.push(named(
            &format!("links_latency_{t}_{bytes}"),
            &format!("{t} latency between every pair of ranks at {size} against each link's healthy level; flagged links outlined"),
            Chart::Heatmap(ctx.heatmap(format!("{t} latency at {size}, against the healthy level"), ("rank", "rank"), cells)),
        ));
    }
    if let Some(&bytes) = ctx.sizes(t, "oneway").last() {
        let cells: Vec<Cell> = of("oneway", bytes)
            .into_iter()
            .filter_map(|l| cell(l.params.src_rank as usize, l.params.dst_rank as usize, l))
            .collect();
        let size = crate::units::human_bytes(bytes);
        out.push(named(
            &format!("links_bandwidth_{t}_{bytes}"),
            &format!("{t} bandwidth from each rank (row) to each other (column) at {size} against each link's healthy level; flagged links outlined"),
            Chart::Heatmap(ctx.heatmap(format!("{t} bandwidth at {size} (row sends to column), against the healthy level"), ("from rank", "to rank"), cells)),
        ));
    }
    out
}

/// What a node strip shows: each link's ratio to its healthy level (median or tail) and its
/// flag, and the strip's names.
struct StripOf<'a> {
    ratios: &'a [Option<f64>],
    flag: fn(&Line<LinksTable>) -> bool,
    stem: &'a str,
    what: &'a str,
}

/// The tail beside the median: at the smallest ping-pong size, each link's p99 against its
/// healthy level, the cell saying the share of round trips that stalled (none drawn for a run
/// that kept no tails).
fn tail_heatmap(ctx: &Ctx, t: &str, tails: &[Option<f64>]) -> Option<Named> {
    let bytes = *ctx.sizes(t, "pingpong").first()?;
    let cells: Vec<Cell> = ctx
        .rows
        .iter()
        .zip(tails)
        .filter(|(l, _)| {
            l.params.transport == t && l.params.direction == "pingpong" && l.params.bytes == bytes
        })
        .filter_map(|(l, r)| {
            let r = (*r)?;
            let share = l.figures.stalls? as f64 / l.stats().n.max(1) as f64;
            let text = if share > 0.0 {
                format!("{:.1}%", 100.0 * share)
            } else {
                format!("{r:.2}x")
            };
            let mark = if stalled(l) { Mark::Fail } else { Mark::Plain };
            let (a, b) = (l.params.src_rank as usize, l.params.dst_rank as usize);
            Some([(a, b), (b, a)].map(|(row, col)| Cell {
                row,
                col,
                ratio: r,
                text: text.clone(),
                mark,
            }))
        })
        .flatten()
        .collect();
    if cells.is_empty() {
        return None;
    }
    let size = crate::units::human_bytes(bytes);
    let mut h = ctx.heatmap(
        format!("{t} tail at {size}: p99 against the healthy level"),
        ("rank", "rank"),
        cells,
    );
    h.key = "Cell: the healthy links' p99 over the link's (below 1x a longer tail); its text, \
             the share of round trips that stalled (at or over the stall threshold)."
        .into();
    h.marks = vec![(
        Mark::Fail,
        "flagged on its tail (confirmed by its retest)".into(),
    )];
    Some(named(
        &format!("links_tail_{t}_{bytes}"),
        &format!("{t} tail latency (p99) between every pair of ranks at {size} against the healthy links' p99, with each link's stalled share; links flagged on their tail outlined"),
        Chart::Heatmap(h),
    ))
}

/// Past [`LINKS_HEATMAP_RANKS`]: each node's links (every size and direction) as its spread
/// and median, nodes sorted by their median, slowest first.
fn node_strip(ctx: &Ctx, t: &str, of: &StripOf) -> Option<Named> {
    let n = ctx.names.len();
    let blamed = |r: u32| ctx.blamed.contains(&r);
    // Each end's view of a link: its ratio, and how it marks that end: a flagged link marks a
    // blamed end FAIL, and a healthy end WARN only when the other end is not blamed either
    // (the blamed node explains it).
    let mut per_node: Vec<Vec<(f64, Mark)>> = vec![Vec::new(); n];
    for (l, r) in ctx.rows.iter().zip(of.ratios) {
        let Some(r) = r.filter(|_| l.params.transport == t) else {
            continue;
        };
        let (a, b) = (l.params.src_rank, l.params.dst_rank);
        for (end, other) in [(a, b), (b, a)] {
            let mark = match ((of.flag)(l), blamed(end), blamed(other)) {
                (true, true, _) => Mark::Fail,
                (true, false, false) => Mark::Warn,
                _ => Mark::Plain,
            };
            per_node[end as usize].push((r, mark));
        }
    }
    let median_of = |v: &[(f64, Mark)]| {
        let xs: Vec<f64> = v.iter().map(|x| x.0).collect();
        crate::stats::robust::median(&xs)
    };
    let mut order: Vec<usize> = (0..n).filter(|&i| !per_node[i].is_empty()).collect();
    if order.is_empty() {
        return None;
    }
    order.sort_by(|&a, &b| median_of(&per_node[a]).total_cmp(&median_of(&per_node[b])));
    let mut strip = Strip {
        title: format!("{t}: each node's links' {} against their healthy level — {}", of.what, ctx.run.label.short()),
        x_label: format!("{} nodes, slowest median first", order.len()),
        y_label: format!("healthy level / link's {} (x, log)", of.what),
        y_log: true,
        expected_label: format!("healthy level (1x); shaded: short of the {SLOW_THRESHOLD}x slowdown that can flag a link"),
        marks: vec![
            (Mark::Plain, "a node's links: from the slowest to the fastest, and the median".into()),
            (Mark::Warn, "has a flagged link no slow node explains".into()),
            (Mark::Fail, "blamed: the slow node".into()),
        ],
        note: Some(
            "Each point: a link's speed against its healthy level (the lower median of the \
             links of its size, direction and hop class). Below 1x is slower."
                .into(),
        ),
        ..Default::default()
    };
    for (i, &node) in order.iter().enumerate() {
        strip.categories.push(ctx.names[node].clone());
        strip
            .points
            .extend(per_node[node].iter().map(|&(r, mark)| (i, r, mark)));
        strip.expected.push((i, 1.0, 1.0 / SLOW_THRESHOLD, 1.0));
    }
    Some(named(
        &format!("{}_{t}", of.stem),
        &format!("{t}: every node's links' {} against their healthy level, slowest nodes first, the blamed nodes named", of.what),
        Chart::Strip(strip),
    ))
}
