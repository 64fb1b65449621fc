//! The gate's links: `links` led inside the gate's session once every rank's own tests are in
//! (standard: `quick`, 3 random partners each; extended: all pairs, or as many random rounds
//! as the deadline allows), pairs on one machine in turns, suspects retested before anything
//! is blamed. Its outcome becomes each rank's `links gbps` row of fleet.csv: a node the
//! confirmed links blame FAILs; a confirmed slow link between two nodes the links do not
//! blame is a WARN on both ends (draining either would not mend the path between them).

use std::collections::BTreeMap;

use super::checks::LinksSpec;
use super::rank::{judged, row, RankOutcome, Row, FAIL, PASS, SKIP, WARN};
use super::verdict::Verdict;
use crate::bench::links::outcome::LinksOutcome;
use crate::bench::links::pattern::{self, Pattern, QUICK_ROUNDS};
use crate::bench::links::LinksOptions;
use crate::cluster::SessionOptions;
use crate::gpu::BackendChoice;
use crate::record::csv::sig4;
use crate::stats::robust::median;

/// How the gate's links went.
#[derive(Debug, Clone)]
pub enum LinksResult {
    /// Not at this level.
    None,
    /// Not run, with why (one rank, or a rank already lost).
    Skipped(String),
    /// Cut short by a rank that died, stopped or failed: why.
    Failed(String),
    Done(Box<LinksOutcome>),
}

/// The links bench's options for the gate: the level's plan, `machines[rank]` for the turns,
/// and the pattern (extended: all pairs if they fit the deadline, else the most random rounds
/// that do, at least `quick`'s).
pub fn options(
    spec: &LinksSpec,
    session: &SessionOptions,
    machines: Vec<String>,
    (backend, adapter): (BackendChoice, Option<String>),
) -> LinksOptions {
    let n = machines.len() as u32;
    let took = |p: Pattern| {
        let s = pattern::schedule(p, n, 0);
        pattern::estimate(&spec.plan, &s, usize::MAX, Some(&machines)).as_secs_f64()
    };
    let pattern = match spec.pattern {
        Pattern::AllPairs if took(Pattern::AllPairs) > spec.deadline_s => {
            // Random rounds take about as long each as quick's.
            let per_round = took(Pattern::Quick) / f64::from(QUICK_ROUNDS);
            let k = (spec.deadline_s / per_round.max(1e-3)) as u32;
            Pattern::Rounds(k.clamp(QUICK_ROUNDS, pattern::MAX_ROUNDS))
        }
        p => p,
    };
    LinksOptions {
        session: session.clone(),
        plan: spec.plan.clone(),
        choice: Default::default(),
        fingerprint: false,
        concurrent: None,
        pattern,
        seed: crate::bench::links::args::seed(), // rank 0's; in fleet.json
        budget_s: 3600,
        topology: None,
        backend,
        adapter,
        machines: Some(machines),
        deadline_s: Some(spec.deadline_s),
    }
}

/// Each rank's `links gbps` row.
pub fn rows(ranks: &[RankOutcome], links: &LinksResult) -> Vec<Row> {
    let all = |verdict: Verdict, why: &str| -> Vec<Row> {
        ranks
            .iter()
            .filter(|o| o.failure.is_none())
            .map(|o| judged(o, "links", "gbps", verdict, why.into()))
            .collect()
    };
    match links {
        LinksResult::None => Vec::new(),
        LinksResult::Skipped(why) => all(SKIP, why),
        LinksResult::Failed(why) => all(WARN, &format!("the links did not complete: {why}")),
        LinksResult::Done(out) => judged_links(ranks, out),
    }
}

