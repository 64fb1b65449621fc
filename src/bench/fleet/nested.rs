//! The benches the gate leads inside its session once every rank's own tests are in: the
//! links between the ranks and the short real pipeline ([`Crew::nested`]). Each needs every
//! rank; a rank lost before them skips them, one lost during them is named.

use super::network::{self, LinksResult};
use super::pipeline::{self, PipelineResult};
use super::rank::RankOutcome;
use super::{Fleet, Order, Reply};
use crate::bench::links::Links;
use crate::bench::pipeline::Pipeline;
use crate::cluster::{ClusterError, Crew, Ranked};
use crate::record::run_dir::RunDir;

impl Fleet {
    /// This level's links bench on this rank (`machines`: rank 0's, from the inventory).
    pub(super) fn links_bench(&mut self, machines: Vec<String>) -> Option<&mut Links> {
        let spec = self.opts.links()?;
        let gpu = (self.opts.backend, self.opts.adapter.clone());
        let opts = &self.opts.session;
        Some(
            self.links
                .get_or_insert_with(|| Links::new(network::options(&spec, opts, machines, gpu))),
        )
    }

    /// This level's pipeline bench on this rank.
    pub(super) fn pipeline_bench(&mut self, stages: usize) -> Option<&mut Pipeline> {
        let allowance = self.opts.pipeline()?;
        let gpu = (self.opts.backend, self.opts.adapter.clone());
        let opts = &self.opts.session;
        Some(
            self.pipeline.get_or_insert_with(|| {
                Pipeline::new(pipeline::options(stages, opts, gpu, allowance))
            }),
        )
    }

    /// Rank 0: the level's short real pipeline, every rank a stage, once the links are in. A
    /// rank already lost skips it; a rank lost during it is named.
    pub(super) fn lead_pipeline(
        &mut self,
        crew: &mut Crew<Order, Reply>,
        ranks: &mut [RankOutcome],
        dir: &RunDir,
    ) -> PipelineResult {
        if self.opts.pipeline().is_none() {
            return PipelineResult::None;
        }
        if let Some(why) = lost_or_alone(ranks, "the pipeline") {
            return PipelineResult::Skipped(why);
        }
        if ranks.len() > pipeline::MAX_STAGES {
            return PipelineResult::Skipped(format!(
                "a pipeline of {} stages is not short: run `morphbench pipeline` on up to {} \
                 nodes that passed",
                ranks.len(),
                pipeline::MAX_STAGES
            ));
        }
        let Some(bench) = self.pipeline_bench(ranks.len()) else {
            return PipelineResult::None;
        };
        let world = crew.world();
        let led = bench
            .validate(world)
            .and_then(|()| bench.prepare(world).map(|_| ()))
            .and_then(|()| bench.lead(&mut crew.nested(), dir));
        let (busy, rows, cut) = (bench.busy().to_vec(), bench.rows().to_vec(), bench.cut());
        self.busy.extend(busy);
        match led {
            Ok(()) => PipelineResult::Done(rows, cut),
            Err(e) => PipelineResult::Failed(blame_lost(ranks, &e, "during the pipeline")),
        }
    }

    /// Rank 0: the level's links, once every rank's own tests are in. A rank already lost
    /// skips them (links needs every rank); a rank lost during them is named and the rows so
    /// far stay in links.csv.
    pub(super) fn lead_links(
        &mut self,
        crew: &mut Crew<Order, Reply>,
        ranks: &mut [RankOutcome],
        dir: &RunDir,
    ) -> LinksResult {
        if self.opts.links().is_none() {
            return LinksResult::None;
        }
        if let Some(why) = lost_or_alone(ranks, "links") {
            return LinksResult::Skipped(why);
        }
        let machines = ranks
            .iter()
            .map(|o| {
                o.inventory
                    .as_ref()
                    .map_or(String::new(), |i| i.machine_id.clone())
            })
            .collect();
        let Some(bench) = self.links_bench(machines) else {
            return LinksResult::None;
        };
        let led = bench.lead(&mut crew.nested(), dir);
        let (busy, outcome) = (bench.busy().to_vec(), bench.outcome().cloned());
        self.busy.extend(busy);
        match (led, outcome) {
            (Ok(()), Some(out)) => LinksResult::Done(Box::new(out)),
            (Ok(()), None) => LinksResult::Failed("links left no outcome".into()),
            (Err(e), _) => LinksResult::Failed(blame_lost(ranks, &e, "during the links")),
        }
    }
}

/// Why a bench that needs every rank (links, the pipeline) cannot run, if it cannot.
fn lost_or_alone(ranks: &[RankOutcome], what: &str) -> Option<String> {
    if ranks.len() < 2 {
        return Some(format!("one rank: no {what} to run"));
    }
    let lost = ranks.iter().find(|o| o.failure.is_some())?;
    Some(format!(
        "not run: {what} needs every rank, and rank {} was lost",
        lost.rank
    ))
}

/// A nested bench's error: the ranks it names (dead, silent, failed) get it as their failure;
/// returns it as text.
fn blame_lost(ranks: &mut [RankOutcome], e: &anyhow::Error, when: &str) -> String {
    let culprits = e
        .downcast_ref::<ClusterError>()
        .map(ClusterError::culprits)
        .unwrap_or_default();
    for r in culprits {
        if let Some(o) = ranks.get_mut(r as usize) {
            o.failure = Some(format!("{when}: {e:#}"));
        }
    }
    format!("{e:#}")
}
