//! Which nodes the slow links blame. A node whose confirmed-slow links are most of its links,
//! while the other ends of those links are healthy elsewhere, is the slow one: its links are
//! slow because of it, and the operator is told "host 5 is slow" once rather than fifteen
//! links. A slow link between two healthy nodes is still a link.

use std::collections::BTreeMap;

use crate::stats::robust::median;

/// A node the links blame.
#[derive(Debug, Clone, PartialEq)]
pub struct SlowNode {
    pub rank: u32,
    /// Its confirmed-slow links and all its measured links.
    pub slow: usize,
    pub measured: usize,
    /// The median of its slow links' worst slowdowns.
    pub median_slowdown: f64,
}

/// One measured link (lower rank, higher rank): confirmed slow or not, with its worst
/// slowdown when slow.
pub type LinkVerdicts = BTreeMap<(u32, u32), Option<f64>>;

/// The nodes to blame, most slow links first. A node is blamed when more than half of its
/// links to nodes not yet blamed are slow, and more than half of those slow links end at a
/// node whose other links (to nodes not yet blamed) are mostly healthy; each blamed node's
/// links are then set aside, so a second slow node is judged on what is left.
pub fn slow_nodes(links: &LinkVerdicts) -> Vec<SlowNode> {
    let mut blamed: Vec<SlowNode> = Vec::new();
    loop {
        let out = |r: u32, blamed: &[SlowNode]| blamed.iter().any(|b| b.rank == r);
        // Each node's links to nodes not yet blamed.
        let mut of: BTreeMap<u32, Vec<(u32, Option<f64>)>> = BTreeMap::new();
        for (&(a, b), &v) in links {
            if out(a, &blamed) || out(b, &blamed) {
                continue;
            }
            of.entry(a).or_default().push((b, v));
            of.entry(b).or_default().push((a, v));
        }
        let healthy_elsewhere = |m: u32, n: u32| {
            let others: Vec<bool> = of[&m]
                .iter()
                .filter(|(p, _)| *p != n)
                .map(|(_, v)| v.is_none())
                .collect();
            let healthy = others.iter().filter(|h| **h).count();
            !others.is_empty() && healthy * 2 > others.len()
        };
        let candidate = of
            .iter()
            .filter_map(|(&n, ls)| {
                let slow: Vec<(u32, f64)> = ls.iter().filter_map(|&(m, v)| Some((m, v?))).collect();
                let vouched = slow
                    .iter()
                    .filter(|(m, _)| healthy_elsewhere(*m, n))
                    .count();
                (slow.len() * 2 > ls.len() && vouched * 2 > slow.len()).then(|| SlowNode {
                    rank: n,
                    slow: slow.len(),
                    measured: ls.len(),
                    median_slowdown: median(&slow.iter().map(|s| s.1).collect::<Vec<_>>()),
                })
            })
            .max_by(|x, y| {
                (x.slow, x.median_slowdown)
                    .partial_cmp(&(y.slow, y.median_slowdown))
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
        match candidate {
            Some(c) => blamed.push(c),
            None => return blamed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every pair of `n` ranks, the ones in `slow` slow at 40x.
    fn all_pairs(n: u32, slow: &[(u32, u32)]) -> LinkVerdicts {
        let mut v = LinkVerdicts::new();
        for a in 0..n {
            for b in a + 1..n {
                v.insert((a, b), slow.contains(&(a, b)).then_some(40.0));
            }
        }
        v
    }

    fn ranks(v: &[SlowNode]) -> Vec<u32> {
        v.iter().map(|s| s.rank).collect()
    }

    #[test]
    fn a_slow_host_is_named_once() {
        let v = slow_nodes(&all_pairs(4, &[(0, 1), (1, 2), (1, 3)]));
        assert_eq!(
            v,
            [SlowNode {
                rank: 1,
                slow: 3,
                measured: 3,
                median_slowdown: 40.0
            }]
        );
        // 16 hosts, host 5 slow on all its 15 links.
        let slow: Vec<(u32, u32)> = (0..16u32)
            .filter(|&m| m != 5)
            .map(|m| (m.min(5), m.max(5)))
            .collect();
        let v = slow_nodes(&all_pairs(16, &slow));
        assert_eq!(ranks(&v), [5]);
        assert_eq!((v[0].slow, v[0].measured), (15, 15));
    }

    #[test]
    fn two_slow_hosts_are_both_named() {
        let mut slow = Vec::new();
        for bad in [2u32, 6] {
            for m in (0..8u32).filter(|&m| m != bad) {
                slow.push((m.min(bad), m.max(bad)));
            }
        }
        let mut v = ranks(&slow_nodes(&all_pairs(8, &slow)));
        v.sort();
        assert_eq!(v, [2, 6]);
    }

    #[test]
    fn a_slow_link_between_healthy_nodes_blames_no_node() {
        assert!(slow_nodes(&all_pairs(4, &[(0, 2)])).is_empty());
        assert!(slow_nodes(&all_pairs(8, &[(0, 2), (3, 5)])).is_empty());
        // Two ranks: the one link is slow, and nothing says which end.
        assert!(slow_nodes(&all_pairs(2, &[(0, 1)])).is_empty());
        // Nothing slow.
        assert!(slow_nodes(&all_pairs(6, &[])).is_empty());
    }

    #[test]
    fn a_node_is_judged_on_the_links_it_had_measured() {
        // A quick pattern: host 3 met partners 0, 1 and 5, all slow; they are healthy with
        // their other partners.
        let mut v = LinkVerdicts::new();
        for (p, slow) in [
            ((0, 3), true),
            ((1, 3), true),
            ((3, 5), true),
            ((0, 1), false),
            ((1, 5), false),
            ((0, 5), false),
            ((2, 4), false),
            ((0, 2), false),
        ] {
            v.insert(p, slow.then_some(12.0));
        }
        assert_eq!(ranks(&slow_nodes(&v)), [3]);
    }
}
