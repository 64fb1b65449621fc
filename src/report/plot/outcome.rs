//! What drawing a run's charts gives back: the figures written and what was skipped.

use std::path::PathBuf;

/// A written figure and what it shows.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Figure {
    pub name: String,
    pub about: String,
    pub files: Vec<PathBuf>,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PlotOutcome {
    pub figures: Vec<Figure>,
    pub skipped: Vec<String>,
    /// What could not be used (a missing or damaged meta.json), with why.
    pub warnings: Vec<String>,
}
