//! A `pipeline` run folder as validation input: its cases with a delay against the case of the
//! same schedule and comm without one, predicted from that healthy case's measured op and send
//! times and the injected delay (what a user knows before the fault); the replay on the
//! delayed case's own times is a column of its own (`replayed_slow_ms`).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{anyhow, Context, Result};

use super::case::{median, Case, Input, ProfileFrom};
use crate::bench::pipeline::table::{PipelineTable, TimelineTable};
use crate::record::{read_table, Line};
use crate::sim::model::{OpKind, MAX_MS};
use crate::sim::runtime::program::Orders;
use crate::sim::runtime::System;

/// Columns of the rows made from a pipeline run folder.
const PIPELINE_COLUMNS: [&str; 13] = [
    "case",
    "system",
    "schedule",
    "slow_links",
    "delay_ms",
    "stages",
    "microbatches",
    "tf_ms",
    "tb_ms",
    "tw_ms",
    "healthy_ms",
    "slow_ms",
    "replayed_slow_ms",
];

/// One case's measured lane: op durations by kind and stage, how long each sending op held its
/// stage after computing (copy, and inline: send and acknowledgement), and each stage's order.
type Lane = (
    [Vec<Vec<f64>>; 3],
    Vec<Vec<f64>>,
    Vec<Vec<(f64, OpKind, usize)>>,
);

fn lane_of(ops: &[Line<TimelineTable>], case: &str, stages: usize) -> anyhow::Result<Lane> {
    let measured: Vec<&Line<TimelineTable>> = ops
        .iter()
        .filter(|o| o.lead.case == case && o.params.lane == "measured")
        .collect();
    if measured.is_empty() {
        return Err(anyhow::anyhow!("no measured ops in pipeline_timeline.csv"));
    }
    let mut times = [
        vec![Vec::new(); stages],
        vec![Vec::new(); stages],
        vec![Vec::new(); stages],
    ];
    let mut send = vec![Vec::new(); stages];
    let mut orders: Vec<Vec<(f64, OpKind, usize)>> = vec![Vec::new(); stages];
    for o in &measured {
        let (s, k) = (o.params.stage as usize, o.params.kind);
        if s >= stages {
            return Err(anyhow::anyhow!("an op on stage {s} of {stages}"));
        }
        times[k.index()][s].push(o.params.end_ms - o.params.start_ms);
        let sends = matches!(k, OpKind::F if s + 1 < stages) || matches!(k, OpKind::B if s > 0);
        if sends {
            send[s].push(o.params.queue_end_ms - o.params.end_ms);
        }
        orders[s].push((o.params.start_ms, k, o.params.microbatch as usize));
    }
    Ok((times, send, orders))
}

/// A case's `slow` cell: `none`, or `LINK:MS` on a link the pipeline has.
fn slow_of(slow: &str, stages: usize) -> anyhow::Result<Option<(usize, f64)>> {
    if slow == "none" {
        return Ok(None);
    }
    let parsed = slow
        .split_once(':')
        .and_then(|(l, d)| Some((l.parse::<usize>().ok()?, d.parse::<f64>().ok()?)));
    match parsed {
        Some((l, d)) if l + 1 < stages && d.is_finite() && (0.0..=MAX_MS).contains(&d) => {
            Ok(Some((l, d)))
        }
        _ => Err(anyhow::anyhow!(
            "slow '{slow}' is not LINK:MS of a link it has"
        )),
    }
}

/// A case without delay (`none`, or `LINK:0` in a sweep) is its schedule's healthy one.
fn calm(slow: &str, stages: usize) -> bool {
    match slow_of(slow, stages) {
        Ok(None) => true,
        Ok(Some((_, d))) => d == 0.0,
        Err(_) => false,
    }
}

/// Per stage, the median of each stage's values.
fn medians(v: &[Vec<f64>]) -> Vec<f64> {
    v.iter().map(|x| median(x.clone())).collect()
}

/// The case without a delay of `line`'s schedule and comm: its healthy twin.
fn twin_of<'a>(
    line: &Line<PipelineTable>,
    cases: &'a [Line<PipelineTable>],
) -> Option<&'a Line<PipelineTable>> {
    let (p, stages) = (&line.params, line.params.stages as usize);
    cases.iter().find(|c| {
        calm(&c.params.slow, stages) && c.params.schedule == p.schedule && c.params.comm == p.comm
    })
}

