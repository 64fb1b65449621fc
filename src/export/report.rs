//! `RUN/report.md` and `RUN/report.html`: the headline numbers of a run, with links to its
//! CSVs and figures (the HTML embeds the SVGs).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};

use super::plot::{Loaded, PlotOutcome};
use crate::bench::hol::Mode;
use crate::bench::sim::total_delay;
use crate::export::DataError;

/// One headline: what, the figure, and how it was obtained.
pub struct Headline {
    pub what: String,
    pub value: String,
}

fn gemm_headlines(run: &Loaded, out: &mut Vec<Headline>) -> Result<(), DataError> {
    let Some(t) = &run.kernels else { return Ok(()) };
    let mut best: Option<(f64, String, String)> = None;
    let mut cpu = std::collections::HashMap::new();
    let mut memcpy = std::collections::HashMap::new();
    let mut best_ln: Option<(f64, String)> = None;
    let dim = |d: Option<u32>| d.map(|x| x.to_string()).unwrap_or_default();
    for r in t {
        let (p, f) = (&r.params, &r.figures);
        let size = format!("{}x{}x{}", dim(p.size_m), dim(p.size_n), dim(p.size_k));
        let ln = format!("{}x{}", dim(p.rows), dim(p.hidden));
        match (p.kernel.as_str(), f.timer.as_str(), f.gflops, f.gbps) {
            ("gemm", "gpu", Some(g), _) if best.as_ref().is_none_or(|b| g > b.0) => {
                best = Some((g, size, p.variant.clone()));
            }
            ("cpu_sgemm", _, Some(g), _) => {
                cpu.insert(size, g);
            }
            ("layernorm", "gpu", _, Some(g)) if best_ln.as_ref().is_none_or(|b| g > b.0) => {
                best_ln = Some((g, ln));
            }
            ("memcpy", _, _, Some(g)) => {
                memcpy.insert(ln, g);
            }
            _ => {}
        }
    }
    if let Some((g, size, variant)) = best {
        let ratio = cpu
            .get(&size)
            .filter(|&&c| c > 0.0)
            .map(|c| format!(", {:.3}x the CPU SGEMM baseline ({c:.1} GFLOP/s)", g / c))
            .unwrap_or_default();
        out.push(Headline {
            what: "Best GEMM".into(),
            value: format!("{g:.2} GFLOP/s at {size} ({variant}){ratio}"),
        });
    }
    if let Some((g, size)) = best_ln {
        let ratio = memcpy
            .get(&size)
            .filter(|&&m| m > 0.0)
            .map(|m| format!(", {:.3}x host memcpy ({m:.1} GB/s)", g / m))
            .unwrap_or_default();
        out.push(Headline {
            what: "Best layernorm".into(),
            value: format!("{g:.2} GB/s at {size}{ratio}"),
        });
    }
    Ok(())
}

fn d2h_headlines(run: &Loaded, out: &mut Vec<Headline>) -> Result<(), DataError> {
    let Some(t) = &run.d2h else { return Ok(()) };
    let mut best: Option<(f64, f64)> = None;
    let mut memcpy = std::collections::HashMap::new();
    let mut smallest: Option<(f64, f64)> = None;
    for r in t {
        let p = &r.params;
        let (bytes, g) = (p.bytes as f64, r.figures.gbps);
        match (p.direction.as_str(), p.part.as_str()) {
            ("d2h", "gpu_copy") if best.is_none_or(|b| g > b.0) => {
                best = Some((g, bytes));
            }
            ("d2h", "end_to_end") if smallest.is_none_or(|s| bytes < s.0) => {
                smallest = Some((bytes, r.stats().p50_us));
            }
            ("memcpy", _) => {
                memcpy.insert(p.bytes, g);
            }
            _ => {}
        }
    }
    if let Some((g, bytes)) = best {
        let ratio = memcpy
            .get(&(bytes as u64))
            .filter(|&&m| m > 0.0)
            .map(|m| format!(", {:.2}x host memcpy", g / m))
            .unwrap_or_default();
        out.push(Headline {
            what: "D2H bandwidth (GPU copy)".into(),
            value: format!("{g:.2} GB/s at {bytes} B{ratio}"),
        });
    }
    if let Some((bytes, us)) = smallest {
        out.push(Headline {
            what: "D2H end-to-end latency".into(),
            value: format!("{us:.1} µs at {bytes} B (p50)"),
        });
    }
    Ok(())
}

