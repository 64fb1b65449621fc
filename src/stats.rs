//! Summary statistics over timing samples.
//!
//! Percentiles use linear interpolation between closest ranks (Hyndman & Fan type 7, the
//! default of numpy and R): for sorted samples x[0..n) and p in [0, 1], h = (n - 1) p,
//! q = x[floor(h)] + (h - floor(h)) (x[floor(h) + 1] - x[floor(h)]).
//! The standard deviation is the sample one (n - 1 denominator); the 95% confidence interval
//! of the mean is mean ± t(0.975, n - 1) · s / sqrt(n) with Student's t from statrs.

pub mod hist;

use statrs::distribution::{ContinuousCDF, StudentsT};
use statrs::statistics::Statistics;

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    pub n: usize,
    pub mean: f64,
    pub stddev: f64,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    /// Coefficient of variation: stddev / mean (0 when the mean is 0).
    pub cv: f64,
    pub ci95_lo: f64,
    pub ci95_hi: f64,
}

/// n, mean and sample standard deviation of one row's samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Moments {
    pub n: usize,
    pub mean: f64,
    pub stddev: f64,
}

/// Type-7 percentile of already sorted samples; `p` in [0, 1].
pub fn percentile_sorted(sorted: &[f64], p: f64) -> f64 {
    assert!(!sorted.is_empty(), "percentile of no samples");
    let h = (sorted.len() - 1) as f64 * p.clamp(0.0, 1.0);
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

/// Robust statistics, in one place: the median, the median absolute deviation (MAD) and
/// Iglewicz and Hoaglin's modified z-score, 0.6745 (x - median) / MAD, which `check --fleet`,
/// the links' flags and the noisy-row warnings all judge outliers by.
pub mod robust {
    use super::percentile_sorted;

    /// 1.4826 MAD estimates the standard deviation of normal data.
    pub const MAD_TO_SIGMA: f64 = 1.4826;
    /// 0.6745 = 1 / 1.4826: the modified z-score's scale.
    pub const Z_SCALE: f64 = 0.6745;

    /// The median (type-7: the mean of the middle two for an even count), sorting in place.
    pub fn median_in_place(xs: &mut [f64]) -> f64 {
        xs.sort_by(f64::total_cmp);
        percentile_sorted(xs, 0.5)
    }

    /// The median of `values`.
    pub fn median(values: &[f64]) -> f64 {
        median_in_place(&mut values.to_vec())
    }

    /// The lower median: the middle value, or the lower of the middle two. Always one of the
    /// values, so a group's baseline is a member's measurement.
    pub fn lower_median(values: &[f64]) -> f64 {
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        v[(v.len() - 1) / 2]
    }

    /// The median absolute deviation of `values` from `center`, by `middle` (median or lower
    /// median).
    pub fn mad(values: &[f64], center: f64, middle: fn(&[f64]) -> f64) -> f64 {
        let dev: Vec<f64> = values.iter().map(|x| (x - center).abs()).collect();
        middle(&dev)
    }

    /// The modified z-score of `x` against `center` and `mad`. With a MAD of zero (the others
    /// agree exactly) a value off the center is infinitely far.
    pub fn modified_z(x: f64, center: f64, mad: f64) -> f64 {
        if x == center {
            0.0
        } else if mad > 0.0 {
            Z_SCALE * (x - center) / mad
        } else {
            f64::INFINITY.copysign(x - center)
        }
    }
}

impl Summary {
    /// Summarises samples; `None` when there are none or any is not finite.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() || samples.iter().any(|x| !x.is_finite()) {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let mean = sorted.iter().mean();
        let stddev = if n > 1 { sorted.iter().std_dev() } else { 0.0 };
        let half_width = if n > 1 {
            let t = StudentsT::new(0.0, 1.0, (n - 1) as f64)
                .expect("n - 1 >= 1 degrees of freedom")
                .inverse_cdf(0.975);
            t * stddev / (n as f64).sqrt()
        } else {
            0.0
        };
        Some(Summary {
            n,
            mean,
            stddev,
            min: sorted[0],
            p50: percentile_sorted(&sorted, 0.50),
            p90: percentile_sorted(&sorted, 0.90),
            p99: percentile_sorted(&sorted, 0.99),
            p999: percentile_sorted(&sorted, 0.999),
            max: sorted[n - 1],
            cv: if mean != 0.0 { stddev / mean } else { 0.0 },
            ci95_lo: mean - half_width,
            ci95_hi: mean + half_width,
        })
    }
}

/// A trend over equally spaced samples (one an iteration): Theil and Sen's slope (the median
/// of the slopes between every pair of samples, unmoved by one outlier) and Mann and Kendall's
/// test of whether there is one at all (S = concordant minus discordant pairs; its exact null
/// distribution counts the permutations of n samples by their inversions).
pub mod trend {
    use super::robust::median_in_place;

