//! What readers take from `links.csv` and `nodes.csv`: the headlines (per transport, the
//! median link's p50 latency at the smallest size and one-way bandwidth at the largest, and
//! each flagged link at its worst slowdown) and the figures `check` compares (a link's stream
//! by GB/s, its ping-pong by latency; a node's fingerprint). Its charts are [`super::charts`].

use super::tables::{LinksTable, NodesTable};
use crate::record::view::figure::{Better, Checked, Figure};
use crate::record::view::headline::{source, Headline};
use crate::record::view::loaded::Loaded;
use crate::record::Line;
use crate::units::human_bytes;

/// Its headlines (the module's header says which).
pub fn headlines(run: &Loaded, out: &mut Vec<Headline>) {
    let Some(t) = run.table::<LinksTable>() else {
        return;
    };
    let t = &super::tables::matrix_rows(t);
    let mut transports: Vec<&str> = t.iter().map(|l| l.params.transport.as_str()).collect();
    transports.sort();
    transports.dedup();
    for tr in transports {
        // The median link (the lower median, the flagging baseline) at one size and direction.
        let median =
            |dir: &str,
             pick: fn(&[u64]) -> Option<u64>,
             figure: &dyn Fn(&crate::record::Line<super::tables::LinksTable>) -> f64| {
                let mut sizes: Vec<u64> = t
                    .iter()
                    .filter(|l| l.params.transport == tr && l.params.direction == dir)
                    .map(|l| l.params.bytes)
                    .collect();
                sizes.sort();
                let bytes = pick(&sizes)?;
                let mut rows: Vec<(usize, f64)> = t
                    .iter()
                    .enumerate()
                    .filter(|(_, l)| {
                        l.params.transport == tr
                            && l.params.direction == dir
                            && l.params.bytes == bytes
                    })
                    .map(|(i, l)| (i, figure(l)))
                    .collect();
                rows.sort_by(|a, b| a.1.total_cmp(&b.1));
                let (i, v) = rows[(rows.len() - 1) / 2];
                Some((i, bytes, v, rows.len()))
            };
        if let Some((i, bytes, us, n)) =
            median("pingpong", |s| s.first().copied(), &|l| l.stats().p50_us)
        {
            out.push(Headline {
                bench: "links",
                what: format!(
                    "{tr} link latency, {}, median of {n} links",
                    human_bytes(bytes)
                ),
                value: Some(us),
                unit: "µs",
                text: format!("{us:.1} µs (p50, round trip / 2)"),
                source: source("links.csv", i),
            });
        }
        if let Some((i, bytes, g, n)) = median("oneway", |s| s.last().copied(), &|l| {
            -l.figures.gbps.unwrap_or(0.0)
        }) {
            let g = -g;
            out.push(Headline {
                bench: "links",
                what: format!(
                    "{tr} link bandwidth, {}, median of {n} directions",
                    human_bytes(bytes)
                ),
                value: Some(g),
                unit: "GB/s",
                text: format!("{g:.3} GB/s (one way)"),
                source: source("links.csv", i),
            });
        }
    }
    // Each flagged link once, at its worst row.
    for ((a, b), i) in super::tables::worst_flagged(t) {
        let s = t[i].figures.slowdown.unwrap_or(0.0);
        let l = &t[i];
        out.push(Headline {
            bench: "links",
            what: format!("FLAGGED link r{a}-r{b}"),
            value: Some(s),
            unit: "x",
            text: format!(
                "{s:.2}x the links' baseline ({} {} {}, {} -> {})",
                l.params.transport,
                human_bytes(l.params.bytes),
                l.params.direction,
                l.params.src_host,
                l.params.dst_host
            ),
            source: source("links.csv", i),
        });
    }
}

/// A link: its stream by GB/s, its ping-pong by p50 latency. Cases name the ranks, so a run
/// is compared with a baseline of the same ranks (the same launch on the same nodes).
impl Checked for LinksTable {
    fn figure(line: &Line<Self>) -> Option<Figure> {
        // A retest measures a suspect again; the matrix's own row is the link's figure.
        if super::tables::is_retest(line) {
            return None;
        }
        let s = line.stats();
        let mut fig = match line.figures.gbps {
            Some(x) if line.params.direction != "pingpong" => {
                Figure::new("gbps", "GB/s", Better::Higher, x, s)
            }
            _ => Figure::time(s),
        };
        fig.detail = format!("{} -> {}", line.params.src_host, line.params.dst_host);
        Some(fig)
    }
}

/// A node's fingerprint: the GEMM by GFLOP/s, the D2H copy by GB/s.
impl Checked for NodesTable {
    fn figure(line: &Line<Self>) -> Option<Figure> {
        let mut fig = Figure::rate_or_time(line.figures.gflops, line.figures.gbps, line.stats());
        fig.detail = line.params.host.clone();
        Some(fig)
    }
}
