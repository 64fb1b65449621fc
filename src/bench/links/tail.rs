//! Tails: a link that drops packets keeps its median and stalls now and then (a TCP
//! retransmission timeout, RDMA's go-back-N after a local ACK timeout), and a pipeline waits
//! for every transfer, so one stall in a hundred is a bubble in every iteration. A sample is a
//! *stall* when it lies far beyond what the healthy links of its group reach at their tail
//! ([`threshold_us`]); a link is flagged on its tail when its stalls are significantly more
//! frequent than the group's healthy rate (a one-sided binomial test on counts,
//! [`tail_flagged`]), and, as a slow link, only when its own retest confirms it.
//!
//! Why the counts suffice at the defaults, and how a host's own pauses are told from a lossy
//! network ([`paused_explains`]): docs/cluster.md, "Tails, stalls and retransmissions".

use serde::{Deserialize, Serialize};

use crate::stats::robust::lower_median;

/// A sample under this is never a stall, whatever its group (µs, one way: a round trip of 40
/// ms). Scheduler noise on a busy 2-core machine shared by 16 virtual hosts stays below it
/// (measured: the largest healthy 8 B to 4 MiB ping-pong sample, with and without a CPU hog,
/// under 10 ms), while a TCP retransmission timeout is at least 200 ms (100 ms one way) and an
/// RDMA local ACK timeout at perftest's setting 67 ms.
pub const STALL_FLOOR_US: f64 = 20_000.0;
/// A stall is also this many times the healthy links' tail (their p99's lower median).
pub const STALL_FACTOR: f64 = 10.0;
/// A link's stall rate is tested against the group's healthy rate, never below this: no
/// healthy ping-pong sample reached its threshold in 524,117 round trips on the virtual
/// cluster, a rate under 5.7e-6 at 95% (docs/cluster.md lists each constant's measurement).
pub const HEALTHY_RATE_FLOOR: f64 = 1e-4;
/// The significance level of the tail test (one-sided).
pub const ALPHA: f64 = 1e-3;
/// Fewer stalls than this never flag a link, however few its samples.
pub const MIN_STALLS: u32 = 3;
/// A test keeps at most this many of its samples over the floor for rank 0 (the largest).
pub const MAX_KEPT: usize = 1024;
/// Stall time is not charged against a test's budget, up to this many budgets in all: a lossy
/// link keeps its samples (its evidence), and every test's cost stays bounded.
pub const STALL_CAP: u32 = 4;

/// What one test measured of its tail, as the measuring rank reports it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Tail {
    /// Samples taken (round trips, or stream batches).
    pub trials: u32,
    /// Samples the plan asked for that the stall cap cut: each counts as a stall.
    pub missing: u32,
    /// p99 of the samples in the unit stalls are judged in (µs: half a round trip, or a
    /// stream batch's time).
    pub p99_us: f64,
    /// Their p50: a stall is also far beyond the link's own typical time (a link slow in
    /// every sample is slow, not stalling).
    #[serde(default)]
    pub p50_us: f64,
    /// The samples at or over [`STALL_FLOOR_US`] (µs), largest first, at most [`MAX_KEPT`].
    pub over_floor_us: Vec<f64>,
}

impl Tail {
    /// From a test's samples (µs) and the samples the stall cap cut.
    pub fn of(samples: &[f64], missing: u32) -> Tail {
        let mut over: Vec<f64> = samples
            .iter()
            .copied()
            .filter(|&s| s >= STALL_FLOOR_US)
            .collect();
        over.sort_by(|a, b| b.total_cmp(a));
        over.truncate(MAX_KEPT);
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        Tail {
            trials: samples.len() as u32,
            missing,
            p99_us: if sorted.is_empty() {
                0.0
            } else {
                crate::stats::percentile_sorted(&sorted, 0.99)
            },
            p50_us: if sorted.is_empty() {
                0.0
            } else {
                crate::stats::percentile_sorted(&sorted, 0.5)
            },
            over_floor_us: over,
        }
    }

