//! What `links` prints: the rank-by-rank matrices, the flagged links and the nodes.

use super::blame::SlowNode;
use super::nodes::{self, NodeSample};
use super::tables::{self, LinksTable, NodesTable};
use crate::cluster::world::World;
use crate::noise::load::BusyWarning;
use crate::noise::rank as load;
use crate::record::csv::Line;
use crate::sanitize::{console, CONSOLE_TEXT, MAX_HOSTNAME};
use crate::units::human_bytes;

/// A peer's host name as the console shows it (control characters escaped).
fn host(s: &str) -> std::borrow::Cow<'_, str> {
    console(s, MAX_HOSTNAME)
}

/// A peer's other text (an adapter, a transport, a reason) as the console shows it.
fn text(s: &str) -> std::borrow::Cow<'_, str> {
    console(s, CONSOLE_TEXT)
}

/// The most ranks whose matrices the console shows (a row of 16 cells fills a wide
/// terminal); a larger world gets one line per matrix, and links.csv and the plots the rest.
pub(super) const CONSOLE_MATRIX_RANKS: usize = 16;

/// The rank-by-rank matrices on the console: p50 latency at the smallest size, one-way GB/s
/// at the largest, per transport (row: source, column: destination). Beyond
/// [`CONSOLE_MATRIX_RANKS`], each matrix's spread in one line.
pub(super) fn print_matrices(world: &World, lines: &[Line<LinksTable>]) {
    let n = world.size() as usize;
    let mut transports: Vec<&str> = lines.iter().map(|l| l.params.transport.as_str()).collect();
    transports.sort();
    transports.dedup();
    for t in transports {
        let of = |dir: &str| -> Vec<&Line<LinksTable>> {
            lines
                .iter()
                .filter(|l| l.params.transport == t && l.params.direction == dir)
                .collect()
        };
        let (lat, bw) = (of("pingpong"), of("oneway"));
        if let Some(small) = lat.iter().map(|l| l.params.bytes).min() {
            let title = format!(
                "{} latency, p50 µs at {} (round trip / 2)",
                text(t),
                human_bytes(small)
            );
            let cells = cells(&lat, small, true, |l| l.stats().p50_us, 1);
            print_matrix(n, &title, &cells, "µs");
        }
        if let Some(big) = bw.iter().map(|l| l.params.bytes).max() {
            let title = format!(
                "{} bandwidth, GB/s at {} (row sends to column)",
                text(t),
                human_bytes(big)
            );
            let cells = cells(&bw, big, false, |l| l.figures.gbps.unwrap_or(0.0), 3);
            print_matrix(n, &title, &cells, "GB/s");
        }
    }
}

/// One matrix's cells at one size, by (row, column): the value, its text, and whether the
/// link is flagged. A ping-pong fills both cells of its pair.
type Cells = std::collections::HashMap<(u32, u32), (f64, String, bool)>;

fn cells(
    lines: &[&Line<LinksTable>],
    bytes: u64,
    either_way: bool,
    value: impl Fn(&Line<LinksTable>) -> f64,
    decimals: usize,
) -> Cells {
    let mut cells = Cells::new();
    for l in lines.iter().filter(|l| l.params.bytes == bytes) {
        let v = value(l);
        let cell = (
            v,
            format!("{v:.decimals$}"),
            l.figures.flagged == Some(true),
        );
        let (s, d) = (l.params.src_rank, l.params.dst_rank);
        // A link's first row holds its cell.
        if either_way {
            cells.entry((d, s)).or_insert_with(|| cell.clone());
        }
        cells.entry((s, d)).or_insert(cell);
    }
    cells
}

