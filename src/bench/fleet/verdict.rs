//! Every rank's rows of fleet.csv with their verdicts: each figure against the fleet's other
//! nodes of its adapter (the links' rule: slowdown over the lower median of the healthy
//! members' times, a MAD outlier, beyond their tail; at least 3 members), against the
//! baseline's expected value when one is given, and the inventory against the nodes of its
//! kind. A busy rank (other processes using its machine) is left out of the fleet's level and
//! is a WARN, not a FAIL, unless it is slower than its load can explain. A figure that fails
//! is measured again ([`suspects`]) and fails only if its retest, judged in its place, fails
//! too; one that does not is a WARN (noisy, not blamed), as links confirms before it blames.
//! A test its deadline cut before its fewest samples has no figure: it could not be checked
//! (a WARN whose reason starts [`COULD_NOT_CHECK`]), is measured again, and is never a FAIL
//! on that alone: a slow machine's missed deadline is not a slow GPU.

use std::collections::BTreeMap;

use super::baseline::Baseline;
use super::checks::{Inventory, Measured};
use super::rank::{judged, row, RankOutcome, Row, FAIL, PASS, SKIP, WARN};
use super::table::FleetFigures;
use crate::bench::links::flag;
pub use crate::verdict::Verdict;

/// How the reason of a figure that could not be checked begins; `health` answers "could
/// not judge" (exit 2) for a node with one and nothing failed.
pub const COULD_NOT_CHECK: &str = "could not check: ";

/// Whether a row is a figure that could not be checked (see [`COULD_NOT_CHECK`]).
pub fn could_not_check(f: &FleetFigures) -> bool {
    f.verdict == WARN && f.reason.starts_with(COULD_NOT_CHECK)
}

/// The ranks (by index) with a result for one (adapter, test, figure), and whether the rank
/// was busy while it measured it.
type Members<'a> = Vec<(usize, &'a Measured, bool)>;

/// Every row of fleet.csv, judged, in rank order.
pub fn judge(ranks: &[RankOutcome], baseline: Option<&Baseline>) -> Vec<Row> {
    let mut rows = super::inventory_rows::rows(ranks);
    rows.extend(figure_rows(ranks, baseline));
    rows.extend(super::pcie::rows(ranks));
    for o in ranks {
        if let Some(why) = &o.failure {
            rows.push(judged(o, "gate", "answer", FAIL, why.clone()));
        }
    }
    rows.sort_by_key(|(p, _)| p.rank);
    rows
}

/// The fleet's verdict on each measured figure, then the baseline's; a failed figure with a
/// retest is judged again with the retest in its place.
fn figure_rows(ranks: &[RankOutcome], baseline: Option<&Baseline>) -> Vec<Row> {
    let retested: Vec<Option<RankOutcome>> = ranks.iter().map(RankOutcome::as_retested).collect();
    // (adapter, test, figure) -> [(rank index, result, busy)]
    let mut groups: BTreeMap<(String, String, String), Members> = BTreeMap::new();
    for (i, o) in ranks.iter().enumerate() {
        for m in o.results() {
            let key = (o.adapter(), m.test.name().to_string(), m.figure.clone());
            groups.entry(key).or_default().push((i, m, o.busy()));
        }
    }
    let mut rows = Vec::new();
    for ((_, test, figure), members) in groups {
        let modes = placement_modes(&test, &members);
        let level = match &modes {
            Some(m) => m.standing.clone(),
            None => fleet_level(&members),
        };
        for (pos, &(i, m, _)) in members.iter().enumerate() {
            let o = &ranks[i];
            let (p, mut f) = row(o, &test, &figure);
            judge_figure(o, m, level.get(&i).copied(), baseline, &mut f);
            if let Some(modes) = &modes {
                f.reason = format!("{}; {}", f.reason, modes.said);
            }
            let again = retested[i].as_ref().and_then(|r| {
                let m2 = r
                    .results()
                    .find(|x| x.test == m.test && x.figure == m.figure)?;
                Some((r, m2))
            });
            let unchecked = could_not_check(&f);
            let judged_again = unchecked || (f.verdict == FAIL && m.value.is_some());
            if let (true, Some((r, m2))) = (judged_again, again) {
                let (_, mut g) = row(r, &test, &figure);
                let standing = level_with(&test, &members, pos, (i, m2, r.busy()));
                judge_figure(r, m2, standing, baseline, &mut g);
                if unchecked {
                    after_cut(&mut f, g);
                } else {
                    // Busy only slows a figure down: a busy retest as slow as a failure
                    // clears nothing.
                    let slow = standing.is_some_and(|(s, ..)| s >= flag::SLOW_THRESHOLD);
                    confirm(&mut f, &g, r.busy() && slow);
                }
            }
            rows.push((p, f));
        }
    }
    rows
}

