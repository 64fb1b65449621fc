//! Tail and retransmission flags in words, for the console, the fleet gate's reason and
//! `health`: "3 of 3 links stall: p99 104 ms (p99.9 107 ms) vs 0.03 ms healthy, 2.1% of round trips; 41 TCP
//! retransmissions".

use std::collections::BTreeSet;

use super::tables::{pair, why_has, LinksTable};
use crate::record::csv::Line;
use crate::stats::robust::lower_median;

/// Whether a row was flagged on its tail or its retransmissions (not its median alone).
pub fn lossy(l: &Line<LinksTable>) -> bool {
    l.figures.flagged == Some(true) && (why_has(l, "tail") || why_has(l, "retransmits"))
}

/// A time for people: "104 ms", "2.5 ms", "0.03 ms".
pub fn ms(us: f64) -> String {
    let m = us / 1e3;
    match m {
        m if m >= 10.0 => format!("{m:.0} ms"),
        m if m >= 1.0 => format!("{m:.1} ms"),
        m => format!("{m:.2} ms"),
    }
}

/// What the lossy rows of the matrix rows `on` selects (a node's, a link's) say, or None when
/// none of them is lossy.
pub fn tail_words(
    matrix: &[Line<LinksTable>],
    on: impl Fn(&Line<LinksTable>) -> bool,
) -> Option<String> {
    let mine: Vec<&Line<LinksTable>> = matrix.iter().filter(|l| on(l)).collect();
    let bad: Vec<&Line<LinksTable>> = mine.iter().copied().filter(|l| lossy(l)).collect();
    let links: BTreeSet<(u32, u32)> = mine.iter().map(|l| pair(l)).collect();
    let paused = pause_words(&mine, links.len());
    if bad.is_empty() {
        return paused;
    }
    let stalling: BTreeSet<(u32, u32)> = bad
        .iter()
        .filter(|l| l.figures.stalls.unwrap_or(0) > 0)
        .map(|l| pair(l))
        .collect();
    let mut parts = Vec::new();
    // Ping-pongs speak in round trips; a node with only streams stalling, in batches.
    let pings: Vec<&&Line<LinksTable>> = bad
        .iter()
        .filter(|l| l.params.direction == "pingpong" && l.figures.stalls.unwrap_or(0) > 0)
        .collect();
    let (rows, unit): (Vec<&Line<LinksTable>>, &str) = if pings.is_empty() {
        (
            bad.iter()
                .copied()
                .filter(|l| l.figures.stalls.unwrap_or(0) > 0)
                .collect(),
            "stream batches",
        )
    } else {
        (pings.iter().map(|l| **l).collect(), "round trips")
    };
    if let Some(worst) = rows
        .iter()
        .max_by(|a, b| a.stats().p99_us.total_cmp(&b.stats().p99_us))
    {
        let healthy: Vec<f64> = matrix
            .iter()
            .filter(|l| {
                l.figures.flagged != Some(true)
                    && (&l.params.transport, l.params.bytes, &l.params.direction)
                        == (
                            &worst.params.transport,
                            worst.params.bytes,
                            &worst.params.direction,
                        )
            })
            .map(|l| l.stats().p99_us)
            .collect();
        let stalls: u64 = rows
            .iter()
            .map(|l| l.figures.stalls.unwrap_or(0) as u64)
            .sum();
        let trials: u64 = rows.iter().map(|l| l.stats().n as u64).sum();
        let vs = if healthy.is_empty() {
            String::new()
        } else {
            format!(" vs {} healthy", ms(lower_median(&healthy)))
        };
        parts.push(format!(
            "{} of {} links stall: p99 {} (p99.9 {}){vs}, {:.1}% of {unit}",
            stalling.len(),
            links.len(),
            ms(worst.stats().p99_us),
            ms(worst.stats().p999_us),
            100.0 * stalls as f64 / trials.max(1) as f64
        ));
    }
    for (transport, what) in [
        ("tcp", "TCP retransmissions"),
        ("rdma", "RDMA port retransmissions and sequence errors"),
    ] {
        let counts: Vec<u64> = bad
            .iter()
            .filter(|l| l.params.transport == transport)
            .filter(|l| why_has(l, "retransmits"))
            .filter_map(|l| l.figures.retransmits)
            .collect();
        if !counts.is_empty() {
            parts.push(format!(
                "{} {what} in {} tests whose healthy peers had a tenth as many",
                counts.iter().sum::<u64>(),
                counts.len()
            ));
        }
    }
    parts.extend(paused);
    Some(parts.join("; "))
}