fn print_matrix(n: usize, title: &str, cells: &Cells, unit: &str) {
    if n > CONSOLE_MATRIX_RANKS {
        let mut values: Vec<f64> = cells.values().map(|c| c.0).collect();
        values.sort_by(f64::total_cmp);
        let flagged = cells.values().filter(|c| c.2).count();
        if let (Some(lo), Some(hi)) = (values.first(), values.last()) {
            println!(
                "{title}: median {:.3} {unit}, {lo:.3} to {hi:.3} over {} cells of {n} ranks, \
                 {flagged} flagged (each link in links.csv; `morphbench plot` draws the matrix)",
                values[values.len() / 2],
                values.len()
            );
        }
        return;
    }
    println!("{title}:");
    print_grid(n, |a, b| cells.get(&(a, b)).map(|c| (c.1.clone(), c.2)));
}

fn print_grid(n: usize, cell: impl Fn(u32, u32) -> Option<(String, bool)>) {
    let mut head = format!("{:>6}", "");
    for b in 0..n {
        head.push_str(&format!("{:>11}", format!("r{b}")));
    }
    println!("{head}");
    for a in 0..n {
        let mut row = format!("{:>6}", format!("r{a}"));
        for b in 0..n {
            let text = match cell(a as u32, b as u32) {
                _ if a == b => "-".to_string(),
                Some((v, true)) => format!("*{v}"),
                Some((v, false)) => v,
                None => "?".to_string(),
            };
            row.push_str(&format!("{text:>11}"));
        }
        println!("{row}");
    }
    println!("       (* flagged)");
}

/// The nodes the links blame, one line each.
pub(super) fn print_slow_nodes(world: &World, outcome: &super::outcome::LinksOutcome) {
    for b in &outcome.slow_nodes {
        let median = if b.median_slowdown >= crate::noise::SLOW {
            format!(", median slowdown {:.1}x", b.median_slowdown)
        } else {
            String::new()
        };
        let tail = outcome
            .node_tails
            .get(&b.rank)
            .map_or(String::new(), |w| format!("; {w}"));
        println!(
            "SLOW NODE: {} (rank {}): {}/{} links slow{median}{tail}",
            host(&world.roster[b.rank as usize].hostname),
            b.rank,
            b.slow,
            b.measured
        );
    }
}

pub(super) fn print_flagged(lines: &[Line<LinksTable>], blamed: &[SlowNode]) {
    let matrix = tables::matrix_rows(lines);
    let explained = |a: u32, b: u32| blamed.iter().any(|n| n.rank == a || n.rank == b);
    let mut worst = tables::worst_flagged(&matrix);
    let all = worst.len();
    worst.retain(|&(a, b), _| !explained(a, b));
    if all == 0 {
        println!("links: none flagged");
        return;
    }
    if worst.is_empty() {
        println!("links: every flagged link is a slow node's ({all} links)");
        return;
    }
    let rows = matrix
        .iter()
        .filter(|l| l.figures.flagged == Some(true))
        .filter(|l| !explained(l.params.src_rank, l.params.dst_rank))
        .count();
    println!("FLAGGED links, confirmed by a retest alone ({rows} rows):");
    for ((a, b), i) in worst {
        let l = &matrix[i];
        let tail = super::words::tail_words(&matrix, |l| tables::pair(l) == (a, b))
            .map_or(String::new(), |w| format!("; {w}"));
        println!(
            "  r{a}-r{b} ({} -> {}): {:.2}x the baseline ({} {} {}, p50 {:.1} µs; {}){tail}",
            host(&l.params.src_host),
            host(&l.params.dst_host),
            l.figures.slowdown.unwrap_or(0.0),
            text(&l.params.transport),
            human_bytes(l.params.bytes),
            text(&l.params.direction),
            l.stats().p50_us,
            text(l.figures.why.as_deref().unwrap_or("median"))
        );
    }
}

