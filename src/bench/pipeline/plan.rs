//! What a pipeline run is: its cases, its plan (every rank follows rank 0's), the bounds it is
//! checked against before any rank starts, and what rank 0 sends each stage.

use serde::{Deserialize, Serialize};

use super::exec::Comm;
use super::shape::Shape;
use crate::cluster::world::WorldOptions;
use crate::cluster::SessionOptions;
use crate::gpu::BackendChoice;
use crate::sim::{Op, Schedule};
use crate::transport::TransportKind;

/// One configuration of the run (a row of pipeline.csv).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Case {
    /// Parsed once, from `--schedule`.
    pub schedule: Schedule,
    pub comm: Comm,
    /// (link, delay ms) injected on every message of that link, both ways.
    pub slow: Option<(u32, f64)>,
}

/// What every rank follows (rank 0's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PipelinePlan {
    pub shape: Shape,
    pub cases: Vec<Case>,
    pub iters: u32,
    pub warmup: u32,
    pub timeout_s: u64,
    /// What carries activations and gradients between stages.
    pub transport: TransportKind,
}

/// The most work one run may take, checked before it starts: microbatches x stages, sizes.
pub(super) const MAX_ELEMENTS: usize = 1 << 24;
pub const MAX_MICROBATCHES: u32 = 256;
pub(super) const MAX_LAYERS: u32 = 64;
pub(super) const MAX_WARMUP: u32 = 1000;
/// The most cases one run may hold (schedules x comm modes x delays).
pub(super) const MAX_CASES: usize = 64;
/// The most memory one stage's buffers may take (checked before any rank starts).
pub(super) const MAX_STAGE_BYTES: u64 = 2 << 30;
/// Relative error of the weight gradients against f64 that still verifies: per dot product
/// f32 rounding grows about sqrt(K) * 2^-24 (the GEMM check's bound is 1e-5 sqrt(K)), the
/// layernorm backward scales errors by 1/std (about 1 here), and L layers and N microbatches
/// add them up; measured errors are about 1e-6. A wrong index, a lost or repeated microbatch
/// gives errors of order 1, far above.
pub const GRAD_TOLERANCE: f64 = 1e-3;

/// A stage's op times measured alone, for planning (µs): F, B split, W, B fused, D2H.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Calibration {
    pub(super) f: f64,
    pub(super) b: f64,
    pub(super) w: f64,
    pub(super) d2h: f64,
}

/// A stage's order: the simulator's ops for it.
pub type OpOrder = Vec<Op>;

/// The most stages `--local` starts.
pub const MAX_LOCAL_STAGES: u32 = 16;

#[derive(Debug, Clone)]
pub struct PipelineOptions {
    pub session: SessionOptions,
    pub plan: PipelinePlan,
    pub backend: BackendChoice,
    pub adapter: Option<String>,
    /// This rank's RDMA device (with `--transport rdma`).
    pub rdma: crate::transport::rdma::DeviceChoice,
    /// Rank 0 starts no more rounds this many seconds into the rounds (the fleet gate's
    /// allowance), once one timed round is in; its gradients are checked all the same.
    pub deadline_s: Option<f64>,
}

impl PipelineOptions {
    pub fn world(&self) -> &WorldOptions {
        &self.session.world
    }
}
