//! What a run folder's meta.json says about it, read back: the labels that name a run.

use std::path::Path;

/// What a run's meta.json says about it: the one reader of meta.json for titles, legends,
/// reports, `runs` and summary.json. Fields are `None` where meta.json lacks them.
#[derive(Debug, Clone)]
pub struct RunLabel {
    pub run_id: Option<String>,
    pub host: Option<String>,
    /// `None` for a run without a GPU.
    pub adapter: Option<String>,
    /// The adapter's driver and its version (`llvmpipe Mesa 22.3.6 (LLVM 15.0.6)`).
    pub driver: Option<String>,
    /// meta.json's status ("complete", "failed", "running"), or "unknown" without one.
    pub status: String,
    pub error: Option<String>,
    pub started_utc: Option<String>,
    pub finished_utc: Option<String>,
    /// Benches that ran on a busy machine, each (bench, warning) (meta.json's
    /// `notes.host_load`).
    pub busy: Vec<(String, String)>,
    /// Why meta.json could not be read, when the folder has one that is damaged (not a
    /// regular file, too large, not JSON).
    pub meta_problem: Option<String>,
    /// The folder has no meta.json at all (CSVs only: copied, or written by hand).
    pub meta_missing: bool,
    /// A multi-rank run's ranks, hosts and adapters, counted ("4 ranks on 4 hosts, 4x
    /// llvmpipe"): its rank 0 alone is not what ran.
    pub ranks: Option<String>,
}

impl RunLabel {
    pub fn of(dir: &Path) -> RunLabel {
        let (meta, meta_problem, meta_missing) = match super::read_meta(dir) {
            Ok(Some(m)) => (m, None, false),
            Ok(None) => (serde_json::Value::Null, None, true),
            Err(e) => (serde_json::Value::Null, Some(e.to_string()), false),
        };
        let text = |v: &serde_json::Value| v.as_str().map(String::from);
        let ranks = ranks_of(dir, &meta["config"]["roster"]);
        RunLabel {
            ranks,
            run_id: text(&meta["run_id"]),
            host: text(&meta["host"]["hostname"]),
            adapter: text(&meta["adapter"]["name"]),
            driver: match (
                text(&meta["adapter"]["driver"]),
                text(&meta["adapter"]["driver_info"]),
            ) {
                (None, None) => None,
                (d, i) => Some(
                    format!("{} {}", d.unwrap_or_default(), i.unwrap_or_default())
                        .trim()
                        .to_string(),
                ),
            },
            status: text(&meta["status"]).unwrap_or_else(|| "unknown".into()),
            error: text(&meta["error"]),
            started_utc: text(&meta["started_utc"]),
            finished_utc: text(&meta["finished_utc"]),
            busy: meta["notes"]["host_load"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .filter_map(|(bench, v)| Some((bench.clone(), text(&v["warning"])?)))
                        .collect()
                })
                .unwrap_or_default(),
            meta_problem,
            meta_missing,
        }
    }

    /// What could not be used of the folder's meta.json and why, when it is missing or
    /// damaged: the run's identity, status, host and adapter are then unknown.
    pub fn meta_warning(&self, dir: &Path) -> Option<String> {
        let what = "the run's id, status, host and adapter are unknown";
        match (&self.meta_problem, self.meta_missing) {
            (Some(p), _) => Some(format!("{p}: {what}")),
            (None, true) => Some(format!("{} has no meta.json: {what}", dir.display())),
            _ => None,
        }
    }

    pub fn host_name(&self) -> &str {
        self.host.as_deref().unwrap_or("?")
    }

    pub fn adapter_name(&self) -> &str {
        self.adapter.as_deref().unwrap_or("no GPU")
    }

    /// A warning for a run that did not complete, to put at the top of its report.
    pub fn incomplete(&self) -> Option<String> {
        if self.meta_missing || self.meta_problem.is_some() {
            return Some(
                "Its meta.json is missing or damaged: whether it finished is unknown.".into(),
            );
        }
        match self.status.as_str() {
            "complete" => None,
            "running" => Some(
                "This run did not finish (meta.json still says \"running\": interrupted or \
                 still going). Its rows are whole, but figures may be missing."
                    .into(),
            ),
            status => Some(format!(
                "This run is {status}{}. Its rows are whole, but figures may be missing.",
                self.error
                    .as_ref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            )),
        }
    }

    pub fn short(&self) -> String {
        match &self.ranks {
            Some(r) => r.clone(),
            // A folder whose meta.json says nothing of either (missing, or a multi-rank run's
            // without a roster) is not a host called "?" without a GPU.
            None if self.host.is_none() && self.adapter.is_none() => {
                "host and adapter unknown".into()
            }
            None => format!("{} / {}", self.host_name(), self.adapter_name()),
        }
    }
}

/// A multi-rank run's roster counted: ranks, hosts, and each adapter with its count, from the
/// roster or, where the roster has none (the gate opens adapters later), `ranks/rN/rank.json`.
fn ranks_of(dir: &Path, roster: &serde_json::Value) -> Option<String> {
    use std::collections::BTreeMap;
    let roster = roster.as_array().filter(|r| r.len() > 1)?;
    let hosts: std::collections::BTreeSet<&str> = roster
        .iter()
        .filter_map(|r| r["hostname"].as_str())
        .collect();
    let mut adapters: BTreeMap<String, usize> = BTreeMap::new();
    for r in roster {
        let from_rank = || -> Option<String> {
            let rank = r["rank"].as_u64()?;
            let path = dir.join("ranks").join(format!("r{rank}")).join("rank.json");
            let bytes = super::read_capped(&path, 1 << 20).ok()?;
            let doc: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
            doc["inventory"]["adapter"].as_str().map(String::from)
        };
        let name = r["adapter"].as_str().map(String::from).or_else(from_rank);
        *adapters
            .entry(name.unwrap_or_else(|| "adapter unknown".into()))
            .or_default() += 1;
    }
    // A run that opened no adapter (links) names none.
    let counted: Vec<String> = if adapters.keys().all(|a| a == "adapter unknown") {
        Vec::new()
    } else {
        adapters
            .iter()
            .map(|(a, n)| format!(", {n}x {a}"))
            .collect()
    };
    Some(format!(
        "{} ranks on {} host{}{}",
        roster.len(),
        hosts.len(),
        if hosts.len() == 1 { "" } else { "s" },
        counted.join("")
    ))
}
