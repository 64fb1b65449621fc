//! links.csv and nodes.csv.

use serde::{Deserialize, Serialize};

use crate::record::csv::{CsvTable, Line};

/// `links.csv`: one row per link, transport, size and kind of test.
#[derive(Debug, Clone)]
pub struct LinksTable;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkParams {
    pub src_rank: u32,
    pub dst_rank: u32,
    pub src_host: String,
    pub dst_host: String,
    /// "tcp" or "rdma".
    pub transport: String,
    pub bytes: u64,
    /// "pingpong" (latency: round trip / 2), "oneway" (src streams to dst) or "bidir" (both
    /// stream at once; gbps is the sum).
    pub direction: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkFigures {
    /// GB/s (10^9 bytes) over the whole test, for streams.
    pub gbps: Option<f64>,
    /// p50 over the baseline of the links of this transport, size, direction and locality
    /// (empty while the run is under way, and in a run that failed).
    pub slowdown: Option<f64>,
    pub flagged: Option<bool>,
    /// Both ranks on one host.
    pub intra_node: bool,
    /// Every message arrived whole and in order (sequence-stamped; perftest's pattern check
    /// for RDMA).
    pub verified: bool,
    /// The matching round the row was measured in (from 1), or `retest`: a suspect link
    /// measured again on its own.
    pub round: Option<String>,
    /// For a row flagged in the rounds: whether its retest confirmed it (a row stays flagged
    /// only then). Empty for rows never suspected.
    pub confirmed: Option<bool>,
    /// With `--topology`: the switches between the two hosts (`same-leaf`, `3-switches`,
    /// `unlisted`...); a row is judged against rows of its own class. Empty without a file.
    pub hop_class: Option<String>,
    /// CPU that other processes (not this run's ranks) used on either end's machine while the
    /// row was measured, in cores (the larger end), and the hypervisor's steal (percent).
    pub others_cores: Option<f64>,
    pub steal_pct: Option<f64>,
    /// Either end's machine was busy: a slow row is not blamed on that measurement alone.
    pub busy: Option<bool>,
    /// Samples at or over `stall_threshold_us`: round trips for a ping-pong, batches for a
    /// stream. (The tail test also counts, as stalls, the samples a test's stall cap cut:
    /// `n` is then short of the plan's `--iters`.)
    pub stalls: Option<u32>,
    /// The group's stall threshold (µs): ten times its healthy links' p99, at least 20 ms.
    pub stall_threshold_us: Option<f64>,
    /// TCP segments both ends retransmitted during the test (TCP_INFO deltas).
    pub retransmits: Option<u64>,
    /// Why the row is flagged: `median`, `tail`, `paused`, `retransmits`, joined by `+`
    /// (`paused`: stalls its own hosts' lost time explains, not the network).
    pub why: Option<String>,
    /// The time (ms) either end's measuring thread was ready to run and did not while the row
    /// was measured (the larger end; its run delay: CPU quota throttling, other work), and
    /// the part its cgroup's CPU quota held it.
    pub paused_ms: Option<f64>,
    pub throttled_ms: Option<f64>,
    /// How long the wave `paused_ms` was read over (ms; in memory, not a column).
    #[serde(skip)]
    pub wave_ms: Option<f64>,
    /// The tail the measuring rank reported (rank 0's, in memory; not a column).
    #[serde(skip)]
    pub tail: Option<super::tail::Tail>,
    /// The samples' distribution, for links_hist.csv (in memory; not a column).
    #[serde(skip)]
    pub hist: Option<crate::stats::hist::LogHist>,
}

impl CsvTable for LinksTable {
    const NAME: &'static str = "links";
    const WITH_STATS: bool = true;
    type Params = LinkParams;
    type Figures = LinkFigures;
    const ADDED: &'static [&'static str] = &[
        "round",
        "confirmed",
        "hop_class",
        "others_cores",
        "steal_pct",
        "busy",
        "stalls",
        "stall_threshold_us",
        "retransmits",
        "why",
        "paused_ms",
        "throttled_ms",
    ];
}

/// The `round` of a retest row.
pub const RETEST: &str = "retest";

/// Whether a row is a retest (not one of the matrix's own measurements).
pub fn is_retest(l: &Line<LinksTable>) -> bool {
    l.figures.round.as_deref() == Some(RETEST)
}

/// The rows of the matrix itself, retests left out (for the matrices, charts and headlines).
pub fn matrix_rows(rows: &[Line<LinksTable>]) -> Vec<Line<LinksTable>> {
    rows.iter().filter(|l| !is_retest(l)).cloned().collect()
}

