//! What a lossy link costs a pipeline: each transfer over a link stalls with the link's
//! probability (`--stall LINK:PROB:MS`, or the stall rate and size a links run measured),
//! iteration after iteration, and the iteration time's median, p99 and mean show the price a
//! median hides. Every schedule plans on the scenario without stalls (a stall is not known
//! before it happens) and then runs under the same draws (common random numbers: the schedules
//! are compared on the same luck). Deterministic for a seed.

use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::measured::MeasuredLink;
use crate::sim::{adaptive, policy_of, simulate, Layout, Policy, Scenario, Schedule, SimError};
use crate::stats::percentile_sorted;

/// The stalls, the iterations and the seed of a tail run.
#[derive(Debug, Clone)]
pub struct TailPlan {
    pub stalls: Vec<Stall>,
    /// Links whose transfers draw their excess from a links run's distributions.
    pub measured: Vec<MeasuredLink>,
    pub iterations: u32,
    pub seed: u64,
    /// Each schedule's measured healthy iteration (ms), where the op times came from a
    /// pipeline run that ran it: the drawn iterations are also given on it.
    pub measured_healthy: std::collections::BTreeMap<String, f64>,
}

/// A stall: each transfer over `link` takes `ms` longer with probability `prob`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stall {
    pub link: usize,
    pub prob: f64,
    pub ms: f64,
}

/// The most iterations one `sim` draws (a run's cost is bounded before it starts).
pub const MAX_ITERATIONS: u32 = 100_000;

/// `LINK:PROB:MS`, as `--stall 2:0.01:200` (PROB in [0, 1], MS in ms).
pub fn parse_stall(s: &str) -> anyhow::Result<Stall> {
    let usage = "give LINK:PROB:MS, as 2:0.01:200 (link 2 stalls 1% of transfers by 200 ms)";
    let parts: Vec<&str> = s.split(':').collect();
    let [link, prob, ms] = parts[..] else {
        return Err(anyhow::anyhow!("{s:?}: {usage}"));
    };
    let link: usize = link
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("{s:?}: the link is not a number; {usage}"))?;
    let prob: f64 = prob
        .trim()
        .parse()
        .ok()
        .filter(|p: &f64| (0.0..=1.0).contains(p))
        .ok_or_else(|| anyhow::anyhow!("{s:?}: PROB must be a number in 0..=1; {usage}"))?;
    let ms: f64 = ms
        .trim()
        .parse()
        .ok()
        .filter(|m: &f64| m.is_finite() && (0.0..=crate::sim::model::MAX_MS).contains(m))
        .ok_or_else(|| anyhow::anyhow!("{s:?}: MS must be a number of ms in 0..=1e6; {usage}"))?;
    Ok(Stall { link, prob, ms })
}

/// The stalls a links run measured on the links of a pipeline in launcher order (stage i on
/// rank i, link i between ranks i and i + 1): each link's ping-pong at the activation's size
/// (or the nearest size under it), over `transport`, with its stall share as the probability
/// and its stall's length ([`crate::bench::links::words::stall_of`]).
pub fn from_links_run(
    dir: &std::path::Path,
    transport: &str,
    activation: u64,
) -> anyhow::Result<Vec<(Stall, String)>> {
    use crate::bench::links::tables::{matrix_rows, LinksTable};
    let rows: Vec<crate::record::Line<LinksTable>> =
        crate::record::read_table(&dir.join("links.csv"))?;
    let rows = matrix_rows(&rows);
    let ranks = rows
        .iter()
        .map(|l| l.params.src_rank.max(l.params.dst_rank) + 1)
        .max()
        .unwrap_or(0);
    let mut out = Vec::new();
    for link in 0..ranks.saturating_sub(1) {
        let (a, b) = (link, link + 1);
        let pings: Vec<&crate::record::Line<LinksTable>> = rows
            .iter()
            .filter(|l| {
                let (s, d) = (l.params.src_rank, l.params.dst_rank);
                (s.min(d), s.max(d)) == (a, b)
                    && l.params.direction == "pingpong"
                    && l.params.transport == transport
            })
            .collect();
        let at = pings
            .iter()
            .filter(|l| l.params.bytes <= activation)
            .max_by_key(|l| l.params.bytes)
            .or_else(|| pings.iter().min_by_key(|l| l.params.bytes));
        let Some(l) = at else { continue };
        let Some((k, n, ms)) = crate::bench::links::words::stall_of(l).filter(|s| s.0 > 0) else {
            continue;
        };
        let stall = Stall {
            link: link as usize,
            prob: k as f64 / n.max(1) as f64,
            ms: (ms * 1e3).round() / 1e3,
        };
        let why = format!(
            "link {link} (r{a}-r{b}): {k} of {n} round trips at {} B stalled, {:.1} ms each",
            l.params.bytes, stall.ms
        );
        out.push((stall, why));
    }
    Ok(out)
}

