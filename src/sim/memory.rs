//! Memory per stage in bytes, from the model's shape: the activations a forward keeps until
//! its backward and the parameters. Per transformer layer, in 16-bit (the Zero Bubble paper's
//! Table 1, after Korthikanti et al.): a forward keeps M_B = s·b·(34h + 5a·s) bytes, of which
//! the input-gradient pass frees all but M_W = 32·s·b·h, which the weight-gradient pass frees.

use serde::{Deserialize, Serialize};

/// A transformer's shape, as far as memory goes (`[model]` in a scenario).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelShape {
    /// Hidden size h.
    pub hidden: u64,
    /// Attention heads a.
    pub heads: u64,
    /// Sequence length s.
    pub seq_len: u64,
    /// Microbatch size b (sequences per microbatch).
    pub micro_batch: u64,
    /// Transformer layers on each stage.
    pub layers_per_stage: f64,
}

/// What one microbatch's forward keeps on a stage, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ActivationBytes {
    /// Held from the forward until the backward (M_B per layer, times the layers).
    pub held: f64,
    /// The part of it the weight-gradient pass frees (M_W per layer, times the layers).
    pub weight_part: f64,
}

impl ModelShape {
    /// Why the shape cannot be used, if it cannot.
    pub fn problem(&self) -> Option<String> {
        let fields = [
            ("hidden", self.hidden),
            ("heads", self.heads),
            ("seq_len", self.seq_len),
            ("micro_batch", self.micro_batch),
        ];
        if let Some((name, _)) = fields.iter().find(|(_, v)| *v == 0 || *v > 1 << 24) {
            return Some(format!("[model] {name} must be 1 to 16777216"));
        }
        if !(self.layers_per_stage > 0.0 && self.layers_per_stage <= 4096.0) {
            return Some("[model] layers_per_stage must be over 0 and at most 4096".into());
        }
        if !self.hidden.is_multiple_of(self.heads) {
            return Some(format!(
                "[model] hidden {} is not a multiple of heads {}: give heads that divide it",
                self.hidden, self.heads
            ));
        }
        None
    }

    /// M_B: bytes one layer keeps per microbatch from forward to backward.
    pub fn layer_activation(&self) -> f64 {
        let (h, a, s, b) = (
            self.hidden as f64,
            self.heads as f64,
            self.seq_len as f64,
            self.micro_batch as f64,
        );
        s * b * (34.0 * h + 5.0 * a * s)
    }

    /// M_W: the part of M_B only the weight-gradient pass frees.
    pub fn layer_weight_part(&self) -> f64 {
        32.0 * (self.seq_len * self.micro_batch * self.hidden) as f64
    }

    /// One microbatch's activations on a stage.
    pub fn activation(&self) -> ActivationBytes {
        ActivationBytes {
            held: self.layer_activation() * self.layers_per_stage,
            weight_part: self.layer_weight_part() * self.layers_per_stage,
        }
    }

    /// A stage's parameters in 16-bit: 12h² + 13h per layer, two bytes each (weights only;
    /// gradients and optimizer states come on top and do not depend on the schedule).
    pub fn param_bytes(&self) -> f64 {
        let h = self.hidden as f64;
        2.0 * (12.0 * h * h + 13.0 * h) * self.layers_per_stage
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{evaluate, Scenario, Schedule};

    fn shape() -> ModelShape {
        ModelShape {
            hidden: 1024,
            heads: 16,
            seq_len: 512,
            micro_batch: 2,
            layers_per_stage: 3.0,
        }
    }

    /// Peak activation bytes per rank of `schedule` on p ranks and m microbatches.
    fn peaks(schedule: &str, p: usize, m: usize) -> Vec<f64> {
        let sc = Scenario::builder(p, m)
            .times(&[2.0], &[2.0], &[1.0])
            .link_ms(0.1)
            .build()
            .unwrap()
            .with_activation(shape().activation());
        let schedule: Schedule = schedule.parse().unwrap();
        evaluate(&schedule, &sc, usize::MAX)
            .unwrap()
            .1
            .peak_activation_bytes
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn the_closed_forms_hold() {
        let (p, m) = (6, 24);
        let act = shape().activation();
        let (mb, mw) = (act.held, act.weight_part);
        // 1F1B: the first stage holds p microbatches.
        assert!(close(peaks("1f1b", p, m)[0], p as f64 * mb));
        // ZB-H1 worker i (from 1): (p - i + 1) M_B + (i - 1) M_W.
        for (r, got) in peaks("zb-h1", p, m).into_iter().enumerate() {
            let i = (r + 1) as f64;
            let want = (p as f64 - i + 1.0) * mb + (i - 1.0) * mw;
            assert!(close(got, want), "zb-h1 rank {r}: {got} != {want}");
        }
        // ZB-H2 worker i: (2p - 2i + 1) M_B + (2i - 2) M_W.
        for (r, got) in peaks("zb-h2", p, m).into_iter().enumerate() {
            let i = (r + 1) as f64;
            let want = (2.0 * p as f64 - 2.0 * i + 1.0) * mb + (2.0 * i - 2.0) * mw;
            assert!(close(got, want), "zb-h2 rank {r}: {got} != {want}");
        }
        // Interleaving: the first stage holds p M_B times 1 + (p - 1) / (p V).
        for v in [2usize, 3] {
            let got = peaks(&format!("interleaved:{v}"), p, m)[0];
            let want = p as f64 * mb * (1.0 + (p as f64 - 1.0) / (p * v) as f64);
            assert!(close(got, want), "interleaved:{v}: {got} != {want}");
        }
    }

    #[test]
    fn the_paper_formulas_and_bad_shapes() {
        let s = shape();
        assert_eq!(
            s.layer_activation(),
            512.0 * 2.0 * (34.0 * 1024.0 + 5.0 * 16.0 * 512.0)
        );
        assert_eq!(s.layer_weight_part(), 32.0 * 512.0 * 2.0 * 1024.0);
        assert!(s.problem().is_none());
        let odd = ModelShape { heads: 3, ..s };
        assert!(odd.problem().unwrap().contains("multiple of heads"));
        let none = ModelShape { seq_len: 0, ..s };
        assert!(none.problem().unwrap().contains("seq_len"));
    }
}
