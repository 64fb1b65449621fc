//! What `check` compares: one figure per measured row of a run, named so the same figure of
//! another run matches it, with its direction (lower or higher is better) and the timing
//! statistics it was computed from. Every table that `check` reads says here which of its
//! columns is its figure; a new bench adds one `Checked` impl and one line in [`CHECKED`].

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;

use super::stats::Moments;
use crate::bench::d2h::D2hTable;
use crate::bench::hol::HolTable;
use crate::bench::kernels::KernelsTable;
use crate::bench::links::tables::{LinksTable, NodesTable};
use crate::bench::peak::PeakTable;
use crate::bench::rdma::RdmaTable;
use crate::record::csv::{SamplesTable, Stats};
use crate::record::label::RunLabel;
use crate::record::{read_optional, read_table, CsvTable, Line};

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
    fn new(
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
    fn rate_or_time(gflops: Option<f64>, gbps: Option<f64>, s: &Stats) -> Figure {
        match (gflops, gbps) {
            (Some(x), _) => Figure::new("gflops", "GFLOP/s", Better::Higher, x, s),
            (None, Some(x)) => Figure::new("gbps", "GB/s", Better::Higher, x, s),
            (None, None) => Figure::time(s),
        }
    }

    fn time(stats: &Stats) -> Figure {
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

/// Every figure of one run, with what names the run.
#[derive(Debug, Clone)]
pub struct RunFigures {
    pub dir: std::path::PathBuf,
    pub run_id: String,
    pub label: RunLabel,
    pub figures: BTreeMap<Key, Figure>,
}

/// A table whose rows `check` compares.
pub(crate) trait Checked: CsvTable + Sized {
    /// The row's figure, or `None` for a row that holds no measurement to compare.
    fn figure(line: &Line<Self>) -> Option<Figure>;
    /// The row's timer, which tells two rows of one case apart (`gpu`, `host`).
    fn timer(_line: &Line<Self>) -> &str {
        ""
    }
}

/// A kernel that runs for less than this is dominated by dispatch and scheduling overhead,
/// which moves from run to run with the machine's state (on lavapipe, 17x33x65 GEMMs took 63
/// to 132 µs across five back-to-back runs); the `peak` bench measures dispatch itself.
const LAUNCH_BOUND_US: f64 = 100.0;

impl Checked for KernelsTable {
    fn figure(line: &Line<Self>) -> Option<Figure> {
        let s = line.stats();
        let mut fig = Figure::rate_or_time(line.figures.gflops, line.figures.gbps, s);
        fig.detail = line.params.variant.clone();
        if s.p50_us < LAUNCH_BOUND_US {
            fig.caveat = Some(format!(
                "too short to judge ({:.0} us < {LAUNCH_BOUND_US:.0} us): its rate is launch and timer \
                 overhead more than the kernel",
                s.p50_us
            ));
        }
        Some(fig)
    }
    fn timer(line: &Line<Self>) -> &str {
        &line.figures.timer
    }
}

/// Transfers from 1 MiB up are judged by bandwidth, smaller ones by latency (as perftest and
/// nvbandwidth report them); mapping a buffer moves no bytes, so it is always a latency.
const BANDWIDTH_FROM_BYTES: u64 = 1 << 20;

impl Checked for D2hTable {
    fn figure(line: &Line<Self>) -> Option<Figure> {
        let s = line.stats();
        Some(
            if line.params.bytes >= BANDWIDTH_FROM_BYTES
                && line.figures.gbps > 0.0
                && line.params.part != "map"
            {
                Figure::new("gbps", "GB/s", Better::Higher, line.figures.gbps, s)
            } else {
                Figure::time(s)
            },
        )
    }
    fn timer(line: &Line<Self>) -> &str {
        &line.figures.timer
    }
}

impl Checked for HolTable {
    /// The statistics block is the makespan over repetitions.
    fn figure(line: &Line<Self>) -> Option<Figure> {
        let mut fig = Figure::time(line.stats());
        fig.column = "makespan_p50_us";
        Some(fig)
    }
}

impl Checked for RdmaTable {
    fn figure(line: &Line<Self>) -> Option<Figure> {
        let s = line.stats();
        Some(match line.figures.gbps {
            Some(x) if line.params.test == "bw" => {
                Figure::new("gbps", "GB/s", Better::Higher, x, s)
            }
            _ => Figure::time(s),
        })
    }
}

impl Checked for PeakTable {
    fn figure(line: &Line<Self>) -> Option<Figure> {
        // Dispatch latency and rate, and the timestamp tick, have no rate: times.
        Some(Figure::rate_or_time(
            line.figures.gflops,
            line.figures.gbps,
            line.stats(),
        ))
    }
    fn timer(line: &Line<Self>) -> &str {
        &line.figures.timer
    }
}

/// A link: its stream by GB/s, its ping-pong by p50 latency. Cases name the ranks, so a run
/// is compared with a baseline of the same ranks (the same launch on the same nodes).
impl Checked for LinksTable {
    fn figure(line: &Line<Self>) -> Option<Figure> {
        // A retest measures a suspect again; the matrix's own row is the link's figure.
        if crate::bench::links::tables::is_retest(line) {
            return None;
        }
        let s = line.stats();
        let mut fig = match line.figures.gbps {
            Some(x) if line.params.direction != "pingpong" => {
                Figure::new("gbps", "GB/s", Better::Higher, x, s)
            }
            _ => Figure::time(s),
        };
        fig.detail = format!("{} -> {}", line.params.src_host, line.params.dst_host);
        Some(fig)
    }
}

/// A node's fingerprint: the GEMM by GFLOP/s, the D2H copy by GB/s.
impl Checked for NodesTable {
    fn figure(line: &Line<Self>) -> Option<Figure> {
        let mut fig = Figure::rate_or_time(line.figures.gflops, line.figures.gbps, line.stats());
        fig.detail = line.params.host.clone();
        Some(fig)
    }
}

/// Adds the figures of table `T` in `dir`, when it is there.
pub(crate) fn add<T: Checked>(dir: &Path, out: &mut BTreeMap<Key, Figure>) -> Result<()> {
    let Some(lines) = read_optional::<T>(dir)? else {
        return Ok(());
    };
    for line in &lines {
        let Some(fig) = T::figure(line) else { continue };
        let key = key(T::NAME, &line.lead.case, T::timer(line));
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

/// Every table `check` compares, in the report's order: its name and how its figures are read.
pub const CHECKED: &[(&str, AddFigures)] = &[
    (PeakTable::NAME, add::<PeakTable>),
    (KernelsTable::NAME, add::<KernelsTable>),
    (D2hTable::NAME, add::<D2hTable>),
    (HolTable::NAME, add::<HolTable>),
    (RdmaTable::NAME, add::<RdmaTable>),
    (LinksTable::NAME, add::<LinksTable>),
    (NodesTable::NAME, add::<NodesTable>),
];

/// Benches whose tables hold predictions, not measurements of the node, and are not compared.
pub const NOT_COMPARED: &[&str] = &["sim"];

/// Reads every figure of the run in `dir`.
pub fn collect(dir: &Path) -> Result<RunFigures> {
    if !dir.is_dir() {
        anyhow::bail!(
            "{} is not a folder: give a run folder (results/<run-id>)",
            dir.display()
        );
    }
    let mut figures = BTreeMap::new();
    let mut files = Vec::new();
    for (name, add) in CHECKED {
        add(dir, &mut figures)?;
        files.push(format!("{name}.csv"));
    }
    // A check must know what it compares: which run (a copy of the baseline passes
    // whatever it measured), on which adapter and host. A damaged meta.json is named first;
    // a folder with neither figures nor meta.json is no run at all.
    let label = RunLabel::of(dir);
    let unknown = label.meta_warning(dir).map(|why| {
        anyhow::anyhow!(
            "{why}; a check needs each run's identity: give the run folder as the run wrote it"
        )
    });
    if let (Some(e), Some(_)) = (unknown.as_ref(), &label.meta_problem) {
        anyhow::bail!("{e}");
    }
    if figures.is_empty() {
        anyhow::bail!(
            "{} holds no measured figures ({}): give a run folder of a run that measured \
             something",
            dir.display(),
            files.join(", ")
        );
    }
    if let Some(e) = unknown {
        return Err(e);
    }
    let run_id = label.run_id.clone().unwrap_or_else(|| {
        dir.file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned()
    });
    Ok(RunFigures {
        dir: dir.to_path_buf(),
        run_id,
        label,
        figures,
    })
}