/// The standing of member `pos` with its retest `again` in its place.
fn level_with<'a>(
    test: &str,
    members: &Members<'a>,
    pos: usize,
    again: (usize, &'a Measured, bool),
) -> Option<Standing> {
    let mut swapped = members.clone();
    swapped[pos] = again;
    let i = again.0;
    match placement_modes(test, &swapped) {
        Some(modes) => modes.standing.get(&i).copied(),
        None => fleet_level(&swapped).get(&i).copied(),
    }
}

/// A figure that could not be checked (`f`), judged by its retest (`again`): a retest that
/// passes or warns stands in its place; one that fails is a single slow measurement, which
/// blames no node (a FAIL takes two), and one cut again leaves it unchecked.
fn after_cut(f: &mut FleetFigures, again: FleetFigures) {
    let first = f.reason.trim_start_matches(COULD_NOT_CHECK).to_string();
    f.retest_value = again.value;
    if could_not_check(&again) {
        f.reason = format!(
            "{COULD_NOT_CHECK}{first}, and its retest too ({})",
            again.reason.trim_start_matches(COULD_NOT_CHECK)
        );
    } else if again.verdict == FAIL {
        f.reason = format!(
            "{COULD_NOT_CHECK}{first}; its retest alone fails, which blames nothing (a FAIL \
             takes two measurements): {}",
            again.reason
        );
    } else {
        *f = FleetFigures {
            retest_value: again.value,
            reason: format!("its retest: {} (its first try {first})", again.reason),
            ..again
        };
    }
}

/// One figure's verdict: the fleet's, then the baseline's.
fn judge_figure(
    o: &RankOutcome,
    m: &Measured,
    standing: Option<Standing>,
    baseline: Option<&Baseline>,
    f: &mut FleetFigures,
) {
    (f.value, f.unit) = (m.value, m.unit.clone());
    let no_fleet = standing.is_none();
    judge_one(o, m, standing, f);
    if let Some(b) = baseline {
        against_baseline(o, m, b, f, no_fleet);
    }
    if let Some(note) = &m.note {
        f.reason = format!("{}; {note}", f.reason);
    }
    // Where a host copy's memory and thread were: a reader tells placement from hardware.
    if let Some(at) = &m.placement {
        f.reason = format!("{}; placement: {at}", f.reason);
    }
}

/// A failed figure stays FAIL only when its retest (`again`) fails too, or was busy and as
/// slow (`still_slow`: a busy machine cannot clear it); otherwise it is a WARN, noisy and not
/// blamed.
fn confirm(f: &mut FleetFigures, again: &FleetFigures, still_slow: bool) {
    f.retest_value = again.value;
    if again.verdict == FAIL {
        f.reason = format!("{}; its retest confirms it: {}", f.reason, again.reason);
    } else if still_slow {
        f.reason = format!(
            "{}; its retest, busy, is as slow and clears nothing: {}",
            f.reason, again.reason
        );
    } else {
        f.verdict = WARN;
        f.reason = format!(
            "noisy, not blamed: {}, but its retest {}",
            f.reason, again.reason
        );
    }
}

