//! The model's shape, and the seeded values every rank can make alone: weights, the first
//! stage's inputs, the last stage's targets.

/// The model's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Shape {
    pub layers: u32,
    pub hidden: u32,
    pub tokens: u32,
    pub microbatches: u32,
}

impl Shape {
    /// Elements of one activation (tokens x hidden).
    pub fn elements(&self) -> usize {
        self.tokens as usize * self.hidden as usize
    }

    /// Bytes of a stage's buffers (`Stage::new`'s allocations) with `chunks` model chunks: per
    /// chunk and microbatch its input, dy and dx, and per layer and microbatch y, dz and a
    /// layer's dy (activation-sized) and rstd (a float per token); per layer the weights and
    /// their gradient; the staging copy and z.
    pub fn stage_bytes(&self, chunks: u32) -> u64 {
        let (l, n) = (self.layers as u64, self.microbatches as u64);
        let e = self.elements() as u64;
        let h = self.hidden as u64;
        let v = chunks as u64;
        let floats = e * (3 * n * v + 2) + l * n * (3 * e + self.tokens as u64) + l * 2 * h * h;
        4 * floats
    }
}

/// Deterministic pseudo-random values in [-1, 1) (splitmix64), so every rank can make any
/// stage's weights and the first stage's inputs from a seed alone.
pub fn seeded(seed: u64, len: usize, scale: f32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    (0..len)
        .map(|_| {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// The last stage's target for microbatch `mb`.
pub fn target(shape: &Shape, mb: u32) -> Vec<f32> {
    seeded(2_000_003 + mb as u64, shape.elements(), 1.0)
}

/// The first stage's input for microbatch `mb`.
pub fn input(shape: &Shape, mb: u32) -> Vec<f32> {
    seeded(1_000_003 + mb as u64, shape.elements(), 1.0)
}
