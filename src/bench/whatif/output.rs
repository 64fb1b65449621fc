//! What a what-if leaves: whatif.csv, whatif_attribution.csv, whatif.json (read into
//! summary.json), whatif_trace.json (Perfetto: a step as recorded and without stragglers),
//! drain.txt with `--hosts`, and the one-screen answer.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::analysis::{mean, Answer};
use super::job::{Job, Sizes};
use super::schedules::ScheduleRow;
use crate::record::{CsvSink, CsvTable, Line, RunDir};

pub struct WhatifTable;
pub struct AttributionTable;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StepParams {
    pub step: i64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StepFigures {
    pub base_s: f64,
    pub nodelay_s: f64,
    pub ideal_s: f64,
    pub slowdown: f64,
}

impl CsvTable for WhatifTable {
    const NAME: &'static str = "whatif";
    const WITH_STATS: bool = false;
    type Params = StepParams;
    type Figures = StepFigures;
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GroupParams {
    pub dimension: String,
    pub key: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GroupFigures {
    pub slowdown: f64,
}

impl CsvTable for AttributionTable {
    const NAME: &'static str = "whatif_attribution";
    const WITH_STATS: bool = false;
    type Params = GroupParams;
    type Figures = GroupFigures;
}

pub struct SchedulesTable;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ScheduleParams {
    pub schedule: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ScheduleFigures {
    pub with_stragglers_s: Option<f64>,
    pub without_s: Option<f64>,
    pub slowdown: Option<f64>,
    pub refused: String,
}

impl CsvTable for SchedulesTable {
    const NAME: &'static str = "whatif_schedules";
    const WITH_STATS: bool = false;
    type Params = ScheduleParams;
    type Figures = ScheduleFigures;
}

pub fn write_schedules(dir: &RunDir, rows: &[ScheduleRow]) -> Result<()> {
    let mut sink: CsvSink<SchedulesTable> = dir.table()?;
    for r in rows {
        let figures = ScheduleFigures {
            with_stragglers_s: r.with_stragglers_s,
            without_s: r.without_s,
            slowdown: r.with_stragglers_s.zip(r.without_s).map(|(a, b)| a / b),
            refused: r.refused.clone().unwrap_or_default(),
        };
        let params = ScheduleParams {
            schedule: r.schedule.clone(),
        };
        sink.write(&Line::new(&dir.id, &r.schedule, params, None, figures))?;
    }
    Ok(())
}

/// A worker whose removal recovers enough of the step.
#[derive(Debug, Clone, Serialize)]
pub struct Drain {
    pub host: String,
    pub worker: String,
    pub rank: u32,
    /// Share of the step (without launch delays) its removal recovers.
    pub recovers: f64,
}

pub fn write(
    dir: &RunDir,
    job: &Job,
    a: &Answer,
    sizes: Sizes,
    drains: &[Drain],
    hosts: bool,
) -> Result<()> {
    let mut steps: CsvSink<WhatifTable> = dir.table()?;
    for s in &a.steps {
        let params = StepParams { step: s.step };
        let figures = StepFigures {
            base_s: s.base_s,
            nodelay_s: s.nodelay_s,
            ideal_s: s.ideal_s,
            slowdown: s.slowdown,
        };
        steps.write(&Line::new(
            &dir.id,
            s.step.to_string(),
            params,
            None,
            figures,
        ))?;
    }
    let mut groups: CsvSink<AttributionTable> = dir.table()?;
    for g in &a.attribution {
        let params = GroupParams {
            dimension: g.dimension.into(),
            key: g.key.clone(),
        };
        let case = format!("{}={}", g.dimension, g.key);
        groups.write(&Line::new(
            &dir.id,
            &case,
            params,
            None,
            GroupFigures {
                slowdown: g.slowdown,
            },
        ))?;
    }
    let top = |dim: &str| -> Vec<serde_json::Value> {
        let mut v: Vec<_> = a
            .attribution
            .iter()
            .filter(|g| g.dimension == dim)
            .collect();
        v.sort_by(|x, y| y.slowdown.total_cmp(&x.slowdown));
        v.iter()
            .take(5)
            .map(|g| serde_json::json!({"key": g.key, "slowdown": g.slowdown}))
            .collect()
    };
    let json = serde_json::json!({
        "sizes": sizes,
        "steps": a.steps.len(),
        "blocking_slowdown": a.blocking_slowdown,
        "launch_slowdown": a.launch_slowdown,
        "m_s": a.m_s.as_ref().map(|e| e.rem),
        "m_w": a.m_w.as_ref().map(|e| e.rem),
        "m_s_detail": a.m_s,
        "m_w_detail": a.m_w,
        "m_w_workers": a.m_w_workers,
        "top": {
            "optype": top("optype"), "dp_rank": top("dp_rank"),
            "stage": top("stage"), "worker": top("worker"),
        },
        "drain": if hosts { Some(drains) } else { None },
    });
    std::fs::write(
        dir.path.join("whatif.json"),
        serde_json::to_vec_pretty(&json)?,
    )
    .context("cannot write whatif.json")?;
    std::fs::write(
        dir.path.join("whatif_trace.json"),
        serde_json::to_vec(&perfetto(job, a))?,
    )
    .context("cannot write whatif_trace.json")?;
    if hosts {
        let names: Vec<String> = drains.iter().map(|d| d.host.clone()).collect();
        let line = crate::cluster::hostlist::compress(&names);
        let text = if line.is_empty() {
            String::new()
        } else {
            format!("{line}\n")
        };
        std::fs::write(dir.path.join("drain.txt"), text).context("cannot write drain.txt")?;
    }
    Ok(())
}

/// The first step as recorded and as replayed without stragglers, DP ranks 0 to 3, in the
/// Chrome trace format Perfetto opens (the format of `sim --trace-out`).
fn perfetto(job: &Job, a: &Answer) -> serde_json::Value {
    let mut events = Vec::new();
    let dps = job.dp.min(4);
    let views: [(&str, &[f64], &[f64]); 2] = [
        ("recorded", &job.start, &job.end),
        ("no stragglers", &a.ideal.start, &a.ideal.end),
    ];
    for (pid, (what, start, end)) in views.iter().enumerate() {
        events.push(
            serde_json::json!({"name": "process_name", "ph": "M", "pid": pid,
            "args": {"name": format!("step {} {what}", job.steps[0])}}),
        );
        for d in 0..dps {
            for s in 0..job.pp {
                events.push(
                    serde_json::json!({"name": "thread_name", "ph": "M", "pid": pid,
                    "tid": d * job.pp + s, "args": {"name": format!("worker {d}:{s}")}}),
                );
            }
        }
        for (n, key) in job.model.keys.iter().enumerate() {
            for d in 0..dps {
                let at = n * job.lanes + d;
                events.push(serde_json::json!({
                    "name": format!("{} {}", key.optype.name(), key.seq),
                    "cat": key.optype.attribution_key(), "ph": "X",
                    "ts": start[at] * 1e6, "dur": (end[at] - start[at]).max(0.0) * 1e6,
                    "pid": pid, "tid": d * job.pp + key.stage as usize,
                }));
            }
        }
    }
    serde_json::json!({ "traceEvents": events, "displayTimeUnit": "ms" })
}

/// `RANK HOST` per line (`#` starts a comment); each host name checked.
pub fn read_hosts(path: &Path) -> Result<HashMap<u32, String>> {
    let meta = std::fs::metadata(path).with_context(|| format!("--hosts {}", path.display()))?;
    if meta.len() > 16 << 20 {
        bail!(
            "--hosts {}: over 16 MB, not a rank-to-host list",
            path.display()
        );
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("--hosts {}", path.display()))?;
    let mut out = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut parts = line
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|p| !p.is_empty());
        let (Some(rank), Some(host), None) = (parts.next(), parts.next(), parts.next()) else {
            bail!(
                "--hosts {} line {}: expected `RANK HOST`",
                path.display(),
                i + 1
            );
        };
        let rank: u32 = rank.parse().map_err(|_| {
            anyhow::anyhow!(
                "--hosts {} line {}: rank is not a number",
                path.display(),
                i + 1
            )
        })?;
        if !crate::sanitize::valid_hostname(host) {
            bail!(
                "--hosts {} line {}: {:?} is not a host name (letters, digits, '-' and '.')",
                path.display(),
                i + 1,
                crate::sanitize::console(host, 64)
            );
        }
        out.insert(rank, host.to_string());
    }
    Ok(out)
}

/// Every worker whose times set to the typical recover at least `threshold` of the step.
pub fn drains(
    job: &Job,
    a: &Answer,
    hosts: &HashMap<u32, String>,
    threshold: f64,
) -> Result<Vec<Drain>> {
    let workers: Vec<(usize, usize)> = (0..job.dp)
        .flat_map(|d| (0..job.pp).map(move |s| (d, s)))
        .collect();
    let tori = mean(&a.nodelay.spans(job.dp));
    let recovered = job.parallel(&workers, |&(d, s)| {
        let pick = move |n: usize, dd: usize| dd == d && job.node_stage(n) == s;
        let cost = job.mixed(&job.cost, &a.ideal_cost, &pick);
        let t = job.replay(&cost, &vec![0.0; cost.len()]);
        1.0 - mean(&t.spans(job.dp)) / tori
    });
    let mut out = Vec::new();
    for (&(d, s), r) in workers.iter().zip(recovered) {
        if r < threshold {
            continue;
        }
        let rank = job.ranks[d * job.pp + s];
        let host = hosts.get(&rank).with_context(|| {
            format!("--hosts has no host for rank {rank} (worker {d}:{s}), which would be drained")
        })?;
        out.push(Drain {
            host: host.clone(),
            worker: format!("{d}:{s}"),
            rank,
            recovers: r,
        });
    }
    out.sort_by(|x, y| y.recovers.total_cmp(&x.recovers));
    Ok(out)
}

/// The answer in a screen.
pub fn answer_text(
    job: &Job,
    a: &Answer,
    drains: &[Drain],
    schedules: &[ScheduleRow],
) -> Vec<String> {
    let mut out = Vec::new();
    let s = a.blocking_slowdown;
    let best = |dim: &str| {
        a.attribution
            .iter()
            .filter(|g| g.dimension == dim)
            .max_by(|x, y| x.slowdown.total_cmp(&y.slowdown))
    };
    out.push(format!(
        "whatif: {} steps of a DP {} x PP {} job; stragglers cost {:.1}% of its step time \
         (S {:.3}: {:.3} s a step, {:.3} s without them); launch delays {:.1}%",
        job.steps.len(),
        job.dp,
        job.pp,
        (s - 1.0) * 100.0,
        s,
        mean(&a.steps.iter().map(|x| x.nodelay_s).collect::<Vec<_>>()),
        mean(&a.steps.iter().map(|x| x.ideal_s).collect::<Vec<_>>()),
        (a.launch_slowdown - 1.0) * 100.0
    ));
    if let (Some(stage), Some(ms)) = (best("stage"), &a.m_s) {
        let kind = if ms.rem >= 0.5 {
            "stage partitioning imbalance"
        } else {
            "not the last stage's length alone"
        };
        out.push(format!(
            "  stage {} accounts for most of it (S {:.3} with only its times real; {kind}, M_S {:.2})",
            stage.key, stage.slowdown, ms.rem
        ));
    }
    if let Some(t) = best("optype") {
        out.push(format!(
            "  op type: {} (S {:.3} with only its times real)",
            t.key, t.slowdown
        ));
    }
    match &a.m_w {
        Some(mw) if mw.rem >= 0.5 => out.push(format!(
            "  the top 3% of workers ({}) stand out (M_W {:.2}): their removal takes away most \
             of the slowdown",
            a.m_w_workers.join(", "),
            mw.rem
        )),
        Some(mw) => out.push(format!("  no single worker stands out (M_W {:.2})", mw.rem)),
        None => {}
    }
    for r in schedules {
        out.push(match (r.with_stragglers_s, r.without_s) {
            (Some(with), Some(without)) => format!(
                "  under {}: {with:.3} s a step with its stragglers, {without:.3} s without",
                r.schedule
            ),
            _ => format!(
                "  under {}: not simulated ({})",
                r.schedule,
                r.refused.as_deref().unwrap_or("")
            ),
        });
    }
    for d in drains {
        out.push(format!(
            "  drain {} (worker {}, rank {}): recovers {:.1}% of the step",
            d.host,
            d.worker,
            d.rank,
            d.recovers * 100.0
        ));
    }
    out
}
