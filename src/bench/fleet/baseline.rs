//! Expected values per SKU (adapter and driver), as SuperBench's generated baselines: written
//! by `morphbench baseline FLEET_RUN -o FILE` from a healthy fleet run, read by
//! `fleet --baseline FILE`. Each figure's expected value is the median of the nodes that did
//! not fail (the quiet ones, when any were); its tolerance comes from their spread (4 robust standard deviations, 1.4826 MAD,
//! relative to the median), at least [`MIN_TOLERANCE`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::rank::FAIL;
use super::table::FleetTable;
use crate::record::csv::{read_table, Line};
use crate::stats::robust::{mad, median};

/// (test, figure, unit) -> the values of the nodes that stand for a SKU.
type FigureValues = BTreeMap<(String, String, String), Vec<f64>>;

/// The smallest tolerance written: a figure's run-to-run drift on one healthy node, which the
/// spread across the nodes of one run does not show (on a shared VM a healthy node's D2H was
/// 0.61-0.67x of its own baseline a minute later, its GEMM 0.70x). Below expected x (1 -
/// tolerance)^2, 0.56x, a figure FAILs.
pub const MIN_TOLERANCE: f64 = 0.25;
/// The largest tolerance read or written: a FAIL below a quarter of the expected value. A
/// wider spread (3 lavapipe processes' GEMM gave 74%) would leave a FAIL below a fifteenth,
/// where a node 7x slower than its SKU still passed as a WARN.
pub const MAX_TOLERANCE: f64 = 0.5;
/// With fewer passing nodes than this, the spread is not known: the tolerance is this wide.
const FEW_NODES: usize = 3;
const FEW_NODES_TOLERANCE: f64 = 0.25;
/// The largest baseline file read.
const MAX_FILE_BYTES: u64 = 4 << 20;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    /// The fleet run it was made from.
    pub from_run: String,
    pub level: String,
    pub sku: Vec<Sku>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sku {
    pub adapter: String,
    pub driver: String,
    pub figure: Vec<Expected>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Expected {
    pub test: String,
    pub figure: String,
    pub unit: String,
    pub expected: f64,
    /// A value below expected x (1 - tolerance) is a WARN, below expected x (1 - tolerance)^2
    /// (two tolerances compounded, so always above zero) a FAIL.
    pub tolerance: f64,
    /// How many passing nodes it was made from.
    pub nodes: usize,
}

impl Baseline {
    /// The expected value of a figure for a node of this adapter and driver.
    pub fn expected(
        &self,
        adapter: &str,
        driver: &str,
        test: &str,
        figure: &str,
    ) -> Option<&Expected> {
        self.sku
            .iter()
            .find(|s| s.adapter == adapter && s.driver == driver)?
            .figure
            .iter()
            .find(|e| e.test == test && e.figure == figure)
    }

    /// From a fleet run folder: every measured figure of the nodes that passed.
    pub fn from_run(dir: &Path) -> Result<Baseline> {
        let rows = read_table::<FleetTable>(&dir.join("fleet.csv")).with_context(|| {
            format!(
                "{} is not a fleet run (no readable fleet.csv)",
                dir.display()
            )
        })?;
        // The baseline names the run it came from: a folder of unknown identity makes none.
        let meta = crate::record::read_meta(dir)?.with_context(|| {
            format!(
                "{} has no meta.json: the fleet run's identity is unknown; give the run \
                     folder as the gate wrote it",
                dir.display()
            )
        })?;
        // Nodes with no FAIL stand for their SKU, the quiet ones when there are any: a busy
        // node's figures are low.
        let failed: std::collections::BTreeSet<u32> = rows
            .iter()
            .filter(|l| l.figures.verdict == FAIL)
            .map(|l| l.params.rank)
            .collect();
        let sku_of = |l: &Line<FleetTable>| (l.params.adapter.clone(), l.params.driver.clone());
        let quiet: std::collections::BTreeSet<(String, String)> = rows
            .iter()
            .filter(|l| !l.figures.busy && !failed.contains(&l.params.rank))
            .map(sku_of)
            .collect();
        let mut from_busy = std::collections::BTreeSet::new();
        let mut values: BTreeMap<(String, String), FigureValues> = BTreeMap::new();
        for l in rows.iter().filter(|l| !failed.contains(&l.params.rank)) {
            let (p, f) = (&l.params, &l.figures);
            let measured = matches!(
                p.test.as_str(),
                "memcpy" | "gemm" | "d2h" | "h2d" | "fma" | "bandwidth"
            );
            let (Some(v), true) = (f.value, measured) else {
                continue;
            };
            if f.busy && quiet.contains(&sku_of(l)) {
                continue;
            }
            if f.busy {
                from_busy.insert(p.adapter.clone());
            }
            values
                .entry(sku_of(l))
                .or_default()
                .entry((p.test.clone(), p.figure.clone(), f.unit.clone()))
                .or_default()
                .push(v);
        }
        for adapter in from_busy {
            eprintln!(
                "warning: every node with {adapter} was busy in {}: the baseline's expected \
                 values for it may be low; make it again on quiet nodes",
                dir.display()
            );
        }
        if values.is_empty() {
            bail!(
                "{}: every node failed, so there is no healthy figure to expect: make a \
                 baseline from a healthy fleet run",
                dir.display()
            );
        }
        let sku = values
            .into_iter()
            .map(|((adapter, driver), figures)| Sku {
                adapter,
                driver,
                figure: figures
                    .into_iter()
                    .map(|((test, figure, unit), v)| expect(test, figure, unit, &v))
                    .collect(),
            })
            .collect();
        Ok(Baseline {
            from_run: meta["run_id"].as_str().unwrap_or_default().to_string(),
            level: meta["config"]["level"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            sku,
        })
    }

    pub fn write(&self, path: &Path) -> Result<()> {
        let text = format!(
            "# morphbench fleet baseline: each figure's expected value per adapter and driver, \
             from run {}.\n# Below expected x (1 - tolerance) a figure is a WARN, below expected x \
             (1 - tolerance)^2 a FAIL.\n{}",
            self.from_run,
            toml::to_string_pretty(self)?
        );
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
    }

    /// Reads and checks a baseline file.
    pub fn load(path: &Path) -> Result<Baseline> {
        let len = std::fs::metadata(path)
            .with_context(|| format!("--baseline {}", path.display()))?
            .len();
        if len > MAX_FILE_BYTES {
            bail!(
                "--baseline {}: {len} bytes, more than a baseline's {MAX_FILE_BYTES}",
                path.display()
            );
        }
        let text = crate::record::read_input(path)
            .with_context(|| format!("--baseline {}", path.display()))?;
        let b: Baseline = toml::from_str(&text).with_context(|| {
            format!("--baseline {}: not a baseline (write one with `morphbench baseline FLEET_RUN -o FILE`)", path.display())
        })?;
        for s in &b.sku {
            for e in &s.figure {
                if !(e.expected.is_finite() && e.expected > 0.0) {
                    bail!(
                        "--baseline {}: {} {} of {:?}: expected {} is not a positive number",
                        path.display(),
                        e.test,
                        e.figure,
                        s.adapter,
                        e.expected
                    );
                }
                if !(0.0..=MAX_TOLERANCE).contains(&e.tolerance) {
                    bail!("--baseline {}: {} {} of {:?}: tolerance {} is not between 0 and {MAX_TOLERANCE}", path.display(), e.test, e.figure, s.adapter, e.tolerance);
                }
            }
        }
        Ok(b)
    }
}

fn expect(test: String, figure: String, unit: String, v: &[f64]) -> Expected {
    let m = median(v);
    let spread = 4.0 * 1.4826 * mad(v, m, median) / m.max(1e-12);
    let tolerance = if v.len() < FEW_NODES {
        FEW_NODES_TOLERANCE
    } else {
        spread.clamp(MIN_TOLERANCE, MAX_TOLERANCE)
    };
    Expected {
        test,
        figure,
        unit,
        expected: crate::record::csv::sig4(m),
        tolerance: crate::record::csv::round(tolerance, 3),
        nodes: v.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tolerance_follows_the_fleets_spread_within_bounds() {
        let tight = expect(
            "gemm".into(),
            "gflops".into(),
            "GFLOP/s".into(),
            &[10.0, 10.1, 9.9, 10.0],
        );
        assert_eq!(
            (tight.expected, tight.tolerance, tight.nodes),
            (10.0, MIN_TOLERANCE, 4)
        );
        let loose = expect(
            "d2h".into(),
            "gbps".into(),
            "GB/s".into(),
            &[10.0, 12.0, 8.0, 10.0, 11.0],
        );
        assert!(
            loose.tolerance > 0.3 && loose.tolerance <= MAX_TOLERANCE,
            "{loose:?}"
        );
        let few = expect("d2h".into(), "gbps".into(), "GB/s".into(), &[10.0, 12.0]);
        assert_eq!(few.tolerance, FEW_NODES_TOLERANCE);
    }

    #[test]
    fn a_baseline_round_trips_and_nonsense_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let b = Baseline {
            from_run: "r1".into(),
            level: "quick".into(),
            sku: vec![Sku {
                adapter: "llvmpipe".into(),
                driver: "Mesa".into(),
                figure: vec![expect(
                    "gemm".into(),
                    "gflops".into(),
                    "GFLOP/s".into(),
                    &[5.0, 5.0, 5.0],
                )],
            }],
        };
        let path = dir.path().join("b.toml");
        b.write(&path).unwrap();
        assert_eq!(Baseline::load(&path).unwrap(), b);
        assert!(b.expected("llvmpipe", "Mesa", "gemm", "gflops").is_some());
        assert!(b.expected("llvmpipe", "other", "gemm", "gflops").is_none());
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("tolerance = 0.25", "tolerance = 3.0");
        std::fs::write(&path, text).unwrap();
        let e = Baseline::load(&path).unwrap_err().to_string();
        assert!(e.contains("tolerance 3 is not between 0 and"), "{e}");
        std::fs::write(&path, "not = [a baseline").unwrap();
        let e = format!("{:#}", Baseline::load(&path).unwrap_err());
        assert!(e.contains("morphbench baseline FLEET_RUN"), "{e}");
    }
}

/// `morphbench baseline`: a fleet baseline from a healthy fleet run.
pub const COMMAND: crate::bench::descriptor::CommandSpec =
    crate::bench::descriptor::CommandSpec::runs(
        "Write a fleet baseline (each figure's expected value and tolerance per adapter and \
         driver) from a healthy fleet run, for `fleet --baseline`",
        "Examples:\n  morphbench baseline results/FLEET_RUN -o bench-configs/baseline-h200.toml",
        <BaselineArgs as clap::Args>::augment_args,
        write_baseline,
    );

#[derive(Debug, clap::Args)]
struct BaselineArgs {
    /// A fleet run folder (healthy nodes: only those that passed every test are used).
    #[arg(value_name = "FLEET_RUN")]
    run_dir: PathBuf,
    /// Where to write the baseline (TOML).
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
}

fn write_baseline(
    m: &clap::ArgMatches,
    g: &crate::bench::descriptor::GlobalArgs,
) -> anyhow::Result<crate::bench::descriptor::Ran> {
    let a: BaselineArgs = crate::bench::descriptor::parsed(m)?;
    let b = Baseline::from_run(&a.run_dir)?;
    b.write(&a.output)?;
    if !g.quiet {
        let figures: usize = b.sku.iter().map(|s| s.figure.len()).sum();
        println!(
            "baseline: {figures} figures of {} adapter/driver pair(s) from run {} -> {}",
            b.sku.len(),
            b.from_run,
            a.output.display()
        );
    }
    Ok(crate::bench::descriptor::Ran::done())
}
