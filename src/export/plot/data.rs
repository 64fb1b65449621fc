//! Reading a run back for plotting: its tables (typed, through each bench's row type) and
//! the labels that name it.

use std::path::Path;

/// Host and adapter of a run, for titles and legends.
#[derive(Debug, Clone)]
pub struct RunLabel {
    pub host: String,
    pub adapter: String,
    /// meta.json's status ("complete", "failed", "running"), or "unknown" without one.
    pub status: String,
    pub error: Option<String>,
}

impl RunLabel {
    pub fn of(dir: &Path) -> RunLabel {
        let meta: serde_json::Value = std::fs::read(dir.join("meta.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let s = |v: &serde_json::Value| v.as_str().unwrap_or("?").to_string();
        RunLabel {
            host: s(&meta["host"]["hostname"]),
            adapter: meta["adapter"]["name"]
                .as_str()
                .map(String::from)
                .unwrap_or_else(|| "no GPU".into()),
            status: meta["status"].as_str().unwrap_or("unknown").to_string(),
            error: meta["error"].as_str().map(String::from),
        }
    }

    /// A warning for a run that did not complete, to put at the top of its report.
    pub fn incomplete(&self) -> Option<String> {
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
        format!("{} / {}", self.host, self.adapter)
    }
}