fn judged_links(ranks: &[RankOutcome], out: &LinksOutcome) -> Vec<Row> {
    let blamed: BTreeMap<u32, _> = out.slow_nodes.iter().map(|n| (n.rank, n)).collect();
    // The healthy level: the median of the unblamed ranks' own medians, the quiet ones'; when
    // every one was busy (a hypervisor stealing from all of them), all of theirs: a level
    // that is at worst low, so what keeping a blamed node costs is not overstated, and is
    // still said (cluster test: 28-40% steal on every rank left a blamed node without one).
    let level = |quiet_only: bool| -> Vec<f64> {
        out.per_rank
            .iter()
            .filter(|(r, _)| !blamed.contains_key(r))
            .filter(|(_, e)| !quiet_only || !e.busy)
            .filter_map(|(_, e)| e.gbps)
            .collect()
    };
    let healthy = Some(level(true))
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| level(false));
    let expected = (!healthy.is_empty()).then(|| sig4(median(&healthy)));
    let host = |r: u32| ranks.get(r as usize).map_or("?", |o| o.host.as_str());
    let cut = match out.rounds_cut {
        0 => String::new(),
        c => format!(
            "; cut by its deadline after {} of {} rounds",
            out.rounds - c,
            out.rounds
        ),
    };
    let mut rows = Vec::new();
    for o in ranks.iter().filter(|o| o.failure.is_none()) {
        let Some(mine) = out.per_rank.get(&o.rank) else {
            let why = format!("no link measured{cut}");
            rows.push(judged(o, "links", "gbps", SKIP, why));
            continue;
        };
        let (p, mut f) = row(o, "links", "gbps");
        (f.value, f.expected, f.unit) = (mine.gbps.map(sig4), expected, "GB/s".into());
        let slow_links: Vec<String> = out
            .slow_links
            .iter()
            .filter(|l| l.a == o.rank || l.b == o.rank)
            .map(|l| {
                let other = if l.a == o.rank { l.b } else { l.a };
                match &l.tail {
                    Some(w) => format!("{} (rank {other}): {w}", host(other)),
                    None => format!("{} (rank {other}) {:.1}x", host(other), l.slowdown),
                }
            })
            .collect();
        (f.verdict, f.reason) = if let Some(n) = blamed.get(&o.rank) {
            let why = match out.node_tails.get(&o.rank) {
                Some(w) => format!(
                    "lossy node: {w}; {} of its {} links confirmed, their other ends healthy \
                     with other partners ({}){cut}",
                    n.slow, n.measured, out.pattern
                ),
                None => format!(
                    "slow node: {} of its {} links confirmed slow (median {:.1}x), their other \
                     ends healthy with other partners ({}){cut}",
                    n.slow, n.measured, n.median_slowdown, out.pattern
                ),
            };
            (FAIL, why)
        } else if !slow_links.is_empty() {
            let why = format!(
                "confirmed slow link to {}; neither end is slow with its other partners: check \
                 the path between them (cable, NIC port, switch){cut}",
                slow_links.join(", ")
            );
            (WARN, why)
        } else {
            let verdict = if cut.is_empty() { PASS } else { WARN };
            let why = match mine.slow {
                0 => format!("{} links, none slow ({}){cut}", mine.measured, out.pattern),
                n => format!(
                    "{} links; {n} slow, blamed on the slow node at the other end ({}){cut}",
                    mine.measured, out.pattern
                ),
            };
            (verdict, why)
        };
        // A lossy node's stall ratio comes first: its first FAIL is its drain reason.
        rows.extend(tail_rows(o, mine, out, &blamed));
        rows.push((p, f));
    }
    rows
}