fn hol_sim_headlines(run: &Loaded, out: &mut Vec<Headline>) -> Result<(), DataError> {
    if let Some(t) = &run.rdma {
        if let Some(r) = t.iter().find(|r| r.params.test == "lat") {
            out.push(Headline {
                what: "RDMA latency".into(),
                value: format!("{:.2} µs at {} B (p50)", r.stats().p50_us, r.params.bytes),
            });
        }
    } else {
        out.push(Headline {
            what: "RDMA latency".into(),
            value: "not measured in this run".into(),
        });
    }
    if let Some(t) = &run.hol {
        let mut best: Option<(f64, f64)> = None;
        for r in t.iter().filter(|r| r.params.mode == Mode::Offload) {
            let d: f64 = r.params.delay_ms.parse().unwrap_or(0.0);
            if let Some(removed) = r.figures.stall_removed {
                if best.is_none_or(|b| d > b.0) {
                    best = Some((d, removed));
                }
            }
        }
        if let Some((d, removed)) = best {
            let value = if removed >= 0.0 {
                format!("{:.1}% at {d} ms injected delay", removed * 100.0)
            } else {
                format!("none at {d} ms injected delay: offload stalled longer than inline")
            };
            out.push(Headline {
                what: "HoL stall removed by offload".into(),
                value,
            });
        }
    }
    if let Some(t) = &run.sim {
        let mut best: Option<(f64, String, f64)> = None;
        for r in t.iter().filter(|r| r.params.schedule == "adaptive") {
            let delay = total_delay(&r.params.slow);
            if best.as_ref().is_none_or(|b| delay > b.0) {
                best = Some((delay, r.lead.case.clone(), r.figures.speedup_vs_1f1b));
            }
        }
        if let Some((_, case, speedup)) = best {
            out.push(Headline {
                what: "Adaptive schedule vs 1F1B (simulated)".into(),
                value: format!("{speedup:.2}x faster ({case})"),
            });
        }
    }
    Ok(())
}

