//! A link's measured distribution as the price of its tail: each transfer over a pipeline link
//! takes its healthy time plus an excess drawn from the link's ping-pong samples at the
//! transfer's size (interpolated between the measured sizes), as `links` kept them
//! (links_hist.csv). The derivation of the draw is in docs/simulator.md ("Tails from a links run").

use std::path::Path;

use rand::Rng;

use crate::bench::links::tables::{LinkParams, LinksTable};
use crate::record::Line;
use crate::stats::hist::LogHist;

/// One pipeline link's ping-pong distributions (one-way µs: half a round trip), by size.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasuredLink {
    /// Link i joins stages i and i + 1.
    pub link: usize,
    /// The bytes each transfer over it carries.
    pub bytes: u64,
    /// The measured sizes around `bytes` (one, at or beyond the ends), with their
    /// distributions and medians, and the weight of the second.
    lower: (LogHist, f64),
    upper: Option<(LogHist, f64, f64)>,
    /// What it was drawn from, in words.
    pub why: String,
    /// Each send waits for its acknowledgement (the op times came from a `pipeline --comm
    /// inline` run): a transfer is a round trip that holds its sender ([`Self::draw_round_trip`]).
    pub sends_wait: bool,
}

impl MeasuredLink {
    /// From the distributions at each measured size; None without any.
    pub fn new(link: usize, bytes: u64, mut sizes: Vec<(u64, LogHist)>) -> Option<MeasuredLink> {
        sizes.retain(|(_, h)| h.count() > 0);
        sizes.sort_by_key(|(b, _)| *b);
        let median = |h: &LogHist| h.quantile(0.5).unwrap_or(0.0);
        let below = sizes.iter().rposition(|(b, _)| *b <= bytes);
        let (lower, upper) = match below {
            None => (0, None),
            Some(i) if i + 1 < sizes.len() && sizes[i].0 < bytes => (i, Some(i + 1)),
            Some(i) => (i, None),
        };
        let lo_bytes = sizes.get(lower)?.0;
        let upper = upper.map(|j| {
            let (hi_bytes, h) = &sizes[j];
            let w =
                (bytes as f64 / lo_bytes as f64).ln() / (*hi_bytes as f64 / lo_bytes as f64).ln();
            (h.clone(), median(h), w)
        });
        let n: u64 = sizes[lower].1.count() + upper.as_ref().map_or(0, |u| u.0.count());
        let at = match &upper {
            Some(_) => format!("{lo_bytes} B and {} B", sizes[lower + 1].0),
            None => format!("{lo_bytes} B"),
        };
        let why = format!("link {link}: {n} round trips at {at}, drawn at {bytes} B");
        let lo_hist = sizes.swap_remove(lower).1;
        let lo_median = median(&lo_hist);
        Some(MeasuredLink {
            link,
            bytes,
            lower: (lo_hist, lo_median),
            upper,
            why,
            sends_wait: false,
        })
    }

    /// Its name in sim_tail.csv's `stalls`: `LINK:measured@BYTESB`, or
    /// `LINK:measured_round_trip@BYTESB` where each send is held for its round trip.
    pub fn label(&self) -> String {
        if self.sends_wait {
            return format!("{}:measured_round_trip@{}B", self.link, self.bytes);
        }
        format!("{}:measured@{}B", self.link, self.bytes)
    }

    /// What it was drawn from, and how, in words.
    pub fn described(&self) -> String {
        if self.sends_wait {
            format!(
                "{}; each send held for its whole round trip (the op times came from a \
                 `pipeline --comm inline` run, whose sends wait for their acknowledgements)",
                self.why
            )
        } else {
            self.why.clone()
        }
    }

    /// One transfer's excess over its median (ms, never negative). A round trip crosses the
    /// link twice, so a drawn round trip's excess belongs to this transfer's direction half
    /// the time, and then all of it (in one-way units doubled): a stall keeps its length and
    /// its rate per crossing.
    pub fn draw(&self, rng: &mut impl Rng) -> f64 {
        let (out, _) = self.draw_round_trip(rng);
        out
    }

    /// One send that waits for its acknowledgement (a round trip, as the ping-pong's): its
    /// excess over the median (ms), as (the data's arrival, the sender's hold). The excess
    /// is on the data's way out half the time (both are late), else on the acknowledgement's
    /// way back (the sender alone is held).
    pub fn draw_round_trip(&self, rng: &mut impl Rng) -> (f64, f64) {
        let u: f64 = rng.gen();
        let out: bool = rng.gen();
        let excess = |(h, m): (&LogHist, f64)| h.quantile(u).map_or(0.0, |x| x - m);
        let lo = excess((&self.lower.0, self.lower.1));
        let e = match &self.upper {
            Some((h, m, w)) => lo * (1.0 - w) + excess((h, *m)) * w,
            None => lo,
        };
        let e = (2.0 * e).max(0.0) / 1e3;
        (if out { e } else { 0.0 }, e)
    }
}