/// The tests to measure again on each rank: those whose figure fails against the fleet or
/// the baseline, or that could not be checked (a failed verification or a missing adapter is
/// not noise and is not retested).
pub fn suspects(ranks: &[RankOutcome], baseline: Option<&Baseline>) -> BTreeMap<u32, Vec<String>> {
    let mut out: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for (p, f) in figure_rows(ranks, baseline) {
        if (f.verdict == FAIL && f.value.is_some()) || could_not_check(&f) {
            let tests = out.entry(p.rank).or_default();
            if !tests.contains(&p.test) {
                tests.push(p.test);
            }
        }
    }
    out
}

/// A member's standing in its group: (slowdown, flagged, the fleet's healthy rate).
type Standing = (f64, bool, f64);

/// Tests whose figure depends on where the host's memory and thread landed (huge pages or
/// not, the NUMA node, a VM's vCPU), as much as on the hardware.
const PLACEMENT_DEPENDENT: [&str; 3] = ["memcpy", "d2h", "h2d"];

/// A placement-dependent figure whose healthy ranks fall in two modes, and each member's
/// standing against its own mode.
struct Modes {
    standing: BTreeMap<usize, Standing>,
    said: String,
}

/// The two modes of a placement-dependent figure's healthy (not busy) ranks, if they have
/// two: sorted by time, the widest step between neighbours with at least two ranks on each
/// side is at least the slow threshold (one rank apart is what one slow node looks like, and
/// is left to the rule and the retest on fresh placements). Each rank is then judged
/// against the lower median of its own mode, a busy one against the mode nearest it: on a
/// machine whose processes land in a fast or a slow mode (measured here: 6-8 against 12-13
/// GB/s for memcpy, per process), the slow mode is healthy, not a failing node.
fn placement_modes(test: &str, members: &Members) -> Option<Modes> {
    if !PLACEMENT_DEPENDENT.contains(&test) {
        return None;
    }
    let mut healthy: Vec<(usize, f64, f64)> = members
        .iter()
        .filter(|(_, _, busy)| !busy)
        .filter_map(|&(i, m, _)| Some((i, m.p50_us?, m.value?)))
        .collect();
    healthy.sort_by(|a, b| a.1.total_cmp(&b.1));
    let n = healthy.len();
    let (at, step) = healthy
        .windows(2)
        .enumerate()
        .map(|(k, w)| (k + 1, w[1].1 / w[0].1.max(1e-12)))
        .filter(|&(at, _)| at >= 2 && n - at >= 2)
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    if step < flag::SLOW_THRESHOLD {
        return None;
    }
    let (fast, slow) = healthy.split_at(at);
    let base = |mode: &[(usize, f64, f64)]| {
        crate::stats::robust::lower_median(&mode.iter().map(|t| t.1).collect::<Vec<_>>())
    };
    let rate = |mode: &[(usize, f64, f64)]| {
        crate::stats::robust::lower_median(&mode.iter().map(|t| t.2).collect::<Vec<_>>())
    };
    let (fast_base, slow_base) = (base(fast), base(slow));
    let mut standing = BTreeMap::new();
    for &(i, m, _) in members.iter() {
        let Some(t) = m.p50_us else { continue };
        // The nearer mode, in ratio.
        let (b, r) = if (t / fast_base).ln().abs() <= (t / slow_base).ln().abs() {
            (fast_base, rate(fast))
        } else {
            (slow_base, rate(slow))
        };
        let slowdown = if b > 0.0 { t / b } else { 1.0 };
        standing.insert(i, (slowdown, slowdown >= flag::SLOW_THRESHOLD, r));
    }
    let unit = members.first().map_or(String::new(), |m| m.1.unit.clone());
    Some(Modes {
        standing,
        said: format!(
            "the fleet's healthy ranks fall in two modes ({} ranks near {} {unit}, {} near \
             {} {unit}: where memory and threads landed, see placement), each judged against \
             its own",
            fast.len(),
            crate::record::csv::sig4(rate(fast)),
            slow.len(),
            crate::record::csv::sig4(rate(slow))
        ),
    })
}

