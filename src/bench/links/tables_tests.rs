//! The links table's judgment: suspects, retests, hop classes, tails.

use super::*;
use crate::stats::Summary;

/// A ping-pong row of link a-b whose samples sit around `us`.
fn row(a: u32, b: u32, us: f64, round: &str) -> Line<LinksTable> {
    let mut l = pingpong_line(a, b, 8, &[us * 0.98, us, us * 1.02]);
    l.figures.round = Some(round.into());
    if round == RETEST {
        l.lead.case = format!("{}_{RETEST}", l.lead.case);
    }
    l
}

/// Four ranks' six links, two a round: 0-1 and 2-3 in round 1, 0-2 and 1-3 in 2, 0-3 and 1-2
/// in 3.
const SIX: [(u32, u32); 6] = [(0, 1), (2, 3), (0, 2), (1, 3), (0, 3), (1, 2)];

/// The round of link `i` of [`SIX`].
fn round_of(i: usize) -> String {
    (i / 2 + 1).to_string()
}

/// The [`SIX`] links as `row`s, link `i` at `us[i]`.
fn matrix(us: [f64; 6]) -> Vec<Line<LinksTable>> {
    (0..6)
        .map(|i| row(SIX[i].0, SIX[i].1, us[i], &round_of(i)))
        .collect()
}