pub fn headlines(run: &Loaded) -> Result<Vec<Headline>, DataError> {
    let mut out = Vec::new();
    gemm_headlines(run, &mut out)?;
    d2h_headlines(run, &mut out)?;
    hol_sim_headlines(run, &mut out)?;
    Ok(out)
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Writes report.md and report.html into the run folder.
pub fn write_report(dir: &Path, plots: &PlotOutcome) -> Result<()> {
    let run = Loaded::load(dir)?;
    let heads = headlines(&run)?;
    let csvs: Vec<String> = [
        "kernels.csv",
        "d2h.csv",
        "hol.csv",
        "rdma.csv",
        "sim.csv",
        "sim_timeline.csv",
        "meta.json",
    ]
    .iter()
    .filter(|f| dir.join(f).exists())
    .map(|f| f.to_string())
    .collect();
    let rel = |p: &Path| p.strip_prefix(dir).unwrap_or(p).display().to_string();

    let mut md = String::new();
    writeln!(
        md,
        "# morphbench run {}\n",
        dir.file_name().unwrap_or_default().to_string_lossy()
    )?;
    writeln!(
        md,
        "Host **{}**, adapter **{}**.\n",
        run.label.host, run.label.adapter
    )?;
    if let Some(warning) = run.label.incomplete() {
        writeln!(md, "> **Partial run.** {warning}\n")?;
    }
    writeln!(md, "| headline | value |\n|---|---|")?;
    for h in &heads {
        writeln!(md, "| {} | {} |", h.what, h.value)?;
    }
    writeln!(md, "\n## Data\n")?;
    for c in &csvs {
        writeln!(md, "- [{c}]({c})")?;
    }
    writeln!(md, "\n## Figures\n")?;
    for f in &plots.figures {
        let links: Vec<String> = f
            .files
            .iter()
            .map(|p| format!("[{}]({})", rel(p), rel(p)))
            .collect();
        writeln!(md, "- {}: {}", f.about, links.join(", "))?;
        if let Some(png) = f
            .files
            .iter()
            .find(|p| p.extension().is_some_and(|e| e == "png"))
        {
            writeln!(md, "\n  ![{}]({})\n", f.about, rel(png))?;
        }
    }
    for s in &plots.skipped {
        writeln!(md, "- skipped: {s}")?;
    }
    std::fs::write(dir.join("report.md"), &md).context("cannot write report.md")?;

    let mut html = String::new();
    writeln!(
        html,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>morphbench {}</title>",
        html_escape(&run.label.short())
    )?;
    writeln!(html, "<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left}}</style></head><body>")?;
    writeln!(
        html,
        "<h1>morphbench: {}</h1>",
        html_escape(&run.label.short())
    )?;
    if let Some(warning) = run.label.incomplete() {
        writeln!(
            html,
            "<p style=\"border:2px solid #c00;padding:8px\"><b>Partial run.</b> {}</p>",
            html_escape(&warning)
        )?;
    }
    writeln!(html, "<table><tr><th>headline</th><th>value</th></tr>")?;
    for h in &heads {
        writeln!(
            html,
            "<tr><td>{}</td><td>{}</td></tr>",
            html_escape(&h.what),
            html_escape(&h.value)
        )?;
    }
    writeln!(html, "</table><h2>Data</h2><ul>")?;
    for c in &csvs {
        writeln!(html, "<li><a href=\"{c}\">{c}</a></li>")?;
    }
    writeln!(html, "</ul><h2>Figures</h2>")?;
    for f in &plots.figures {
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
                for p in &f.files {
                    writeln!(
                        html,
                        "<img src=\"{}\" alt=\"{}\">",
                        rel(p),
                        html_escape(&f.about)
                    )?;
                }
            }
        }
    }
    writeln!(html, "</body></html>")?;
    std::fs::write(dir.join("report.html"), html).context("cannot write report.html")?;
    Ok(())
}

/// `morphbench runs`: one line per run folder under `out`, oldest first: id, status (complete,
/// failed, or partial for a run that never finished), start date, adapter, main headline.
pub fn print_runs(out: &Path) -> Result<()> {
    let runs = super::run_dir::list_runs(out)?;
    if runs.is_empty() {
        println!("no runs in {}", out.display());
        return Ok(());
    }
    println!(
        "{:<28} {:<9} {:<20} {:<34} headline",
        "run", "status", "started (UTC)", "adapter"
    );
    for dir in runs {
        let meta: serde_json::Value = std::fs::read(dir.join("meta.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let status = match meta["status"].as_str().unwrap_or("?") {
            "running" => "partial",
            s => s,
        };
        let started: String = meta["started_utc"]
            .as_str()
            .unwrap_or("?")
            .chars()
            .take(19)
            .collect::<String>()
            .replace('T', " ");
        let adapter = meta["adapter"]["name"].as_str().unwrap_or("no GPU");
        let headline = match Loaded::load(&dir).map(|run| headlines(&run)) {
            Ok(Ok(h)) => h
                .into_iter()
                .find(|h| !h.value.starts_with("not measured"))
                .map(|h| format!("{}: {}", h.what, h.value))
                .unwrap_or_else(|| "-".into()),
            Ok(Err(e)) | Err(e) => format!("unreadable: {e}"),
        };
        let name = dir.file_name().unwrap_or_default().to_string_lossy();
        let adapter: String = adapter.chars().take(34).collect();
        println!("{name:<28} {status:<9} {started:<20} {adapter:<34} {headline}");
    }
    Ok(())
}
