//! A distribution kept small and mergeable: counts in logarithmic buckets, 16 to an octave
//! (each 4.4% wide), from 0.01 µs to about 10^10 µs (3 hours). Kept instead of the samples because
//! a links run at 4,096 ranks measures millions of round trips, and a bucket's width is far
//! under what a tail's price needs (a retransmission timeout is 200 ms against a p50 of tens
//! of µs). Two histograms of one link merge by adding counts. docs/simulator.md ("Tails from a links run") says more.

use serde::{Deserialize, Serialize};

/// Buckets to an octave.
pub const PER_OCTAVE: f64 = 16.0;
/// The lower edge of bucket 0 (µs): every value at or under it falls in bucket 0.
pub const BASE_US: f64 = 0.01;
/// The bucket count: 40 octaves over [`BASE_US`]; values past the last fall in it.
pub const BUCKETS: u16 = 640;

/// Bucket index and count, by index, counts above zero.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LogHist(Vec<(u16, u32)>);

/// The bucket of a value (µs).
pub fn bucket_of(x: f64) -> u16 {
    if x.is_nan() || x <= BASE_US {
        return 0;
    }
    let i = (PER_OCTAVE * (x / BASE_US).log2()).floor();
    (i as u64).min(BUCKETS as u64 - 1) as u16
}

/// The lower edge of bucket `i` (µs).
pub fn lower_edge(i: u16) -> f64 {
    BASE_US * (i as f64 / PER_OCTAVE).exp2()
}

impl LogHist {
    pub fn of(samples: &[f64]) -> LogHist {
        let mut counts = std::collections::BTreeMap::<u16, u32>::new();
        for &x in samples {
            *counts.entry(bucket_of(x)).or_default() += 1;
        }
        LogHist(counts.into_iter().collect())
    }

    /// From (bucket, count) pairs as read back, checked: buckets in range, each once, counts
    /// above zero.
    pub fn from_buckets(mut pairs: Vec<(u16, u32)>) -> anyhow::Result<LogHist> {
        pairs.sort_unstable();
        let h = LogHist(pairs);
        h.check()?;
        Ok(h)
    }

    pub fn buckets(&self) -> &[(u16, u32)] {
        &self.0
    }

    pub fn count(&self) -> u64 {
        self.0.iter().map(|&(_, c)| c as u64).sum()
    }

    /// Why it is not one this module makes (from a peer, or a file).
    pub fn check(&self) -> anyhow::Result<()> {
        if self.0.len() > BUCKETS as usize {
            return Err(anyhow::anyhow!("{} buckets, over {BUCKETS}", self.0.len()));
        }
        for w in self.0.windows(2) {
            if w[0].0 >= w[1].0 {
                return Err(anyhow::anyhow!("bucket {} out of order or twice", w[1].0));
            }
        }
        match self.0.iter().find(|&&(i, c)| i >= BUCKETS || c == 0) {
            Some((i, c)) => Err(anyhow::anyhow!("bucket {i} with count {c}")),
            None => Ok(()),
        }
    }

    /// Adds `other`'s counts.
    pub fn merge(&mut self, other: &LogHist) {
        let mut all: std::collections::BTreeMap<u16, u32> = self.0.iter().copied().collect();
        for &(i, c) in &other.0 {
            let e = all.entry(i).or_default();
            *e = e.saturating_add(c);
        }
        self.0 = all.into_iter().collect();
    }

    /// The value at quantile `q` in [0, 1]: the bucket holding it, and within it geometric
    /// interpolation by rank (the buckets are logarithmic). None when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let target = q.clamp(0.0, 1.0) * n as f64;
        let mut below = 0.0;
        for &(i, c) in &self.0 {
            let c = c as f64;
            if below + c >= target {
                let within = ((target - below) / c).clamp(0.0, 1.0);
                let (lo, hi) = (lower_edge(i), lower_edge(i + 1));
                return Some(lo * (hi / lo).powf(within));
            }
            below += c;
        }
        self.0.last().map(|&(i, _)| lower_edge(i + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_a_bucket_of_the_samples() {
        let samples: Vec<f64> = (1..=1000).map(|i| 10.0 + i as f64 * 0.1).collect();
        let h = LogHist::of(&samples);
        assert_eq!(h.count(), 1000);
        for (q, want) in [(0.5, 60.0), (0.9, 100.0), (0.99, 109.0)] {
            let got = h.quantile(q).unwrap();
            assert!((got / want - 1.0).abs() < 0.045, "q{q}: {got} vs {want}");
        }
        assert_eq!(LogHist::default().quantile(0.5), None);
    }

    #[test]
    fn a_tail_keeps_its_share_and_its_length() {
        // 2% of round trips stalled by a 200 ms retransmission timeout.
        let mut s = vec![30.0; 980];
        s.extend(vec![200_030.0; 20]);
        let h = LogHist::of(&s);
        assert!((h.quantile(0.5).unwrap() / 30.0 - 1.0).abs() < 0.045);
        assert!((h.quantile(0.99).unwrap() / 200_030.0 - 1.0).abs() < 0.045);
        assert!(h.quantile(0.97).unwrap() < 32.0);
    }

    #[test]
    fn merging_adds_counts_and_bad_buckets_are_refused() {
        let mut a = LogHist::of(&[1.0, 2.0]);
        a.merge(&LogHist::of(&[2.0, 1e6, f64::INFINITY, -3.0]));
        assert_eq!(a.count(), 6);
        a.check().unwrap();
        assert_eq!(bucket_of(f64::INFINITY), BUCKETS - 1);
        assert_eq!(bucket_of(-3.0), 0);
        assert!(LogHist::from_buckets(vec![(3, 1), (3, 2)]).is_err());
        assert!(LogHist::from_buckets(vec![(BUCKETS, 1)]).is_err());
        assert!(LogHist::from_buckets(vec![(4, 0)]).is_err());
        assert_eq!(
            LogHist::from_buckets(vec![(9, 2), (4, 1)]).unwrap().count(),
            3
        );
    }
}