/// What the rows flagged `paused` among `mine` (of `links` links) say: the host lost the time,
/// not the network. None when there is none.
fn pause_words(mine: &[&Line<LinksTable>], links: usize) -> Option<String> {
    let paused: Vec<&&Line<LinksTable>> = mine
        .iter()
        .filter(|l| l.figures.flagged == Some(true))
        .filter(|l| why_has(l, "paused"))
        .collect();
    let worst = paused.iter().max_by(|a, b| {
        let lost = |l: &Line<LinksTable>| super::tables::lost_ms(l).unwrap_or(0.0);
        lost(a).total_cmp(&lost(b))
    })?;
    let pairs: BTreeSet<(u32, u32)> = paused.iter().map(|l| pair(l)).collect();
    let wave = worst
        .figures
        .wave_ms
        .map_or(String::new(), |w| format!(" of {}", ms(1e3 * w)));
    let throttled = worst
        .figures
        .throttled_ms
        .filter(|&t| t > 0.0)
        .map_or(String::new(), |t| {
            format!(", {} of it held by its cgroup's CPU quota", ms(1e3 * t))
        });
    let stolen_ms = super::tables::stolen_ms(worst);
    let stolen = if stolen_ms > 0.0 {
        format!(", {} stolen by its hypervisor", ms(1e3 * stolen_ms))
    } else {
        String::new()
    };
    Some(format!(
        "{} of {links} links stall while their own host waits to run (up to {}{wave}{throttled}\
         {stolen}), not the network",
        pairs.len(),
        ms(1e3 * super::tables::lost_ms(worst).unwrap_or(0.0)),
    ))
}

/// One ping-pong row's stalls: (stalls, round trips, ms a stall costs a transfer). A stall's
/// length is the smallest of the row's p99, p99.9 and max at or over its stall threshold, less
/// its p50, taken as a whole round trip (a lost segment holds its transfer for the
/// retransmission the round trip waited for; a ping-pong sample is half of it). None for a row
/// without tails, or none of whose quantiles reaches its threshold.
pub fn stall_of(l: &Line<LinksTable>) -> Option<(u32, usize, f64)> {
    let (k, threshold) = (l.figures.stalls?, l.figures.stall_threshold_us?);
    let st = l.stats();
    let q = [st.p99_us, st.p999_us, st.max_us]
        .into_iter()
        .find(|&q| q >= threshold)?;
    Some((k, st.n, 2.0 * (q - st.p50_us).max(0.0) / 1e3))
}

/// What a pipeline's send over the rows `on` selects would pay in stalls: (share of sends,
/// ms each), from the ping-pong size whose stalls cost the most per transfer (share x
/// length, [`stall_of`]). None when none of them stalled.
pub fn stall_cost(
    matrix: &[Line<LinksTable>],
    on: impl Fn(&Line<LinksTable>) -> bool,
) -> Option<(f64, f64)> {
    let mut sizes: Vec<u64> = matrix
        .iter()
        .filter(|l| on(l) && l.params.direction == "pingpong")
        .map(|l| l.params.bytes)
        .collect();
    sizes.sort();
    sizes.dedup();
    sizes
        .into_iter()
        .filter_map(|bytes| {
            let (mut stalls, mut trials, mut lengths) = (0u64, 0u64, Vec::new());
            for l in matrix
                .iter()
                .filter(|l| on(l) && l.params.direction == "pingpong" && l.params.bytes == bytes)
            {
                if let Some((k, n, ms)) = stall_of(l) {
                    stalls += k as u64;
                    trials += n as u64;
                    lengths.push(ms);
                }
            }
            (stalls > 0 && trials > 0).then(|| {
                let ms = crate::stats::robust::median(&lengths);
                (stalls as f64 / trials as f64, ms)
            })
        })
        .max_by(|a, b| (a.0 * a.1).total_cmp(&(b.0 * b.1)))
}
