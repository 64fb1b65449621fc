//! When a figure is a FAIL, a WARN or a PASS: thresholds with defaults, overridden per bench
//! and per figure by a TOML policy file:
//!
//! ```toml
//! fail_pct = 10        # worse by at least this much and significant: FAIL
//! warn_pct = 5         # worse by at least this much and significant: WARN
//! alpha = 0.01         # significance level of the tests (and 1 - the intervals' level)
//! z = 3.5              # --fleet: modified z-score beyond which a figure is an outlier
//! max_cv = 0.10        # rows more variable than this (stddev / mean) can WARN, never FAIL
//! min_n = 10           # rows with fewer samples than this can WARN, never FAIL
//!
//! [bench.d2h]
//! fail_pct = 20
//!
//! [figure."kernels: gemm 17x33x65 [gpu]"]
//! ignore = true
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Deserialize;

use super::figures::Key;

/// Thresholds as written in a policy file: each one optional, so a bench or figure section
/// sets only what it changes.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Overrides {
    pub fail_pct: Option<f64>,
    pub warn_pct: Option<f64>,
    pub alpha: Option<f64>,
    pub z: Option<f64>,
    pub max_cv: Option<f64>,
    pub min_n: Option<usize>,
    /// Leave the figure (or the bench's figures) out of the verdict.
    pub ignore: Option<bool>,
}

/// The thresholds that apply to one figure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    pub fail_pct: f64,
    pub warn_pct: f64,
    pub alpha: f64,
    pub z: f64,
    pub max_cv: f64,
    pub min_n: usize,
    pub ignore: bool,
}

impl Default for Thresholds {
    /// 10% is the slowdown that straggler detectors in production act on (Falcon, Greyhound);
    /// p < 0.01 keeps false alarms rare over a run's hundreds of figures; 3.5 is Iglewicz and
    /// Hoaglin's outlier cut for the modified z-score (hyperfine uses it too). A row whose own
    /// samples spread as wide as the FAIL threshold has a median that moves that much from run
    /// to run with the machine's state, so it cannot carry a FAIL (max_cv = 0.10); nor can a
    /// row of fewer than 10 samples, hyperfine's minimum (Mann-Whitney cannot reach p < 0.01
    /// with 5 against 5, and Welch's t then rests on normality).
    fn default() -> Thresholds {
        Thresholds {
            fail_pct: 10.0,
            warn_pct: 5.0,
            alpha: 0.01,
            z: 3.5,
            max_cv: 0.10,
            min_n: 10,
            ignore: false,
        }
    }
}

impl Thresholds {
    fn apply(mut self, o: &Overrides) -> Thresholds {
        self.fail_pct = o.fail_pct.unwrap_or(self.fail_pct);
        self.warn_pct = o.warn_pct.unwrap_or(self.warn_pct);
        self.alpha = o.alpha.unwrap_or(self.alpha);
        self.z = o.z.unwrap_or(self.z);
        self.max_cv = o.max_cv.unwrap_or(self.max_cv);
        self.min_n = o.min_n.unwrap_or(self.min_n);
        self.ignore = o.ignore.unwrap_or(self.ignore);
        self
    }
}

/// The thresholds a section may set.
const KEYS: &[&str] = &[
    "fail_pct", "warn_pct", "alpha", "z", "max_cv", "min_n", "ignore",
];

/// The candidate nearest `name` by edit distance, if it is near enough to be a typo.
pub fn closest<'a>(name: &str, candidates: &[&'a str]) -> Option<&'a str> {
    fn distance(a: &str, b: &str) -> usize {
        let b: Vec<char> = b.chars().collect();
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut prev = row[0];
            row[0] = i + 1;
            for (j, cb) in b.iter().enumerate() {
                let here = row[j + 1];
                row[j + 1] = (prev + (ca != *cb) as usize).min(row[j] + 1).min(here + 1);
                prev = here;
            }
        }
        row[b.len()]
    }
    candidates
        .iter()
        .map(|c| (distance(name, c), *c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 3))
        .min()
        .map(|(_, c)| c)
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    fail_pct: Option<f64>,
    warn_pct: Option<f64>,
    alpha: Option<f64>,
    z: Option<f64>,
    max_cv: Option<f64>,
    min_n: Option<usize>,
    ignore: Option<bool>,
    #[serde(default)]
    bench: BTreeMap<String, Overrides>,
    #[serde(default)]
    figure: BTreeMap<String, Overrides>,
}

/// The thresholds for every figure: defaults, then the file's top level, then its
/// `[bench.NAME]` section, then its `[figure."BENCH: CASE"]` section.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    file: PolicyFile,
    top: Overrides,
}