/// A link as its two ranks, lower first: one key for both directions.
pub fn pair(l: &Line<LinksTable>) -> (u32, u32) {
    let (a, b) = (l.params.src_rank, l.params.dst_rank);
    (a.min(b), a.max(b))
}

/// Whether a row's `why` names `reason`.
pub fn why_has(l: &Line<LinksTable>, reason: &str) -> bool {
    l.figures.why.as_deref().is_some_and(|w| w.contains(reason))
}

/// `nodes.csv`: each rank's fingerprint, one row per metric.
pub struct NodesTable;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeParams {
    pub rank: u32,
    pub host: String,
    pub adapter: String,
    /// "gemm" (a verified GEMM, `size`), "d2h" (device to host copy and map, `size` bytes).
    pub metric: String,
    pub size: String,
    pub cpu_model: String,
    pub logical_cores: usize,
    pub memory_gib: Option<f64>,
    pub kernel: String,
    /// The rank's place among the ranks on its host, which picks its adapter (local rank
    /// modulo the adapters of the best kind, unless --adapter names one).
    pub local_rank: Option<u32>,
    /// The adapter's index in `morphbench info`'s list.
    pub adapter_index: Option<usize>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeFigures {
    pub gflops: Option<f64>,
    pub gbps: Option<f64>,
    pub slowdown: Option<f64>,
    pub flagged: Option<bool>,
    pub verified: bool,
    /// The node's verdict once the links are judged: `slow` (its confirmed links blame it) or
    /// `ok`. Empty in a run that stopped before.
    pub verdict: Option<String>,
}

impl CsvTable for NodesTable {
    const NAME: &'static str = "nodes";
    const WITH_STATS: bool = true;
    type Params = NodeParams;
    type Figures = NodeFigures;
    const ADDED: &'static [&'static str] = &["local_rank", "adapter_index", "verdict"];
}

/// The case name of a link row: `r0-r3_tcp_65536_oneway`.
pub fn link_case(p: &LinkParams) -> String {
    format!(
        "r{}-r{}_{}_{}_{}",
        p.src_rank, p.dst_rank, p.transport, p.bytes, p.direction
    )
}

/// Each flagged link (lower rank, higher rank) once, with the index of its worst row (the
/// largest slowdown), for the console and the headlines.
pub fn worst_flagged(rows: &[Line<LinksTable>]) -> std::collections::BTreeMap<(u32, u32), usize> {
    let mut worst: std::collections::BTreeMap<(u32, u32), usize> = Default::default();
    for (i, l) in rows
        .iter()
        .enumerate()
        .filter(|(_, l)| l.figures.flagged == Some(true))
    {
        let e = worst.entry(pair(l)).or_insert(i);
        if l.figures.slowdown > rows[*e].figures.slowdown {
            *e = i;
        }
    }
    worst
}

/// The suspects of a retest pass: each pair (lower rank, higher rank) with the (transport,
/// size) of its rows still flagged. In a later pass (`again`), only rows whose latest retest
/// was not clearly slow (under `clearly` times the baseline, or slower by less than
/// `clearly_us`) are suspects still; a clearly slow row is confirmed by one retest.
pub fn suspects(
    rows: &[Line<LinksTable>],
    again: bool,
    clearly: f64,
    clearly_us: f64,
) -> std::collections::BTreeMap<(u32, u32), Vec<(String, u64)>> {
    let mut out: std::collections::BTreeMap<(u32, u32), Vec<(String, u64)>> = Default::default();
    for l in rows
        .iter()
        .filter(|l| !is_retest(l) && l.figures.flagged == Some(true))
    {
        if again {
            let latest = rows.iter().rev().find(|t| is_retest(t) && same_test(t, l));
            // Stalls beyond the floor and retransmitted segments are not what a shared
            // host's scheduling makes of a healthy link: one confirming retest settles them.
            let clear = latest.is_some_and(|t| {
                let s = t.figures.slowdown.unwrap_or(1.0);
                let excess = t.stats().p50_us * (1.0 - 1.0 / s.max(1.0));
                let lossy = t.figures.confirmed == Some(true)
                    && t.figures.why.as_deref().is_some_and(|w| w != "median");
                lossy || (s >= clearly && excess >= clearly_us)
            });
            if clear {
                continue;
            }
        }
        let test = (l.params.transport.clone(), l.params.bytes);
        let entry = out.entry(pair(l)).or_default();
        if !entry.contains(&test) {
            entry.push(test);
        }
    }
    out
}

