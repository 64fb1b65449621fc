//! The tests behind a verdict: Welch's t-test from two rows' n, mean and standard deviation,
//! Mann-Whitney U on raw samples, a confidence interval for the ratio of medians, and the
//! robust z-score (median absolute deviation) for fleets.

use crate::stats::robust::{mad, median, median_in_place, modified_z};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use statrs::distribution::{ContinuousCDF, Normal, StudentsT};

use crate::stats::percentile_sorted;
pub use crate::stats::Moments;

fn normal() -> Normal {
    Normal::new(0.0, 1.0).expect("the standard normal")
}

/// Two-sided p-value of Welch's unequal-variances t-test; `None` when either side has fewer
/// than two samples (no variance to test against).
pub fn welch_p(a: Moments, b: Moments) -> Option<f64> {
    if a.n < 2 || b.n < 2 {
        return None;
    }
    let (va, vb) = (
        a.stddev * a.stddev / a.n as f64,
        b.stddev * b.stddev / b.n as f64,
    );
    let se2 = va + vb;
    if se2 <= 0.0 {
        // No spread on either side: the means either are the same or differ for certain.
        return Some(if a.mean == b.mean { 1.0 } else { 0.0 });
    }
    let t = (a.mean - b.mean) / se2.sqrt();
    // Welch–Satterthwaite degrees of freedom.
    let df = se2 * se2 / (va * va / (a.n - 1) as f64 + vb * vb / (b.n - 1) as f64);
    let dist = StudentsT::new(0.0, 1.0, df.max(1.0)).ok()?;
    Some((2.0 * (1.0 - dist.cdf(t.abs()))).clamp(0.0, 1.0))
}

/// Two-sided p-value of the Mann-Whitney U test (normal approximation with tie and continuity
/// corrections, as scipy's `mannwhitneyu(method="asymptotic")`); `None` when either side is
/// empty.
pub fn mann_whitney_p(a: &[f64], b: &[f64]) -> Option<f64> {
    let (n1, n2) = (a.len(), b.len());
    if n1 == 0 || n2 == 0 {
        return None;
    }
    let mut all: Vec<(f64, bool)> = a
        .iter()
        .map(|&x| (x, true))
        .chain(b.iter().map(|&x| (x, false)))
        .collect();
    all.sort_by(|x, y| x.0.total_cmp(&y.0));
    let n = all.len();
    // Average ranks over ties; collect the tie term for the variance.
    let (mut rank_sum_a, mut ties) = (0.0, 0.0);
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        let t = (j - i + 1) as f64;
        let rank = (i + j) as f64 / 2.0 + 1.0;
        rank_sum_a += rank * all[i..=j].iter().filter(|e| e.1).count() as f64;
        ties += t * t * t - t;
        i = j + 1;
    }
    let (n1f, n2f, nf) = (n1 as f64, n2 as f64, n as f64);
    let u = rank_sum_a - n1f * (n1f + 1.0) / 2.0;
    let mu = n1f * n2f / 2.0;
    let var = n1f * n2f / 12.0 * ((nf + 1.0) - ties / (nf * (nf - 1.0)).max(1.0));
    if var <= 0.0 {
        return Some(1.0);
    }
    let z = ((u - mu).abs() - 0.5).max(0.0) / var.sqrt();
    Some((2.0 * (1.0 - normal().cdf(z))).clamp(0.0, 1.0))
}

/// Benjamini-Hochberg adjusted p-values (q-values), in the order given: a figure is
/// significant at false discovery rate alpha when its q < alpha.
pub fn benjamini_hochberg(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    let mut q = vec![1.0; m];
    let mut running = 1.0f64;
    for (rank, &i) in order.iter().enumerate().rev() {
        running = running.min(p[i] * m as f64 / (rank + 1) as f64);
        q[i] = running.min(1.0);
    }
    q
}

/// The two-sided normal quantile for a confidence level `1 - alpha`.
fn z_for(alpha: f64) -> f64 {
    normal().inverse_cdf(1.0 - alpha / 2.0)
}

/// A `1 - alpha` interval for median(b) / median(a) from summary rows: the log ratio's
/// standard error by the delta method, with a median's standard error taken as
/// sqrt(pi/2) · s / sqrt(n) (its large-sample value for normal samples).
pub fn ratio_ci_from_moments(
    a: Moments,
    med_a: f64,
    b: Moments,
    med_b: f64,
    alpha: f64,
) -> Option<(f64, f64)> {
    if a.n < 2 || b.n < 2 || med_a <= 0.0 || med_b <= 0.0 {
        return None;
    }
    let se_med = |m: Moments| (std::f64::consts::PI / 2.0).sqrt() * m.stddev / (m.n as f64).sqrt();
    let se_log = ((se_med(a) / med_a).powi(2) + (se_med(b) / med_b).powi(2)).sqrt();
    let r = med_b / med_a;
    let w = (z_for(alpha) * se_log).exp();
    Some((r / w, r * w))
}

