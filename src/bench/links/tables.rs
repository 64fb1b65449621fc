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
        let (a, b) = (l.params.src_rank, l.params.dst_rank);
        let e = worst.entry((a.min(b), a.max(b))).or_insert(i);
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
            let clear = latest.is_some_and(|t| {
                let s = t.figures.slowdown.unwrap_or(1.0);
                let excess = t.stats().p50_us * (1.0 - 1.0 / s.max(1.0));
                s >= clearly && excess >= clearly_us
            });
            if clear {
                continue;
            }
        }
        let (a, b) = (l.params.src_rank, l.params.dst_rank);
        let test = (l.params.transport.clone(), l.params.bytes);
        let entry = out.entry((a.min(b), a.max(b))).or_default();
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
        let (a, b) = (l.params.src_rank, l.params.dst_rank);
        let e = out.entry((a.min(b), a.max(b))).or_insert(None);
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
        let (mut times, mut tails): (Vec<f64>, Vec<f64>) = group
            .iter()
            .map(|&i| (rows[i].stats().p50_us, rows[i].stats().p99_us))
            .unzip();
        let mut fastest: Vec<f64> = group.iter().map(|&i| rows[i].stats().min_us).collect();
        (times[pos], tails[pos]) = (t.stats().p50_us, t.stats().p99_us);
        fastest[pos] = t.stats().min_us;
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
        if crate::noise::is_loaded(t.figures.busy == Some(true), others, steal) {
            let bound = crate::noise::explained_by_load(others, steal);
            let excess = t.stats().p50_us * (1.0 - 1.0 / v.slowdown.max(1.0));
            slow &= v.slowdown >= bound && excess >= crate::noise::CLEARLY_SLOWER_US;
        }
        // A retest speaks only for a suspect: the other direction of a retested link, measured
        // along with it, keeps its slowdown but is no suspect of its own.
        let original = &mut rows[group[pos]];
        let suspect = original.figures.flagged == Some(true);
        t.figures.slowdown = Some(crate::record::csv::round(v.slowdown, 3));
        t.figures.flagged = Some(slow && suspect);
        t.figures.confirmed = suspect.then_some(slow);
        if suspect {
            original.figures.confirmed = Some(slow);
            original.figures.flagged = Some(slow);
            if slow {
                confirmed += 1;
            } else {
                noisy += 1;
            }
        }
        rows.push(t);
    }
    (confirmed, noisy)
}

