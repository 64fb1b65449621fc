//! `meta.json`: what ran, where, and with which tool, so a CSV can be trusted later.

use serde::Serialize;

use crate::host::HostInfo;

#[derive(Debug, Clone, Serialize)]
pub struct RunMeta {
    pub run_id: String,
    pub tool: &'static str,
    pub tool_version: &'static str,
    pub git_revision: Option<&'static str>,
    pub command_line: Vec<String>,
    /// "running" until the run ends, then "complete" or "failed".
    pub status: String,
    pub error: Option<String>,
    pub started_utc: String,
    pub finished_utc: Option<String>,
    pub host: HostInfo,
    pub adapter: Option<serde_json::Value>,
    pub config: Option<serde_json::Value>,
    /// Free-form per-bench notes (variant selection, calibration, warnings).
    pub notes: serde_json::Map<String, serde_json::Value>,
}

impl RunMeta {
    pub fn new(host: HostInfo) -> RunMeta {
        RunMeta {
            run_id: String::new(),
            tool: "morphbench",
            tool_version: env!("CARGO_PKG_VERSION"),
            git_revision: option_env!("MORPHBENCH_GIT_REVISION"),
            command_line: std::env::args().collect(),
            status: "running".into(),
            error: None,
            started_utc: chrono::Utc::now().to_rfc3339(),
            finished_utc: None,
            host,
            adapter: None,
            config: None,
            notes: Default::default(),
        }
    }
}