/// The links the rounds flagged that their retest did not confirm: noise, not blamed.
pub(super) fn print_noisy(lines: &[Line<LinksTable>]) {
    println!("noisy, not blamed (slow in their round, not when measured again alone):");
    for l in lines
        .iter()
        .filter(|l| !tables::is_retest(l) && l.figures.confirmed == Some(false))
    {
        let alone = lines
            .iter()
            .filter(|t| {
                tables::is_retest(t) && t.lead.case == format!("{}_{}", l.lead.case, tables::RETEST)
            })
            .find_map(|t| t.figures.slowdown);
        println!(
            "  r{}-r{} ({} {} {}): {:.2}x in its round, {} alone",
            l.params.src_rank,
            l.params.dst_rank,
            text(&l.params.transport),
            human_bytes(l.params.bytes),
            text(&l.params.direction),
            l.figures.slowdown.unwrap_or(0.0),
            alone.map_or("-".into(), |x| format!("{x:.2}x"))
        );
    }
}

/// Each node's samples and the flagged ones.
pub(super) fn print_nodes(samples: &[NodeSample], lines: &[Line<NodesTable>], flagged: usize) {
    for s in samples {
        let gemm = s
            .gemm
            .as_ref()
            .map_or("-".into(), |g| format!("{:.0} µs", g.p50));
        let d2h = s
            .d2h
            .as_ref()
            .map_or("-".into(), |d| format!("{:.0} µs", d.p50));
        println!(
            "node rank {} {}: {} | GEMM {} p50 {gemm} | D2H {} p50 {d2h}{}",
            s.rank,
            host(&s.host.hostname),
            text(s.adapter.as_deref().unwrap_or("no adapter")),
            nodes::GEMM,
            human_bytes(nodes::D2H_BYTES),
            s.note
                .as_ref()
                .map_or(String::new(), |n| format!(" ({})", text(n)))
        );
    }
    for l in lines.iter().filter(|l| l.figures.flagged == Some(true)) {
        println!(
            "FLAGGED node rank {} {}: {} {} is {:.2}x the nodes' baseline",
            l.params.rank,
            host(&l.params.host),
            text(&l.params.metric),
            text(&l.params.size),
            l.figures.slowdown.unwrap_or(0.0)
        );
    }
    if flagged == 0 && samples.len() >= super::flag::MIN_GROUP {
        println!("nodes: none flagged");
    }
}

/// A round's waves of pairs: "0-1 2-3 | 4-5".
pub(super) fn waves(waves: &[Vec<(u32, u32)>]) -> String {
    waves
        .iter()
        .map(|w| {
            w.iter()
                .map(|(a, b)| format!("{a}-{b}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// One busy rank, as the single-node warning words it.
pub(super) fn busy_line(world: &World, rank: u32, b: &load::Busy) -> String {
    b.line(
        &world.describe(rank),
        "its links were measured",
        "a slow row there is not blamed on that measurement alone",
    )
}

/// A line per busy rank, last in the summary.
pub(super) fn print_busy(world: &World, busiest: &load::Busiest) {
    for (r, b) in &busiest.0 {
        println!("{}", text(&busy_line(world, *r, b)));
    }
}

/// The line announcing the `k`th of `n` retests of a pass: `retest 2/3 (pass 2): 0-1 alone at 8 B`.
pub fn retest_line(k: usize, n: usize, pass: usize, (a, b): (u32, u32), sizes: &[u64]) -> String {
    let sizes: Vec<String> = sizes
        .iter()
        .map(|&b| crate::units::human_bytes(b))
        .collect();
    let pass = match pass {
        0 => String::new(),
        p => format!(" (pass {})", p + 1),
    };
    format!(
        "retest {}/{n}{pass}: {a}-{b} alone at {}",
        k + 1,
        sizes.join(",")
    )
}

/// A warning per busy rank (named `links rN`), each also said on stderr when quiet, since the
/// console report that would say it is not printed then.
pub(super) fn busy_warnings(
    world: &World,
    busiest: &load::Busiest,
    quiet: bool,
) -> Vec<BusyWarning> {
    if quiet {
        for (r, b) in &busiest.0 {
            eprintln!("{}", busy_line(world, *r, b));
        }
    }
    let warning = |(r, b): (&u32, &load::Busy)| (format!("links r{r}"), busy_line(world, *r, b));
    busiest.0.iter().map(warning).collect()
}