    /// Its samples at or over `threshold` (µs) and [`STALL_FACTOR`] times its own p50.
    pub fn stalls(&self, threshold: f64) -> u32 {
        let at = threshold.max(STALL_FACTOR * self.p50_us);
        self.over_floor_us.iter().filter(|&&s| s >= at).count() as u32
    }

    /// What the count test weighs: (stalls, trials), the cut samples counted as stalls.
    pub fn evidence(&self, threshold: f64) -> (u32, u32) {
        (
            self.stalls(threshold) + self.missing,
            self.trials + self.missing,
        )
    }
}

/// The stall threshold of a group (µs): [`STALL_FACTOR`] times its members' tails' lower
/// median (the healthy level while at most half of them are lossy), never under the floor.
pub fn threshold_us(tails: &[&Tail]) -> f64 {
    let p99s: Vec<f64> = tails.iter().map(|t| t.p99_us).collect();
    (STALL_FACTOR * median_or(&p99s, 0.0)).max(STALL_FLOOR_US)
}

/// The lower median of `v`, or `empty` when it has none.
fn median_or(v: &[f64], empty: f64) -> f64 {
    if v.is_empty() {
        empty
    } else {
        lower_median(v)
    }
}

/// The healthy stall rate of a group at `threshold`: the lower median of its members' rates,
/// never under [`HEALTHY_RATE_FLOOR`].
pub fn healthy_rate(tails: &[&Tail], threshold: f64) -> f64 {
    let rates: Vec<f64> = tails
        .iter()
        .map(|t| {
            let (k, n) = t.evidence(threshold);
            if n == 0 {
                0.0
            } else {
                k as f64 / n as f64
            }
        })
        .collect();
    median_or(&rates, HEALTHY_RATE_FLOOR).max(HEALTHY_RATE_FLOOR)
}

/// P(X >= k) for X ~ Binomial(n, p), summed in log space (exact for the counts links use).
pub fn binomial_sf(k: u32, n: u32, p: f64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if k > n || p <= 0.0 {
        return 0.0;
    }
    if p >= 1.0 {
        return 1.0;
    }
    let ln_choose = |n: u32, i: u32| ln_factorial(n) - ln_factorial(i) - ln_factorial(n - i);
    let (lp, lq) = (p.ln(), (1.0 - p).ln());
    let mut sum = 0.0;
    for i in k..=n {
        let term = (ln_choose(n, i) + i as f64 * lp + (n - i) as f64 * lq).exp();
        sum += term;
        // Past the mode the terms only shrink: stop once they no longer matter.
        if i as f64 > n as f64 * p && term < sum * 1e-16 {
            break;
        }
    }
    sum.min(1.0)
}

fn ln_factorial(n: u32) -> f64 {
    (2..=n).map(|i| (i as f64).ln()).sum()
}

/// The p-value of a member's stalls: P(as many or more | `rate`) over its trials.
pub fn p_value(tail: &Tail, threshold: f64, rate: f64) -> f64 {
    let (k, n) = tail.evidence(threshold);
    binomial_sf(k, n, rate)
}

/// Whether a member with `tail` stalls significantly more often than `rate` at `threshold`:
/// at least [`MIN_STALLS`] stalls and P(as many | rate) under [`ALPHA`].
pub fn tail_flagged(tail: &Tail, threshold: f64, rate: f64) -> bool {
    tail.evidence(threshold).0 >= MIN_STALLS && p_value(tail, threshold, rate) < ALPHA
}

/// One member's tail verdict in its group.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TailVerdict {
    /// Samples at or over the threshold (the cut ones not counted here).
    pub stalls: u32,
    pub threshold_us: f64,
    pub flagged: bool,
    /// So significant that one retest confirms it (p under [`ALPHA`] squared).
    pub clearly: bool,
}

