//! `RUN/report.md` and `RUN/report.html`: the headline numbers of a run, with links to its
//! CSVs and figures (the HTML embeds the SVGs).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};

use super::catalog;
use super::plot::PlotOutcome;
use super::tables::headlines;
use crate::check::CheckTable;
use crate::noise::NOISY_CV;
use crate::record::label::RunLabel;
use crate::record::view::headline::Headline;
use crate::record::view::loaded::Loaded;
use crate::record::Line;
use crate::verdict::Verdict;

/// Text for report.html: every string in it (a hostname, an adapter's name, an error from
/// meta.json, a reason) is escaped, so none is read as markup.
fn html_escape(s: &str) -> String {
    crate::sanitize::html(s).into_owned()
}

/// Text for report.md, likewise: no string from a run becomes markup, a table column or a
/// link there.
fn md_text(s: &str) -> String {
    crate::sanitize::markdown(s).into_owned()
}

/// A link's target in report.md: a file of the run folder, its characters that could end or
/// bend the link escaped.
fn md_target(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '(' | ')' | '<' | '>' | '\\' | '[' | ']' | '`' | '|' | '&' => {
                out.push_str(&format!("%{:02X}", c as u32))
            }
            ' ' => out.push_str("%20"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// What both reports show, gathered once.
struct Page<'a> {
    dir: &'a Path,
    run: Loaded,
    heads: Vec<Headline>,
    /// The run's data files that exist.
    csvs: Vec<String>,
    /// The check's summary and its FAIL and WARN rows.
    check: Option<(String, Vec<Vec<String>>)>,
    cautions: Vec<String>,
    plots: &'a PlotOutcome,
}

impl Page<'_> {
    /// A path relative to the run folder.
    fn rel(&self, p: &Path) -> String {
        p.strip_prefix(self.dir).unwrap_or(p).display().to_string()
    }
}

/// Writes report.md and report.html into the run folder.
pub fn write_report(dir: &Path, plots: &PlotOutcome) -> Result<()> {
    let run = catalog::load(dir)?;
    let check = run.table::<CheckTable>().map(|c| {
        let flagged: Vec<Vec<String>> = c
            .iter()
            .filter(|l| l.figures.verdict != Verdict::Pass)
            .map(check_cells)
            .collect();
        (check_summary(c), flagged)
    });
    let page = Page {
        dir,
        heads: headlines(&run),
        csvs: catalog::specs()
            .iter()
            .map(|t| t.file())
            .chain(
                crate::report::tables::OTHER_FILES
                    .iter()
                    .map(|f| f.to_string()),
            )
            .filter(|f| dir.join(f).exists())
            .collect(),
        check,
        cautions: cautions(&run),
        run,
        plots,
    };
    std::fs::write(dir.join("report.md"), markdown(&page)?).context("cannot write report.md")?;
    std::fs::write(dir.join("report.html"), html(&page)?).context("cannot write report.html")?;
    Ok(())
}

fn markdown(p: &Page) -> Result<String> {
    let mut md = String::new();
    writeln!(
        md,
        "# morphbench run {}\n",
        md_text(&p.dir.file_name().unwrap_or_default().to_string_lossy())
    )?;
    match &p.run.label.ranks {
        Some(ranks) => writeln!(
            md,
            "Ranks: **{}** (rank 0 on {}).\n",
            md_text(ranks),
            md_text(p.run.label.host_name())
        )?,
        None => writeln!(
            md,
            "Host **{}**, adapter **{}**.\n",
            md_text(p.run.label.host_name()),
            md_text(p.run.label.adapter_name())
        )?,
    }
    if let Some(warning) = p.run.label.incomplete() {
        writeln!(md, "> **Partial run.** {}\n", md_text(&warning))?;
    }
    for c in &p.cautions {
        writeln!(md, "> **Caution.** {}\n", md_text(c))?;
    }
    writeln!(md, "| headline | value | from |\n|---|---|---|")?;
    for h in &p.heads {
        let file = h.source.split(' ').next().unwrap_or("");
        writeln!(
            md,
            "| {} | {} | [{}]({}) |",
            md_text(&h.what),
            md_text(&h.text),
            md_text(&h.source),
            md_target(file)
        )?;
    }
    if let Some((summary, flagged)) = &p.check {
        writeln!(md, "\n## Check\n\n{}\n", md_text(summary))?;
        if !flagged.is_empty() {
            writeln!(md, "| verdict | figure | column | base | value | ratio | reason |\n|---|---|---|---|---|---|---|")?;
            for cells in flagged {
                let cells: Vec<String> = cells.iter().map(|c| md_text(c)).collect();
                writeln!(md, "| {} |", cells.join(" | "))?;
            }
        }
    }
    writeln!(md, "\n## Data\n")?;
    for c in &p.csvs {
        writeln!(md, "- [{}]({})", md_text(c), md_target(c))?;
    }
    writeln!(md, "\n## Figures\n")?;
    for f in &p.plots.figures {
        let links: Vec<String> = f
            .files
            .iter()
            .map(|file| format!("[{}]({})", md_text(&p.rel(file)), md_target(&p.rel(file))))
            .collect();
        writeln!(md, "- {}: {}", md_text(&f.about), links.join(", "))?;
        if let Some(png) = f
            .files
            .iter()
            .find(|p| p.extension().is_some_and(|e| e == "png"))
        {
            writeln!(
                md,
                "\n  ![{}]({})\n",
                md_text(&f.about),
                md_target(&p.rel(png))
            )?;
        }
    }
    for s in &p.plots.skipped {
        writeln!(md, "- skipped: {}", md_text(s))?;
    }
    Ok(md)
}