#[test]
fn a_suspect_stays_flagged_only_when_its_retest_confirms_it() {
    // Six links at 10 µs; 0-3 and 1-2 at 30 µs in their rounds.
    let mut rows = matrix([10.0, 30.0, 10.0, 10.0, 30.0, 10.5]);
    judge_links(&mut rows);
    let flagged = flagged_why(&rows);
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
    let flagged: Vec<String> = flagged_why(&rows).into_iter().map(|f| f.0).collect();
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
    let mut rows = matrix([10.0, 10.0, 10.0, 10.0, 30.0, 1000.0]);
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
                l.figures.hop_class = hops.map(|t| t.hop_class(&format!("h{a}"), &format!("h{b}")));
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

/// Row `row(a, b, 4.0, round)` with a tail of 1000 round trips, `stalls` of them at 100 ms,
/// and `retransmits`.
fn lossy_row(a: u32, b: u32, stalls: u32, retransmits: u64, round: &str) -> Line<LinksTable> {
    let l = row(a, b, 4.0, round);
    let samples: Vec<f64> = (0..1000)
        .map(|i| {
            if i < stalls {
                100_000.0
            } else {
                4.0 + (i % 3) as f64
            }
        })
        .collect();
    let mut figures = l.figures.clone();
    figures.tail = Some(crate::bench::links::tail::Tail::of(&samples, 0));
    figures.retransmits = Some(retransmits);
    let s = Summary::of(&samples).unwrap();
    Line::new("run", l.lead.case, l.params, Some(&s), figures)
}

/// The [`SIX`] links as `lossy_row`s, link `i` with `stalls[i]` (stalls, retransmits).
fn lossy_matrix(stalls: [(u32, u64); 6]) -> Vec<Line<LinksTable>> {
    (0..6)
        .map(|i| lossy_row(SIX[i].0, SIX[i].1, stalls[i].0, stalls[i].1, &round_of(i)))
        .collect()
}

fn flagged_why(rows: &[Line<LinksTable>]) -> Vec<(String, String)> {
    rows.iter()
        .filter(|l| l.figures.flagged == Some(true))
        .map(|l| {
            (
                l.lead.case.clone(),
                l.figures.why.clone().unwrap_or_default(),
            )
        })
        .collect()
}

#[test]
fn a_lossy_hosts_links_are_flagged_on_their_tail_and_retransmits_and_confirmed_once() {
    // Host 3 drops 1%: its links' medians are healthy, 2% of their round trips stall.
    let mut rows = lossy_matrix([(0, 0), (21, 20), (0, 0), (17, 14), (1, 3), (0, 0)]);
    assert_eq!(judge_links(&mut rows), 2);
    assert_eq!(
        flagged_why(&rows),
        [
            ("r2-r3_tcp_8_pingpong".into(), "tail+retransmits".into()),
            ("r1-r3_tcp_8_pingpong".into(), "tail+retransmits".into()),
        ]
    );
    let of = |rows: &[Line<LinksTable>], case: &str| {
        rows.iter().find(|l| l.lead.case == case).unwrap().clone()
    };
    let r23 = of(&rows, "r2-r3_tcp_8_pingpong");
    assert_eq!(r23.figures.stalls, Some(21));
    assert_eq!(r23.figures.stall_threshold_us, Some(20_000.0));
    // One stall and three retransmissions in 1000 is within what a healthy link may show.
    assert_eq!(
        of(&rows, "r0-r3_tcp_8_pingpong").figures.flagged,
        Some(false)
    );
    // The retests stall again: confirmed, and no second pass is needed (losses are not what
    // a busy host's scheduling makes).
    let (confirmed, noisy) = confirm(
        &mut rows,
        vec![
            lossy_row(2, 3, 19, 18, RETEST),
            lossy_row(1, 3, 22, 25, RETEST),
        ],
    );
    assert_eq!((confirmed, noisy), (2, 0));
    assert!(suspects(&rows, true, 10.0, 500.0).is_empty());
    assert_eq!(
        of(&rows, "r1-r3_tcp_8_pingpong").figures.why.as_deref(),
        Some("tail+retransmits")
    );
    let v = link_verdicts(&rows);
    let blamed = crate::bench::links::blame::slow_nodes(&v);
    // Two of host 3's three links flagged: more than half, vouched by healthy other ends.
    assert_eq!(blamed.iter().map(|n| n.rank).collect::<Vec<_>>(), [3]);
    let words = host3_words(&rows);
    assert!(
        words.starts_with(
            "2 of 3 links stall: p99 100 ms (p99.9 100 ms) vs 0.01 ms healthy, 1.9% of round trips"
        ),
        "{words}"
    );
    assert!(words.contains("TCP retransmissions"), "{words}");
}

#[test]
fn a_healthy_retest_or_a_loaded_one_with_short_stalls_clears_a_tail_suspect() {
    let matrix = || {
        let mut rows = lossy_matrix([(0, 0), (12, 0), (0, 0), (0, 0), (0, 0), (0, 0)]);
        judge_links(&mut rows);
        rows
    };
    let mut rows = matrix();
    assert_eq!(flagged_why(&rows).len(), 1);
    assert_eq!(
        confirm(&mut rows, vec![lossy_row(2, 3, 0, 0, RETEST)]),
        (0, 1)
    );
    assert!(flagged_why(&rows).is_empty());
    // Under load, stalls of 30 ms are what a busy machine may make: not confirmed.
    let mut rows = matrix();
    let mut loaded = lossy_row(2, 3, 0, 0, RETEST);
    let samples: Vec<f64> = (0..1000)
        .map(|i| if i < 15 { 30_000.0 } else { 4.0 })
        .collect();
    loaded.figures.tail = Some(crate::bench::links::tail::Tail::of(&samples, 0));
    loaded.figures.busy = Some(true);
    loaded.figures.others_cores = Some(1.0);
    assert_eq!(confirm(&mut rows, vec![loaded]), (0, 1));
}

#[test]
fn a_row_cleared_by_a_later_retest_leaves_no_retest_row_flagged() {
    let mut rows = matrix([10.0, 10.0, 10.0, 10.0, 30.0, 10.5]);
    judge_links(&mut rows);
    assert_eq!(confirm(&mut rows, vec![row(0, 3, 31.0, RETEST)]), (1, 0));
    assert_eq!(confirm(&mut rows, vec![row(0, 3, 10.1, RETEST)]), (0, 1));
    assert!(
        rows.iter().all(|l| l.figures.flagged != Some(true)),
        "{rows:?}"
    );
    // The first retest still says what it saw.
    let first = rows.iter().find(|l| is_retest(l)).unwrap();
    assert_eq!(first.figures.confirmed, Some(true));
}

/// Four ranks' six links, host 3's stalling with no retransmissions (21, 17 and 1 stalls),
/// each row given its value of `v` by `set`.
fn host3_stalls(
    set: impl Fn(Line<LinksTable>, f64) -> Line<LinksTable>,
    v: [f64; 6],
) -> Vec<Line<LinksTable>> {
    lossy_matrix([(0, 0), (21, 0), (0, 0), (17, 0), (1, 0), (0, 0)])
        .into_iter()
        .zip(v)
        .map(|(l, x)| set(l, x))
        .collect()
}

/// What the words say of host 3's links.
fn host3_words(rows: &[Line<LinksTable>]) -> String {
    let on3 = |l: &Line<LinksTable>| l.params.src_rank == 3 || l.params.dst_rank == 3;
    crate::bench::links::words::tail_words(&matrix_rows(rows), on3).unwrap()
}

#[test]
fn a_host_that_lost_the_time_itself_is_paused_not_lossy() {
    // Host 3 is held by its CPU quota: its links stall with no retransmissions, and its
    // measuring thread waited 2.9 s of a 3.5 s wave to run, where healthy ranks waited 0.4 s.
    let lost = |mut l: Line<LinksTable>, ms: f64| {
        (l.figures.paused_ms, l.figures.wave_ms) = (Some(ms), Some(3500.0));
        l.figures.throttled_ms = (ms > 1000.0).then_some(ms - 100.0);
        l
    };
    let mut rows = host3_stalls(lost, [400.0, 2900.0, 420.0, 2800.0, 2700.0, 380.0]);
    assert_eq!(judge_links(&mut rows), 2);
    assert_eq!(
        flagged_why(&rows),
        [
            ("r2-r3_tcp_8_pingpong".into(), "paused".into()),
            ("r1-r3_tcp_8_pingpong".into(), "paused".into()),
        ]
    );
    let words = host3_words(&rows);
    assert_eq!(
        words,
        "2 of 3 links stall while their own host waits to run (up to 2900 ms of 3500 ms, 2800 \
         ms of it held by its cgroup's CPU quota), not the network"
    );
    assert!(!rows.iter().any(crate::bench::links::words::lossy));
    // The same stalls with retransmissions are the network's, whatever the host lost.
    let mut lossy = vec![
        lost(lossy_row(0, 1, 0, 0, "1"), 400.0),
        lost(lossy_row(2, 3, 21, 20, "1"), 2900.0),
        lost(lossy_row(0, 2, 0, 0, "2"), 420.0),
        lost(lossy_row(1, 3, 17, 14, "2"), 2800.0),
        lost(lossy_row(1, 2, 0, 0, "3"), 380.0),
    ];
    judge_links(&mut lossy);
    assert!(flagged_why(&lossy)
        .iter()
        .all(|(_, w)| w == "tail+retransmits"));
}

#[test]
fn a_host_whose_hypervisor_stole_the_time_is_paused_not_lossy() {
    // Host 3's VM lost 70% of a 3.5 s wave to steal: its threads' run delay is as healthy as
    // the others' (a stolen vCPU runs nothing, and the guest does not count it as waiting).
    let lost = |mut l: Line<LinksTable>, steal: f64| {
        (l.figures.paused_ms, l.figures.wave_ms) = (Some(400.0), Some(3500.0));
        l.figures.steal_pct = Some(steal);
        l
    };
    let mut rows = host3_stalls(lost, [0.0, 70.0, 0.0, 70.0, 70.0, 0.0]);
    assert_eq!(judge_links(&mut rows), 2);
    assert!(
        flagged_why(&rows).iter().all(|(_, w)| w == "paused"),
        "{rows:?}"
    );
    let words = host3_words(&rows);
    assert_eq!(
        words,
        "2 of 3 links stall while their own host waits to run (up to 2850 ms of 3500 ms, 2450 \
         ms stolen by its hypervisor), not the network"
    );
    // Without the steal the same stalls are the network's: a tail.
    for r in &mut rows {
        r.figures.steal_pct = Some(0.0);
    }
    judge_links(&mut rows);
    assert!(
        flagged_why(&rows).iter().all(|(_, w)| w == "tail"),
        "{rows:?}"
    );
}