/// Every link of the matrix (lower rank, higher rank) with its worst slowdown when a row of it
/// is flagged (confirmed), for [`super::blame`].
pub fn link_verdicts(rows: &[Line<LinksTable>]) -> super::blame::LinkVerdicts {
    let mut out = super::blame::LinkVerdicts::new();
    for l in rows.iter().filter(|l| !is_retest(l)) {
        let e = out.entry(pair(l)).or_insert(None);
        if l.figures.flagged == Some(true) {
            let s = l.figures.slowdown.unwrap_or(1.0);
            *e = Some(e.map_or(s, |w: f64| w.max(s)));
        }
    }
    out
}

/// The group a link row is judged in: transport, size, direction, locality and hop class.
fn group_of(l: &Line<LinksTable>) -> (String, u64, String, bool, Option<String>) {
    (
        l.params.transport.clone(),
        l.params.bytes,
        l.params.direction.clone(),
        l.figures.intra_node,
        l.figures.hop_class.clone(),
    )
}

/// Whether two rows are the same test of the same link.
fn same_test(a: &Line<LinksTable>, b: &Line<LinksTable>) -> bool {
    (a.params.src_rank, a.params.dst_rank) == (b.params.src_rank, b.params.dst_rank)
        && group_of(a) == group_of(b)
}

/// After the retests: each retest row is judged in its group of matrix rows, standing in for
/// the row of its own test; a row flagged in the rounds stays flagged only if its retest is
/// flagged too and even the retest's fastest sample is slow ([`super::flag::best_is_slow`])
/// (`confirmed`). The retest rows are appended. Returns (confirmed, not confirmed).
pub fn confirm(rows: &mut Vec<Line<LinksTable>>, retests: Vec<Line<LinksTable>>) -> (usize, usize) {
    let (mut confirmed, mut noisy) = (0, 0);
    for mut t in retests {
        let group: Vec<usize> = (0..rows.len())
            .filter(|&i| !is_retest(&rows[i]) && group_of(&rows[i]) == group_of(&t))
            .collect();
        let Some(pos) = group.iter().position(|&i| same_test(&rows[i], &t)) else {
            rows.push(t);
            continue;
        };
        // The group's rows, with the retest standing in for the row of its own test.
        let members: Vec<&Line<LinksTable>> = group
            .iter()
            .enumerate()
            .map(|(k, &i)| if k == pos { &t } else { &rows[i] })
            .collect();
        let (times, tails): (Vec<f64>, Vec<f64>) = members
            .iter()
            .map(|l| (l.stats().p50_us, l.stats().p99_us))
            .unzip();
        let fastest: Vec<f64> = members.iter().map(|l| l.stats().min_us).collect();
        let v = super::flag::judge(&times, &tails)[pos];
        let mut slow = v.flagged && super::flag::best_is_slow(&fastest, pos);
        // Measured again while busy (or, in a window too short to call busy, on a machine
        // loaded by half a core or with a tenth of its time stolen): slow only beyond what
        // the load explains, and by milliseconds. A CPU hog makes a small message's
        // microseconds several times longer (measured: 8 B streams at 3-5.5x on a 2-vCPU
        // machine with 1.0-1.2 cores of other work; 1.7-3.1x under 46% steal), which a
        // path's fault at that size cannot be told from; a slow path's milliseconds stand out.
        let others = t.figures.others_cores.unwrap_or(0.0);
        let steal = t.figures.steal_pct.unwrap_or(0.0) / 100.0;
        let loaded = crate::noise::is_loaded(t.figures.busy == Some(true), others, steal);
        let scale = if loaded {
            crate::noise::explained_by_load(others, steal)
        } else {
            1.0
        };
        if loaded {
            let excess = t.stats().p50_us * (1.0 - 1.0 / v.slowdown.max(1.0));
            slow &= v.slowdown >= scale && excess >= crate::noise::CLEARLY_SLOWER_US;
        }
        // Its tail and retransmissions, judged with it standing in for its row; a loaded
        // window's stalls must lie beyond what the load explains (`scale`).
        let tails: Vec<Option<&super::tail::Tail>> =
            members.iter().map(|l| l.figures.tail.as_ref()).collect();
        let judged = super::tail::judges_retransmits(&t.params.direction, t.params.bytes);
        let counts: Vec<Option<u64>> = members
            .iter()
            .map(|l| l.figures.retransmits.filter(|_| judged))
            .collect();
        let paused_ms: Vec<Option<(f64, f64)>> = members.iter().map(|&l| lost(l)).collect();
        let tail_v = super::tail::judge_one(&tails, pos, scale);
        let retransmits = super::tail::retransmits_flagged(&counts, pos);
        let tail = tail_v.is_some_and(|v| v.flagged);
        t.figures.stalls = tail_v.map(|v| v.stalls);
        t.figures.stall_threshold_us = tail_v.map(|v| crate::record::csv::round(v.threshold_us, 1));
        let paused = tail && !retransmits && own_pause(&t, tail_v, &paused_ms, pos);
        let reasons = why(slow, tail && !paused, paused, retransmits);
        let slow = reasons.is_some();
        // A retest speaks only for a suspect: the other direction of a retested link, measured
        // along with it, keeps its slowdown but is no suspect of its own.
        let original = &mut rows[group[pos]];
        let suspect = original.figures.flagged == Some(true);
        t.figures.slowdown = Some(crate::record::csv::round(v.slowdown, 3));
        t.figures.flagged = Some(slow && suspect);
        t.figures.confirmed = suspect.then_some(slow);
        t.figures.why = reasons.clone().filter(|_| suspect);
        if suspect {
            original.figures.confirmed = Some(slow);
            original.figures.flagged = Some(slow);
            original.figures.why = reasons;
            if slow {
                confirmed += 1;
            } else {
                noisy += 1;
                // A retest that clears the row overrules the earlier ones that confirmed it:
                // they keep `confirmed` (what their pass saw), not the flag.
                let cleared = rows[group[pos]].clone();
                for r in rows
                    .iter_mut()
                    .filter(|r| is_retest(r) && same_test(r, &cleared))
                {
                    r.figures.flagged = Some(false);
                }
            }
        }
        rows.push(t);
    }
    (confirmed, noisy)
}

