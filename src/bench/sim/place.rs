//! From a links run to a pipeline: each pair's link cost at the activation size, fitted from
//! links.csv, and the order of ranks into stages that the simulator predicts fastest.
//!
//! Cost model: per pair, the ping-pong p50 (round trip / 2: the one-way time of a message) at
//! each measured size is fitted with t(bytes) = a + bytes / b by least squares (a >= 0, b > 0),
//! and the link costs t(activation): `a` as latency, `activation / b` as occupancy (the link
//! is held for it, so sends queue behind each other: the simulator's occupancy model). Stages follow the ranks' order, so stage i's link to
//! stage i + 1 is the pair (order[i], order[i + 1]).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{anyhow, Result};

use crate::bench::links::tables::LinksTable;
use crate::record::{read_table, Line};
use crate::sim::{evaluate, Scenario, Schedule};
use crate::units::human_bytes;

/// Orders are searched exhaustively up to this many ranks (8! = 40320 orders).
pub const EXHAUSTIVE_UP_TO: usize = 8;
/// The most ranks placement takes (the heuristic's swaps grow with the square).
pub const MAX_RANKS: usize = 64;

/// One pair's fitted line: t(bytes) = a_us + bytes / b_bytes_per_us.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fit {
    pub a_us: f64,
    pub b_bytes_per_us: f64,
}

impl Fit {
    pub fn at_ms(&self, bytes: u64) -> f64 {
        (self.a_us + bytes as f64 / self.b_bytes_per_us) / 1e3
    }

    /// Least squares over (bytes, µs) points; one point gives a pure bandwidth line.
    pub fn of(points: &[(f64, f64)]) -> Option<Fit> {
        let n = points.len() as f64;
        if points.is_empty() || points.iter().any(|p| !(p.0 > 0.0 && p.1 > 0.0)) {
            return None;
        }
        let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
        let my = points.iter().map(|p| p.1).sum::<f64>() / n;
        let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
        let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
        let (a, slope) = if slope > 0.0 && my - slope * mx >= 0.0 {
            (my - slope * mx, slope)
        } else {
            // A negative intercept or slope (noise at small sizes): through the origin.
            let sxy0: f64 = points.iter().map(|p| p.0 * p.1).sum();
            let sxx0: f64 = points.iter().map(|p| p.0 * p.0).sum();
            (0.0, sxy0 / sxx0)
        };
        (slope > 0.0).then_some(Fit {
            a_us: a,
            b_bytes_per_us: 1.0 / slope,
        })
    }
}

/// The link costs of a links run.
#[derive(Debug, Clone)]
pub struct LinkCosts {
    pub ranks: usize,
    pub hosts: Vec<String>,
    pub transport: String,
    pub activation: u64,
    /// fits[a][b] for a != b (symmetric).
    pub fits: Vec<Vec<Option<Fit>>>,
}

impl LinkCosts {
    /// Reads `dir/links.csv`; `transport` None takes rdma when the run has it, else tcp;
    /// `activation` None takes the largest size measured.
    pub fn from_run(
        dir: &Path,
        transport: Option<&str>,
        activation: Option<u64>,
    ) -> Result<LinkCosts> {
        let rows: Vec<Line<LinksTable>> = read_table(&dir.join("links.csv"))?;
        let has = |t: &str| rows.iter().any(|l| l.params.transport == t);
        let transport = match transport {
            Some(t) if has(t) => t.to_string(),
            Some(t) => return Err(anyhow!("{} has no {t} links", dir.display())),
            None if has("rdma") => "rdma".into(),
            None if has("tcp") => "tcp".into(),
            None => return Err(anyhow!("{} has no links", dir.display())),
        };
        let ranks = rows
            .iter()
            .map(|l| l.params.src_rank.max(l.params.dst_rank) as usize + 1)
            .max()
            .unwrap_or(0);
        if !(2..=MAX_RANKS).contains(&ranks) {
            return Err(anyhow!(
                "{}: {ranks} ranks; placement takes 2 to {MAX_RANKS}",
                dir.display()
            ));
        }
        let mut hosts = vec![String::new(); ranks];
        let mut points: BTreeMap<(usize, usize), Vec<(f64, f64)>> = BTreeMap::new();
        // The matrix's rows: a retest measures a suspect link again, it is not another sample.
        for l in rows.iter().filter(|l| {
            l.params.transport == transport && !crate::bench::links::tables::is_retest(l)
        }) {
            let (s, d) = (l.params.src_rank as usize, l.params.dst_rank as usize);
            hosts[s] = l.params.src_host.clone();
            hosts[d] = l.params.dst_host.clone();
            if l.params.direction == "pingpong" {
                points
                    .entry((s.min(d), s.max(d)))
                    .or_default()
                    .push((l.params.bytes as f64, l.stats().p50_us));
            }
        }
        let largest = rows.iter().map(|l| l.params.bytes).max().unwrap_or(0);
        let mut fits = vec![vec![None; ranks]; ranks];
        for (&(a, b), pts) in &points {
            let fit = Fit::of(pts);
            fits[a][b] = fit;
            fits[b][a] = fit;
        }
        let missing = (0..ranks)
            .flat_map(|a| (a + 1..ranks).map(move |b| (a, b)))
            .find(|&(a, b)| fits[a][b].is_none());
        if let Some((a, b)) = missing {
            if let Some(pts) = points.get(&(a, b)) {
                return Err(anyhow!(
                    "{}: the {transport} ping-pong rows of ranks {a} and {b} hold no usable time \
                     (bytes, p50 µs: {pts:?}; every p50 must be above 0): the links run's \
                     timing is broken; run links again",
                    dir.display()
                ));
            }
            return Err(anyhow!(
                "{}: no {transport} ping-pong rows for ranks {a} and {b}; placement needs every \
                 pair (run links to the end)",
                dir.display()
            ));
        }
        Ok(LinkCosts {
            ranks,
            hosts,
            transport,
            activation: activation.unwrap_or(largest),
            fits,
        })
    }