/// Fills `slowdown` and `flagged` of every row, judging each group (transport, size,
/// direction, locality, hop class) apart. Returns the number flagged.
pub fn judge_links(rows: &mut [Line<LinksTable>]) -> usize {
    judge_groups(
        rows,
        group_of,
        |l| (l.stats().p50_us, l.stats().p99_us),
        |l, v| {
            l.figures.slowdown = Some(crate::record::csv::round(v.slowdown, 3));
            l.figures.flagged = Some(v.flagged);
        },
    )
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
    let mut done = vec![false; rows.len()];
    let mut flagged = 0;
    for i in 0..rows.len() {
        if done[i] {
            continue;
        }
        let k = key(&rows[i]);
        let members: Vec<usize> = (i..rows.len())
            .filter(|&j| !done[j] && key(&rows[j]) == k)
            .collect();
        let (times, fastest): (Vec<f64>, Vec<f64>) =
            members.iter().map(|&j| time(&rows[j])).unzip();
        for (&j, v) in members.iter().zip(super::flag::judge(&times, &fastest)) {
            flagged += v.flagged as usize;
            set(&mut rows[j], v);
            done[j] = true;
        }
    }
    flagged
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Summary;

    /// A ping-pong row of link a-b whose samples sit around `us`.
    fn row(a: u32, b: u32, us: f64, round: &str) -> Line<LinksTable> {
        let s = Summary::of(&[us * 0.98, us, us * 1.02]).unwrap();
        let params = LinkParams {
            src_rank: a,
            dst_rank: b,
            src_host: format!("h{a}"),
            dst_host: format!("h{b}"),
            transport: "tcp".into(),
            bytes: 8,
            direction: "pingpong".into(),
        };
        let figures = LinkFigures {
            round: Some(round.into()),
            verified: true,
            ..Default::default()
        };
        let case = match round {
            RETEST => format!("{}_{RETEST}", link_case(&params)),
            _ => link_case(&params),
        };
        Line::new("run", case, params, Some(&s), figures)
    }

    #[test]
    fn a_suspect_stays_flagged_only_when_its_retest_confirms_it() {
        // Six links at 10 µs; 0-3 and 1-2 at 30 µs in their rounds.
        let mut rows = vec![
            row(0, 1, 10.0, "1"),
            row(2, 3, 30.0, "1"),
            row(0, 2, 10.0, "2"),
            row(1, 3, 10.0, "2"),
            row(0, 3, 30.0, "3"),
            row(1, 2, 10.5, "3"),
        ];
        judge_links(&mut rows);
        let flagged: Vec<String> = rows
            .iter()
            .filter(|l| l.figures.flagged == Some(true))
            .map(|l| l.lead.case.clone())
            .collect();
        assert_eq!(flagged.len(), 2, "{flagged:?}");
        // Alone, 2-3 is fast (noise in its round); 0-3 is still slow.
        let (confirmed, noisy) = confirm(
            &mut rows,
            vec![row(2, 3, 10.2, RETEST), row(0, 3, 31.0, RETEST)],
        );
        assert_eq!((confirmed, noisy), (1, 1));
        let of = |case: &str| rows.iter().find(|l| l.lead.case == case).unwrap();
        assert_eq!(of("r2-r3_tcp_8_pingpong").figures.flagged, Some(false));
        assert_eq!(of("r2-r3_tcp_8_pingpong").figures.confirmed, Some(false));
        assert_eq!(of("r0-r3_tcp_8_pingpong").figures.flagged, Some(true));
        assert_eq!(of("r0-r3_tcp_8_pingpong").figures.confirmed, Some(true));
        assert_eq!(of("r0-r1_tcp_8_pingpong").figures.confirmed, None);
        assert_eq!(rows.iter().filter(|l| is_retest(l)).count(), 2);
        assert_eq!(matrix_rows(&rows).len(), 6);
    }

    #[test]
    fn a_retest_under_steal_confirms_only_milliseconds_and_flags_no_unsuspected_row() {
        // 2-3 at 8 B: 2.5x in its round; retested under 46% steal, 3x (microseconds).
        let matrix = || {
            let mut rows = vec![
                row(0, 1, 10.0, "1"),
                row(2, 3, 25.0, "1"),
                row(3, 2, 10.0, "1"),
                row(0, 2, 10.0, "2"),
                row(1, 3, 10.0, "2"),
                row(0, 3, 10.0, "3"),
                row(1, 2, 10.5, "3"),
            ];
            judge_links(&mut rows);
            rows
        };
        let stolen = |mut l: Line<LinksTable>, pct: f64| {
            l.figures.steal_pct = Some(pct);
            l.figures.busy = Some(false); // a window too short to call busy
            l
        };
        let mut rows = matrix();
        let retests = vec![
            stolen(row(2, 3, 30.0, RETEST), 46.0),
            stolen(row(3, 2, 30.0, RETEST), 46.0),
        ];
        assert_eq!(confirm(&mut rows, retests), (0, 1));
        assert!(
            rows.iter().all(|l| l.figures.flagged != Some(true)),
            "{rows:?}"
        );
        let retest_of_32 = rows
            .iter()
            .find(|l| is_retest(l) && l.params.src_rank == 3)
            .unwrap();
        assert_eq!(retest_of_32.figures.confirmed, None);
        assert!(retest_of_32.figures.slowdown.unwrap() > 2.5);
        // Without steal the same retest confirms the suspect, and only the suspect.
        let mut rows = matrix();
        let retests = vec![row(2, 3, 30.0, RETEST), row(3, 2, 30.0, RETEST)];
        assert_eq!(confirm(&mut rows, retests), (1, 0));
        let flagged: Vec<String> = rows
            .iter()
            .filter(|l| l.figures.flagged == Some(true))
            .map(|l| l.lead.case.clone())
            .collect();
        assert_eq!(
            flagged,
            ["r2-r3_tcp_8_pingpong", "r2-r3_tcp_8_pingpong_retest"]
        );
        // Under steal, a link slow by milliseconds is still confirmed.
        let mut rows = matrix();
        rows[1] = row(2, 3, 5000.0, "1");
        judge_links(&mut rows);
        let retests = vec![stolen(row(2, 3, 5000.0, RETEST), 46.0)];
        assert_eq!(confirm(&mut rows, retests), (1, 0));
    }

    #[test]
    fn a_later_pass_retests_only_rows_that_could_still_be_noise() {
        // 0-3 is 3x slow at 8 B (could be a shared host's scheduling), 1-2 is 100x slow by
        // milliseconds (beyond it).
        let mut rows = vec![
            row(0, 1, 10.0, "1"),
            row(2, 3, 10.0, "1"),
            row(0, 2, 10.0, "2"),
            row(1, 3, 10.0, "2"),
            row(0, 3, 30.0, "3"),
            row(1, 2, 1000.0, "3"),
        ];
        judge_links(&mut rows);
        let first = suspects(&rows, false, 10.0, 500.0);
        let tcp8 = vec![("tcp".to_string(), 8)];
        assert_eq!(first.get(&(0, 3)), Some(&tcp8));
        assert_eq!(first.get(&(1, 2)), Some(&tcp8));
        assert_eq!(first.len(), 2);
        confirm(
            &mut rows,
            vec![row(0, 3, 31.0, RETEST), row(1, 2, 990.0, RETEST)],
        );
        // Both confirmed once; only 0-3 needs another retest.
        let again = suspects(&rows, true, 10.0, 500.0);
        assert_eq!(again.keys().copied().collect::<Vec<_>>(), [(0, 3)]);
        // A second retest that is fast clears it for good.
        let (_, cleared) = confirm(&mut rows, vec![row(0, 3, 10.1, RETEST)]);
        assert_eq!(cleared, 1);
        assert!(suspects(&rows, true, 10.0, 500.0).is_empty());
        let of = |case: &str| rows.iter().find(|l| l.lead.case == case).unwrap();
        assert_eq!(of("r0-r3_tcp_8_pingpong").figures.flagged, Some(false));
        assert_eq!(of("r1-r2_tcp_8_pingpong").figures.flagged, Some(true));
    }

    #[test]
    fn with_a_topology_a_longer_path_is_judged_against_its_own_class() {
        // Hosts 0-5 under leaf0, 6-7 under leaf1: links across leaves take 2x as long, and
        // 1-7 (across) is 4x slow beside them.
        let t = crate::cluster::topology::Topology::parse(
            "SwitchName=leaf0 Nodes=h[0-5]\nSwitchName=leaf1 Nodes=h[6-7]\n\
             SwitchName=spine Switches=leaf[0-1]",
        )
        .unwrap();
        let matrix = |hops: Option<&crate::cluster::topology::Topology>| {
            let mut rows = Vec::new();
            for a in 0..8u32 {
                for b in a + 1..8 {
                    let across = (a < 6) != (b < 6);
                    let us = match (a, b) {
                        (1, 7) => 80.0,
                        _ if across => 20.0,
                        _ => 10.0,
                    };
                    let mut l = row(a, b, us, "1");
                    l.figures.hop_class =
                        hops.map(|t| t.hop_class(&format!("h{a}"), &format!("h{b}")));
                    rows.push(l);
                }
            }
            judge_links(&mut rows);
            let flagged: Vec<(u32, u32)> = rows
                .iter()
                .filter(|l| l.figures.flagged == Some(true))
                .map(|l| (l.params.src_rank, l.params.dst_rank))
                .collect();
            (rows, flagged)
        };
        // One class: every healthy link across the spine looks slow.
        let (_, flat) = matrix(None);
        assert_eq!(flat.len(), 12, "{flat:?}");
        // By hop class: only the slow one.
        let (rows, by_class) = matrix(Some(&t));
        assert_eq!(by_class, [(1, 7)]);
        let class = |a, b| {
            rows.iter()
                .find(|l| (l.params.src_rank, l.params.dst_rank) == (a, b))
                .and_then(|l| l.figures.hop_class.clone())
        };
        assert_eq!(class(0, 1).as_deref(), Some("same-leaf"));
        assert_eq!(class(0, 6).as_deref(), Some("3-switches"));
    }
}