fn html(p: &Page) -> Result<String> {
    let mut html = String::new();
    writeln!(
        html,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>morphbench {}</title>",
        html_escape(&p.run.label.short())
    )?;
    writeln!(html, "<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left}}</style></head><body>")?;
    writeln!(
        html,
        "<h1>morphbench: {}</h1>",
        html_escape(&p.run.label.short())
    )?;
    if let Some(warning) = p.run.label.incomplete() {
        writeln!(
            html,
            "<p style=\"border:2px solid #c00;padding:8px\"><b>Partial run.</b> {}</p>",
            html_escape(&warning)
        )?;
    }
    for c in &p.cautions {
        writeln!(
            html,
            "<p style=\"border:2px solid #c80;padding:8px\"><b>Caution.</b> {}</p>",
            html_escape(c)
        )?;
    }
    writeln!(
        html,
        "<table><tr><th>headline</th><th>value</th><th>from</th></tr>"
    )?;
    for h in &p.heads {
        let file = h.source.split(' ').next().unwrap_or("");
        writeln!(
            html,
            "<tr><td>{}</td><td>{}</td><td><a href=\"{}\">{}</a></td></tr>",
            html_escape(&h.what),
            html_escape(&h.text),
            html_escape(file),
            html_escape(&h.source)
        )?;
    }
    writeln!(html, "</table>")?;
    if let Some((summary, flagged)) = &p.check {
        writeln!(html, "<h2>Check</h2><p>{}</p>", html_escape(summary))?;
        if !flagged.is_empty() {
            writeln!(html, "<table><tr><th>verdict</th><th>figure</th><th>column</th><th>base</th><th>value</th><th>ratio</th><th>reason</th></tr>")?;
            for cells in flagged {
                let cells: Vec<String> = cells
                    .iter()
                    .map(|c| format!("<td>{}</td>", html_escape(c)))
                    .collect();
                writeln!(html, "<tr>{}</tr>", cells.join(""))?;
            }
            writeln!(html, "</table>")?;
        }
    }
    writeln!(html, "<h2>Data</h2><ul>")?;
    for c in &p.csvs {
        let c = html_escape(c);
        writeln!(html, "<li><a href=\"{c}\">{c}</a></li>")?;
    }
    writeln!(html, "</ul><h2>Figures</h2>")?;
    for f in &p.plots.figures {
        writeln!(html, "<h3>{}</h3>", html_escape(&f.about))?;
        match f
            .files
            .iter()
            .find(|p| p.extension().is_some_and(|e| e == "svg"))
        {
            Some(svg) => {
                let text = std::fs::read_to_string(svg)?;
                let start = text.find("<svg").unwrap_or(0);
                html.push_str(&text[start..]);
            }
            None => {
                for file in &f.files {
                    writeln!(
                        html,
                        "<img src=\"{}\" alt=\"{}\">",
                        html_escape(&p.rel(file)),
                        html_escape(&f.about)
                    )?;
                }
            }
        }
    }
    writeln!(html, "</body></html>")?;
    Ok(html)
}

/// A run's label, its first headline with a value, and why its tables did not load (if so):
/// what `runs` lists, as a table or as JSON.
fn first_headline(dir: &Path) -> (RunLabel, Option<String>, Option<String>) {
    match catalog::load(dir) {
        Ok(run) => {
            let first = headlines(&run)
                .into_iter()
                .find(|h| h.value.is_some())
                .map(|h| format!("{}: {}", h.what, h.text));
            (run.label, first, None)
        }
        Err(e) => (RunLabel::of(dir), None, Some(e.to_string())),
    }
}

/// One run as `runs --json` lists it.
fn run_entry(dir: &Path) -> serde_json::Value {
    let (label, headline, error) = first_headline(dir);
    serde_json::json!({
        "run": dir.file_name().unwrap_or_default().to_string_lossy(),
        "path": dir,
        "status": label.status,
        "started_utc": label.started_utc,
        "adapter": label.adapter_name(),
        "headline": headline,
        "unreadable": error,
        "meta_problem": label.meta_warning(dir),
    })
}

/// The most noisy rows a caution names one by one.
const NOISY_NAMED: usize = 12;

