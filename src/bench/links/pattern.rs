//! Which pairs `links` measures, in rounds in which no rank plays twice. `all-pairs` is the
//! round-robin tournament (every pair once: n(n-1)/2 pairs in n-1 rounds), which a rack can
//! afford and a fleet cannot (1024 nodes: 523,776 pairs). `quick` and `rounds:K` are rounds
//! of random perfect matchings, as fleet health checks at scale do (Imbue's cluster-health
//! uses 15 randomized pairings over >12k links): each round measures every node at once, K
//! rounds give every node K partners, and the retests then settle the suspects.

use std::time::Duration;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

use super::pair::PairPlan;

/// Rounds of `quick`: every node meets this many partners (fewer in a smaller world, where
/// it is all-pairs). Three partners tell a slow node (every link of it slow, each partner
/// healthy with its other two) from a slow link (one of three), and the retests confirm
/// both; `rounds:K` buys more partners. On 16 hosts, 3 rounds and their retests take a
/// quarter of all-pairs' pair tests (24 + 3 against 120 + 15).
pub const QUICK_ROUNDS: u32 = 3;
/// The most rounds `rounds:K` may ask for.
pub const MAX_ROUNDS: u32 = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Pattern {
    AllPairs,
    Quick,
    Rounds(u32),
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pattern::AllPairs => f.write_str("all-pairs"),
            Pattern::Quick => f.write_str("quick"),
            Pattern::Rounds(k) => write!(f, "rounds:{k}"),
        }
    }
}

impl std::str::FromStr for Pattern {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Pattern> {
        let usage = "give all-pairs, quick or rounds:K (K random matchings, 1 to 4096)";
        match s.trim() {
            "all-pairs" => Ok(Pattern::AllPairs),
            "quick" => Ok(Pattern::Quick),
            other => match other.strip_prefix("rounds:").map(str::parse::<u32>) {
                Some(Ok(k)) if (1..=MAX_ROUNDS).contains(&k) => Ok(Pattern::Rounds(k)),
                _ => Err(anyhow::anyhow!("{other:?}: {usage}")),
            },
        }
    }
}