/// One schedule's iteration times under the stalls.
#[derive(Debug, Clone, PartialEq)]
pub struct TailRow {
    pub schedule: String,
    /// Without stalls (the healthy links).
    pub healthy_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub mean_ms: f64,
    /// 1 - healthy / mean: the share of throughput the stalls take.
    pub lost: f64,
    /// Every iteration's time (ms), sorted: sim.csv's statistics of the schedule.
    pub iterations_ms: Vec<f64>,
}

/// One iteration's draws: each transfer's extra arrival time, and each one's extra hold of its
/// sender (empty when no send waits for its acknowledgement).
type Drawn = (Vec<f64>, Vec<f64>);

/// Draws one iteration's stalls: every transfer over a stalled link, in a fixed order. Returns
/// each transfer's extra arrival time and extra hold of its sender (empty when no send waits
/// for its acknowledgement).
fn draw(
    sc: &Scenario,
    layout: Layout,
    (stalls, measured): (&[Stall], &[MeasuredLink]),
    rng: &mut rand::rngs::SmallRng,
) -> Drawn {
    let mut out = vec![0.0; sc.transfer_slots(layout)];
    let mut hold = if measured.iter().any(|m| m.sends_wait) {
        vec![0.0; out.len()]
    } else {
        Vec::new()
    };
    for kind in [crate::sim::OpKind::F, crate::sim::OpKind::B] {
        for stage in 0..sc.stages {
            for chunk in 0..layout.chunks() {
                for mb in 0..sc.microbatches {
                    let op = crate::sim::Op {
                        kind,
                        stage,
                        mb,
                        chunk,
                    };
                    let Some(link) = sc.out_link(op, layout) else {
                        continue;
                    };
                    let at = sc.transfer_index(op, layout);
                    for s in stalls.iter().filter(|s| s.link == link) {
                        if rng.gen::<f64>() < s.prob {
                            out[at] += s.ms;
                        }
                    }
                    for m in measured.iter().filter(|m| m.link == link) {
                        if m.sends_wait {
                            let (arrival, held) = m.draw_round_trip(rng);
                            out[at] += arrival;
                            hold[at] += held;
                        } else {
                            out[at] += m.draw(rng);
                        }
                    }
                }
            }
        }
    }
    (out, hold)
}

/// The policy a schedule plans on `sc` (without stalls).
fn planned(schedule: &Schedule, sc: &Scenario, mem_limit: usize) -> Result<Policy, SimError> {
    match schedule {
        Schedule::Adaptive => Ok(adaptive(sc, mem_limit)?.policy),
        other => policy_of(other, sc),
    }
}