    /// The cost in ms of the link between ranks `a` and `b` at the activation size.
    pub fn cost_ms(&self, a: usize, b: usize) -> f64 {
        self.fits[a][b].map_or(0.0, |f| f.at_ms(self.activation))
    }

    /// The latency part of a link's cost (the fit's intercept), in ms.
    pub fn latency_ms(&self, a: usize, b: usize) -> f64 {
        self.fits[a][b].map_or(0.0, |f| f.a_us / 1e3)
    }

    /// (link_ms, per-link extra delays) of the pipeline whose stage i is rank `order[i]`, the
    /// latency part of each link's cost: the lowest is the base latency, the others' excess
    /// their delay. The bandwidth part is the links' occupancy ([`Self::occupancy_of`]).
    pub fn links_of(&self, order: &[usize], wrap: bool) -> (f64, Vec<(usize, f64)>) {
        let costs: Vec<f64> = hops(order, wrap)
            .map(|(a, b)| self.latency_ms(a, b))
            .collect();
        let base = costs.iter().copied().fold(f64::INFINITY, f64::min);
        let base = if base.is_finite() { base } else { 0.0 };
        let slow = costs
            .iter()
            .enumerate()
            .map(|(i, c)| (i, c - base))
            .collect();
        (base, slow)
    }

    /// Per link of `order`, how long an activation holds it: bytes / the fitted bandwidth (a
    /// transfer in a link's FIFO waits for the one before it).
    pub fn occupancy_of(&self, order: &[usize], wrap: bool) -> Vec<(usize, f64)> {
        hops(order, wrap)
            .enumerate()
            .map(|(i, (a, b))| (i, self.cost_ms(a, b) - self.latency_ms(a, b)))
            .collect()
    }

    /// One line per link of `order`, for the console.
    pub fn describe(&self, order: &[usize]) -> String {
        order
            .windows(2)
            .map(|w| format!("r{}-r{} {:.3} ms", w[0], w[1], self.cost_ms(w[0], w[1])))
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub fn note(&self) -> String {
        format!(
            "links: {} ranks, {} links fitted t = a + bytes/b from ping-pong p50s, costed at the \
             activation size {}",
            self.ranks,
            self.transport,
            human_bytes(self.activation)
        )
    }
}

/// The pairs of ranks `order` puts on links 0, 1, ...: neighbours, then with `wrap` (from 3
/// ranks on) the wrap link from the last stage back to the first, which interleaved schedules
/// cross.
fn hops(order: &[usize], wrap: bool) -> impl Iterator<Item = (usize, usize)> + '_ {
    let wrap = (wrap && order.len() > 2).then(|| (order[order.len() - 1], order[0]));
    order.windows(2).map(|w| (w[0], w[1])).chain(wrap)
}

/// Whether any of `schedules` on `ranks` ranks crosses the wrap link (its cost is then the
/// last rank's to the first's).
pub fn crosses_wrap(schedules: &[Schedule], ranks: usize) -> bool {
    schedules.iter().any(|s| {
        matches!(
            s.layout(ranks),
            crate::sim::Layout::Interleaved(_) | crate::sim::Layout::InterleavedAsPublished(..)
        )
    })
}