/// The row `--validate` prints and writes for a case: what it read and the replay's time.
fn record_of(
    line: &Line<PipelineTable>,
    case: &Case,
    cells: [String; 2],
    replayed: Option<f64>,
) -> Vec<String> {
    let opt = |x: Option<f64>| x.map(|v| format!("{v}")).unwrap_or_default();
    let list = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.4}"))
            .collect::<Vec<_>>()
            .join(";")
    };
    let p = &line.params;
    let [link_cell, delay_cell] = cells;
    vec![
        line.lead.case.clone(),
        case.system.to_string(),
        p.schedule.clone(),
        link_cell,
        delay_cell,
        case.stages.to_string(),
        p.microbatches.to_string(),
        list(&case.tf),
        list(&case.tb),
        list(&case.tw),
        opt(case.healthy_ms),
        opt(case.slow_ms),
        replayed.map(|v| format!("{v:.2}")).unwrap_or_default(),
    ]
}

/// A case's delay on each link, and its `slow_links` and `delay_ms` cells.
fn delays_of(slow: &str, stages: usize) -> anyhow::Result<(Vec<f64>, [String; 2])> {
    let mut delay = vec![0.0; stages - 1];
    let (mut link_cell, mut delay_cell) = (String::new(), "0".to_string());
    if let Some((l, d)) = slow_of(slow, stages)? {
        delay[l] = d;
        (link_cell, delay_cell) = (format!("{l}_{}", l + 1), format!("{d}"));
    }
    Ok((delay, [link_cell, delay_cell]))
}

/// Each stage's measured ops as an order: sorted by when they started.
fn start_ordered(orders: Vec<Vec<(f64, OpKind, usize)>>) -> Orders {
    orders
        .into_iter()
        .map(|mut o| {
            o.sort_by(|a, b| a.0.total_cmp(&b.0));
            o.into_iter().map(|(_, k, m)| (k, m)).collect()
        })
        .collect()
}

/// Op times (F, B and W medians per stage) and per-op send holds a case is predicted from.
type HealthyTimes = ([Vec<f64>; 3], Vec<Vec<f64>>);

/// The prediction's op and send times: the healthy twin's, where there is one (its B and W as
/// its own lane has them: a case of the same schedule splits backward alike), else a healthy
/// case's own. Inline, a send's hold includes the wait for the acknowledgement, so it must be
/// taken without the delay too.
fn healthy_times(
    line: &Line<PipelineTable>,
    twin: Option<&Line<PipelineTable>>,
    ops: &[Line<TimelineTable>],
    own: &[Vec<f64>; 3],
    send: &[Vec<f64>],
) -> anyhow::Result<HealthyTimes> {
    let stages = line.params.stages as usize;
    // A healthy case is its own twin; a delayed one without a twin never reaches here (`read`).
    let (tf, tb, tw, healthy_send) = match twin {
        Some(c) => {
            let (t, send, _) = lane_of(ops, &c.lead.case, stages)?;
            (medians(&t[0]), medians(&t[1]), medians(&t[2]), send)
        }
        None if calm(&line.params.slow, stages) => (
            own[0].clone(),
            own[1].clone(),
            own[2].clone(),
            send.to_vec(),
        ),
        None => return Err(anyhow::anyhow!("a delayed case with no healthy twin")),
    };
    if tf.iter().chain(&tb).any(|&t| t <= 0.0) {
        return Err(anyhow::anyhow!(
            "its healthy case has a stage without F or B ops"
        ));
    }
    Ok(([tf, tb, tw], healthy_send))
}

/// The replay: the delayed case on its own op times and sends (the delay inside them).
fn replayed_slow_ms(case: &Case, own: [Vec<f64>; 3], send: &[Vec<f64>]) -> anyhow::Result<f64> {
    let [tf, tb, tw] = own;
    let own_case = Case {
        tf,
        tb,
        tw,
        delay: vec![0.0; case.stages - 1],
        send_ms: medians(send),
        ..case.clone()
    };
    let p = own_case.predict(&crate::sim::runtime::Mechanisms::ALL)?;
    Ok(p.slow_ms)
}

