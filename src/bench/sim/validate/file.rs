//! A validation CSV: one measured run a row, every cell checked where it is read.

use std::path::Path;

use anyhow::{anyhow, Context, Result};

use super::case::{Case, Input, ProfileFrom, Trend};
use crate::sim::model::MAX_MS;
use crate::sim::runtime::System;

/// Bytes of one fp16 activation of sequence 1024 and micro-batch 1 (the artifact's runs)
/// per unit of hidden size.
const BYTES_PER_HIDDEN: f64 = 1024.0 * 2.0;
/// The most stages x microbatches a row may ask for (each row runs several plans).
const MAX_ROW_OPS: usize = 1 << 14;
/// The columns every validation file has.
pub(super) const REQUIRED: [&str; 8] = [
    "system",
    "slow_links",
    "delay_ms",
    "stages",
    "microbatches",
    "tf_ms",
    "tb_ms",
    "tw_ms",
];

/// Reads and checks FILE (or a `pipeline` run folder); any bad cell is an error naming its row
/// and column.
pub fn read(path: &Path) -> Result<Input> {
    if path.is_dir() {
        return super::pipeline_run::read(path);
    }
    let text = crate::record::read_input(path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let mut r = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let header: Vec<String> = r
        .headers()
        .with_context(|| format!("{}: no header row", path.display()))?
        .iter()
        .map(str::to_string)
        .collect();
    if let Some(need) = REQUIRED.iter().find(|n| !header.iter().any(|h| h == *n)) {
        anyhow::bail!(
            "{}: no column '{need}'; a validation file needs {}",
            path.display(),
            REQUIRED.join(", ")
        );
    }
    let (mut records, mut cases) = (Vec::new(), Vec::new());
    for (i, rec) in r.records().enumerate() {
        let row = i + 1;
        let rec = rec.with_context(|| format!("{}: row {row} is not CSV", path.display()))?;
        let cells: Vec<String> = rec.iter().map(str::to_string).collect();
        let case = parse_row(&Row {
            header: &header,
            cells: &cells,
        })
        .map_err(|e| anyhow!("{}: row {row} (line {}), {e}", path.display(), row + 1))?;
        records.push(cells);
        cases.push(case);
    }
    if cases.is_empty() {
        anyhow::bail!("{}: no rows to validate", path.display());
    }
    Ok(Input {
        header,
        records,
        cases,
    })
}

/// One record with its header: each read names its column in its error.
struct Row<'a> {
    header: &'a [String],
    cells: &'a [String],
}

fn bad(name: &str, v: &str, why: &str) -> anyhow::Error {
    anyhow::anyhow!("column {name}: '{v}' {why}")
}

impl Row<'_> {
    /// The cell of `name`, None when the column is missing or the cell empty.
    fn get(&self, name: &str) -> Option<&str> {
        self.header
            .iter()
            .position(|h| h == name)
            .and_then(|i| self.cells.get(i))
            .map(|s| s.as_str())
            .filter(|s| !s.is_empty())
    }

    fn need(&self, name: &str) -> anyhow::Result<&str> {
        self.get(name)
            .ok_or_else(|| anyhow::anyhow!("column {name}: empty"))
    }

    fn count(&self, name: &str, lo: usize, hi: usize) -> anyhow::Result<usize> {
        let v = self.need(name)?;
        match v.parse::<usize>() {
            Ok(x) if (lo..=hi).contains(&x) => Ok(x),
            _ => Err(bad(
                name,
                v,
                &format!("is not a whole number from {lo} to {hi}"),
            )),
        }
    }

    /// A number >= 0, None when the cell is empty.
    fn number(&self, name: &str) -> anyhow::Result<Option<f64>> {
        self.get(name)
            .map(|v| match v.parse::<f64>() {
                Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
                _ => Err(bad(name, v, "is not a number >= 0")),
            })
            .transpose()
    }

    /// A measured duration, None when the cell is empty.
    fn measured(&self, name: &str) -> anyhow::Result<Option<f64>> {
        self.get(name).map(|v| ms(name, v)).transpose()
    }

    /// One value or one per stage, `;` between them.
    fn per_stage(&self, name: &str, stages: usize) -> anyhow::Result<Vec<f64>> {
        let v = self.need(name)?;
        let xs = v
            .split(';')
            .map(|x| ms(name, x))
            .collect::<Result<Vec<_>, _>>()?;
        let xs = match xs.len() {
            1 => vec![xs[0]; stages],
            n if n == stages => xs,
            n => {
                let why = format!("has {n} values; give 1 or {stages} separated by ';'");
                return Err(bad(name, v, &why));
            }
        };
        if name != "tw_ms" && xs.iter().any(|&x| x <= 0.0) {
            return Err(bad(name, v, "has a zero: F and B take > 0 ms"));
        }
        Ok(xs)
    }
}

fn ms(name: &str, v: &str) -> anyhow::Result<f64> {
    match v.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && (0.0..=MAX_MS).contains(&x) => Ok(x),
        _ => Err(bad(
            name,
            v,
            &format!("is not a duration from 0 to {MAX_MS} ms"),
        )),
    }
}