/// The best order found for one schedule, against the launcher's.
#[derive(Debug, Clone)]
pub struct Placement {
    pub schedule: String,
    pub launcher_ms: f64,
    pub best: Vec<usize>,
    pub best_ms: f64,
}

/// The most passes of pairwise swaps the heuristic search makes.
const MAX_SWAP_PASSES: u64 = 20;

/// Refuses a search whose cost (orders judged x ops simulated per order) is over the cap,
/// before any of it runs.
fn check_search_cost(
    n: usize,
    exhaustive: bool,
    microbatches: usize,
    schedules: &[Schedule],
) -> Result<()> {
    let orders: u64 = if exhaustive {
        (1..=n as u64).product()
    } else {
        n as u64 + MAX_SWAP_PASSES * (n * (n - 1) / 2) as u64
    };
    let per_order: u64 = schedules
        .iter()
        .map(|s| {
            let runs = if matches!(s, Schedule::Adaptive) {
                super::plan::ADAPTIVE_RUNS
            } else {
                1
            };
            runs * (n * microbatches * 3) as u64
        })
        .sum();
    let ops = orders.saturating_mul(per_order);
    if ops > super::plan::MAX_SIM_OPS {
        return Err(anyhow!(
            "--place would simulate about {ops} ops ({orders} orders of {n} ranks, {} \
             microbatches), over the cap of {}: give fewer --microbatches (the best order is \
             found the same way with fewer)",
            microbatches,
            super::plan::MAX_SIM_OPS
        ));
    }
    Ok(())
}

/// The fastest of every order of the ranks, starting from the launcher's (kept on ties).
fn search_exhaustive(
    launcher: &[usize],
    launcher_ms: f64,
    time: impl Fn(&[usize]) -> Result<f64>,
) -> Result<(Vec<usize>, f64)> {
    let (mut best, mut best_ms) = (launcher.to_vec(), launcher_ms);
    let mut order = launcher.to_vec();
    permute(&mut order, 0, &mut |o| {
        let t = time(o)?;
        if t < best_ms - 1e-9 {
            best_ms = t;
            best = o.to_vec();
        }
        Ok(())
    })?;
    Ok((best, best_ms))
}

/// The best nearest-neighbour chain (each rank in turn starting one), improved by swapping
/// pairs of positions while the simulator says it helps; the launcher's order if none beats it.
fn search_heuristic(
    costs: &LinkCosts,
    launcher: &[usize],
    launcher_ms: f64,
    time: impl Fn(&[usize]) -> Result<f64>,
) -> Result<(Vec<usize>, f64)> {
    let n = costs.ranks;
    let (mut best, mut best_ms) = (launcher.to_vec(), launcher_ms);
    for start in 0..n {
        let chain = nearest_chain(costs, start);
        let t = time(&chain)?;
        if t < best_ms - 1e-9 {
            (best, best_ms) = (chain, t);
        }
    }
    let (mut improved, mut passes) = (true, 0);
    while improved && passes < MAX_SWAP_PASSES {
        improved = false;
        passes += 1;
        for i in 0..n {
            for j in i + 1..n {
                let mut o = best.clone();
                o.swap(i, j);
                let t = time(&o)?;
                if t < best_ms - 1e-9 {
                    (best, best_ms, improved) = (o, t, true);
                }
            }
        }
    }
    Ok((best, best_ms))
}

/// The search: exhaustive up to [`EXHAUSTIVE_UP_TO`] ranks; above, each rank in turn starts a
/// nearest-neighbour chain over the fitted costs, and the best chain is improved by swapping
/// pairs of positions while the simulator says it helps.
pub fn place(
    costs: &LinkCosts,
    base: &Scenario,
    mem_limit: usize,
    schedules: &[Schedule],
) -> Result<(Vec<Placement>, bool)> {
    let n = costs.ranks;
    let wrap = crosses_wrap(schedules, n);
    let scenario = |order: &[usize]| -> Result<Scenario> {
        let (link_ms, slow) = costs.links_of(order, wrap);
        Scenario::builder(n, base.microbatches)
            .times(&base.tf, &base.tb, &base.tw)
            .link_ms(link_ms)
            .slow(&slow)
            .comm(base.comm, base.d2h_ms)
            .build()
            .and_then(|sc| sc.with_occupancy(&costs.occupancy_of(order, wrap)))
            .map_err(|e| anyhow!("{e}"))
    };
    let time = |order: &[usize], s: &Schedule| -> Result<f64> {
        let sc = scenario(order)?;
        Ok(evaluate(s, &sc, mem_limit)
            .map_err(|e| anyhow!("{s}: {e}"))?
            .1
            .iteration_ms)
    };
    let launcher: Vec<usize> = (0..n).collect();
    let exhaustive = n <= EXHAUSTIVE_UP_TO;
    check_search_cost(n, exhaustive, base.microbatches, schedules)?;
    let mut out = Vec::new();
    for s in schedules {
        let launcher_ms = time(&launcher, s)?;
        let time_of = |o: &[usize]| time(o, s);
        let (best, best_ms) = if exhaustive {
            search_exhaustive(&launcher, launcher_ms, time_of)?
        } else {
            search_heuristic(costs, &launcher, launcher_ms, time_of)?
        };
        out.push(Placement {
            schedule: s.to_string(),
            launcher_ms,
            best,
            best_ms,
        });
    }
    Ok((out, exhaustive))
}