/// A group's tail level: its stall threshold and its healthy stall rate at that threshold.
fn level(tails: &[Option<&Tail>]) -> (f64, f64) {
    let known: Vec<&Tail> = tails.iter().flatten().copied().collect();
    let threshold = threshold_us(&known);
    (threshold, healthy_rate(&known, threshold))
}

/// A member's verdict at its group's `(threshold, rate)`; `scale` stretches the threshold.
fn verdict(t: &Tail, (threshold, rate): (f64, f64), scale: f64) -> TailVerdict {
    let threshold = threshold * scale.max(1.0);
    let flagged = tail_flagged(t, threshold, rate);
    TailVerdict {
        stalls: t.stalls(threshold),
        threshold_us: threshold,
        flagged,
        clearly: flagged && p_value(t, threshold, rate) < ALPHA * ALPHA,
    }
}

/// Member `i`'s tail verdict in its group (None for a member with no tail reported, as rows
/// read back from a file). `scale` stretches its threshold: a loaded measurement's stall must
/// lie beyond what the load explains.
pub fn judge_one(tails: &[Option<&Tail>], i: usize, scale: f64) -> Option<TailVerdict> {
    Some(verdict(tails[i]?, level(tails), scale))
}

/// Every member's tail verdict in one group (the group's level computed once).
pub fn judge(tails: &[Option<&Tail>]) -> Vec<Option<TailVerdict>> {
    let at = level(tails);
    tails
        .iter()
        .map(|t| t.map(|t| verdict(t, at, 1.0)))
        .collect()
}

/// A row's stalls are its own hosts' pauses, not the network's, when the time its ends were
/// ready to run and did not (their run delay over the wave: a CPU quota's throttling, a
/// descheduled rank) covers at least this share of the time its stalls added.
pub const PAUSE_SHARE: f64 = 0.5;

/// The time (ms) a row's stalls at `threshold` added beyond its typical sample (the samples
/// its stall cap cut are not timed: what they would have cost is unknown); a ping-pong's
/// samples are half a round trip (`round_trip`), so twice theirs.
pub fn stall_excess_ms(t: &Tail, threshold: f64, round_trip: bool) -> f64 {
    let at = threshold.max(STALL_FACTOR * t.p50_us);
    let one: f64 = t
        .over_floor_us
        .iter()
        .filter(|&&s| s >= at)
        .map(|s| s - t.p50_us)
        .sum();
    let per = if round_trip { 2.0 } else { 1.0 };
    per * one / 1e3
}

/// A row's lost time counts as its hosts' own pauses only at this many times its group's
/// healthy share of the wave (the lower median): on the 2-core virtual cluster every rank
/// waits for a CPU now and then (measured: healthy ranks' run delay 368-466 ms in waves of
/// 2-3 s; a rank held to a quarter of a CPU by its cgroup 2,159-3,486 ms in the rounds and
/// 699-1,392 ms in its shorter retests alone).
pub const PAUSE_FACTOR: f64 = 2.0;

/// Whether member `i`'s stalls (at `threshold`) are its own hosts' pauses. `lost` holds each
/// member's (lost ms, wave ms), its larger end's: member `i`'s lost time covers
/// [`PAUSE_SHARE`] of what its stalls added and is over the stall floor, and its share of its
/// wave is [`PAUSE_FACTOR`] times its group's healthy share or more.
pub fn paused_explains(
    t: &Tail,
    threshold: f64,
    round_trip: bool,
    lost: &[Option<(f64, f64)>],
    i: usize,
) -> bool {
    let Some((mine, wave)) = lost[i] else {
        return false;
    };
    let share = |(ms, wave): (f64, f64)| ms / wave.max(1e-9);
    let shares: Vec<f64> = lost.iter().flatten().map(|&l| share(l)).collect();
    let healthy = lower_median(&shares);
    let excess = stall_excess_ms(t, threshold, round_trip);
    (excess > 0.0 || t.missing > 0)
        && mine >= PAUSE_SHARE * excess
        && mine >= STALL_FLOOR_US / 1e3
        && share((mine, wave)) >= PAUSE_FACTOR * healthy
}

