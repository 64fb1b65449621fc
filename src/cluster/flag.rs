//! Which links (or nodes) are slow. A figure's slowdown is its time over the baseline of its
//! group (links of one transport, size and kind; nodes for one metric); it is flagged when the
//! slowdown is at least [`SLOW_THRESHOLD`] (PipeMorph's threshold for a slow stage) and it is an
//! outlier by the modified z-score of the median absolute deviation, above [`Z_THRESHOLD`] (as
//! hyperfine flags outliers), and its fastest sample is also at least [`SLOW_THRESHOLD`] times
//! the group's fastest (by the same baseline): a link that is sometimes as fast as the others
//! is shared or noisy, not slow, and on a busy machine a tail of slow samples can move a
//! median.
//!
//! The baseline is the *lower* median. In a small cluster one bad host touches half of the
//! links (3 of the 6 links of 4 ranks), and the plain median of an even count is then the
//! midpoint between the healthy and the slow level, which hides both. The lower median stays
//! on the healthy level as long as at most half of the group is slow; with an odd count it is
//! the median.

/// A slowdown at or above this can be flagged.
pub const SLOW_THRESHOLD: f64 = 1.35;
/// A modified z-score above this is an outlier (Iglewicz and Hoaglin).
pub const Z_THRESHOLD: f64 = 3.5;
/// Fewer members than this and nothing is called an outlier: there is no spread to judge by.
pub const MIN_GROUP: usize = 3;

/// One member's verdict.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verdict {
    /// Time over the group's baseline.
    pub slowdown: f64,
    /// Modified z-score: 0.6745 (x - baseline) / MAD (infinite when the MAD is 0 and x is
    /// above the baseline).
    pub z: f64,
    pub flagged: bool,
}

fn lower_median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v[(v.len() - 1) / 2]
}

/// The verdict of every member of one group, in order, from each member's typical time (p50)
/// and fastest time (min); larger is slower.
pub fn judge(times: &[f64], fastest: &[f64]) -> Vec<Verdict> {
    assert_eq!(times.len(), fastest.len(), "one fastest time per member");
    if times.is_empty() {
        return Vec::new();
    }
    let base = lower_median(times);
    let base_fastest = lower_median(fastest);
    let deviations: Vec<f64> = times.iter().map(|t| (t - base).abs()).collect();
    let mad = lower_median(&deviations);
    times
        .iter()
        .zip(fastest)
        .map(|(&t, &f)| {
            let slowdown = if base > 0.0 { t / base } else { 1.0 };
            let z = if mad > 0.0 {
                0.6745 * (t - base) / mad
            } else if t > base {
                f64::INFINITY
            } else {
                0.0
            };
            Verdict {
                slowdown,
                z,
                flagged: times.len() >= MIN_GROUP
                    && slowdown >= SLOW_THRESHOLD
                    && z > Z_THRESHOLD
                    && (base_fastest <= 0.0 || f / base_fastest >= SLOW_THRESHOLD),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flagged(times: &[f64]) -> Vec<usize> {
        judge(times, times)
            .iter()
            .enumerate()
            .filter(|(_, v)| v.flagged)
            .map(|(i, _)| i)
            .collect()
    }

    #[test]
    fn one_slow_host_of_four_is_found_although_it_touches_half_the_links() {
        // Links 0-1, 0-2, 0-3, 1-2, 1-3, 2-3 with host 3 slow: the plain median would sit
        // between the two levels.
        let t = [101.0, 98.0, 1050.0, 103.0, 990.0, 1010.0];
        assert_eq!(flagged(&t), [2, 4, 5]);
        let v = judge(&t, &t);
        // The baseline is the lower median, 103 (the healthy level), not the midpoint 546.5.
        assert!((v[2].slowdown - 1050.0 / 103.0).abs() < 1e-9, "{v:?}");
    }

    #[test]
    fn noise_is_not_a_slow_link() {
        // 30% apart: an outlier by z perhaps, but under the slowdown threshold.
        assert!(flagged(&[100.0, 101.0, 99.0, 100.5, 130.0]).is_empty());
        // Slow by 2x but the whole group spreads that much: not an outlier.
        assert!(flagged(&[100.0, 200.0, 150.0, 300.0, 250.0]).is_empty());
        // Too few to judge.
        assert!(flagged(&[100.0, 1000.0]).is_empty());
        assert!(judge(&[], &[]).is_empty());
        // A median moved by a tail while the fastest sample is as fast as the others'.
        let p50 = [1.0, 1.02, 0.98, 1.6];
        let min = [0.4, 0.41, 0.39, 0.42];
        assert!(judge(&p50, &min).iter().all(|v| !v.flagged));
        assert!(judge(&p50, &[0.4, 0.41, 0.39, 0.9])[3].flagged);
    }

    #[test]
    fn identical_healthy_links_make_any_slow_one_stand_out() {
        assert_eq!(flagged(&[50.0, 50.0, 50.0, 80.0]), [3]);
        assert!(flagged(&[50.0, 50.0, 50.0, 60.0]).is_empty());
    }
}