/// Every schedule over `iterations` iterations of `sc` with `stalls` drawn from `seed`.
pub fn run(
    sc: &Scenario,
    schedules: &[Schedule],
    mem_limit: usize,
    drawn: (&[Stall], &[MeasuredLink]),
    iterations: u32,
    seed: u64,
) -> Result<Vec<TailRow>, SimError> {
    let policies: Vec<Policy> = schedules
        .iter()
        .map(|s| planned(s, sc, mem_limit))
        .collect::<Result<_, _>>()?;
    let healthy: Vec<f64> = policies
        .iter()
        .map(|p| simulate(sc, p).map(|r| r.iteration_ms))
        .collect::<Result<_, _>>()?;
    let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(iterations as usize); schedules.len()];
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut stalled = sc.clone();
    for _ in 0..iterations {
        // One draw per layout, so schedules with the same transfers see the same stalls.
        let mut draws: Vec<(Layout, Drawn)> = Vec::new();
        for (p, t) in policies.iter().zip(times.iter_mut()) {
            let layout = p.layout();
            if !draws.iter().any(|(l, _)| *l == layout) {
                draws.push((layout, draw(sc, layout, drawn, &mut rng)));
            }
            let (out, hold) = &draws.iter().find(|(l, _)| *l == layout).unwrap().1;
            (stalled.stall_ms, stalled.hold_ms) = (out.clone(), hold.clone());
            t.push(simulate(&stalled, p)?.iteration_ms);
        }
    }
    Ok(schedules
        .iter()
        .zip(times)
        .zip(healthy)
        .map(|((s, mut t), healthy_ms)| {
            t.sort_by(f64::total_cmp);
            let mean_ms = t.iter().sum::<f64>() / t.len().max(1) as f64;
            let q = |p| {
                if t.is_empty() {
                    healthy_ms
                } else {
                    percentile_sorted(&t, p)
                }
            };
            TailRow {
                schedule: s.to_string(),
                healthy_ms,
                p50_ms: q(0.5),
                p90_ms: q(0.9),
                p99_ms: q(0.99),
                mean_ms: if t.is_empty() { healthy_ms } else { mean_ms },
                lost: if t.is_empty() {
                    0.0
                } else {
                    1.0 - healthy_ms / mean_ms
                },
                iterations_ms: t,
            }
        })
        .collect())
}

/// `sim_tail.csv`: one row per schedule of a tail run.
#[derive(Debug, Clone)]
pub struct SimTailTable;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SimTailParams {
    pub schedule: String,
    pub iterations: u32,
    pub seed: u64,
    /// The stalls drawn, `link:prob:ms` joined by `;`.
    pub stalls: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SimTailFigures {
    /// The iteration without stalls.
    pub healthy_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub mean_ms: f64,
    /// 1 - healthy / mean.
    pub throughput_lost: f64,
    pub p90_ms: Option<f64>,
    /// The schedule's measured healthy iteration (its p50 in the op-times pipeline run), and
    /// the p50 and p99 on it: that iteration plus what the stalls add to the simulated one.
    /// Empty without such a run.
    pub measured_healthy_ms: Option<f64>,
    pub anchored_p50_ms: Option<f64>,
    pub anchored_p99_ms: Option<f64>,
}

impl crate::record::csv::CsvTable for SimTailTable {
    const NAME: &'static str = "sim_tail";
    const WITH_STATS: bool = false;
    type Params = SimTailParams;
    type Figures = SimTailFigures;
    const ADDED: &'static [&'static str] = &[
        "p90_ms",
        "measured_healthy_ms",
        "anchored_p50_ms",
        "anchored_p99_ms",
    ];
}

/// Writes `sim_tail.csv` in the run folder.
pub fn write(
    rows: &[TailRow],
    plan: &TailPlan,
    dir: &crate::record::run_dir::RunDir,
) -> anyhow::Result<()> {
    let mut sink = dir.table::<SimTailTable>()?;
    let stalls: Vec<String> = plan
        .stalls
        .iter()
        .map(|s| format!("{}:{}:{}", s.link, s.prob, s.ms))
        .chain(plan.measured.iter().map(MeasuredLink::label))
        .collect();
    let sig = crate::record::csv::sig4;
    for r in rows {
        let params = SimTailParams {
            schedule: r.schedule.clone(),
            iterations: plan.iterations,
            seed: plan.seed,
            stalls: stalls.join(";"),
        };
        let figures = SimTailFigures {
            healthy_ms: sig(r.healthy_ms),
            p50_ms: sig(r.p50_ms),
            p99_ms: sig(r.p99_ms),
            mean_ms: sig(r.mean_ms),
            throughput_lost: crate::record::csv::round(r.lost, 4),
            p90_ms: Some(sig(r.p90_ms)),
            measured_healthy_ms: plan.measured_healthy.get(&r.schedule).map(|&h| sig(h)),
            anchored_p50_ms: anchored(plan, r, r.p50_ms).map(sig),
            anchored_p99_ms: anchored(plan, r, r.p99_ms).map(sig),
        };
        let line =
            crate::record::csv::Line::new(&dir.id, r.schedule.clone(), params, None, figures);
        sink.write(&line)?;
    }
    Ok(())
}

/// A drawn figure `x` of row `r` on the schedule's measured healthy iteration: that
/// iteration plus what the stalls added to the simulated one (None without it).
fn anchored(plan: &TailPlan, r: &TailRow, x: f64) -> Option<f64> {
    let h = plan.measured_healthy.get(&r.schedule)?;
    Some(h + (x - r.healthy_ms))
}