/// Fewest retransmissions that flag a test.
pub const MIN_RETRANSMITS: u64 = 10;
/// A test is flagged on its retransmissions at this many times its group's healthy level.
/// Counts on a shared machine are overdispersed, far from Poisson: healthy streams between
/// the virtual cluster's namespaces retransmit 50 to 6,000 segments a test (the veth backlog
/// overflows when the two cores are busy), while a healthy 8 B ping-pong retransmits none.
pub const RETRANSMIT_FACTOR: f64 = 10.0;

/// The largest ping-pong whose retransmissions are judged. A round trip of at most this much
/// never fills a healthy path's queues, so a healthy ping-pong retransmits nothing (measured:
/// 0 in every healthy 8 B and 64 KiB ping-pong on the virtual cluster), while streams and
/// 1 MiB ping-pongs overflow the veth backlog of a busy 2-core machine and retransmit
/// thousands of segments on healthy links: their counts are kept, not judged.
pub const MAX_JUDGED_RETRANSMIT_BYTES: u64 = 64 << 10;

/// Whether a row's retransmissions are judged (ping-pongs up to
/// [`MAX_JUDGED_RETRANSMIT_BYTES`], TCP or RDMA, each in its own transport's group).
pub fn judges_retransmits(direction: &str, bytes: u64) -> bool {
    direction == "pingpong" && bytes <= MAX_JUDGED_RETRANSMIT_BYTES
}

/// Whether member `i` retransmitted while its group's healthy members did not: at least
/// [`MIN_RETRANSMITS`] and [`RETRANSMIT_FACTOR`] times the group's lower median.
pub fn retransmits_flagged(counts: &[Option<u64>], i: usize) -> bool {
    retransmits_judged(counts)[i]
}

/// [`retransmits_flagged`] for every member (the group's level computed once).
pub fn retransmits_judged(counts: &[Option<u64>]) -> Vec<bool> {
    let known: Vec<f64> = counts.iter().flatten().map(|&c| c as f64).collect();
    let healthy = median_or(&known, 0.0);
    counts
        .iter()
        .map(|c| c.is_some_and(|r| r >= MIN_RETRANSMITS && r as f64 >= RETRANSMIT_FACTOR * healthy))
        .collect()
}

/// Charges a test's time against its budget, stall time excepted: a sample at or over the
/// floor and [`STALL_FACTOR`] times the test's fastest so far is a stall, and costs the
/// budget nothing, until the test has run [`STALL_CAP`] budgets in all.
#[derive(Debug)]
pub struct TestClock {
    started: std::time::Instant,
    stalled_us: f64,
    fastest_us: f64,
    budget_us: f64,
    /// The wall time and count of the samples that were not stalls.
    healthy_us: f64,
    healthy: u64,
}

impl TestClock {
    pub fn start(budget_ms: u64) -> TestClock {
        TestClock {
            started: std::time::Instant::now(),
            stalled_us: 0.0,
            fastest_us: f64::INFINITY,
            budget_us: budget_ms as f64 * 1e3,
            healthy_us: 0.0,
            healthy: 0,
        }
    }

    /// Notes one sample, `unit_us` in the unit stalls are judged in (half a round trip, a
    /// stream batch), which took `wall_us` of wall time.
    pub fn note(&mut self, unit_us: f64, wall_us: f64) {
        if unit_us >= STALL_FLOOR_US && unit_us >= STALL_FACTOR * self.fastest_us {
            self.stalled_us += wall_us;
        } else {
            self.healthy_us += wall_us;
            self.healthy += 1;
        }
        self.fastest_us = self.fastest_us.min(unit_us);
    }