/// The measured links of a pipeline in launcher order (stage i on rank i): each link's
/// ping-pong rows over `transport`, both ways and every retest merged by size. Empty for a run
/// that kept no distributions (written before links_hist.csv).
pub fn measured_links(
    dir: &Path,
    transport: &str,
    bytes: u64,
) -> anyhow::Result<Vec<MeasuredLink>> {
    let hists = crate::bench::links::hist::read(dir)?;
    if hists.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<Line<LinksTable>> = crate::record::read_table(&dir.join("links.csv"))?;
    let ranks = rows
        .iter()
        .map(|l| l.params.src_rank.max(l.params.dst_rank) + 1)
        .max()
        .unwrap_or(0);
    let on = |p: &LinkParams, a: u32| {
        (p.src_rank.min(p.dst_rank), p.src_rank.max(p.dst_rank)) == (a, a + 1)
            && p.direction == "pingpong"
            && p.transport == transport
    };
    let mut out = Vec::new();
    for a in 0..ranks.saturating_sub(1) {
        let mut sizes: Vec<(u64, LogHist)> = Vec::new();
        // A case's passes are merged already: each case counts once.
        let mut taken = std::collections::BTreeSet::new();
        for l in rows.iter().filter(|l| on(&l.params, a)) {
            let Some(h) = hists.get(&l.lead.case) else {
                continue;
            };
            if !taken.insert(&l.lead.case) {
                continue;
            }
            match sizes.iter_mut().find(|(b, _)| *b == l.params.bytes) {
                Some((_, merged)) => merged.merge(h),
                None => sizes.push((l.params.bytes, h.clone())),
            }
        }
        out.extend(MeasuredLink::new(a as usize, bytes, sizes));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn link(sizes: Vec<(u64, Vec<f64>)>, bytes: u64) -> MeasuredLink {
        let sizes = sizes
            .into_iter()
            .map(|(b, s)| (b, LogHist::of(&s)))
            .collect();
        MeasuredLink::new(0, bytes, sizes).unwrap()
    }

    fn draws(l: &MeasuredLink, n: usize) -> Vec<f64> {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        (0..n).map(|_| l.draw(&mut rng)).collect()
    }

    #[test]
    fn a_stall_keeps_its_length_and_half_its_round_trip_rate() {
        // 4% of round trips stalled by 200 ms (100 ms one way): 2% of crossings stall 200 ms.
        let mut s = vec![20.0; 960];
        s.extend(vec![100_020.0; 40]);
        let d = draws(&link(vec![(8, s)], 8), 100_000);
        let stalled = d.iter().filter(|&&x| x > 100.0).count() as f64 / d.len() as f64;
        assert!((stalled - 0.02).abs() < 0.003, "{stalled}");
        let long = d.iter().copied().fold(0.0, f64::max);
        assert!((long / 200.0 - 1.0).abs() < 0.05, "{long} ms");
        assert!(d.iter().all(|&x| x >= 0.0));
    }

    #[test]
    fn a_send_that_waits_for_its_acknowledgement_meets_every_stall_of_its_round_trip() {
        // 4% of round trips stalled by 200 ms: such a send is held on 4% of its draws, and
        // its data is late on half of those (the stall was on the way out).
        let mut s = vec![20.0; 960];
        s.extend(vec![100_020.0; 40]);
        let l = link(vec![(8, s)], 8);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let d: Vec<(f64, f64)> = (0..100_000).map(|_| l.draw_round_trip(&mut rng)).collect();
        let share = |f: fn(&(f64, f64)) -> bool| d.iter().filter(|x| f(x)).count() as f64 / 1e5;
        assert!((share(|x| x.1 > 100.0) - 0.04).abs() < 0.004);
        assert!((share(|x| x.0 > 100.0) - 0.02).abs() < 0.003);
        assert!(d.iter().all(|&(a, h)| a == 0.0 || a == h));
        // The one-way draw is the arrival half of it, on the same luck.
        let mut one = rand::rngs::SmallRng::seed_from_u64(7);
        assert!(d[..1000].iter().all(|x| x.0 == l.draw(&mut one)));
    }

    #[test]
    fn a_link_whose_sends_wait_says_so_in_its_label_and_its_words() {
        let mut l = link(vec![(8, vec![20.0; 100])], 8);
        assert_eq!(l.label(), "0:measured@8B");
        assert_eq!(l.described(), l.why);
        l.sends_wait = true;
        assert_eq!(l.label(), "0:measured_round_trip@8B");
        let words = l.described();
        assert!(words.contains("held for its whole round trip"), "{words}");
    }

    #[test]
    fn a_size_between_two_measured_is_interpolated_and_ends_are_held() {
        // No excess at 8 B; at 1 MiB half the round trips are 10 ms (one way) over the median.
        let mut big = vec![100.0; 500];
        big.extend(vec![10_100.0; 500]);
        let small = vec![10.0; 1000];
        let mid = link(vec![(8, small.clone()), (1 << 20, big.clone())], 2896);
        let d = draws(&mid, 20_000);
        let max = d.iter().copied().fold(0.0, f64::max);
        // ln(2896/8) / ln(131072) = 0.5: half the big size's excess (2 x 10 ms, halved).
        assert!(max > 5.0 && max < 15.0, "{max}");
        assert!(mid.why.contains("8 B and 1048576 B"), "{}", mid.why);
        let beyond = link(vec![(8, small), (1 << 20, big)], 1 << 30);
        assert!(beyond.why.contains("at 1048576 B,"), "{}", beyond.why);
        assert!(MeasuredLink::new(0, 8, vec![]).is_none());
    }

    /// A links run of ranks 0, 1, 2 with links.csv and links_hist.csv: each pair's ping-pong
    /// at 8 B and 64 KiB, both ways; link 1's 64 KiB round trips stall 2% of the time by 30 ms.
    fn links_run() -> tempfile::TempDir {
        use crate::bench::links::tables::pingpong_line;
        let dir = tempfile::tempdir().unwrap();
        let mut lines = Vec::new();
        for (a, b) in [(0u32, 1u32), (1, 2), (2, 1)] {
            for bytes in [8u64, 65536] {
                let mut samples = vec![50.0; 1000];
                if (a.min(b), bytes) == (1, 65536) {
                    samples[..20].fill(30_000.0);
                }
                lines.push(pingpong_line(a, b, bytes, &samples));
            }
        }
        crate::bench::links::hist::write_run(dir.path(), &lines).unwrap();
        dir
    }

    #[test]
    fn a_links_run_gives_each_pipeline_link_its_distributions_both_ways_merged() {
        let dir = links_run();
        let links = measured_links(dir.path(), "tcp", 4096).unwrap();
        assert_eq!(links.iter().map(|l| l.link).collect::<Vec<_>>(), [0, 1]);
        let stalled = &links[1];
        assert!(
            stalled.why.contains("4000 round trips at 8 B and 65536 B"),
            "{}",
            stalled.why
        );
        // At 4 KiB, 9/13 of the way from 8 B to 64 KiB in log size: the 60 ms stall, so
        // weighted, on 1% of crossings (2% of round trips, one crossing in two).
        let d = draws(stalled, 50_000);
        let share = d.iter().filter(|&&x| x > 1.0).count() as f64 / d.len() as f64;
        assert!((share - 0.01).abs() < 0.002, "{share}");
        let w = (4096f64 / 8.0).ln() / (65536f64 / 8.0).ln();
        let long = d.iter().copied().fold(0.0, f64::max);
        assert!(
            (long / (60.0 * w) - 1.0).abs() < 0.05,
            "{long} vs {}",
            60.0 * w
        );
        assert!(draws(&links[0], 1000).iter().all(|&x| x < 0.01));
        assert!(measured_links(dir.path(), "rdma", 4096).unwrap().is_empty());
    }

    #[test]
    fn a_retest_written_twice_reads_back_merged_and_counts_once() {
        use crate::bench::links::tables::pingpong_line;
        let dir = tempfile::tempdir().unwrap();
        let first = pingpong_line(0, 1, 8, &[50.0; 1000]);
        let retest = format!("{}_retest", first.lead.case);
        let mut lines = vec![first];
        // Two passes of one retest, in the same buckets (a reader that took a case for one
        // histogram refused the second pass's buckets as repeated).
        for _ in 0..2 {
            let samples: Vec<f64> = (0..500).map(|i| [40.0, 60.0][i % 2]).collect();
            let mut again = pingpong_line(0, 1, 8, &samples);
            again.lead.case = retest.clone();
            lines.push(again);
        }
        crate::bench::links::hist::write_run(dir.path(), &lines).unwrap();
        let hists = crate::bench::links::hist::read(dir.path()).unwrap();
        assert_eq!(hists[&retest].count(), 1000);
        let links = measured_links(dir.path(), "tcp", 8).unwrap();
        assert!(
            links[0].why.contains("2000 round trips"),
            "{}",
            links[0].why
        );
    }
}