    /// The slope per sample, None for fewer than two samples or a non-finite one.
    pub fn theil_sen(ys: &[f64]) -> Option<f64> {
        if ys.len() < 2 || ys.iter().any(|y| !y.is_finite()) {
            return None;
        }
        let mut slopes = Vec::with_capacity(ys.len() * (ys.len() - 1) / 2);
        for i in 0..ys.len() {
            for j in i + 1..ys.len() {
                slopes.push((ys[j] - ys[i]) / (j - i) as f64);
            }
        }
        Some(median_in_place(&mut slopes))
    }

    /// Two-sided p-value of Mann and Kendall's test for no trend, exact (ties count as
    /// neither concordant nor discordant, which makes it conservative); None for fewer than
    /// three samples or more than 64, or a non-finite one.
    pub fn mann_kendall_p(ys: &[f64]) -> Option<f64> {
        let n = ys.len();
        if !(3..=64).contains(&n) || ys.iter().any(|y| !y.is_finite()) {
            return None;
        }
        let mut s: i64 = 0;
        for i in 0..n {
            for j in i + 1..n {
                s += (ys[j] - ys[i]).partial_cmp(&0.0).map_or(0, |o| o as i64);
            }
        }
        // Permutations of n by inversions k (Mahonian numbers): S = pairs - 2k.
        let pairs = n * (n - 1) / 2;
        let mut count = vec![1.0f64];
        for m in 2..=n {
            let mut next = vec![0.0; count.len() + m - 1];
            for (k, c) in count.iter().enumerate() {
                for extra in 0..m {
                    next[k + extra] += c;
                }
            }
            count = next;
        }
        let total: f64 = count.iter().sum();
        let at_least = count
            .iter()
            .enumerate()
            .filter(|(k, _)| (pairs as i64 - 2 * *k as i64).abs() >= s.abs())
            .map(|(_, c)| c)
            .sum::<f64>();
        Some((at_least / total).min(1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn known_data() {
        // 1..=10: mean 5.5, sample sd sqrt(55/6), numpy percentiles p50 5.5, p90 9.1, p99 9.91.
        let xs: Vec<f64> = (1..=10).map(f64::from).collect();
        let s = Summary::of(&xs).unwrap();
        assert_eq!(s.n, 10);
        assert!(close(s.mean, 5.5));
        assert!(close(s.stddev, (55.0f64 / 6.0).sqrt()));
        assert!(close(s.min, 1.0) && close(s.max, 10.0));
        assert!(close(s.p50, 5.5));
        assert!(close(s.p90, 9.1));
        assert!(close(s.p99, 9.91));
        assert!(close(s.p999, 9.991));
        assert!(close(s.cv, s.stddev / 5.5));
        // t(0.975, 9) = 2.262157...
        let hw = 2.2621571627982 * s.stddev / 10f64.sqrt();
        assert!((s.ci95_lo - (5.5 - hw)).abs() < 1e-6);
        assert!((s.ci95_hi - (5.5 + hw)).abs() < 1e-6);
    }

    #[test]
    fn order_does_not_matter_and_single_sample() {
        let a = Summary::of(&[3.0, 1.0, 2.0]).unwrap();
        let b = Summary::of(&[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(a, b);
        let one = Summary::of(&[7.0]).unwrap();
        assert_eq!(
            (one.p50, one.p99, one.stddev, one.ci95_lo),
            (7.0, 7.0, 0.0, 7.0)
        );
    }

    #[test]
    fn a_trend_is_the_median_pairwise_slope_and_its_test_is_exact() {
        // Slopes of 1, 2, 4, 3, 5: pairs give 1, 1.5, 2/3, 1, 2, 1/2, 1, -1, 0.5, 2 -> median 1.
        assert_eq!(trend::theil_sen(&[1.0, 2.0, 4.0, 3.0, 5.0]), Some(1.0));
        // One wild sample does not move it.
        assert_eq!(trend::theil_sen(&[10.0, 11.0, 90.0, 13.0, 14.0]), Some(1.0));
        assert_eq!(trend::theil_sen(&[1.0]), None);
        // Five rising samples: S = 10, one permutation in 120 does that, and one falls as far.
        let p = trend::mann_kendall_p(&[1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
        assert!(close(p, 2.0 / 120.0), "{p}");
        // One pair out of order: S = 8; 1 + 4 permutations reach |S| >= 8 each way.
        let p = trend::mann_kendall_p(&[1.0, 2.0, 4.0, 3.0, 5.0]).unwrap();
        assert!(close(p, 10.0 / 120.0), "{p}");
        // No order at all: S = 0, every permutation is at least that far.
        let p = trend::mann_kendall_p(&[2.0, 1.0, 3.0, 5.0, 4.0, 0.0]).unwrap();
        assert!(p > 0.5, "{p}");
        assert_eq!(trend::mann_kendall_p(&[1.0, 2.0]), None);
    }

    #[test]
    fn rejects_empty_and_non_finite() {
        assert!(Summary::of(&[]).is_none());
        assert!(Summary::of(&[1.0, f64::NAN]).is_none());
    }
}