/// The table `sim` prints.
pub fn print(rows: &[TailRow], plan: &TailPlan) {
    let what: Vec<String> = plan
        .stalls
        .iter()
        .map(|s| {
            format!(
                "link {} stalls {:.2}% of transfers by {:.1} ms",
                s.link,
                100.0 * s.prob,
                s.ms
            )
        })
        .chain(plan.measured.iter().map(MeasuredLink::described))
        .collect();
    println!(
        "\ntail: {} iterations (seed {}); {}",
        plan.iterations,
        plan.seed,
        what.join("; ")
    );
    println!(
        "  {:<14} {:>11} {:>10} {:>10} {:>10} {:>10} {:>16}",
        "schedule", "healthy ms", "p50 ms", "p90 ms", "p99 ms", "mean ms", "throughput lost"
    );
    for r in rows {
        println!(
            "  {:<14} {:>11.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>15.1}%",
            r.schedule,
            r.healthy_ms,
            r.p50_ms,
            r.p90_ms,
            r.p99_ms,
            r.mean_ms,
            100.0 * r.lost
        );
        if let (Some(h), Some(p50), Some(p99)) = (
            plan.measured_healthy.get(&r.schedule),
            anchored(plan, r, r.p50_ms),
            anchored(plan, r, r.p99_ms),
        ) {
            println!(
                "  {:<14} on its measured healthy iteration ({h:.2} ms): p50 {p50:.2} ms, p99 \
                 {p99:.2} ms",
                ""
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sc(s: usize, n: usize) -> Scenario {
        Scenario::builder(s, n).link_ms(0.1).build().unwrap()
    }

    fn stall(link: usize, prob: f64, ms: f64) -> Stall {
        Stall { link, prob, ms }
    }

    fn schedules() -> Vec<Schedule> {
        ["1f1b", "adaptive"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect()
    }

    #[test]
    fn the_stall_flag_is_parsed_and_bad_input_named() {
        assert_eq!(parse_stall("2:0.01:200").unwrap(), stall(2, 0.01, 200.0));
        for (input, named) in [
            ("2:1.5:200", "PROB"),
            ("x:0.1:2", "link"),
            ("2:0.1", "LINK:PROB:MS"),
            ("2:0.1:-3", "MS"),
        ] {
            let e = crate::testing::err_text(parse_stall(input));
            assert!(e.contains(named), "{input}: {e}");
        }
    }

    #[test]
    fn no_stall_is_the_healthy_iteration_and_a_sure_one_is_priced_exactly() {
        let base = sc(4, 8);
        let rows = run(&base, &schedules(), 16, (&[], &[]), 20, 1).unwrap();
        for r in &rows {
            for x in [r.p50_ms, r.p99_ms, r.mean_ms] {
                assert!((x - r.healthy_ms).abs() < 1e-9, "{r:?}");
            }
            assert!(r.lost.abs() < 1e-12);
        }
        // Every transfer over link 1 stalls 5 ms: the same as a 5 ms slow link, each iteration.
        let sure = [stall(1, 1.0, 5.0)];
        let rows = run(&base, &schedules()[..1], 16, (&sure, &[]), 5, 1).unwrap();
        let slow = Scenario::builder(4, 8)
            .link_ms(0.1)
            .slow(&[(1, 5.0)])
            .build()
            .unwrap();
        let policy = policy_of(&"1f1b".parse().unwrap(), &slow).unwrap();
        let want = simulate(&slow, &policy).unwrap().iteration_ms;
        assert!((rows[0].p50_ms - want).abs() < 1e-9, "{rows:?} vs {want}");
        assert!(rows[0].lost > 0.0);
    }

    #[test]
    fn a_rare_stall_moves_the_tail_not_the_median_and_the_seed_repeats() {
        let base = sc(8, 32);
        let rare = [stall(3, 0.01, 100.0)];
        let a = run(&base, &schedules(), 16, (&rare, &[]), 300, 7).unwrap();
        let b = run(&base, &schedules(), 16, (&rare, &[]), 300, 7).unwrap();
        assert_eq!(a, b, "deterministic for a seed");
        for r in &a {
            // 64 transfers over link 3 an iteration at 1%: about half the iterations stall.
            assert!(r.p99_ms >= r.healthy_ms + 50.0, "{r:?}");
            assert!(r.mean_ms > r.healthy_ms && r.lost > 0.0, "{r:?}");
        }
    }

    #[test]
    fn a_thousand_iterations_of_8_stages_and_32_microbatches_fit_the_budget() {
        let base = sc(8, 32);
        let rare = [stall(3, 0.02, 200.0)];
        let t = std::time::Instant::now();
        let rows = run(&base, &schedules(), 16, (&rare, &[]), 1000, 1).unwrap();
        assert_eq!(rows.len(), 2);
        // The goal is 2 s here; a test only checks it finishes (timings are the note's).
        assert!(t.elapsed().as_secs() < 120);
    }

    /// A links run of ranks 0, 1, 2 (pipeline links 0 and 1) as links.csv: each pair's
    /// ping-pong at 8 B and 64 KiB; link 1's 64 KiB round trips stall 1% of the time, 30 ms.
    fn links_run() -> tempfile::TempDir {
        use crate::bench::links::tables::pingpong_line;
        let dir = tempfile::tempdir().unwrap();
        let mut lines = Vec::new();
        for (a, b) in [(0u32, 1u32), (1, 2)] {
            for bytes in [8u64, 65536] {
                let mut samples = vec![50.0; 1000];
                let stalls = (a, bytes) == (1, 65536);
                if stalls {
                    samples[..10].fill(30_000.0);
                }
                let mut l = pingpong_line(a, b, bytes, &samples);
                l.figures.stalls = Some(if stalls { 10 } else { 0 });
                l.figures.stall_threshold_us = Some(5_000.0);
                lines.push(l);
            }
        }
        crate::bench::links::hist::write_run(dir.path(), &lines).unwrap();
        dir
    }

    #[test]
    fn a_links_run_gives_each_pipeline_link_its_measured_stall_share_and_length() {
        let dir = links_run();
        // An activation of 1 MiB reads the largest size under it: 64 KiB.
        let stalls = from_links_run(dir.path(), "tcp", 1 << 20).unwrap();
        assert_eq!(stalls.len(), 1, "{stalls:?}");
        let (stall, why) = &stalls[0];
        assert_eq!(stall.link, 1);
        assert!((stall.prob - 0.01).abs() < 1e-12, "{stall:?}");
        // Twice (the quantile over the threshold - p50): p99 sits in the stalls.
        assert!(
            (stall.ms - 2.0 * (30_000.0 - 50.0) / 1e3).abs() < 1e-6,
            "{stall:?}"
        );
        assert!(
            why.contains("link 1 (r1-r2): 10 of 1000 round trips at 65536 B"),
            "{why}"
        );
        // A small activation reads the 8 B rows, which did not stall; another transport none.
        assert!(from_links_run(dir.path(), "tcp", 100).unwrap().is_empty());
        assert!(from_links_run(dir.path(), "rdma", 1 << 20)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn the_sampler_stalls_each_transfer_with_its_links_probability() {
        let s = sc(4, 64);
        let stalls = [stall(1, 0.25, 7.0)];
        let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
        let (mut hits, mut total, mut elsewhere) = (0usize, 0usize, 0usize);
        for _ in 0..200 {
            let (d, hold) = draw(&s, Layout::Linear, (&stalls, &[]), &mut rng);
            assert!(hold.is_empty(), "no send waits for an acknowledgement here");
            for kind in [crate::sim::OpKind::F, crate::sim::OpKind::B] {
                for stage in 0..4 {
                    for mb in 0..64 {
                        let op = crate::sim::Op::new(kind, stage, mb);
                        let Some(link) = s.out_link(op, Layout::Linear) else {
                            continue;
                        };
                        let v = d[s.transfer_index(op, Layout::Linear)];
                        match link {
                            1 => {
                                total += 1;
                                hits += usize::from(v > 0.0);
                                assert!(v == 0.0 || v == 7.0, "{v}");
                            }
                            _ => elsewhere += usize::from(v > 0.0),
                        }
                    }
                }
            }
        }
        // 200 iterations x 128 transfers over link 1 (F from stage 1, B from stage 2).
        assert_eq!(total, 200 * 128);
        let share = hits as f64 / total as f64;
        assert!((share - 0.25).abs() < 0.01, "{share}");
        assert_eq!(elsewhere, 0);
    }
}
