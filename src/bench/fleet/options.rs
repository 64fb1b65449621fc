//! What each rank of a fleet gate is told: its options (level, tests, baseline, where its
//! verdict goes), and the steps rank 0 plans them into.

use std::path::PathBuf;
use std::time::Duration;

use super::checks::{self, Level, TestSpec};
use crate::cluster::SessionOptions;
use crate::gpu::BackendChoice;

#[derive(Debug, Clone)]
pub struct FleetOptions {
    pub session: SessionOptions,
    pub level: Level,
    /// Only these of the level's tests (`--only`; [`checks::TEST_NAMES`]).
    pub only: Option<Vec<String>>,
    /// Expected values per SKU (`morphbench baseline`), read by rank 0.
    pub baseline: Option<PathBuf>,
    /// Per-stage op times for keep_cost's modelled pipeline (a `sim --validate` file).
    pub profile: Option<PathBuf>,
    /// Rank 0 drains each failed host through scontrol (`--slurm`).
    pub slurm: bool,
    /// Each host's lowest rank writes its host's metrics here (`--textfile`).
    pub textfile: Option<PathBuf>,
    pub backend: BackendChoice,
    pub adapter: Option<String>,
}

impl FleetOptions {
    pub(super) fn selected(&self, name: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|o| o.iter().any(|n| n == name))
    }

    /// The level's tests that run.
    pub fn tests(&self) -> Vec<TestSpec> {
        let mut tests = self.level.tests();
        tests.retain(|t| self.selected(t.kind.name()));
        tests
    }

    /// The level's links, when they run.
    pub fn links(&self) -> Option<checks::LinksSpec> {
        self.level.links().filter(|_| self.selected("links"))
    }

    /// The time allowed the level's pipeline, when it runs.
    pub fn pipeline(&self) -> Option<Duration> {
        self.level.pipeline().filter(|_| self.selected("pipeline"))
    }

    /// The most one rank may take ([`checks::rank_bound`]).
    pub fn rank_bound(&self) -> Duration {
        checks::rank_bound(
            &self.tests(),
            self.links().as_ref(),
            self.pipeline(),
            self.level.setup_margin(),
        )
    }
}

/// One step: the ranks that run at once, each with its tests.
pub(super) type Step = Vec<(u32, Vec<TestSpec>)>;