/// Judges the healthy (not busy) members with a figure against each other, and places the
/// busy ones against the healthy level. With fewer than 3 healthy members (a machine whose
/// hypervisor steals from every rank in turn) the level is every member's, busy included; a
/// busy one is still judged only against what its load explains. Fewer than 3 members: none.
fn fleet_level(members: &Members) -> BTreeMap<usize, Standing> {
    let timed: Vec<(usize, f64, f64, f64, bool)> = members
        .iter()
        .filter_map(|&(i, m, busy)| Some((i, m.p50_us?, m.p99_us?, m.value?, busy)))
        .collect();
    let healthy: Vec<&(usize, f64, f64, f64, bool)> = timed.iter().filter(|t| !t.4).collect();
    let pool: Vec<&(usize, f64, f64, f64, bool)> = if healthy.len() >= flag::MIN_GROUP {
        healthy
    } else {
        timed.iter().collect()
    };
    let mut out = BTreeMap::new();
    if pool.len() < flag::MIN_GROUP {
        return out;
    }
    let times: Vec<f64> = pool.iter().map(|t| t.1).collect();
    let tails: Vec<f64> = pool.iter().map(|t| t.2).collect();
    let base = crate::stats::robust::lower_median(&times);
    for (t, v) in pool.iter().zip(flag::judge(&times, &tails)) {
        if !t.4 {
            out.insert(t.0, (v.slowdown, v.flagged, t.3 * v.slowdown));
        }
    }
    for t in timed.iter().filter(|t| t.4) {
        let slowdown = if base > 0.0 { t.1 / base } else { 1.0 };
        out.insert(t.0, (slowdown, false, t.3 * slowdown));
    }
    out
}

fn judge_one(o: &RankOutcome, m: &Measured, standing: Option<Standing>, f: &mut FleetFigures) {
    if let Some(why) = &m.skipped {
        f.verdict = SKIP;
        f.reason = why.clone();
        return;
    }
    if let Some(e) = &m.error {
        f.verdict = FAIL;
        f.reason = e.clone();
        return;
    }
    if m.cut && m.value.is_none() {
        f.verdict = WARN;
        f.reason = format!(
            "{COULD_NOT_CHECK}cut by its deadline after {} samples (fewer than {}), so not \
             judged",
            m.n,
            crate::bench::probe::MIN_SAMPLES
        );
        return;
    }
    let cut = if m.cut {
        format!("; cut by its deadline after {} samples", m.n)
    } else {
        String::new()
    };
    let Some((slowdown, flagged, healthy)) = standing else {
        f.verdict = WARN;
        let busy = if o.busy() {
            format!("{}; ", o.busy_reason())
        } else {
            String::new()
        };
        f.reason = format!(
            "{busy}fewer than {} healthy nodes with this adapter: no fleet to judge by{cut}",
            flag::MIN_GROUP
        );
        return;
    };
    f.expected = Some(crate::record::csv::sig4(healthy));
    f.tolerance = Some(crate::record::csv::sig4(1.0 - 1.0 / flag::SLOW_THRESHOLD));
    let versus = format!(
        "{:.2}x the fleet's {} {}",
        1.0 / slowdown.max(1e-9),
        crate::record::csv::sig4(healthy),
        m.unit
    );
    f.verdict = if m.cut { WARN } else { PASS };
    f.reason = format!("{versus}{cut}");
    if o.busy() {
        let bound = o.explained_by_load();
        if slowdown >= bound {
            f.verdict = FAIL;
            f.reason = format!(
                "{versus}: slower than its load explains (over {bound:.1}x); {}",
                o.busy_reason()
            );
        } else {
            f.verdict = WARN;
            f.reason = format!("{}; {versus}{cut}", o.busy_reason());
        }
    } else if flagged && slowdown < fail_at(o, m) {
        f.verdict = WARN;
        f.reason = format!(
            "{versus} (slowdown {slowdown:.2}), within a CPU driver's spread between processes: \
             a FAIL takes {}x{cut}",
            crate::noise::CPU_DRIVER_SLOW
        );
    } else if flagged {
        f.verdict = FAIL;
        f.reason = format!("{versus} (slowdown {slowdown:.2}){cut}");
    }
}