/// A `1 - alpha` percentile-bootstrap interval for median(b) / median(a) from raw samples,
/// seeded so the same inputs give the same interval.
pub fn ratio_ci_bootstrap(a: &[f64], b: &[f64], alpha: f64, seed: u64) -> Option<(f64, f64)> {
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    // Bound the work: at most about 2e7 samples drawn, at least 200 resamples.
    let resamples = (20_000_000 / (a.len() + b.len())).clamp(200, 2000);
    let mut rng = SmallRng::seed_from_u64(seed);
    let (mut ra, mut rb) = (vec![0.0; a.len()], vec![0.0; b.len()]);
    let mut ratios = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        for x in ra.iter_mut() {
            *x = a[rng.gen_range(0..a.len())];
        }
        for x in rb.iter_mut() {
            *x = b[rng.gen_range(0..b.len())];
        }
        let (ma, mb) = (median_in_place(&mut ra), median_in_place(&mut rb));
        if ma > 0.0 {
            ratios.push(mb / ma);
        }
    }
    if ratios.len() < resamples / 2 {
        return None;
    }
    ratios.sort_by(f64::total_cmp);
    Some((
        percentile_sorted(&ratios, alpha / 2.0),
        percentile_sorted(&ratios, 1.0 - alpha / 2.0),
    ))
}

/// The median and the modified z-score of every value against it (Iglewicz and Hoaglin:
/// 0.6745 (x - median) / MAD). With a MAD of zero, a value off the median is infinitely far.
pub fn robust_z(values: &[f64]) -> (f64, Vec<f64>) {
    let med = median(values);
    let mad = mad(values, med, median);
    (
        med,
        values.iter().map(|&x| modified_z(x, med, mad)).collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(n: usize, mean: f64, stddev: f64) -> Moments {
        Moments { n, mean, stddev }
    }

    #[test]
    fn welch_matches_a_textbook_case() {
        // By hand: t = -2 / sqrt(0.4 + 0.75) = -1.865, df = 1.15^2 / (0.4^2/9 + 0.75^2/11)
        // = 19.19, and a two-sided t(19.19) tail at 1.865 is 0.0776.
        let p = welch_p(m(10, 20.0, 2.0), m(12, 22.0, 3.0)).unwrap();
        assert!((p - 0.0776).abs() < 1e-3, "{p}");
        assert_eq!(welch_p(m(1, 1.0, 0.0), m(5, 2.0, 1.0)), None);
        assert_eq!(welch_p(m(5, 1.0, 0.0), m(5, 1.0, 0.0)), Some(1.0));
        assert_eq!(welch_p(m(5, 1.0, 0.0), m(5, 2.0, 0.0)), Some(0.0));
    }

    #[test]
    fn mann_whitney_matches_a_hand_computation() {
        // By hand: a's ranks are 1, 2, 3, 5, 6, so U = 17 - 15 = 2; mu = 12.5, sigma =
        // sqrt(25 * 11 / 12) = 4.787; z = (10.5 - 0.5) / 4.787 = 2.089; p = 0.0367.
        let a = [1.0, 2.0, 3.0, 4.0, 5.0];
        let b = [3.5, 6.0, 7.0, 8.0, 9.0];
        let p = mann_whitney_p(&a, &b).unwrap();
        assert!((p - 0.0367).abs() < 1e-3, "{p}");
        // Identical samples: nothing to tell apart.
        assert_eq!(mann_whitney_p(&[2.0; 6], &[2.0; 6]), Some(1.0));
        // Fully separated samples of 20 are far below 0.01.
        let lo: Vec<f64> = (0..20).map(|i| 100.0 + i as f64).collect();
        let hi: Vec<f64> = (0..20).map(|i| 200.0 + i as f64).collect();
        assert!(mann_whitney_p(&lo, &hi).unwrap() < 1e-6);
    }

    #[test]
    fn ratio_intervals_cover_the_true_ratio() {
        let a: Vec<f64> = (0..50).map(|i| 100.0 + (i % 10) as f64).collect();
        let b: Vec<f64> = a.iter().map(|x| x * 1.2).collect();
        let (lo, hi) = ratio_ci_bootstrap(&a, &b, 0.01, 7).unwrap();
        assert!(lo <= 1.2 && 1.2 <= hi && hi - lo < 0.1, "{lo} {hi}");
        // The same seed gives the same interval.
        assert_eq!(ratio_ci_bootstrap(&a, &b, 0.01, 7), Some((lo, hi)));
        let (lo, hi) =
            ratio_ci_from_moments(m(50, 104.5, 2.9), 104.5, m(50, 125.4, 3.5), 125.4, 0.01)
                .unwrap();
        assert!(lo < 1.2 && 1.2 < hi && hi - lo < 0.1, "{lo} {hi}");
    }

    #[test]
    fn benjamini_hochberg_matches_r() {
        // R: p.adjust(c(0.01, 0.04, 0.03, 0.5), "BH") = 0.04 0.0533 0.0533 0.5
        let q = benjamini_hochberg(&[0.01, 0.04, 0.03, 0.5]);
        let want = [0.04, 0.04 * 4.0 / 3.0, 0.04 * 4.0 / 3.0, 0.5];
        for (a, b) in q.iter().zip(want) {
            assert!((a - b).abs() < 1e-12, "{q:?}");
        }
        assert!(benjamini_hochberg(&[]).is_empty());
    }

    #[test]
    fn robust_z_flags_the_odd_one_out() {
        let (med, z) = robust_z(&[10.0, 10.2, 9.9, 10.1, 14.0]);
        assert_eq!(med, 10.1);
        assert!(z[4] > 3.5 && z[..4].iter().all(|z| z.abs() < 3.5), "{z:?}");
        let (_, z) = robust_z(&[1.0, 1.0, 1.0, 2.0]);
        assert_eq!(z[3], f64::INFINITY);
    }
}
