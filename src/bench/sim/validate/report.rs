//! Predicting the rows: validate.csv, the printed table and spread line, and the ablation.

use anyhow::{anyhow, Context, Result};

use super::case::{error_added, errors, spread, Case, Input, ProfileFrom, Trend};
use crate::output::Progress;
use crate::record::RunDir;
use crate::sim::runtime::{Mechanisms, Prediction};
use std::collections::BTreeMap;

/// The validation as a bench of a run: writes validate.csv and prints the table.
pub struct ValidateBench {
    pub input: Input,
    pub source: String,
    /// Also predict with each mechanism switched off in turn (validate_ablation.csv).
    pub ablation: bool,
}

/// Each mechanism switched off in turn: its median, p90 and worst error_extra over the rows
/// with measured values, written to validate_ablation.csv and printed.
fn ablation(input: &Input, dir: &RunDir, progress: &Progress) -> Result<serde_json::Value> {
    let path = dir.path.join("validate_ablation.csv");
    let mut w = csv::Writer::from_path(&path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    w.write_record([
        "switched_off",
        "rows",
        "error_extra_median",
        "error_extra_p90",
        "error_extra_max",
        "within_10pct",
    ])?;
    progress.println(format!(
        "{:<34} {:>7} {:>7} {:>7} {:>8}",
        "switched off", "median", "p90", "worst", "<= 10%"
    ));
    let mut out = Vec::new();
    let runs = std::iter::once(("nothing (all mechanisms)", Mechanisms::ALL))
        .chain(Mechanisms::ablations());
    for (name, mech) in runs {
        let mut e = Vec::new();
        for c in &input.cases {
            let p = c.predict(&mech).map_err(|e| anyhow!("{name}: {e}"))?;
            e.extend(errors(c, &p).0);
        }
        let Some((m, p90, max)) = spread(&e) else {
            continue;
        };
        let within = e.iter().filter(|&&x| x <= 0.10).count();
        w.write_record([
            name.to_string(),
            e.len().to_string(),
            format!("{m:.4}"),
            format!("{p90:.4}"),
            format!("{max:.4}"),
            within.to_string(),
        ])?;
        progress.println(format!(
            "{name:<34} {:>7} {:>7} {:>7} {:>8}",
            pct(Some(m)),
            pct(Some(p90)),
            pct(Some(max)),
            format!("{within}/{}", e.len())
        ));
        out.push(serde_json::json!({ "switched_off": name, "median": m, "p90": p90, "max": max }));
    }
    w.flush()?;
    Ok(serde_json::Value::Array(out))
}

/// Per system, the error on the added time itself, printed and as summary.json's
/// `error_added_by_system`: an iteration-level median can hide a system the model predicts
/// badly. Where the file gives the healthy runs' iterations, also apart for the rows whose
/// healthy run was steady and those still moving (their measured added time holds the run's
/// own drift too).
fn print_by_system(
    added: &AddedBySystem,
    progress: &Progress,
) -> serde_json::Map<String, serde_json::Value> {
    let mut by_system = serde_json::Map::new();
    for (system, rows) in added {
        let e: Vec<f64> = rows.iter().map(|r| r.0).collect();
        let (m, p90, max) = spread(&e).expect("a system listed has rows");
        let this_run = rows.iter().filter(|r| r.2).count();
        let own = match this_run {
            0 => String::new(),
            n => format!("; {n} of them on op times taken in the run they predict"),
        };
        progress.println(format!(
            "validate: {system}: error_added median {}, p90 {}, max {} over {} rows (a fault \
             adding at least a tenth of the iteration){own}",
            pct(Some(m)),
            pct(Some(p90)),
            pct(Some(max)),
            e.len()
        ));
        let mut figures = serde_json::json!({
            "rows": e.len(), "median": m, "p90": p90, "max": max, "this_run_rows": this_run
        });
        let part = |moving: bool| -> Vec<f64> {
            rows.iter()
                .filter(|r| r.1 == Some(moving))
                .map(|r| r.0)
                .collect()
        };
        let (steady, moving) = (part(false), part(true));
        if !steady.is_empty() || !moving.is_empty() {
            let median = |v: &[f64]| spread(v).map(|s| s.0);
            progress.println(format!(
                "validate: {system}: {} rows from a steady healthy run, median {}; {} from one \
                 still moving (Mann-Kendall p < {:.2}), median {}",
                steady.len(),
                pct(median(&steady)),
                moving.len(),
                Trend::ALPHA,
                pct(median(&moving))
            ));
            for (name, v) in [("steady", &steady), ("moving", &moving)] {
                figures[name] = serde_json::json!({ "rows": v.len(), "median": median(v) });
            }
        }
        by_system.insert(system.clone(), figures);
    }
    by_system
}

/// validate.csv with its header (FILE's columns, then the predictions and errors), and the
/// console table's header.
fn open_table(
    dir: &RunDir,
    columns: &[String],
    progress: &Progress,
) -> Result<csv::Writer<std::fs::File>> {
    let path = dir.path.join("validate.csv");
    let mut w = csv::Writer::from_path(&path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    let mut header = columns.to_vec();
    header.extend(
        [
            "predicted_healthy_ms",
            "predicted_slow_ms",
            "error_extra",
            "error_slow",
            "error_added",
            "added_left_out",
            "healthy_trend_ms",
            "healthy_trend_p",
            "profile_from",
        ]
        .map(String::from),
    );
    w.write_record(
        header
            .iter()
            .map(|c| crate::sanitize::csv_cell(c).into_owned()),
    )?;
    progress.println(format!(
        "{:<18} {:<12} {:>6} {:>9} {:>9} {:>10} {:>10} {:>7} {:>7}",
        "system", "slow links", "delay", "healthy", "slow", "meas. +", "pred. +", "error", "on +"
    ));
    Ok(w)
}

fn pct(x: Option<f64>) -> String {
    x.map(|e| format!("{:.1}%", 100.0 * e))
        .unwrap_or_else(|| "-".into())
}

/// Per system, each row's error on the added time, whether its healthy run was moving, and
/// whether its op times were taken in the run it predicts.
type AddedBySystem = BTreeMap<String, Vec<(f64, Option<bool>, bool)>>;

/// Each row's error_extra, and whether its op times were taken in the run it predicts.
type ExtraErrors = Vec<(f64, bool)>;

/// The errors one prediction makes on its row.
struct RowErrors {
    extra: Option<f64>,
    slow: Option<f64>,
    /// The error on the added time, or why the row is left out of it.
    added: Result<f64, &'static str>,
}

/// One validate.csv row: FILE's cells padded to its header, then the prediction and errors.
fn csv_row(
    header_len: usize,
    rec: &[String],
    case: &Case,
    p: &Prediction,
    e: &RowErrors,
) -> Vec<String> {
    let mut row = rec.to_vec();
    row.resize(header_len, String::new());
    let opt = |x: Option<f64>| x.map(|v| format!("{v:.4}")).unwrap_or_default();
    row.extend([
        format!("{:.2}", p.healthy_ms),
        format!("{:.2}", p.slow_ms),
        opt(e.extra),
        opt(e.slow),
        opt(e.added.ok()),
        e.added.err().unwrap_or_default().to_string(),
        case.trend
            .map(|t| format!("{:.2}", t.ms_per_iteration))
            .unwrap_or_default(),
        opt(case.trend.map(|t| t.p)),
        case.profile_from.as_str().to_string(),
    ]);
    row
}

/// One line of the console table, with FILE's own cells looked up by column name.
fn console_row(
    header: &[String],
    rec: &[String],
    case: &Case,
    p: &Prediction,
    e: &RowErrors,
) -> String {
    let col = |name: &str| {
        let i = header.iter().position(|h| h == name);
        i.and_then(|i| rec.get(i)).cloned().unwrap_or_default()
    };
    let measured = match (case.healthy_ms, case.slow_ms) {
        (Some(h), Some(s)) => format!("{:+.1}", s - h),
        _ => "-".into(),
    };
    format!(
        "{:<18} {:<12} {:>6} {:>9} {:>9} {:>10} {:>10.1} {:>7} {:>7}",
        case.system.to_string(),
        col("slow_links"),
        col("delay_ms"),
        col("healthy_ms"),
        col("slow_ms"),
        measured,
        p.slow_ms - p.healthy_ms,
        pct(e.extra),
        pct(e.added.ok())
    )
}

impl ValidateBench {
    /// Predicts every row with all mechanisms, writing it to validate.csv and the console
    /// table; returns the error_extra values and the error_added values per system.
    fn predict_rows(
        &self,
        w: &mut csv::Writer<std::fs::File>,
        progress: &Progress,
    ) -> Result<(ExtraErrors, AddedBySystem)> {
        let mut extra_errors = ExtraErrors::new();
        let mut added = AddedBySystem::new();
        for (case, rec) in self.input.cases.iter().zip(&self.input.records) {
            let p = case
                .predict(&Mechanisms::ALL)
                .map_err(|e| anyhow!("{} row: {e}", case.system))?;
            let (extra, slow) = errors(case, &p);
            let e = RowErrors {
                extra,
                slow,
                added: error_added(case, &p),
            };
            let this_run = case.profile_from == ProfileFrom::ThisRun;
            extra_errors.extend(e.extra.map(|x| (x, this_run)));
            if let Ok(x) = e.added {
                added.entry(case.system.to_string()).or_default().push((
                    x,
                    case.trend.map(|t| t.moving()),
                    this_run,
                ));
            }
            let row = csv_row(self.input.header.len(), rec, case, &p, &e);
            // FILE's own cells are copied: neutralised as every CSV cell is.
            w.write_record(
                row.iter()
                    .map(|c| crate::sanitize::csv_cell(c).into_owned()),
            )?;
            w.flush()?;
            progress.println(console_row(&self.input.header, rec, case, &p, &e));
            progress.inc();
        }
        Ok((extra_errors, added))
    }

    /// summary.json's `validate` figures and the spread lines printed under the table: over
    /// every judged row, and again without the rows whose op times were taken in the run they
    /// predict (`profile_from` this_run), where there are such rows.
    fn summary(&self, extra_errors: &ExtraErrors) -> (serde_json::Value, Vec<String>) {
        let rows = self.input.cases.len();
        let all: Vec<f64> = extra_errors.iter().map(|e| e.0).collect();
        let Some((m, p90, max)) = spread(&all) else {
            return (
                serde_json::json!({ "source": self.source, "rows": rows, "judged": 0 }),
                vec![format!("validate: {rows} rows predicted; none has measured healthy_ms and slow_ms, so no error")],
            );
        };
        let mut figures = serde_json::json!({
            "source": self.source,
            "rows": rows,
            "judged": all.len(),
            "error_extra_median": m,
            "error_extra_p90": p90,
            "error_extra_max": max,
        });
        let mut lines = vec![format!(
            "validate: {rows} rows, error_extra median {}, p90 {}, max {} ({} within 10%)",
            pct(Some(m)),
            pct(Some(p90)),
            pct(Some(max)),
            all.iter().filter(|&&e| e <= 0.10).count()
        )];
        for from in ProfileFrom::ALL {
            let n = self.input.cases.iter().filter(|c| c.profile_from == from);
            figures["profile_from"][from.as_str()] = n.count().into();
        }
        let own = extra_errors.iter().filter(|e| e.1).count();
        if own > 0 {
            let others: Vec<f64> = extra_errors.iter().filter(|e| !e.1).map(|e| e.0).collect();
            let s = spread(&others);
            figures["error_extra_not_this_run"] = serde_json::json!({
                "judged": others.len(),
                "median": s.map(|s| s.0),
                "p90": s.map(|s| s.1),
                "max": s.map(|s| s.2),
            });
            lines.push(format!(
                "validate: without the {own} rows whose op times were taken in the run they \
                 predict (profile_from this_run): {} rows, error_extra median {}, p90 {}, max {}",
                others.len(),
                pct(s.map(|s| s.0)),
                pct(s.map(|s| s.1)),
                pct(s.map(|s| s.2))
            ));
        }
        (figures, lines)
    }
}

impl crate::suite::Bench for ValidateBench {
    fn points(&self) -> u64 {
        self.input.cases.len() as u64
    }
    fn run(&self, cx: &crate::suite::Context) -> Result<crate::suite::Notes> {
        let (dir, progress) = (cx.dir, cx.progress);
        let mut w = open_table(dir, &self.input.header, progress)?;
        let (extra_errors, added) = self.predict_rows(&mut w, progress)?;
        let mut notes = crate::suite::Notes::new();
        let (figures, lines) = self.summary(&extra_errors);
        notes.insert("validate".into(), figures);
        for line in lines {
            progress.println(line);
        }
        let by_system = print_by_system(&added, progress);
        if let Some(serde_json::Value::Object(v)) = notes.get_mut("validate") {
            v.insert(
                "error_added_by_system".into(),
                serde_json::Value::Object(by_system),
            );
        }
        if self.ablation {
            let a = ablation(&self.input, dir, progress)?;
            notes.insert("validate_ablation".into(), a);
        }
        Ok(notes)
    }
}