/// The slowdown at which `m` fails (the noise policy's [`crate::noise::slow_at`]): on a CPU
/// driver its kernels, and its "device" copies (the driver's own memcpy, sharing the memory
/// bus with every rank of the machine: a healthy lavapipe rank's h2d at 0.61x, then 0.58x on
/// its retest, beside a loaded rank of the same world), are held to the CPU driver's bound.
fn fail_at(o: &RankOutcome, m: &Measured) -> f64 {
    use super::checks::TestKind::{Bandwidth, D2h, Fma, Gemm, H2d, Hol};
    let cpu = o.inventory.as_ref().is_some_and(Inventory::cpu_adapter);
    crate::noise::slow_at(cpu && matches!(m.test, Gemm | Fma | Bandwidth | Hol | D2h | H2d))
}

/// Without a fleet to judge by (`no_fleet`: a node alone, `morphbench health`), a figure the
/// baseline holds within its tolerance PASSes, unless its deadline cut it or its machine was busy.
fn against_baseline(
    o: &RankOutcome,
    m: &Measured,
    b: &Baseline,
    f: &mut FleetFigures,
    no_fleet: bool,
) {
    let (Some(value), None) = (m.value, &m.skipped) else {
        return;
    };
    let Some(e) = b.expected(&o.adapter(), &o.driver(), m.test.name(), &m.figure) else {
        f.reason
            .push_str("; no baseline for this adapter and driver");
        return;
    };
    f.expected = Some(e.expected);
    f.tolerance = Some(e.tolerance);
    let floor = e.expected * (1.0 - e.tolerance);
    let says = format!(
        "measured {} {} against the baseline's {} ± {:.0}%",
        value,
        m.unit,
        e.expected,
        100.0 * e.tolerance
    );
    if value >= floor {
        if no_fleet && f.verdict == WARN && !m.cut && !o.busy() {
            f.verdict = PASS;
            f.reason = format!("{says} ({:.2}x)", value / e.expected);
            return;
        }
        f.reason = format!("{says}; {}", f.reason);
        return;
    }
    // Within two tolerances below (compounded: a rate's spread is a ratio, and 1 - 2t would
    // never fail a wide tolerance), a WARN (a healthy node's drift on a shared machine);
    // beyond, a FAIL, unless the node was busy and its load explains it.
    let slowdown = e.expected / value.max(1e-12);
    let far = value < floor * (1.0 - e.tolerance);
    let explained = o.busy() && slowdown < o.explained_by_load();
    let verdict = if far && !explained { FAIL } else { WARN };
    f.verdict = f.verdict.worse(verdict);
    f.reason = format!("{says} ({:.2}x); {}", value / e.expected, f.reason);
}

/// Each rank's verdict (the worst of its rows) and its reasons (the rows that are not PASS).
pub fn per_rank(rows: &[Row]) -> BTreeMap<u32, (Verdict, Vec<String>)> {
    let mut out: BTreeMap<u32, (Verdict, Vec<String>)> = BTreeMap::new();
    for (p, f) in rows {
        let e = out.entry(p.rank).or_insert((SKIP, Vec::new()));
        e.0 = e.0.worse(f.verdict);
        if f.verdict == FAIL || f.verdict == WARN {
            e.1.push(format!(
                "{} {} {}: {}",
                f.verdict, p.test, p.figure, f.reason
            ));
        }
    }
    out
}

#[cfg(test)]
#[path = "verdict_tests.rs"]
mod tests;