/// One case as a row (its record and its case), judged against its healthy case.
fn case_of(
    line: &Line<PipelineTable>,
    cases: &[Line<PipelineTable>],
    ops: &[Line<TimelineTable>],
) -> anyhow::Result<(Vec<String>, Case)> {
    let p = &line.params;
    let stages = p.stages as usize;
    if !(2..=256).contains(&stages) || p.microbatches == 0 {
        return Err(anyhow::anyhow!(
            "{} stages, {} microbatches",
            p.stages,
            p.microbatches
        ));
    }
    let system = if p.comm == "offload" {
        System::MorphbenchOffload
    } else {
        System::MorphbenchInline
    };
    let (delay, cells) = delays_of(&p.slow, stages)?;
    let (times, send, orders) = lane_of(ops, &line.lead.case, stages)?;
    let own = [medians(&times[0]), medians(&times[1]), medians(&times[2])];
    if own[0].iter().chain(&own[1]).any(|&t| t <= 0.0) {
        return Err(anyhow::anyhow!("a stage has no F or B ops with a duration"));
    }
    let orders = start_ordered(orders);
    let calm_case = twin_of(line, cases);
    let ([tf, tb, tw], healthy_send) = healthy_times(line, calm_case, ops, &own, &send)?;
    let (healthy_ms, slow_ms) = if calm(&p.slow, stages) {
        (Some(line.figures.iteration_ms), None)
    } else {
        (
            calm_case.map(|c| c.figures.iteration_ms),
            Some(line.figures.iteration_ms),
        )
    };
    let case = Case {
        system,
        stages,
        microbatches: p.microbatches as usize,
        tf,
        tb,
        tw,
        delay,
        activation_bytes: 0.0,
        channels: 1,
        healthy_ms,
        slow_ms,
        // The healthy twin runs in the same rounds as the delayed case: no drift between them.
        trend: None,
        orders: Some(orders),
        send_ms: medians(&healthy_send),
        // Every case's op times are its healthy twin's (a healthy case is its own).
        profile_from: ProfileFrom::Healthy,
    };
    let replayed = match slow_ms {
        Some(_) => Some(replayed_slow_ms(&case, own, &send)?),
        None => None,
    };
    let record = record_of(line, &case, cells, replayed);
    Ok((record, case))
}

/// A `pipeline` run folder: each case with an injected delay against its case without one
/// (same schedule and comm), op times, orders and send times from its measured timeline.
pub(super) fn read(dir: &Path) -> Result<Input> {
    let cases: Vec<Line<PipelineTable>> =
        read_table(&dir.join("pipeline.csv")).with_context(|| {
            format!(
                "{}: a run folder for --validate needs pipeline.csv",
                dir.display()
            )
        })?;
    let ops: Vec<Line<TimelineTable>> = read_table(&dir.join("pipeline_timeline.csv"))
        .with_context(|| format!("{}: no pipeline_timeline.csv", dir.display()))?;
    let mut input = Input {
        header: PIPELINE_COLUMNS.map(String::from).to_vec(),
        records: Vec::new(),
        cases: Vec::new(),
    };
    let mut skipped = Vec::new();
    for line in &cases {
        let chunked = ops
            .iter()
            .any(|o| o.lead.case == line.lead.case && o.params.chunk.unwrap_or(0) > 0);
        if chunked {
            // Said, not dropped: the runtime model replays one chunk per stage.
            eprintln!(
                "note: {}: case '{}' runs several model chunks per stage; --validate reads \
                 one-chunk schedules, and pipeline.csv holds its prediction (predicted_ms)",
                dir.display(),
                line.lead.case
            );
            continue;
        }
        let stages = line.params.stages as usize;
        if !calm(&line.params.slow, stages) && twin_of(line, &cases).is_none() {
            // Predicting it from its own op and send times would count its delay twice: the
            // run it predicts would be its own input.
            eprintln!(
                "note: {}: case '{}' has a delay but no healthy case of its schedule and comm, \
                 so nothing to predict it from (its own times hold the delay): left out of \
                 every figure; run pipeline with --slow LINK:0,MS for a healthy twin",
                dir.display(),
                line.lead.case
            );
            skipped.push(line.lead.case.clone());
            continue;
        }
        let (record, case) = case_of(line, &cases, &ops)
            .map_err(|why| anyhow!("{}: case '{}': {why}", dir.display(), line.lead.case))?;
        input.records.push(record);
        input.cases.push(case);
    }
    if input.cases.is_empty() && !skipped.is_empty() {
        anyhow::bail!(
            "{}: every delayed case ({}) lacks a healthy twin to be predicted from: run \
             pipeline with --slow LINK:0,MS",
            dir.display(),
            skipped.join(", ")
        );
    }
    if input.cases.is_empty() {
        anyhow::bail!("{}: pipeline.csv has no cases", dir.display());
    }
    Ok(input)
}

