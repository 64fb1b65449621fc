//! Reading a run back for plotting: its tables (typed, through each bench's row type) and
//! the labels that name it.

use std::path::Path;

/// Host and adapter of a run, for titles and legends.
#[derive(Debug, Clone)]
pub struct RunLabel {
    pub host: String,
    pub adapter: String,
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
        }
    }

    pub fn short(&self) -> String {
        format!("{} / {}", self.host, self.adapter)
    }
}