/// Warnings for the top of the report: benches that ran on a busy machine, and the rows whose
/// samples varied more than [`NOISY_CV`].
pub fn cautions(run: &Loaded) -> Vec<String> {
    let mut out: Vec<String> = run.label.busy.iter().map(|(_, w)| w.clone()).collect();
    let noisy = noisy_rows(run);
    if !noisy.is_empty() {
        let named: Vec<&str> = noisy.iter().take(NOISY_NAMED).map(|s| s.as_str()).collect();
        let more = noisy.len().saturating_sub(NOISY_NAMED);
        out.push(format!(
            "{} row(s) varied by more than {:.0}% (cv) within the run, so their medians are \
             less certain: {}{}",
            noisy.len(),
            NOISY_CV * 100.0,
            named.join("; "),
            if more > 0 {
                format!("; and {more} more")
            } else {
                String::new()
            }
        ));
    }
    out
}

/// Names the rows whose samples varied by more than the report's bound, where they are seen,
/// not only in the report.
pub fn warn_noisy(dir: &Path, quiet: bool) {
    let Ok(run) = catalog::load(dir) else {
        return;
    };
    let noisy = noisy_rows(&run);
    if quiet || noisy.is_empty() {
        return;
    }
    let shown: Vec<&str> = noisy.iter().take(8).map(|s| s.as_str()).collect();
    eprintln!(
        "warning: {} row(s) varied by more than {:.0}% within the run: {}{}",
        noisy.len(),
        NOISY_CV * 100.0,
        shown.join("; "),
        if noisy.len() > 8 { "; ..." } else { "" }
    );
}

/// Every measured row of a single-node table with cv over [`NOISY_CV`], as "bench: case
/// [timer] (cv 0.23)": the figures `check` would judge, as each bench's table gives them.
pub fn noisy_rows(run: &Loaded) -> Vec<String> {
    let mut out = Vec::new();
    for t in catalog::specs().iter().filter(|t| t.single_node) {
        for (key, fig) in t.figures.map(|f| f(run)).unwrap_or_default() {
            if fig.cv > NOISY_CV {
                out.push(format!("{key} (cv {:.2})", fig.cv));
            }
        }
    }
    out
}

/// One line on a run's check: its worst verdict and the counts.
fn check_summary(check: &[Line<CheckTable>]) -> String {
    let count = |v: Verdict| check.iter().filter(|l| l.figures.verdict == v).count();
    let (fail, warn, pass) = (
        count(Verdict::Fail),
        count(Verdict::Warn),
        count(Verdict::Pass),
    );
    let worst = check
        .iter()
        .map(|l| l.figures.verdict)
        .fold(Verdict::Pass, Verdict::worse);
    format!(
        "Verdict of morphbench check: {worst} ({fail} FAIL, {warn} WARN, {pass} PASS); \
         every figure is in check.csv."
    )
}

/// A check row's cells for the report's table (FAIL and WARN rows; FAILs come first in the
/// file).
fn check_cells(l: &Line<CheckTable>) -> Vec<String> {
    let num = |x: Option<f64>| x.map_or("-".to_string(), |x| x.to_string());
    vec![
        l.figures.verdict.to_string(),
        format!("{}: {}", l.lead.bench, l.lead.case),
        format!("{} ({})", l.params.figure, l.params.better.as_str()),
        num(l.figures.base),
        num(l.figures.value),
        num(l.figures.ratio),
        l.figures.reason.clone(),
    ]
}

/// `morphbench runs`: one line per run folder under `out`, oldest first: id, status (complete,
/// failed, or partial for a run that never finished), start date, adapter, main headline.
pub fn print_runs(out: &Path, json: bool) -> Result<()> {
    let runs = crate::record::run_dir::list_runs(out)?;
    if json {
        let list: Vec<serde_json::Value> = runs.iter().map(|dir| run_entry(dir)).collect();
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(());
    }
    let mut text = String::new();
    if runs.is_empty() {
        writeln!(text, "no runs in {}", out.display())?;
    } else {
        writeln!(
            text,
            "{:<28} {:<9} {:<20} {:<34} headline",
            "run", "status", "started (UTC)", "adapter"
        )?;
    }
    for dir in runs {
        let (label, headline, unreadable) = first_headline(&dir);
        let problem = label.meta_warning(&dir);
        let headline = match (unreadable, &problem) {
            (Some(e), _) => format!("unreadable: {e}"),
            (None, Some(p)) => format!("unreadable: {p}"),
            (None, None) => headline.unwrap_or_else(|| "-".into()),
        };
        let status = match (label.status.as_str(), &problem) {
            (_, Some(_)) if label.meta_missing => "no meta",
            (_, Some(_)) => "damaged",
            ("running", _) => "partial",
            (s, _) => s,
        };
        let started: String = label
            .started_utc
            .as_deref()
            .unwrap_or("?")
            .chars()
            .take(19)
            .collect::<String>()
            .replace('T', " ");
        let name = dir.file_name().unwrap_or_default().to_string_lossy();
        let adapter: String = label.adapter_name().chars().take(34).collect();
        writeln!(
            text,
            "{name:<28} {status:<9} {started:<20} {adapter:<34} {headline}"
        )?;
    }
    // A listing is often piped into `head`: a closed pipe ends it quietly, not with a panic.
    use std::io::Write as _;
    match std::io::stdout().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}