/// A pipeline run's op times for `sim --from`: per stage, the medians of F, B and W (ms) in a
/// case without a delay (what is known before a fault), where they came from, in words, and
/// the case's comm.
/// A case whose backward was split into B and W on every stage is taken first (a schedule
/// that fuses them, as 1f1b does, can be simulated from split times, not the other way round).
pub fn healthy_op_times(dir: &Path) -> Result<([Vec<f64>; 3], String, String)> {
    let cases: Vec<Line<PipelineTable>> = read_table(&dir.join("pipeline.csv"))?;
    let ops: Vec<Line<TimelineTable>> = read_table(&dir.join("pipeline_timeline.csv"))
        .with_context(|| format!("{}: no pipeline_timeline.csv", dir.display()))?;
    let mut found: Vec<(&Line<PipelineTable>, [Vec<f64>; 3])> = Vec::new();
    for c in cases
        .iter()
        .filter(|c| calm(&c.params.slow, c.params.stages as usize))
    {
        let stages = c.params.stages as usize;
        let (t, send, _) = lane_of(&ops, &c.lead.case, stages).map_err(|e| anyhow!("{e}"))?;
        let has = |v: &[Vec<f64>]| v.iter().all(|s| !s.is_empty());
        if has(&t[0]) && has(&t[1]) {
            let split = has(&t[2]);
            let w = if split {
                medians(&t[2])
            } else {
                vec![0.0; stages]
            };
            // An op that sends holds its stage for the send too (inline: the copy, the send
            // and its acknowledgement; offload: the copy and the hand-off), as the run measured.
            let held = medians(&send);
            let (mut f, mut b) = (medians(&t[0]), medians(&t[1]));
            for s in 0..stages {
                if s + 1 < stages {
                    f[s] += held[s];
                }
                if s > 0 {
                    b[s] += held[s];
                }
            }
            found.push((c, [f, b, w]));
        }
    }
    let split = |f: &&(&Line<PipelineTable>, [Vec<f64>; 3])| f.1[2].iter().all(|&w| w > 0.0);
    let Some((case, times)) = found.iter().find(split).or(found.first()) else {
        return Err(anyhow!(
            "{}: no case without a delay whose stages all ran F and B, so no healthy op times \
             (a prediction takes them from before the fault): run `morphbench pipeline` with a \
             healthy case",
            dir.display()
        ));
    };
    let fused = if times[2].iter().all(|&w| w > 0.0) {
        ""
    } else {
        "; its backward is not split (tW = 0, B holds it)"
    };
    let note = format!(
        "op times from {} case {} (medians per stage, an op that sends with its send's hold){fused}",
        dir.display(),
        case.lead.case
    );
    Ok((times.clone(), note, case.params.comm.clone()))
}

/// Each schedule's healthy iteration (ms, its p50) in a pipeline run's cases of `comm` without
/// a delay: what `sim --from` gives the tail's figures on.
pub fn healthy_iterations(dir: &Path, comm: &str) -> Result<BTreeMap<String, f64>> {
    let cases: Vec<Line<PipelineTable>> = read_table(&dir.join("pipeline.csv"))?;
    Ok(cases
        .iter()
        .filter(|c| c.params.comm == comm && calm(&c.params.slow, c.params.stages as usize))
        .map(|c| (c.params.schedule.clone(), c.figures.iteration_ms))
        .collect())
}
