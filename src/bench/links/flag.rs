//! Which links (or nodes) are slow. A figure's slowdown is its time over the baseline of its
//! group (links of one transport, size and kind; nodes for one metric); it is flagged when the
//! slowdown is at least [`SLOW_THRESHOLD`] (PipeMorph's threshold for a slow stage) and it is an
//! outlier by the modified z-score of the median absolute deviation, above [`Z_THRESHOLD`] (as
//! hyperfine flags outliers), and its typical time lies beyond the healthy links' own tail (the
//! baseline of the group's p99s): on a busy host, small-message latency moves with where the
//! scheduler puts the two ends (one core or two), and a link whose p50 the healthy links reach
//! now and then is noisy, not slow.
//!
//! The baseline is the *lower* median. In a small cluster one bad host touches half of the
//! links (3 of the 6 links of 4 ranks), and the plain median of an even count is then the
//! midpoint between the healthy and the slow level, which hides both. The lower median stays
//! on the healthy level as long as at most half of the group is slow; with an odd count it is
//! the median.

use crate::stats::robust::{lower_median, mad, modified_z};

/// A slowdown at or above this can be flagged (the noise policy's).
pub const SLOW_THRESHOLD: f64 = crate::noise::SLOW;
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

/// The verdict of every member of one group, in order, from each member's typical time (p50)
/// and tail (p99); larger is slower.
pub fn judge(times: &[f64], tails: &[f64]) -> Vec<Verdict> {
    assert_eq!(times.len(), tails.len(), "one tail per member");
    if times.is_empty() {
        return Vec::new();
    }
    let base = lower_median(times);
    let healthy_tail = lower_median(tails);
    let mad = mad(times, base, lower_median);
    times
        .iter()
        .map(|&t| {
            let slowdown = if base > 0.0 { t / base } else { 1.0 };
            let z = modified_z(t, base, mad);
            Verdict {
                slowdown,
                z,
                flagged: times.len() >= MIN_GROUP
                    && slowdown >= SLOW_THRESHOLD
                    && z > Z_THRESHOLD
                    && t > healthy_tail,
            }
        })
        .collect()
}

/// Whether member `i`'s fastest sample is slow beside the group's fastest samples (their
/// lower median), by at least [`SLOW_THRESHOLD`]. Noise only slows a link down: a link whose
/// best samples match healthy links' best can carry data as fast as they do, and what slowed
/// the rest of its samples was the hosts (measured on loopback: ranks sharing two cores gave
/// one link's 64 KiB ping-pong a p50 4x the others' through three retests, while its fastest
/// samples stayed at the others' 9-12 µs). A shaped or long link is slow in every sample.
pub fn best_is_slow(fastest: &[f64], i: usize) -> bool {
    let base = lower_median(fastest);
    base > 0.0 && fastest[i] >= SLOW_THRESHOLD * base
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Flags with tight samples (each p99 at its p50).
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
        // Twice the baseline, but within what the healthy links reach at their p99: a busy
        // host's scheduling, not a slow link (measured: 8 B ping-pongs of 4 and 8 µs).
        let p50 = [4.0, 4.1, 3.9, 8.4, 4.0, 8.3];
        let p99 = [12.0, 14.0, 11.0, 13.7, 12.5, 15.6];
        assert!(judge(&p50, &p99).iter().all(|v| !v.flagged));
        let shaped = [4.0, 4.1, 3.9, 5190.0, 4.0, 5200.0];
        let shaped_p99 = [12.0, 14.0, 11.0, 5210.0, 12.5, 5600.0];
        let flagged: Vec<bool> = judge(&shaped, &shaped_p99)
            .iter()
            .map(|v| v.flagged)
            .collect();
        assert_eq!(flagged, [false, false, false, true, false, true]);
    }

    #[test]
    fn a_link_whose_best_samples_are_healthy_is_not_slow() {
        // Fastest samples (µs): a link held back by its hosts reaches 11, a shaped one 5200.
        let fastest = [9.5, 8.8, 11.3, 11.0, 9.0, 5200.0];
        assert!(!best_is_slow(&fastest, 3));
        assert!(best_is_slow(&fastest, 5));
        assert!(!best_is_slow(&[0.0, 0.0, 0.0], 1));
    }

    #[test]
    fn identical_healthy_links_make_any_slow_one_stand_out() {
        assert_eq!(flagged(&[50.0, 50.0, 50.0, 80.0]), [3]);
        assert!(flagged(&[50.0, 50.0, 50.0, 60.0]).is_empty());
    }
}
