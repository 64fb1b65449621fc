//! Describing a [`Scenario`]: its shape, then only what differs from the defaults, checked
//! once by [`ScenarioBuilder::build`].

use super::model::{add_per_link, non_negative, per_stage, CommModel, Scenario, ScenarioError};
use super::model::{MAX_MICROBATCHES, MAX_STAGES, MAX_STAGE_MICROBATCHES};

impl Scenario {
    /// A scenario of `stages` and `microbatches`, described from the defaults on.
    pub fn builder<'a>(stages: usize, microbatches: usize) -> ScenarioBuilder<'a> {
        ScenarioBuilder {
            stages,
            microbatches,
            tf: &[1.0],
            tb: &[1.0],
            tw: &[1.0],
            link_ms: 0.0,
            slow: &[],
            comm: CommModel::Latency,
            d2h_ms: 0.0,
        }
    }
}

/// A scenario being described: its shape, then what differs from the defaults (every op
/// 1 ms, links without latency or delay, transfers on the compute stream, no device-to-host
/// copy); [`ScenarioBuilder::build`] checks it.
#[derive(Debug, Clone, Copy)]
pub struct ScenarioBuilder<'a> {
    stages: usize,
    microbatches: usize,
    tf: &'a [f64],
    tb: &'a [f64],
    tw: &'a [f64],
    link_ms: f64,
    slow: &'a [(usize, f64)],
    comm: CommModel,
    d2h_ms: f64,
}

impl<'a> ScenarioBuilder<'a> {
    /// F, B and W times (ms): one value each, or one per stage.
    pub fn times(self, tf: &'a [f64], tb: &'a [f64], tw: &'a [f64]) -> Self {
        ScenarioBuilder { tf, tb, tw, ..self }
    }

    /// Every link's base latency (ms).
    pub fn link_ms(self, link_ms: f64) -> Self {
        ScenarioBuilder { link_ms, ..self }
    }

    /// Extra delay (ms) on some links: (link, delay) pairs.
    pub fn slow(self, slow: &'a [(usize, f64)]) -> Self {
        ScenarioBuilder { slow, ..self }
    }

    /// How transfers meet the compute stream, and the device-to-host copy's queue time (ms)
    /// under [`CommModel::Offload`].
    pub fn comm(self, comm: CommModel, d2h_ms: f64) -> Self {
        ScenarioBuilder {
            comm,
            d2h_ms,
            ..self
        }
    }

    /// The checked scenario.
    pub fn build(self) -> Result<Scenario, ScenarioError> {
        let ScenarioBuilder {
            stages,
            microbatches,
            tf,
            tb,
            tw,
            link_ms,
            slow,
            comm,
            d2h_ms,
        } = self;
        if stages < 1 {
            return Err(ScenarioError::TooFew("stages"));
        }
        if microbatches < 1 {
            return Err(ScenarioError::TooFew("microbatches"));
        }
        let over = |what, value, cap, why| ScenarioError::TooMany {
            what,
            value,
            cap,
            why,
        };
        if stages > MAX_STAGES {
            return Err(over("stages", stages, MAX_STAGES, ""));
        }
        if microbatches > MAX_MICROBATCHES {
            return Err(over("microbatches", microbatches, MAX_MICROBATCHES, ""));
        }
        if stages * microbatches > MAX_STAGE_MICROBATCHES {
            return Err(over(
                "stages x microbatches",
                stages * microbatches,
                MAX_STAGE_MICROBATCHES,
                " (it keeps one sim run under 1 GiB of memory)",
            ));
        }
        let tf = per_stage("tf", tf, stages)?;
        let tb = per_stage("tb", tb, stages)?;
        let tw = per_stage("tw", tw, stages)?;
        // F and B carry every cross-stage dependency; zero-length ones would let a chain of
        // ops finish "at the same instant", which the event order cannot represent.
        for (field, v) in [("tf", &tf), ("tb", &tb)] {
            if let Some(&x) = v.iter().find(|&&x| x <= 0.0) {
                return Err(ScenarioError::BadDuration {
                    field,
                    value: x,
                    extra: " and F and B must take > 0",
                });
            }
        }
        let delay_ms = add_per_link(vec![0.0; stages - 1], stages, slow, "slow delay")?;
        let tfb = (0..stages).map(|i| tf[i] + tb[i] + tw[i]).collect();
        Ok(Scenario {
            stages,
            microbatches,
            tf,
            tb,
            tw,
            link_ms: non_negative("link-ms", link_ms)?,
            delay_ms,
            comm,
            d2h_ms: non_negative("d2h-ms", d2h_ms)?,
            occupancy_ms: vec![0.0; stages - 1],
            stall_ms: Vec::new(),
            hold_ms: Vec::new(),
            tfb,
            activation: None,
            activation_limit: None,
        })
    }
}