/// Calls `f` with every permutation of `order[k..]` (Heap-free recursive swaps).
fn permute(
    order: &mut Vec<usize>,
    k: usize,
    f: &mut dyn FnMut(&[usize]) -> Result<()>,
) -> Result<()> {
    if k + 1 >= order.len() {
        return f(order);
    }
    for i in k..order.len() {
        order.swap(k, i);
        permute(order, k + 1, f)?;
        order.swap(k, i);
    }
    Ok(())
}

/// A chain from `start`, each next rank the cheapest link away.
fn nearest_chain(costs: &LinkCosts, start: usize) -> Vec<usize> {
    let mut chain = vec![start];
    let mut left: Vec<usize> = (0..costs.ranks).filter(|&r| r != start).collect();
    while !left.is_empty() {
        let last = *chain.last().expect("non-empty");
        let (i, _) = left
            .iter()
            .enumerate()
            .min_by(|a, b| {
                costs
                    .cost_ms(last, *a.1)
                    .total_cmp(&costs.cost_ms(last, *b.1))
            })
            .expect("non-empty");
        chain.push(left.remove(i));
    }
    chain
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::CommModel;

    #[test]
    fn the_fit_recovers_latency_and_bandwidth() {
        // 5 µs + 1 GB/s (1000 bytes per µs).
        let pts: Vec<(f64, f64)> = [8.0, 65536.0, 4194304.0]
            .iter()
            .map(|&b| (b, 5.0 + b / 1000.0))
            .collect();
        let f = Fit::of(&pts).unwrap();
        assert!((f.a_us - 5.0).abs() < 1e-6 && (f.b_bytes_per_us - 1000.0).abs() < 1e-6);
        assert!((f.at_ms(1_000_000) - 1.005).abs() < 1e-9);
        assert!(Fit::of(&[]).is_none());
        assert!(Fit::of(&[(8.0, -1.0)]).is_none());
    }

    fn costs_with_slow(slow: usize, n: usize) -> LinkCosts {
        let fast = Fit {
            a_us: 10.0,
            b_bytes_per_us: 3000.0,
        };
        let slow_fit = Fit {
            a_us: 50.0,
            b_bytes_per_us: 12.0,
        };
        let fits = (0..n)
            .map(|a| {
                (0..n)
                    .map(|b| {
                        (a != b).then_some(if a == slow || b == slow {
                            slow_fit
                        } else {
                            fast
                        })
                    })
                    .collect()
            })
            .collect();
        LinkCosts {
            ranks: n,
            hosts: (0..n).map(|i| format!("h{i}")).collect(),
            transport: "tcp".into(),
            activation: 4 << 20,
            fits,
        }
    }

    #[test]
    fn a_slow_host_is_put_at_an_end_not_between_two_stages() {
        for (n, exhaustive) in [(4, true), (9, false)] {
            let costs = costs_with_slow(1, n);
            let base = Scenario::builder(n, 8)
                .times(&[10.0], &[10.0], &[10.0])
                .comm(CommModel::Latency, 0.5)
                .build()
                .unwrap();
            let schedules: Vec<Schedule> = ["1f1b", "adaptive"]
                .iter()
                .map(|s| s.parse().unwrap())
                .collect();
            let (found, ex) = place(&costs, &base, 8, &schedules).unwrap();
            assert_eq!(ex, exhaustive);
            for p in found {
                let pos = p.best.iter().position(|&r| r == 1).unwrap();
                assert!(
                    pos == 0 || pos == n - 1,
                    "{n} ranks, {}: {:?}",
                    p.schedule,
                    p.best
                );
                assert!(p.best_ms < p.launcher_ms, "{}", p.schedule);
            }
        }
    }
}