    /// How many healthy samples fit in `us` at the healthy samples' mean (0 before any).
    pub fn fit(&self, us: f64) -> u64 {
        match self.healthy {
            0 => 0,
            k => (us / (self.healthy_us / k as f64).max(1e-3)) as u64,
        }
    }

    fn elapsed_us(&self) -> f64 {
        self.started.elapsed().as_secs_f64() * 1e6
    }

    /// Budget left (µs), stall time not charged.
    pub fn left_us(&self) -> f64 {
        (self.budget_us - (self.elapsed_us() - self.stalled_us)).max(0.0)
    }

    /// The budget is spent (stall time not charged).
    pub fn spent(&self) -> bool {
        self.left_us() <= 0.0
    }

    /// The test ran [`STALL_CAP`] budgets in all: it stops, its missing samples counted.
    pub fn capped(&self) -> bool {
        self.elapsed_us() >= self.budget_us * STALL_CAP as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test of `n` samples at 20 µs, `k` of them stalls of 100 ms, deterministic.
    fn tail(n: u32, k: u32) -> Tail {
        let samples: Vec<f64> = (0..n)
            .map(|i| {
                if i < k {
                    100_000.0
                } else {
                    20.0 + (i % 7) as f64
                }
            })
            .collect();
        Tail::of(&samples, 0)
    }

    fn flags(tails: &[Tail]) -> Vec<bool> {
        let refs: Vec<Option<&Tail>> = tails.iter().map(Some).collect();
        judge(&refs).iter().map(|v| v.unwrap().flagged).collect()
    }

    #[test]
    fn the_binomial_tail_matches_hand_values() {
        // P(X >= 1 | 5, 0.5) = 1 - 1/32.
        assert!((binomial_sf(1, 5, 0.5) - 31.0 / 32.0).abs() < 1e-12);
        // P(X >= 6 | 1000, 0.001): Poisson(1) gives 0.000594.
        let p = binomial_sf(6, 1000, 0.001);
        assert!((p - 0.000594).abs() < 0.00002, "{p}");
        assert_eq!(binomial_sf(0, 10, 0.1), 1.0);
        assert_eq!(binomial_sf(11, 10, 0.1), 0.0);
        assert_eq!(binomial_sf(3, 10, 0.0), 0.0);
    }

    #[test]
    fn no_stall_flags_nothing() {
        let t: Vec<Tail> = (0..6).map(|_| tail(1000, 0)).collect();
        assert!(flags(&t).iter().all(|f| !f));
        let v = judge(&[Some(&t[0])]);
        assert_eq!(v[0].unwrap().stalls, 0);
        assert_eq!(v[0].unwrap().threshold_us, STALL_FLOOR_US);
    }

    #[test]
    fn a_tenth_of_a_percent_needs_ten_thousand_samples() {
        // 1 or 2 stalls in 1000 on one link, the others clean: under MIN_STALLS.
        let mut t: Vec<Tail> = (0..6).map(|_| tail(1000, 0)).collect();
        t[2] = tail(1000, 2);
        assert!(flags(&t).iter().all(|f| !f));
        // 0.2% on every link: the group's own rate, nothing stands out.
        let t: Vec<Tail> = (0..6).map(|_| tail(1000, 2)).collect();
        assert!(flags(&t).iter().all(|f| !f));
        // Ten thousand round trips of a host dropping 0.1% (0.2% of round trips) beside clean
        // links: found.
        let mut t: Vec<Tail> = (0..6).map(|_| tail(10_000, 0)).collect();
        t[1] = tail(10_000, 20);
        assert_eq!(flags(&t), [false, true, false, false, false, false]);
        // A hiccup of one or two stalls in ten thousand is not.
        t[1] = tail(10_000, 2);
        assert!(flags(&t).iter().all(|f| !f));
    }

    #[test]
    fn one_percent_on_half_the_links_is_flagged_on_exactly_those() {
        // 4 hosts, host 3 lossy: links 0-3, 1-3, 2-3 stall 1-2% of round trips.
        let t = vec![
            tail(1000, 0),
            tail(1000, 0),
            tail(1000, 21),
            tail(1000, 0),
            tail(1000, 14),
            tail(1000, 18),
        ];
        assert_eq!(flags(&t), [false, false, true, false, true, true]);
        // With fewer samples (a budget cut at 261), 1% still shows: 3 stalls of 261 against a
        // rate of 1 in 1000 (P = 0.0023) is not enough alone...
        let short = Tail::of(
            &(0..261)
                .map(|i| if i < 3 { 1e5 } else { 20.0 })
                .collect::<Vec<_>>(),
            0,
        );
        assert!(!tail_flagged(&short, STALL_FLOOR_US, 1e-3));
        assert!(tail_flagged(&short, STALL_FLOOR_US, HEALTHY_RATE_FLOOR));
        // ...but the 739 round trips the stall cap cut count as stalls.
        let cut = Tail {
            missing: 739,
            ..short.clone()
        };
        assert!(tail_flagged(&cut, STALL_FLOOR_US, 1e-3));
        assert_eq!(cut.evidence(STALL_FLOOR_US), (742, 1000));
    }

    #[test]
    fn the_threshold_follows_the_healthy_tail_above_the_floor() {
        // 4 MiB ping-pongs with a p99 of 4.98 ms: a stall is 49.8 ms.
        let slow: Vec<Tail> = (0..5)
            .map(|_| Tail::of(&[3000.0, 4000.0, 5000.0], 0))
            .collect();
        let refs: Vec<&Tail> = slow.iter().collect();
        assert!((threshold_us(&refs) - 49_800.0).abs() < 1e-6);
        // A uniformly slow link is not a stall: its p99 is high, but the group's lower
        // median is the healthy one, and its samples sit under ten times that.
        let mut t: Vec<Tail> = (0..5).map(|_| tail(1000, 0)).collect();
        t.push(Tail::of(&vec![15_000.0; 1000], 0));
        assert!(flags(&t).iter().all(|f| !f));
        // Nor is one slower than the threshold in every sample (a 100 Mbit/s link at 1 MiB:
        // 87 ms a round trip): its samples are its typical time, not stalls.
        t[5] = Tail::of(&[87_000.0; 5], 0);
        assert!(flags(&t).iter().all(|f| !f));
        assert_eq!(t[5].stalls(STALL_FLOOR_US), 0);
    }

    #[test]
    fn retransmissions_stand_out_only_beside_clean_peers() {
        let c = [Some(0), Some(0), Some(41), Some(0), Some(1), Some(37)];
        assert!(!retransmits_flagged(&[Some(0), Some(0), Some(9)], 2));
        let f: Vec<bool> = (0..6).map(|i| retransmits_flagged(&c, i)).collect();
        assert_eq!(f, [false, false, true, false, false, true]);
        // Everyone retransmits as much: nothing stands out.
        let all = [Some(40), Some(35), Some(41), Some(38)];
        assert!((0..4).all(|i| !retransmits_flagged(&all, i)));
        // A few are not enough, and unread counters flag nothing.
        assert!(!retransmits_flagged(&[Some(0), Some(0), Some(4)], 2));
        assert!(!retransmits_flagged(&[None, None, None], 1));
        // Streams on a busy shared machine: thousands on every link, none stands out.
        let streams = [
            Some(2086),
            Some(172),
            Some(1304),
            Some(3906),
            Some(1687),
            Some(50),
        ];
        assert!((0..6).all(|i| !retransmits_flagged(&streams, i)));
    }

    #[test]
    fn a_loaded_measurement_needs_stalls_beyond_what_the_load_explains() {
        // Stalls of 30 ms: over the floor, but under 4x the floor that a loaded window needs.
        let mut t: Vec<Tail> = (0..5).map(|_| tail(1000, 0)).collect();
        let lossy = Tail::of(
            &(0..1000)
                .map(|i| if i < 20 { 30_000.0 } else { 20.0 })
                .collect::<Vec<_>>(),
            0,
        );
        t.push(lossy);
        let refs: Vec<Option<&Tail>> = t.iter().map(Some).collect();
        assert!(judge_one(&refs, 5, 1.0).unwrap().flagged);
        assert!(!judge_one(&refs, 5, 4.0).unwrap().flagged);
        assert!(judge_one(&refs, 5, 1.0).unwrap().clearly);
    }

    #[test]
    fn the_clock_does_not_charge_stalls_until_the_cap() {
        let mut c = TestClock::start(1000);
        c.note(20.0, 40.0);
        c.note(100_000.0, 200_000.0); // a stall: 5,000x the fastest, over the floor
        assert!(c.stalled_us == 200_000.0);
        c.note(30.0, 60.0);
        assert!(!c.spent() && !c.capped());
        // The healthy pace: 50 µs of wall time a sample, so 1 ms fits 20.
        assert_eq!(c.fit(1000.0), 20);
        // A test whose every sample is slow (a huge message) is charged for all of them.
        let mut big = TestClock::start(1000);
        big.note(50_000.0, 100_000.0);
        big.note(60_000.0, 120_000.0);
        assert_eq!(big.stalled_us, 0.0);
    }

    #[test]
    fn stalls_are_the_hosts_own_pauses_only_when_its_lost_time_covers_them() {
        // 10 round trips stalled 100 ms each (samples are half of them): 1.0 s one way, 2.0 s
        // of round trips.
        let t = tail(1000, 10);
        let excess = stall_excess_ms(&t, STALL_FLOOR_US, true);
        assert!(
            (excess - 2.0 * 10.0 * (100.0 - 0.02)).abs() < 0.5,
            "{excess}"
        );
        assert!((stall_excess_ms(&t, STALL_FLOOR_US, false) - excess / 2.0).abs() < 1e-9);
        // The group's healthy ranks lost 400 ms each; this one 1.5 s: its pauses explain
        // the 2 s of stalls (at least half), and 0.9 s would not.
        let w = |ms: f64| Some((ms, 2500.0));
        let group = |mine: f64| vec![w(400.0), w(mine), w(420.0), w(380.0)];
        assert!(paused_explains(&t, STALL_FLOOR_US, true, &group(1500.0), 1));
        assert!(!paused_explains(&t, STALL_FLOOR_US, true, &group(900.0), 1));
        // Lost time within twice the healthy level is any rank's on a shared machine, and a
        // rank with no figure is never said to pause.
        let busy_group = vec![w(900.0), w(1500.0), w(1000.0), w(950.0)];
        assert!(!paused_explains(&t, STALL_FLOOR_US, true, &busy_group, 1));
        // Lost time is weighed as a share of its wave: 1.5 s of a 10 s wave is no pause beside
        // healthy ranks' 400 ms of 2.5 s, and 1.2 s of a 1.3 s retest alone is one.
        let long = vec![w(400.0), Some((1500.0, 10_000.0)), w(420.0), w(380.0)];
        assert!(!paused_explains(&t, STALL_FLOOR_US, true, &long, 1));
        let alone = vec![w(400.0), Some((1200.0, 1300.0)), w(420.0), w(380.0)];
        assert!(paused_explains(&t, STALL_FLOOR_US, true, &alone, 1));
        assert!(!paused_explains(&t, STALL_FLOOR_US, true, &[None, None], 1));
        // A healthy tail with nothing stalled and nothing cut is never a pause.
        assert!(!paused_explains(
            &tail(1000, 0),
            STALL_FLOOR_US,
            true,
            &group(5000.0),
            1
        ));
    }
}
