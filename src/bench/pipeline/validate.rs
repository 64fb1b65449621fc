//! The checks of a pipeline plan before any rank starts: sizes, counts, cases and links.

use super::plan::{
    PipelinePlan, MAX_CASES, MAX_ELEMENTS, MAX_LAYERS, MAX_MICROBATCHES, MAX_STAGE_BYTES,
    MAX_WARMUP,
};
use super::shape;
use crate::sim::{evaluate, Layout, Scenario, Schedule};

impl PipelinePlan {
    /// The layouts the cases' schedules put the model in (one chunk per stage, interleaved,
    /// ...), each once, in the cases' order.
    pub fn layouts(&self, stages: u32) -> anyhow::Result<Vec<Layout>> {
        let mut out = Vec::new();
        for c in &self.cases {
            let layout = c.schedule.layout(stages as usize);
            if !out.contains(&layout) {
                out.push(layout);
            }
        }
        if out.is_empty() {
            out.push(Layout::Linear);
        }
        Ok(out)
    }

    pub fn validate(&self, stages: u32) -> anyhow::Result<()> {
        let s = &self.shape;
        if s.layers == 0 || s.layers > MAX_LAYERS {
            return Err(anyhow::anyhow!(
                "--layers {}: give 1 to {MAX_LAYERS}",
                s.layers
            ));
        }
        if s.microbatches == 0 || s.microbatches > MAX_MICROBATCHES {
            return Err(anyhow::anyhow!(
                "--microbatches {}: give 1 to {MAX_MICROBATCHES}",
                s.microbatches
            ));
        }
        if s.hidden == 0 || s.tokens == 0 || s.elements() > MAX_ELEMENTS {
            return Err(anyhow::anyhow!(
                "--tokens {} x --hidden {}: each must be >= 1 and their product at most {MAX_ELEMENTS}",
                s.tokens, s.hidden
            ));
        }
        if self.iters == 0 || self.iters > 10_000 {
            return Err(anyhow::anyhow!("--iters {}: give 1 to 10000", self.iters));
        }
        if self.warmup > MAX_WARMUP {
            return Err(anyhow::anyhow!(
                "--warmup {}: give 0 to {MAX_WARMUP}",
                self.warmup
            ));
        }
        if self.cases.len() > MAX_CASES {
            return Err(anyhow::anyhow!(
                "{} cases (schedules x comm modes x --slow delays): give at most {MAX_CASES}",
                self.cases.len()
            ));
        }
        let layouts = self.layouts(stages)?;
        let bytes: u64 = layouts
            .iter()
            .map(|l| s.stage_bytes(l.chunks() as u32))
            .sum();
        if bytes > MAX_STAGE_BYTES {
            return Err(anyhow::anyhow!(
                "--layers {} --microbatches {} --tokens {} --hidden {}: a stage would hold {} \
                 on its GPU, over the {} a stage may take; make one of them smaller",
                s.layers,
                s.microbatches,
                s.tokens,
                s.hidden,
                crate::units::human_bytes(bytes),
                crate::units::human_bytes(MAX_STAGE_BYTES)
            ));
        }
        for c in &self.cases {
            runnable(&c.schedule, s, stages)?;
            if let Some((link, ms)) = c.slow {
                let links = crate::sim::links_of(stages as usize) as u32;
                if link >= links {
                    return Err(anyhow::anyhow!(
                        "--slow {link}:{ms}: link {link} does not exist with {stages} stages (links 0..={}{})",
                        links as i64 - 1,
                        if links > 2 {
                            format!("; link {} is the wrap link from the last stage to the first, which interleaved schedules cross", links - 1)
                        } else {
                            String::new()
                        }
                    ));
                }
                if !(0.0..=60_000.0).contains(&ms) {
                    return Err(anyhow::anyhow!("--slow {link}:{ms}: give 0 to 60000 ms"));
                }
            }
        }
        Ok(())
    }
}

/// Whether the wgpu pipeline can run `schedule` on `stages` ranks of `shape`: its chunks split
/// the layers evenly, its ops are ones a stage runs one at a time (not DualPipe's overlapped
/// pairs), and the simulator plans it (each schedule's own rules on microbatches and ranks).
fn runnable(schedule: &Schedule, shape: &shape::Shape, stages: u32) -> anyhow::Result<()> {
    let layout = schedule.layout(stages as usize);
    let simulate_it = format!("simulate it with `morphbench sim --schedule {schedule}`");
    match (schedule, layout) {
        (Schedule::DualPipeV, _) => {
            return Err(anyhow::anyhow!(
                "--schedule {schedule}: its overlapped forward-and-backward pairs need two \
                 streams a stage does not have here; {simulate_it}"
            ))
        }
        (_, Layout::InterleavedAsPublished(..)) => {
            return Err(anyhow::anyhow!(
                "--schedule {schedule}: this is the Zero Bubble script's accounting, not a \
                 schedule a pipeline can run; run interleaved:V, or {simulate_it}"
            ))
        }
        _ => {}
    }
    let v = layout.chunks() as u32;
    if !shape.layers.is_multiple_of(v) {
        return Err(anyhow::anyhow!(
            "--schedule {schedule} --layers {}: each stage holds {v} model chunks, so give a \
             multiple of {v} layers",
            shape.layers
        ));
    }
    if v > 1 && stages < 2 {
        return Err(anyhow::anyhow!(
            "--schedule {schedule}: it needs at least 2 stages"
        ));
    }
    let unit = Scenario::builder(stages as usize, shape.microbatches as usize).build()?;
    evaluate(schedule, &unit, usize::MAX)
        .map(|_| ())
        .map_err(|e| anyhow::anyhow!("--schedule {schedule}: {e}"))
}