/// The rounds of `pattern` on `n` ranks, the matchings drawn from `seed`. A pattern that asks
/// for n-1 rounds or more is the tournament: it meets every pair, and random draws could not
/// do better.
pub fn schedule(pattern: Pattern, n: u32, seed: u64) -> Vec<Vec<(u32, u32)>> {
    let k = match pattern {
        Pattern::AllPairs => return tournament(n),
        Pattern::Quick => QUICK_ROUNDS,
        Pattern::Rounds(k) => k,
    };
    if k >= n.saturating_sub(1) {
        return tournament(n);
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut met = std::collections::BTreeSet::new();
    let mut ranks: Vec<u32> = (0..n).collect();
    (0..k)
        .map(|_| {
            // A matching with no pair met before, when a few draws find one: K partners each.
            let mut best: Option<(usize, Vec<(u32, u32)>)> = None;
            for _ in 0..64 {
                ranks.shuffle(&mut rng);
                let round: Vec<(u32, u32)> = ranks
                    .chunks_exact(2)
                    .map(|p| (p[0].min(p[1]), p[0].max(p[1])))
                    .collect();
                let repeats = round.iter().filter(|p| met.contains(*p)).count();
                if best.as_ref().is_none_or(|(r, _)| repeats < *r) {
                    best = Some((repeats, round));
                }
                if repeats == 0 {
                    break;
                }
            }
            let mut round = best.expect("64 draws").1;
            round.sort();
            met.extend(round.iter().copied());
            round
        })
        .collect()
}

/// The rounds of a round-robin tournament (the circle method): every pair of `n` ranks meets
/// exactly once, and no rank plays twice in a round. Odd `n` gives each rank one bye.
pub fn tournament(n: u32) -> Vec<Vec<(u32, u32)>> {
    if n < 2 {
        return Vec::new();
    }
    let m = n + n % 2;
    (0..m - 1)
        .map(|r| {
            let mut pairs = vec![(r, m - 1)];
            for k in 1..m / 2 {
                pairs.push(((r + k) % (m - 1), (r + m - 1 - k) % (m - 1)));
            }
            pairs
                .into_iter()
                .filter(|&(a, b)| a < n && b < n)
                .map(|(a, b)| (a.min(b), a.max(b)))
                .collect()
        })
        .collect()
}

/// Whether `pairs` can be one round among `n` ranks: each pair two ranks of the world, lower
/// first, and no rank in two pairs (a follower's check of rank 0's order).
pub fn is_round(pairs: &[(u32, u32)], n: u32) -> bool {
    let mut busy = std::collections::BTreeSet::new();
    pairs
        .iter()
        .all(|&(a, b)| a < b && b < n && busy.insert(a) && busy.insert(b))
}

/// A round split into waves played one after another: at most `concurrent` pairs a wave,
/// and, when the ranks' machines are known (`machines[rank]`), no machine in two pairs of a
/// wave, so pairs on one machine's cores take turns (the fleet gate's fair turns) while
/// pairs on different machines run at once.
pub fn waves(
    round: &[(u32, u32)],
    concurrent: usize,
    machines: Option<&[String]>,
) -> Vec<Vec<(u32, u32)>> {
    let concurrent = concurrent.max(1);
    let machine = |r: u32| machines.and_then(|m| m.get(r as usize));
    let mut out: Vec<Vec<(u32, u32)>> = Vec::new();
    for &(a, b) in round {
        let fits = |w: &Vec<(u32, u32)>| {
            w.len() < concurrent
                && w.iter().all(|&(c, d)| {
                    let (ours, theirs) = ([machine(a), machine(b)], [machine(c), machine(d)]);
                    ours.iter().all(|m| m.is_none() || !theirs.contains(m))
                })
        };
        match out.iter_mut().find(|w| fits(w)) {
            Some(w) => w.push((a, b)),
            None => out.push(vec![(a, b)]),
        }
    }
    out
}

/// Each rank's machine, which a wave holds once: the fleet's inventory, else, when the pairs
/// measure RDMA, the ranks' host names. Every rank on a host opens the same device and port
/// (`--device`, `--port`), so a host's pairs take turns: each pair has the port to itself, and
/// the port counters read around its tests move for its own traffic alone. None: no limit.
pub fn machines(inventory: Option<&[String]>, rdma: bool, hosts: &[&str]) -> Option<Vec<String>> {
    match inventory {
        Some(m) => Some(m.to_vec()),
        None => rdma.then(|| hosts.iter().map(|h| h.to_string()).collect()),
    }
}

/// About how long the rounds take: a pair's tests each run about their budget (RDMA its
/// iterations, taken as the same), pairs of a wave at once, the waves ([`waves`]) one after
/// another. Retests come on top (a few suspects' sizes).
pub fn estimate(
    plan: &PairPlan,
    rounds: &[Vec<(u32, u32)>],
    concurrent: usize,
    machines: Option<&[String]>,
) -> Duration {
    let per_pair = Duration::from_millis(plan.tests() as u64 * (plan.budget_ms + 20));
    let waves: usize = rounds
        .iter()
        .map(|r| waves(r, concurrent, machines).len())
        .sum();
    per_pair * waves as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waves_keep_a_machine_to_one_pair_and_to_the_concurrency() {
        let round = [(0, 1), (2, 3), (4, 5), (6, 7)];
        assert_eq!(waves(&round, usize::MAX, None), [round.to_vec()]);
        assert_eq!(waves(&round, 3, None).len(), 2);
        // Ranks 0-3 on machine a, 4-7 on machines b and c: a's pairs take turns.
        let m: Vec<String> = ["a", "a", "a", "a", "b", "b", "c", "c"]
            .map(String::from)
            .to_vec();
        let w = waves(&round, usize::MAX, Some(&m));
        assert_eq!(w, [vec![(0, 1), (4, 5), (6, 7)], vec![(2, 3)]]);
        // Every host on one machine (the virtual cluster): one pair at a time.
        let one = vec!["x".to_string(); 8];
        assert_eq!(waves(&round, usize::MAX, Some(&one)).len(), 4);
    }

    /// Over RDMA, ranks on one host share its port: their pairs take turns, so each row's
    /// counters are its own; over TCP alone the pairs of a round run at once.
    #[test]
    fn rdma_pairs_on_one_host_take_turns_for_its_port() {
        let hosts = ["a", "a", "b", "b", "c", "d"];
        let round = [(0, 2), (1, 3), (4, 5)];
        let m = machines(None, true, &hosts).unwrap();
        assert_eq!(
            waves(&round, usize::MAX, Some(&m)),
            [vec![(0, 2), (4, 5)], vec![(1, 3)]]
        );
        assert_eq!(machines(None, false, &hosts), None);
        let inventory = vec!["x".to_string(); 6];
        assert_eq!(machines(Some(&inventory), true, &hosts), Some(inventory));
    }

    #[test]
    fn the_tournament_meets_every_pair_once_and_no_rank_twice_a_round() {
        for n in 1..=9u32 {
            let rs = tournament(n);
            let mut seen = std::collections::BTreeSet::new();
            for round in &rs {
                assert!(is_round(round, n), "n={n} {round:?}");
                for &p in round {
                    assert!(seen.insert(p), "n={n}: {p:?} twice");
                }
            }
            assert_eq!(seen.len() as u32, n * n.saturating_sub(1) / 2, "n={n}");
            assert_eq!(rs.len() as u32, if n < 2 { 0 } else { n - 1 + n % 2 });
        }
    }

    #[test]
    fn quick_is_a_few_random_matchings_each_node_meeting_new_partners() {
        for n in [16u32, 17, 128, 1024] {
            let rs = schedule(Pattern::Quick, n, 7);
            assert_eq!(rs.len() as u32, QUICK_ROUNDS);
            let mut partners = vec![std::collections::BTreeSet::new(); n as usize];
            for round in &rs {
                assert!(is_round(round, n));
                assert_eq!(
                    round.len() as u32,
                    n / 2,
                    "a perfect matching (one bye if odd)"
                );
                for &(a, b) in round {
                    partners[a as usize].insert(b);
                    partners[b as usize].insert(a);
                }
            }
            // Every node met at least QUICK_ROUNDS - 1 different partners (a bye or a repeat
            // at most, in a small or odd world).
            assert!(
                partners.iter().all(|p| p.len() as u32 >= QUICK_ROUNDS - 1),
                "n={n}"
            );
        }
        // The seed decides the draw; the same seed draws the same rounds.
        assert_eq!(
            schedule(Pattern::Quick, 64, 1),
            schedule(Pattern::Quick, 64, 1)
        );
        assert_ne!(
            schedule(Pattern::Quick, 64, 1),
            schedule(Pattern::Quick, 64, 2)
        );
        // Small worlds and many rounds are all-pairs.
        assert_eq!(schedule(Pattern::Quick, 4, 1), tournament(4));
        assert_eq!(schedule(Pattern::Rounds(20), 8, 1), tournament(8));
        assert_eq!(schedule(Pattern::Rounds(2), 8, 1).len(), 2);
    }

    #[test]
    fn patterns_parse_and_bad_ones_say_what_to_give() {
        assert_eq!("quick".parse::<Pattern>().unwrap(), Pattern::Quick);
        assert_eq!("all-pairs".parse::<Pattern>().unwrap(), Pattern::AllPairs);
        assert_eq!("rounds:15".parse::<Pattern>().unwrap(), Pattern::Rounds(15));
        for bad in ["rounds:0", "rounds:x", "rounds:5000", "some", ""] {
            let e = bad.parse::<Pattern>().unwrap_err();
            assert!(e.to_string().contains("rounds:K"), "{bad}: {e}");
        }
        assert!(!is_round(&[(0, 1), (1, 2)], 3));
        assert!(!is_round(&[(2, 1)], 3));
        assert!(!is_round(&[(0, 3)], 3));
    }
}
