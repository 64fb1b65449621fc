//! The checks of a pipeline plan before any rank starts: sizes, counts, cases and links.

use super::*;

impl PipelinePlan {
    pub fn validate(&self, stages: u32) -> Result<(), String> {
        let s = &self.shape;
        if s.layers == 0 || s.layers > MAX_LAYERS {
            return Err(format!("--layers {}: give 1 to {MAX_LAYERS}", s.layers));
        }
        if s.microbatches == 0 || s.microbatches > MAX_MICROBATCHES {
            return Err(format!(
                "--microbatches {}: give 1 to {MAX_MICROBATCHES}",
                s.microbatches
            ));
        }
        if s.hidden == 0 || s.tokens == 0 || s.elements() > MAX_ELEMENTS {
            return Err(format!(
                "--tokens {} x --hidden {}: each must be >= 1 and their product at most {MAX_ELEMENTS}",
                s.tokens, s.hidden
            ));
        }
        if self.iters == 0 || self.iters > 10_000 {
            return Err(format!("--iters {}: give 1 to 10000", self.iters));
        }
        if self.warmup > MAX_WARMUP {
            return Err(format!("--warmup {}: give 0 to {MAX_WARMUP}", self.warmup));
        }
        if self.cases.len() > MAX_CASES {
            return Err(format!(
                "{} cases (schedules x comm modes x --slow delays): give at most {MAX_CASES}",
                self.cases.len()
            ));
        }
        let bytes = s.stage_bytes();
        if bytes > MAX_STAGE_BYTES {
            return Err(format!(
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
            let schedule = c.schedule.parse::<Schedule>()?;
            if schedule.layout(stages as usize).chunks() > 1 {
                return Err(format!(
                    "--schedule {schedule}: the wgpu pipeline runs one model chunk per stage; \
                     simulate it with `morphbench sim --schedule {schedule}`"
                ));
            }
            if let Some((link, ms)) = c.slow {
                if link + 1 >= stages {
                    return Err(format!(
                        "--slow {link}:{ms}: link {link} does not exist with {stages} stages (links 0..={})",
                        stages as i64 - 2
                    ));
                }
                if !(0.0..=60_000.0).contains(&ms) {
                    return Err(format!("--slow {link}:{ms}: give 0 to 60000 ms"));
                }
            }
        }
        Ok(())
    }
}
