//! Figures as Prometheus metrics, in node_exporter's textfile collector format: one file per
//! command (`morphbench_<command>.prom`), encoded by `prometheus-client` and written atomically
//! (a temporary file renamed into place), so that the collector never reads half a file.
//!
//! Names: every figure is a gauge `morphbench_<test>_<figure>` (the figure names its unit:
//! `gflops`, `gbps`, `ops_per_s`, `p50_us`); `morphbench_verdict` (0 PASS, 1 WARN, 2 FAIL)
//! per test and figure; where a figure was judged against an expected value,
//! `morphbench_expected` and `morphbench_ratio_to_expected` (value / expected: every figure is
//! higher-better); `morphbench_last_run_timestamp_seconds` and
//! `morphbench_run_duration_seconds` per command. Labels use dcgm-exporter's names where they
//! mean the same thing (`Hostname`, `gpu`, `UUID`, `modelName`, `pci_bus_id`), so that the
//! series join with DCGM's, plus `test`, `figure`, `sku`, `command` (and `case` where a
//! command measures several cases of one figure).

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};

use crate::verdict::Verdict;

/// Every metric's name starts with this.
pub const PREFIX: &str = "morphbench";

/// What a GPU is, as dcgm-exporter labels it (each where known).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuLabels {
    pub hostname: String,
    /// The GPU's index on its host (the local rank that ran on it).
    pub gpu: Option<u32>,
    pub uuid: Option<String>,
    pub model_name: Option<String>,
    pub pci_bus_id: Option<String>,
    /// The adapter and driver a baseline is kept for.
    pub sku: Option<String>,
}

/// One figure and its verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricFigure {
    pub test: String,
    pub figure: String,
    /// Several cases of one figure (a check's sizes) tell themselves apart by this.
    pub case: Option<String>,
    pub value: Option<f64>,
    /// What it was judged against (the baseline's or the fleet's level), where anything was.
    #[serde(default)]
    pub expected: Option<f64>,
    /// PASS, WARN or FAIL; SKIP and none (not judged) have no verdict series.
    pub verdict: Option<Verdict>,
    pub gpu: GpuLabels,
}

/// A command's figures, ready to be written.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Textfile {
    /// `health`, `fleet`, `check`, `run`: the file's name and every series' `command` label.
    pub command: String,
    pub hostname: String,
    pub finished: SystemTime,
    pub took: Duration,
    pub figures: Vec<MetricFigure>,
}

/// Whether a figure in `unit` reads lower as better: a time, a share of stalled round trips
/// (`ratio`), retransmitted `segments`. Such a figure has no ratio series (the series reads
/// higher as better) and the fleet's pictures invert its ratio.
pub fn lower_is_better(unit: &str) -> bool {
    matches!(
        unit,
        "s" | "ms" | "us" | "µs" | "ns" | "ratio" | "segments" | "errors"
    )
}

/// `morphbench_<test>_<figure>`, each part reduced to what a metric name may hold.
pub fn metric_name(test: &str, figure: &str) -> String {
    format!("{PREFIX}_{}_{}", slug(test), slug(figure))
}

/// Lower case, `[a-z0-9_]` only, runs of anything else as one `_`.
pub fn slug(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars().flat_map(char::to_lowercase) {
        match c {
            'a'..='z' | '0'..='9' => out.push(c),
            'µ' => out.push('u'),
            _ if !out.ends_with('_') => out.push('_'),
            _ => {}
        }
    }
    let out = out.trim_matches('_').to_string();
    if out.is_empty() {
        "x".into()
    } else {
        out
    }
}