/// Fills `slowdown`, `flagged`, `stalls`, `stall_threshold_us` and `why` of every row,
/// judging each group (transport, size, direction, locality, hop class) apart: on its median
/// ([`super::flag`]), its tail and its retransmissions ([`super::tail`]). Returns the number
/// flagged.
pub fn judge_links(rows: &mut [Line<LinksTable>]) -> usize {
    judge_groups(
        rows,
        group_of,
        |l| (l.stats().p50_us, l.stats().p99_us),
        |l, v| {
            l.figures.slowdown = Some(crate::record::csv::round(v.slowdown, 3));
            l.figures.flagged = Some(v.flagged);
        },
    );
    let mut flagged = 0;
    for members in groups(rows, group_of) {
        let refs: Vec<Option<&super::tail::Tail>> = members
            .iter()
            .map(|&j| rows[j].figures.tail.as_ref())
            .collect();
        let judged = |j: usize| {
            let p = &rows[j].params;
            super::tail::judges_retransmits(&p.direction, p.bytes)
        };
        let counts: Vec<Option<u64>> = members
            .iter()
            .map(|&j| rows[j].figures.retransmits.filter(|_| judged(j)))
            .collect();
        let verdicts = super::tail::judge(&refs);
        let lossy = super::tail::retransmits_judged(&counts);
        let paused_ms: Vec<Option<(f64, f64)>> = members.iter().map(|&j| lost(&rows[j])).collect();
        for (m, &j) in members.iter().enumerate() {
            let (v, retransmits) = (verdicts[m], lossy[m]);
            let tail = v.is_some_and(|v| v.flagged);
            let paused = tail && !retransmits && own_pause(&rows[j], v, &paused_ms, m);
            let f = &mut rows[j].figures;
            let median = f.flagged == Some(true);
            f.stalls = v.map(|v| v.stalls);
            f.stall_threshold_us = v.map(|v| crate::record::csv::round(v.threshold_us, 1));
            f.flagged = Some(median || tail || retransmits);
            f.why = why(median, tail && !paused, paused, retransmits);
            flagged += usize::from(median || tail || retransmits);
        }
    }
    flagged
}

/// The indices of `rows` grouped by `key`, each group in order, groups by their first row.
fn groups<R, K: PartialEq>(rows: &[R], key: impl Fn(&R) -> K) -> Vec<Vec<usize>> {
    let mut done = vec![false; rows.len()];
    let mut out = Vec::new();
    for i in 0..rows.len() {
        if done[i] {
            continue;
        }
        let k = key(&rows[i]);
        let members: Vec<usize> = (i..rows.len())
            .filter(|&j| !done[j] && key(&rows[j]) == k)
            .collect();
        for &j in &members {
            done[j] = true;
        }
        out.push(members);
    }
    out
}