impl Policy {
    pub fn load(path: &Path) -> Result<Policy> {
        let text = crate::record::read_input(path)
            .with_context(|| format!("cannot read policy {}", path.display()))?;
        Policy::parse(&text).with_context(|| format!("policy {}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Policy> {
        let file: PolicyFile = toml::from_str(text).map_err(|e| {
            let hint = e
                .message()
                .strip_prefix("unknown field `")
                .and_then(|r| r.split_once('`'))
                .and_then(|(name, _)| closest(name, &KEYS.iter().chain(["bench", "figure"].iter()).copied().collect::<Vec<_>>()))
                .map_or(String::new(), |c| format!(" (did you mean {c}?)"));
            anyhow::anyhow!(
                "{}{hint}: the keys are fail_pct, warn_pct, alpha, z, max_cv, min_n and ignore, at the top level or \
                 under [bench.NAME] or [figure.\"BENCH: CASE\"]",
                e.message()
            )
        })?;
        let benches: Vec<&'static str> = super::figures::checked().iter().map(|c| c.0).collect();
        let figure_benches = file
            .figure
            .keys()
            .map(|k| k.split(':').next().unwrap_or("").trim());
        for name in file.bench.keys().map(String::as_str).chain(figure_benches) {
            if !benches.contains(&name) {
                anyhow::bail!(
                    "no bench is called {name:?}{}: the benches check judges are {}",
                    closest(name, &benches)
                        .map_or(String::new(), |c| format!(" (did you mean {c}?)")),
                    benches.join(", ")
                );
            }
        }
        let top = Overrides {
            fail_pct: file.fail_pct,
            warn_pct: file.warn_pct,
            alpha: file.alpha,
            z: file.z,
            max_cv: file.max_cv,
            min_n: file.min_n,
            ignore: file.ignore,
        };
        let policy = Policy { file, top };
        let sections = std::iter::once(("top level".to_string(), &policy.top))
            .chain(
                policy
                    .file
                    .bench
                    .iter()
                    .map(|(k, o)| (format!("[bench.{k}]"), o)),
            )
            .chain(
                policy
                    .file
                    .figure
                    .iter()
                    .map(|(k, o)| (format!("[figure.\"{k}\"]"), o)),
            );
        for (name, o) in sections {
            let t = Thresholds::default().apply(&policy.top).apply(o);
            t.validate().map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        }
        Ok(policy)
    }

    /// The thresholds before any bench or figure section.
    pub fn top_level(&self) -> Thresholds {
        Thresholds::default().apply(&self.top)
    }

    /// The thresholds for figure `key`.
    pub fn for_figure(&self, key: &Key) -> Thresholds {
        let mut t = Thresholds::default().apply(&self.top);
        if let Some(o) = self.file.bench.get(&key.bench) {
            t = t.apply(o);
        }
        if let Some(o) = self.file.figure.get(&key.to_string()) {
            t = t.apply(o);
        }
        t
    }

    /// Figure sections that name no figure of the runs checked (a typo keeps its figure under
    /// the defaults, so it is worth saying).
    pub fn unmatched<'a>(&'a self, keys: &[String]) -> Vec<&'a str> {
        self.file
            .figure
            .keys()
            .filter(|k| !keys.contains(k))
            .map(|k| k.as_str())
            .collect()
    }
}

impl Thresholds {
    fn validate(&self) -> anyhow::Result<()> {
        let pct = |name: &str, x: f64| {
            if x.is_finite() && x > 0.0 && x <= 1000.0 {
                Ok(())
            } else {
                Err(anyhow::anyhow!(
                    "{name} = {x}: give a percentage above 0 and at most 1000"
                ))
            }
        };
        pct("fail_pct", self.fail_pct)?;
        pct("warn_pct", self.warn_pct)?;
        if self.warn_pct > self.fail_pct {
            return Err(anyhow::anyhow!(
                "warn_pct = {} is above fail_pct = {}: a WARN starts below a FAIL",
                self.warn_pct,
                self.fail_pct
            ));
        }
        if !(self.alpha > 0.0 && self.alpha < 1.0) {
            return Err(anyhow::anyhow!(
                "alpha = {}: give a significance level between 0 and 1, e.g. 0.01",
                self.alpha
            ));
        }
        if !(2..=1_000_000).contains(&self.min_n) {
            return Err(anyhow::anyhow!(
                "min_n = {}: give a sample count from 2 up, e.g. 10",
                self.min_n
            ));
        }
        if !(self.max_cv.is_finite() && self.max_cv > 0.0) {
            return Err(anyhow::anyhow!(
                "max_cv = {}: give a positive coefficient of variation, e.g. 0.1",
                self.max_cv
            ));
        }
        if !(self.z.is_finite() && self.z > 0.0) {
            return Err(anyhow::anyhow!(
                "z = {}: give a positive z-score cut, e.g. 3.5",
                self.z
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(bench: &str, case: &str) -> Key {
        Key {
            bench: bench.into(),
            case: case.into(),
        }
    }

    #[test]
    fn sections_override_in_order() {
        let p = Policy::parse(
            "fail_pct = 12\n[bench.d2h]\nfail_pct = 20\nalpha = 0.05\n\
             [figure.\"d2h: x [gpu]\"]\nignore = true\n",
        )
        .unwrap();
        assert_eq!(p.for_figure(&key("kernels", "a")).fail_pct, 12.0);
        let d = p.for_figure(&key("d2h", "y"));
        assert_eq!((d.fail_pct, d.alpha, d.ignore), (20.0, 0.05, false));
        assert!(p.for_figure(&key("d2h", "x [gpu]")).ignore);
        assert_eq!(p.unmatched(&["d2h: z".into()]), vec!["d2h: x [gpu]"]);
    }

    #[test]
    fn the_example_policy_parses() {
        let p = Policy::parse(include_str!("../../bench-configs/check-policy.toml")).unwrap();
        assert_eq!(p.for_figure(&key("d2h", "x")).fail_pct, 20.0);
        assert!(p.for_figure(&key("kernels", "gemm 17x33x65 [gpu]")).ignore);
    }

    #[test]
    fn bad_policies_name_the_key() {
        for (text, wants) in [
            ("fail_pc = 3", &["fail_pc"][..]),
            (
                "[bench.hol]\nwarn_pct = 30",
                &["[bench.hol]", "warn_pct"][..],
            ),
            ("alpha = 2", &["alpha"][..]),
        ] {
            let e = format!("{:#}", Policy::parse(text).unwrap_err());
            assert!(wants.iter().all(|w| e.contains(w)), "{e}");
        }
    }
}