/// Checks before anything runs that `dir` is a folder this process can write a file into,
/// naming the fix; nothing is left in it. A link in its place is refused, and as root a
/// folder another user owns or may write, or one on its way ([`crate::safe_fs`]).
pub fn check_dir(dir: &Path) -> Result<()> {
    let meta = std::fs::metadata(dir).with_context(|| {
        format!(
            "--textfile {}: no such folder; give node_exporter's --collector.textfile.directory",
            dir.display()
        )
    })?;
    if !meta.is_dir() {
        anyhow::bail!(
            "--textfile {}: not a folder; give node_exporter's --collector.textfile.directory",
            dir.display()
        );
    }
    crate::safe_fs::open_dir(dir, &crate::safe_fs::TEXTFILE)?;
    let probe = crate::safe_fs::temp_name(dir, "morphbench-probe");
    crate::safe_fs::create_new(&probe).with_context(|| {
        format!(
            "--textfile {}: cannot write there; run as a user who may, or give another folder",
            dir.display()
        )
    })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

type Labels = Vec<(String, String)>;

fn labels(t: &Textfile, f: &MetricFigure) -> Labels {
    let mut l: Labels = vec![("Hostname".into(), f.gpu.hostname.clone())];
    if let Some(g) = f.gpu.gpu {
        l.push(("gpu".into(), g.to_string()));
    }
    let known = [
        ("UUID", &f.gpu.uuid),
        ("modelName", &f.gpu.model_name),
        ("pci_bus_id", &f.gpu.pci_bus_id),
        ("sku", &f.gpu.sku),
    ];
    for (name, v) in known {
        if let Some(v) = v.as_ref().filter(|v| !v.is_empty()) {
            l.push((name.into(), v.clone()));
        }
    }
    l.push(("test".into(), f.test.clone()));
    l.push(("figure".into(), f.figure.clone()));
    if let Some(c) = &f.case {
        l.push(("case".into(), c.clone()));
    }
    l.push(("command".into(), t.command.clone()));
    l
}

type Gauges = Family<Labels, Gauge<f64, AtomicU64>>;

impl Textfile {
    /// The file's name in the collector's folder.
    pub fn file_name(&self) -> String {
        format!("{PREFIX}_{}.prom", self.command)
    }

    /// The metrics in the text format (one HELP and TYPE per name).
    pub fn encode(&self) -> Result<String> {
        let mut registry = Registry::default();
        let mut figures: std::collections::BTreeMap<String, Gauges> = Default::default();
        let verdicts = Gauges::default();
        let expected = Gauges::default();
        let ratio = Gauges::default();
        for f in &self.figures {
            let l = labels(self, f);
            if let Some(v) = f.value.filter(|v| v.is_finite()) {
                let name = metric_name(&f.test, &f.figure);
                figures.entry(name).or_default().get_or_create(&l).set(v);
            }
            if let Some(e) = f.expected.filter(|e| e.is_finite() && *e > 0.0) {
                expected.get_or_create(&l).set(e);
                if let Some(v) = f.value.filter(|v| v.is_finite()) {
                    ratio.get_or_create(&l).set(v / e);
                }
            }
            if let Some(code) = f.verdict.and_then(Verdict::code) {
                verdicts.get_or_create(&l).set(f64::from(code));
            }
        }
        for (name, family) in figures {
            registry.register(name, "A figure morphbench measured", family);
        }
        let run: Labels = vec![
            ("Hostname".into(), self.hostname.clone()),
            ("command".into(), self.command.clone()),
        ];
        let sub = &mut registry;
        sub.register(
            format!("{PREFIX}_verdict"),
            "The verdict of a figure: 0 PASS, 1 WARN, 2 FAIL",
            verdicts,
        );
        sub.register(
            format!("{PREFIX}_expected"),
            "What a figure was judged against: its baseline's expected value or the fleet's level",
            expected,
        );
        sub.register(
            format!("{PREFIX}_ratio_to_expected"),
            "A figure over what it was judged against (every figure is higher-better)",
            ratio,
        );
        let stamp = Gauges::default();
        let secs = self
            .finished
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        stamp.get_or_create(&run).set(secs.as_secs_f64().floor());
        sub.register(
            format!("{PREFIX}_last_run_timestamp_seconds"),
            "When the command last finished, in seconds since the epoch",
            stamp,
        );
        let took = Gauges::default();
        took.get_or_create(&run).set(self.took.as_secs_f64());
        sub.register(
            format!("{PREFIX}_run_duration_seconds"),
            "How long the command's last run took",
            took,
        );
        let mut out = String::new();
        prometheus_client::encoding::text::encode_registry(&mut out, &registry)
            .context("cannot encode the metrics")?;
        Ok(out)
    }

    /// Writes the file into `dir` atomically: a temporary file of a random name created
    /// exclusively beside it (`O_EXCL | O_NOFOLLOW`: nothing there is opened, a link
    /// included), renamed into place; returns its path. `dir` is checked as [`check_dir`]
    /// does (node_exporter reads `*.prom` only: the temporary name never matches).
    pub fn write(&self, dir: &Path) -> Result<PathBuf> {
        let text = self.encode()?;
        crate::safe_fs::open_dir(dir, &crate::safe_fs::TEXTFILE)?;
        crate::safe_fs::replace_file(dir, &self.file_name(), text.as_bytes())
            .context("cannot write the textfile")
    }
}

/// The GPU's UUID as the NVIDIA driver reports it for `pci_bus_id`, where it does.
pub fn nvidia_uuid(pci_bus_id: &str) -> Option<String> {
    let dir = std::fs::read_dir("/proc/driver/nvidia/gpus").ok()?;
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().to_lowercase();
        if !name.ends_with(&pci_bus_id.to_lowercase().trim_start_matches("0000")) {
            continue;
        }
        let info = std::fs::read_to_string(entry.path().join("information")).ok()?;
        return info
            .lines()
            .find_map(|l| l.strip_prefix("GPU UUID:"))
            .map(|u| u.trim().to_string());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figure(test: &str, value: Option<f64>, verdict: Verdict) -> MetricFigure {
        MetricFigure {
            test: test.into(),
            figure: "gflops".into(),
            case: None,
            value,
            expected: Some(2000.0),
            verdict: Some(verdict),
            gpu: GpuLabels {
                hostname: "node07".into(),
                gpu: Some(3),
                uuid: None,
                model_name: Some("NVIDIA H200".into()),
                pci_bus_id: Some("00000000:1B:00.0".into()),
                sku: Some("NVIDIA H200 / 580".into()),
            },
        }
    }

    fn textfile(figures: Vec<MetricFigure>) -> Textfile {
        Textfile {
            command: "health".into(),
            hostname: "node07".into(),
            finished: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
            took: Duration::from_millis(12_500),
            figures,
        }
    }

    #[test]
    fn figures_and_verdicts_are_gauges_with_dcgms_labels() {
        let t = textfile(vec![
            figure("gemm", Some(1234.5), Verdict::Fail),
            figure("fma", None, Verdict::Warn),
        ]);
        let text = t.encode().unwrap();
        assert!(
            text.contains("# TYPE morphbench_gemm_gflops gauge"),
            "{text}"
        );
        let line = text
            .lines()
            .find(|l| l.starts_with("morphbench_gemm_gflops{"))
            .unwrap();
        for label in [
            "Hostname=\"node07\"",
            "gpu=\"3\"",
            "modelName=\"NVIDIA H200\"",
            "pci_bus_id=\"00000000:1B:00.0\"",
            "test=\"gemm\"",
            "figure=\"gflops\"",
            "sku=\"NVIDIA H200 / 580\"",
            "command=\"health\"",
        ] {
            assert!(line.contains(label), "{label} missing: {line}");
        }
        assert!(line.ends_with(" 1234.5"), "{line}");
        assert!(
            !line.contains("UUID"),
            "an unknown UUID has no label: {line}"
        );
        // A figure without a value has its verdict, no gauge.
        assert!(!text.contains("morphbench_fma_gflops{"), "{text}");
        let verdicts: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("morphbench_verdict{"))
            .collect();
        assert_eq!(verdicts.len(), 2, "{text}");
        assert!(verdicts
            .iter()
            .any(|l| l.contains("test=\"gemm\"") && l.ends_with(" 2.0")));
        assert!(verdicts
            .iter()
            .any(|l| l.contains("test=\"fma\"") && l.ends_with(" 1.0")));
        let ratio = text
            .lines()
            .find(|l| l.starts_with("morphbench_ratio_to_expected{") && l.contains("gemm"))
            .unwrap();
        assert!(ratio.ends_with(" 0.61725"), "{ratio}");
        assert!(text.contains("morphbench_last_run_timestamp_seconds{Hostname=\"node07\",command=\"health\"} 1800000000"), "{text}");
        assert!(
            text.contains(
                "morphbench_run_duration_seconds{Hostname=\"node07\",command=\"health\"} 12.5"
            ),
            "{text}"
        );
    }

    #[test]
    fn names_hold_only_what_prometheus_allows() {
        assert_eq!(metric_name("hol", "ops_per_s"), "morphbench_hol_ops_per_s");
        assert_eq!(metric_name("D2H", "p50 µs"), "morphbench_d2h_p50_us");
        assert_eq!(
            metric_name("inventory", "memory (GiB)"),
            "morphbench_inventory_memory_gib"
        );
        assert_eq!(slug("--"), "x");
    }

    #[test]
    fn the_file_appears_whole_and_a_bad_folder_is_named() {
        let dir = tempfile::tempdir().unwrap();
        check_dir(dir.path()).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let path = textfile(vec![figure("gemm", Some(1.0), Verdict::Pass)])
            .write(dir.path())
            .unwrap();
        assert_eq!(path.file_name().unwrap(), "morphbench_health.prom");
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["morphbench_health.prom"]);
        let e = check_dir(&dir.path().join("nope")).unwrap_err().to_string();
        assert!(e.contains("no such folder"), "{e}");
        let file = dir.path().join("morphbench_health.prom");
        let e = check_dir(&file).unwrap_err().to_string();
        assert!(e.contains("not a folder"), "{e}");
    }

    #[test]
    fn the_textfile_goes_through_no_link() {
        let dir = tempfile::tempdir().unwrap();
        let file = textfile(vec![figure("gemm", Some(1.0), Verdict::Pass)]);
        // A link where the file goes, and at the name a temporary file once had: neither is
        // followed (the temporary name is random, created exclusively).
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "root's").unwrap();
        let prom = dir.path().join("prom");
        std::fs::create_dir(&prom).unwrap();
        std::os::unix::fs::symlink(&secret, prom.join("morphbench_health.prom")).unwrap();
        let old_tmp = format!(".morphbench_health.prom.{}.tmp", std::process::id());
        std::os::unix::fs::symlink(&secret, prom.join(&old_tmp)).unwrap();
        let path = file.write(&prom).unwrap();
        assert!(std::fs::read_to_string(&path)
            .unwrap()
            .contains("morphbench_gemm_gflops"));
        assert!(!path.is_symlink());
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "root's");
        // A textfile folder that is a link: refused, by the check and by the write.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&prom, &link).unwrap();
        for e in [
            check_dir(&link).unwrap_err(),
            file.write(&link).unwrap_err(),
        ] {
            let e = format!("{e:#}");
            assert!(
                e.contains("--textfile") && e.contains("a symbolic link"),
                "{e}"
            );
        }
    }
}