/// A row's hosts' lost time and the wave it was read over (ms), where both are known: its
/// measuring threads' run delay (`paused_ms`) and the hypervisor's steal ([`stolen_ms`]).
fn lost(l: &Line<LinksTable>) -> Option<(f64, f64)> {
    Some((lost_ms(l)?, l.figures.wave_ms?))
}

/// A row's hosts' lost time (ms): its run delay and its hypervisor's steal, None when its run
/// delay is unknown.
pub fn lost_ms(l: &Line<LinksTable>) -> Option<f64> {
    Some(l.figures.paused_ms? + stolen_ms(l))
}

/// The time (ms) a row's machine lost to its hypervisor over the wave: its steal share of the
/// wave. A stolen vCPU runs nothing, and the guest's run delay does not count that time.
pub fn stolen_ms(l: &Line<LinksTable>) -> f64 {
    let share = l.figures.steal_pct.unwrap_or(0.0) / 100.0;
    share * l.figures.wave_ms.unwrap_or(0.0)
}

/// Whether a row flagged on its tail (`v`) stalls because its own hosts paused
/// ([`super::tail::paused_explains`]), its group's lost times `paused_ms` beside it at `pos`.
fn own_pause(
    l: &Line<LinksTable>,
    v: Option<super::tail::TailVerdict>,
    paused_ms: &[Option<(f64, f64)>],
    pos: usize,
) -> bool {
    let (Some(v), Some(t)) = (v, l.figures.tail.as_ref()) else {
        return false;
    };
    let round_trip = l.params.direction == "pingpong";
    super::tail::paused_explains(t, v.threshold_us, round_trip, paused_ms, pos)
}

/// The `why` of a flag: its reasons joined by `+` (None when there is none).
fn why(median: bool, tail: bool, paused: bool, retransmits: bool) -> Option<String> {
    let reasons: Vec<&str> = [
        (median, "median"),
        (tail, "tail"),
        (paused, "paused"),
        (retransmits, "retransmits"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, name)| *name)
    .collect();
    (!reasons.is_empty()).then(|| reasons.join("+"))
}

/// The same for nodes, grouped by metric and size.
pub fn judge_nodes(rows: &mut [Line<NodesTable>]) -> usize {
    judge_groups(
        rows,
        |l| (l.params.metric.clone(), l.params.size.clone()),
        |l| (l.stats().p50_us, l.stats().p99_us),
        |l, v| {
            l.figures.slowdown = Some(crate::record::csv::round(v.slowdown, 3));
            l.figures.flagged = Some(v.flagged);
        },
    )
}

fn judge_groups<R, K: PartialEq>(
    rows: &mut [R],
    key: impl Fn(&R) -> K,
    time: impl Fn(&R) -> (f64, f64),
    mut set: impl FnMut(&mut R, super::flag::Verdict),
) -> usize {
    let mut flagged = 0;
    for members in groups(rows, key) {
        let (times, fastest): (Vec<f64>, Vec<f64>) =
            members.iter().map(|&j| time(&rows[j])).unzip();
        for (&j, v) in members.iter().zip(super::flag::judge(&times, &fastest)) {
            flagged += v.flagged as usize;
            set(&mut rows[j], v);
        }
    }
    flagged
}

/// A TCP ping-pong row of link a-b at `bytes` from `samples` (µs), as rank 0 writes it, its
/// distribution kept: the row tests of a links run build on.
#[cfg(test)]
pub fn pingpong_line(a: u32, b: u32, bytes: u64, samples: &[f64]) -> Line<LinksTable> {
    let params = LinkParams {
        src_rank: a,
        dst_rank: b,
        src_host: format!("h{a}"),
        dst_host: format!("h{b}"),
        transport: "tcp".into(),
        bytes,
        direction: "pingpong".into(),
    };
    let figures = LinkFigures {
        verified: true,
        hist: Some(crate::stats::hist::LogHist::of(samples)),
        ..Default::default()
    };
    let s = crate::stats::Summary::of(samples).expect("samples");
    Line::new("run", link_case(&params), params, Some(&s), figures)
}

#[cfg(test)]
#[path = "tables_tests.rs"]
mod tests;