/// Per link, the delay: `delay_ms` on each of `links` (`i_j` pairs, `,` between them).
fn slow_delays(links: &str, delay_ms: f64, stages: usize) -> anyhow::Result<Vec<f64>> {
    let mut delay = vec![0.0; stages - 1];
    for l in links
        .split(',')
        .map(str::trim)
        .filter(|l| !l.is_empty() && *l != "none")
    {
        let pair = l
            .split_once('_')
            .and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?)));
        match pair {
            Some((a, b)) if b == a + 1 && b < stages => delay[a] += delay_ms,
            _ => {
                let why = format!(
                    "names '{l}': give links as i_j with j = i + 1 < {stages}, separated by ','"
                );
                return Err(bad("slow_links", links, &why));
            }
        }
    }
    Ok(delay)
}

/// The healthy run's trend, from `healthy_iterations_ms`: its iterations before the fault, in
/// order, `;` between them (None when the column is missing or the cell empty).
fn trend(row: &Row) -> anyhow::Result<Option<Trend>> {
    let Some(v) = row.get("healthy_iterations_ms") else {
        return Ok(None);
    };
    let xs = v
        .split(';')
        .map(|x| ms("healthy_iterations_ms", x))
        .collect::<Result<Vec<_>, _>>()?;
    if !(3..=64).contains(&xs.len()) {
        let why = format!("has {} values; give 3 to 64 separated by ';'", xs.len());
        return Err(bad("healthy_iterations_ms", v, &why));
    }
    Ok(Trend::of(&xs))
}

/// Where the row's op times were measured: FILE's `profile_from` where it says
/// (`healthy`, `this_run`, `other_run`, `given`), else read from `profile`, a path ending in
/// `SYSTEM/LINKS/DELAY_S/FILE` as the artifact's are (`.../ZB-CPU/0_1/0.03/simu.txt`): delay 0
/// is a healthy run, the row's own system, links and delay the run it predicts. Without either,
/// or with a path of another shape, `given`.
fn profile_from(row: &Row, system: System, delay_ms: f64) -> anyhow::Result<ProfileFrom> {
    if let Some(v) = row.get("profile_from") {
        return ProfileFrom::ALL
            .into_iter()
            .find(|p| p.as_str() == v)
            .ok_or_else(|| {
                bad(
                    "profile_from",
                    v,
                    "is not healthy, this_run, other_run or given",
                )
            });
    }
    let Some(path) = row.get("profile") else {
        return Ok(ProfileFrom::Given);
    };
    let parts: Vec<&str> = path.split('/').collect();
    let [.., sys, links, delay_s, _file] = parts.as_slice() else {
        return Ok(ProfileFrom::Given);
    };
    let (Ok(sys), Ok(delay_s)) = (sys.parse::<System>(), delay_s.parse::<f64>()) else {
        return Ok(ProfileFrom::Given);
    };
    let same_links = *links == row.get("slow_links").unwrap_or("");
    Ok(if delay_s == 0.0 {
        ProfileFrom::Healthy
    } else if sys == system && same_links && (delay_s * 1e3 - delay_ms).abs() < 1e-6 {
        ProfileFrom::ThisRun
    } else {
        ProfileFrom::OtherRun
    })
}

fn parse_row(row: &Row) -> anyhow::Result<Case> {
    let system: System = row
        .need("system")?
        .parse()
        .map_err(|e: anyhow::Error| anyhow::anyhow!("column system: {e}"))?;
    let stages = row.count("stages", 2, 256)?;
    let microbatches = row.count("microbatches", 1, 4096)?;
    if stages * microbatches > MAX_ROW_OPS {
        return Err(anyhow::anyhow!(
            "stages x microbatches = {} is over {MAX_ROW_OPS}",
            stages * microbatches
        ));
    }
    let delay_ms = ms("delay_ms", row.need("delay_ms")?)?;
    let delay = slow_delays(row.get("slow_links").unwrap_or(""), delay_ms, stages)?;
    let activation_bytes = match (row.number("activation_bytes")?, row.number("hidden")?) {
        (Some(b), _) => b,
        (None, Some(h)) => h * BYTES_PER_HIDDEN,
        (None, None) => 0.0,
    };
    if activation_bytes > 1e12 {
        return Err(anyhow::anyhow!("column activation_bytes: over 1 TB"));
    }
    let channels = match row.get("offload_channels") {
        Some(_) => row.count("offload_channels", 1, 1024)?,
        // The artifact's rule (experiments/*/test.sh): 3 senders up to 30 ms, 6 above.
        None if delay_ms <= 30.0 => 3,
        None => 6,
    };
    Ok(Case {
        system,
        stages,
        microbatches,
        tf: row.per_stage("tf_ms", stages)?,
        tb: row.per_stage("tb_ms", stages)?,
        tw: row.per_stage("tw_ms", stages)?,
        delay,
        activation_bytes,
        channels,
        healthy_ms: row.measured("healthy_ms")?,
        slow_ms: row.measured("slow_ms")?,
        trend: trend(row)?,
        orders: None,
        send_ms: Vec::new(),
        profile_from: profile_from(row, system, delay_ms)?,
    })
}