/// Each rank's tail rows (where its links had tails, and where its counters were read):
/// `link stall_ratio` (the share of its ping-pongs' round trips that stalled, against the
/// unblamed ranks' median) and `retransmits total`. A blamed lossy node FAILs both; a lossy
/// link between healthy nodes WARNs its ends; the rest PASS. A failed lossy node's first FAIL
/// row is its stall ratio, so the drain reason names the stalls, not the bandwidth.
fn tail_rows(
    o: &RankOutcome,
    mine: &crate::bench::links::outcome::RankLinks,
    out: &LinksOutcome,
    blamed: &BTreeMap<u32, &crate::bench::links::blame::SlowNode>,
) -> Vec<Row> {
    let words = out.node_tails.get(&o.rank);
    let verdict = match (blamed.contains_key(&o.rank), words, mine.lossy) {
        (true, Some(_), _) => FAIL,
        (false, _, n) if n > 0 => WARN,
        _ => PASS,
    };
    let reason = match (verdict, words) {
        (FAIL, Some(w)) => format!("lossy node: {w}"),
        (WARN, _) => format!(
            "{} of its links lossy, their other ends healthy: check the path",
            mine.lossy
        ),
        _ => String::new(),
    };
    let level = |pick: fn(&crate::bench::links::outcome::RankLinks) -> Option<f64>| {
        let healthy: Vec<f64> = out
            .per_rank
            .iter()
            .filter(|(r, _)| !blamed.contains_key(r))
            .filter_map(|(_, e)| pick(e))
            .collect();
        (!healthy.is_empty()).then(|| sig4(median(&healthy)))
    };
    let mut rows = Vec::new();
    if let Some(ratio) = mine.stall_ratio {
        let (p, mut f) = judged(o, "link", "stall_ratio", verdict, reason.clone());
        (f.value, f.expected, f.unit) =
            (Some(sig4(ratio)), level(|e| e.stall_ratio), "ratio".into());
        rows.push((p, f));
    }
    if let Some(n) = mine.retransmits {
        let (p, mut f) = judged(o, "retransmits", "total", verdict, reason);
        let healthy = level(|e| e.retransmits.map(|n| n as f64));
        (f.value, f.expected, f.unit) = (Some(n as f64), healthy, "segments".into());
        rows.push((p, f));
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::links::blame::SlowNode;
    use crate::bench::links::outcome::{RankLinks, SlowLink};

    fn outcome(cut: usize) -> LinksOutcome {
        let mut per_rank = BTreeMap::new();
        for r in 0..6 {
            let gbps = if r == 1 { 0.01 } else { 1.0 };
            let e = RankLinks {
                measured: 3,
                slow: usize::from(r == 1) * 3,
                gbps: Some(gbps),
                busy: false,
                ..Default::default()
            };
            per_rank.insert(r, e);
        }
        LinksOutcome {
            pattern: "quick".into(),
            rounds: 3,
            rounds_cut: cut,
            slow_nodes: vec![SlowNode {
                rank: 1,
                slow: 3,
                measured: 3,
                median_slowdown: 80.0,
            }],
            slow_links: vec![SlowLink {
                a: 2,
                b: 4,
                slowdown: 12.0,
                extra_us: Some(9000.0),
                bytes: 1 << 20,
                tail: None,
                stall: None,
            }],
            per_rank,
            ..Default::default()
        }
    }

    fn rows_of(ranks: &[RankOutcome], o: &LinksOutcome) -> Vec<Row> {
        rows(ranks, &LinksResult::Done(Box::new(o.clone())))
    }

    fn verdicts(rows: &[Row]) -> Vec<(u32, Verdict, String)> {
        rows.iter()
            .map(|(p, f)| (p.rank, f.verdict, f.reason.clone()))
            .collect()
    }

    #[test]
    fn a_lossy_node_and_a_lossy_link_are_said_in_words() {
        let ranks: Vec<RankOutcome> = (0..6)
            .map(|r| RankOutcome::new(r, &format!("n{r}")))
            .collect();
        let mut o = outcome(0);
        let words = "3 of 3 links stall: p99 104 ms vs 0.01 ms healthy, 2.1% of round trips";
        o.node_tails.insert(1, words.into());
        o.slow_links[0].tail = Some("1 of 1 links stall: p99 90 ms".into());
        let v = verdicts(&rows_of(&ranks, &o));
        let of = |r: u32| v.iter().find(|x| x.0 == r).unwrap().clone();
        assert_eq!(of(1).1, FAIL);
        assert!(
            of(1).2.starts_with("lossy node: 3 of 3 links stall"),
            "{}",
            of(1).2
        );
        assert_eq!(of(2).1, WARN);
        assert!(
            of(2).2.contains("n4 (rank 4): 1 of 1 links stall"),
            "{}",
            of(2).2
        );
    }

    #[test]
    fn a_blamed_node_fails_a_slow_link_warns_both_ends_and_the_rest_pass() {
        let mut ranks: Vec<RankOutcome> = (0..7)
            .map(|r| RankOutcome::new(r, &format!("n{r}")))
            .collect();
        // Rank 6 was measured but has no link (it had a bye); none is lost.
        let rows = rows(&ranks, &LinksResult::Done(Box::new(outcome(0))));
        let v = verdicts(&rows);
        assert_eq!(v.len(), 7);
        assert_eq!(v[1].1, FAIL);
        assert!(v[1].2.starts_with("slow node: 3 of its 3 links"), "{v:?}");
        for r in [2, 4] {
            assert_eq!(v[r].1, WARN, "{v:?}");
            assert!(v[r].2.contains("confirmed slow link to n"), "{v:?}");
        }
        for r in [0, 3, 5] {
            assert_eq!(v[r].1, PASS, "{v:?}");
        }
        assert_eq!(v[6].1, SKIP);
        // The fleet's level leaves the blamed node out.
        assert_eq!(rows[0].1.expected, Some(1.0));
        // Busy ranks are left out of it too, unless every unblamed rank was busy.
        let mut busy = outcome(0);
        for (r, e) in busy.per_rank.iter_mut() {
            e.gbps = Some(1.0 + *r as f64 / 10.0);
            e.busy = *r != 1 && *r != 0;
        }
        let level = |o: &LinksOutcome| rows_of(&ranks, o)[1].1.expected;
        assert_eq!(level(&busy), Some(1.0));
        busy.per_rank.get_mut(&0).unwrap().busy = true;
        assert_eq!(level(&busy), Some(1.3));
        // Cut by the deadline: a pass becomes a WARN that says so; a lost rank has no row.
        ranks[5].failure = Some("no answer within 60 s".into());
        let v = verdicts(&super::rows(
            &ranks,
            &LinksResult::Done(Box::new(outcome(1))),
        ));
        assert_eq!(v.len(), 6);
        assert_eq!(v[0].1, WARN);
        assert!(
            v[0].2.ends_with("cut by its deadline after 2 of 3 rounds"),
            "{v:?}"
        );
        let v = verdicts(&super::rows(
            &ranks,
            &LinksResult::Failed("rank 3 died".into()),
        ));
        assert!(v.iter().all(|r| r.1 == WARN && r.2.contains("rank 3 died")));
    }
}
