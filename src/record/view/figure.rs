//! What `check` compares, as each table gives it: one figure per measured row of a run, named
//! so the same figure of another run matches it, with its direction (lower or higher is
//! better) and the timing statistics it was computed from. A bench's table says which of its
//! columns is its figure by implementing [`Checked`]; `check` judges the figures.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;

use super::loaded::Loaded;
use crate::record::csv::{SamplesTable, Stats};
use crate::record::{read_optional, read_table, CsvTable, Line};
use crate::stats::Moments;

/// Which way a figure improves: a time lower, a rate higher.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    Lower,
    Higher,
}

impl Better {
    pub fn as_str(self) -> &'static str {
        match self {
            Better::Lower => "lower",
            Better::Higher => "higher",
        }
    }

    /// How much worse `value` is than `base`, as a fraction: +0.2 is 20% worse (a time 1.2x
    /// as long, a throughput 0.8x as high); negative when it is better.
    pub fn worse_by(self, base: f64, value: f64) -> f64 {
        match self {
            Better::Lower => value / base - 1.0,
            Better::Higher => 1.0 - value / base,
        }
    }
}

impl Better {
    /// The log of how many times worse `value` is than `base` (the log of the time ratio):
    /// positive when worse, symmetric for lower- and higher-is-better figures.
    pub fn log_worse(self, base: f64, value: f64) -> f64 {
        match self {
            Better::Lower => (value / base).ln(),
            Better::Higher => (base / value).ln(),
        }
    }
}

/// One figure of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// The column compared (`gflops`, `gbps`, `p50_us`, ...).
    pub column: &'static str,
    pub unit: &'static str,
    pub better: Better,
    /// The figure as the row reports it: a time's median, or a throughput from that median.
    pub value: f64,
    /// The timing the figure comes from (µs): a time figure is its median; a throughput is
    /// work / median, so the same test decides both.
    pub time: Moments,
    pub time_p50: f64,
    /// Every timing sample, when the run kept them (`--raw`).
    pub samples: Option<Vec<f64>>,
    /// The timing's coefficient of variation within its run.
    pub cv: f64,
    /// What else describes the row (a kernel's variant): a difference is named in the reason.
    pub detail: String,
    /// Why this figure can warn but never fail, if it cannot.
    pub caveat: Option<String>,
}

impl Figure {
    /// A figure read from `column` of a row whose statistics block is `stats`.
    pub fn new(
        column: &'static str,
        unit: &'static str,
        better: Better,
        value: f64,
        stats: &Stats,
    ) -> Figure {
        Figure {
            column,
            unit,
            better,
            value,
            time: Moments {
                n: stats.n,
                mean: stats.mean_us,
                stddev: stats.stddev_us,
            },
            time_p50: stats.p50_us,
            samples: None,
            cv: stats.cv,
            detail: String::new(),
            caveat: None,
        }
    }

    /// A row's GFLOP/s, else its GB/s, else its median time.
    pub fn rate_or_time(gflops: Option<f64>, gbps: Option<f64>, s: &Stats) -> Figure {
        match (gflops, gbps) {
            (Some(x), _) => Figure::new("gflops", "GFLOP/s", Better::Higher, x, s),
            (None, Some(x)) => Figure::new("gbps", "GB/s", Better::Higher, x, s),
            (None, None) => Figure::time(s),
        }
    }

    pub fn time(stats: &Stats) -> Figure {
        Figure::new("p50_us", "us", Better::Lower, stats.p50_us, stats)
    }

    #[cfg(any(test, feature = "test-hooks"))]
    /// The same figure measured from other timing samples (for synthetic runs in tests and
    /// trials): a throughput scales with the inverse of the new median.
    pub fn with_samples(&self, samples: Vec<f64>) -> Figure {
        let s = crate::stats::Summary::of(&samples).expect("finite samples");
        let value = match self.better {
            Better::Lower => s.p50,
            Better::Higher => self.value * self.time_p50 / s.p50,
        };
        Figure {
            value,
            time: Moments {
                n: s.n,
                mean: s.mean,
                stddev: s.stddev,
            },
            time_p50: s.p50,
            cv: s.cv,
            samples: Some(samples),
            ..self.clone()
        }
    }
}

/// A figure's name within a run: its bench and its case (with the timer where a case has
/// more than one).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub bench: String,
    pub case: String,
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.bench, self.case)
    }
}

/// A table whose rows `check` compares.
pub trait Checked: CsvTable + Sized {
    /// The row's figure, or `None` for a row that holds no measurement to compare.
    fn figure(line: &Line<Self>) -> Option<Figure>;
    /// The row's timer, which tells two rows of one case apart (`gpu`, `host`).
    fn timer(_line: &Line<Self>) -> &str {
        ""
    }
}

/// Adds the figures of table `T` in `dir`, when it is there.
pub fn add<T: Checked>(dir: &Path, out: &mut BTreeMap<Key, Figure>) -> Result<()> {
    let Some(lines) = read_optional::<T>(dir)? else {
        return Ok(());
    };
    for (key, fig) in named::<T>(&lines) {
        if out.insert(key.clone(), fig).is_some() {
            anyhow::bail!(
                "{}: two rows are named '{key}': a figure must be one row (was the file \
                 written twice into one run folder?)",
                dir.join(format!("{}.csv", T::NAME)).display()
            );
        }
    }
    // Raw samples, where the run kept them, replace nothing but add the test on samples.
    let raw = dir.join(format!("{}_samples.csv", T::NAME));
    if raw.exists() {
        let mut by_key: BTreeMap<Key, Vec<f64>> = BTreeMap::new();
        for s in read_table::<SamplesTable>(&raw)? {
            by_key
                .entry(key(T::NAME, &s.lead.case, &s.params.timer))
                .or_default()
                .push(s.figures.sample_us);
        }
        for (k, samples) in by_key {
            if let Some(fig) = out.get_mut(&k) {
                fig.samples = Some(samples);
            }
        }
    }
    Ok(())
}

/// A table's figures from a loaded run, in row order, each with its name.
pub type FiguresIn = fn(&Loaded) -> Vec<(Key, Figure)>;

/// The figures of table `T` in a loaded run, in row order, each with its name (what the report
/// reads, e.g. which rows were too noisy to judge).
pub fn figures_in<T: Checked + 'static>(run: &Loaded) -> Vec<(Key, Figure)> {
    run.table::<T>()
        .map(|lines| named::<T>(lines).collect())
        .unwrap_or_default()
}

/// Each row's figure with its name, in row order (rows without a figure left out).
fn named<T: Checked>(lines: &[Line<T>]) -> impl Iterator<Item = (Key, Figure)> + '_ {
    lines.iter().filter_map(|line| {
        Some((
            key(T::NAME, &line.lead.case, T::timer(line)),
            T::figure(line)?,
        ))
    })
}

fn key(bench: &str, case: &str, timer: &str) -> Key {
    Key {
        bench: bench.to_string(),
        case: match timer {
            "" => case.to_string(),
            t => format!("{case} [{t}]"),
        },
    }
}

/// Adds a table's figures (those `check` compares) from a run folder.
pub type AddFigures = fn(&Path, &mut BTreeMap<Key, Figure>) -> Result<()>;
