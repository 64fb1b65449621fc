//! A training job's per-op trace, in the schema of the OSDI '25 what-if artifact
//! (github ByteDance-Seed/StragglerAnalysis): one row per recorded op, as CSV or parquet.

use anyhow::{bail, Context, Result};

/// The columns every trace has, in the artifact's names.
pub const COLUMNS: [&str; 11] = [
    "dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration", "seq_id", "mc", "mb_id",
    "gmc",
];

/// The op types of a Megatron step, as the artifact's profiler names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpType {
    ForwardCompute,
    BackwardCompute,
    ForwardSend,
    ForwardRecv,
    BackwardSend,
    BackwardRecv,
    GradsReduceScatter,
    ParamsAllGather,
    SeparateGradsAllReduce,
    LayernormGradsAllReduce,
    EmbeddingGradsAllReduce,
    OptimizerClipMainGrad,
    Optimizer,
    Gc,
}

impl OpType {
    /// Every op type, in order, with its name.
    pub const NAMES: [(OpType, &'static str); 14] = [
        (Self::ForwardCompute, "forward-compute"),
        (Self::BackwardCompute, "backward-compute"),
        (Self::ForwardSend, "forward-send"),
        (Self::ForwardRecv, "forward-recv"),
        (Self::BackwardSend, "backward-send"),
        (Self::BackwardRecv, "backward-recv"),
        (Self::GradsReduceScatter, "grads-reduce-scatter"),
        (Self::ParamsAllGather, "params-all-gather"),
        (Self::SeparateGradsAllReduce, "separate-grads-all-reduce"),
        (Self::LayernormGradsAllReduce, "layernorm-grads-all-reduce"),
        (Self::EmbeddingGradsAllReduce, "embedding-grads-all-reduce"),
        (Self::OptimizerClipMainGrad, "optimizer-clip-main-grad"),
        (Self::Optimizer, "optimizer"),
        (Self::Gc, "gc"),
    ];

    pub fn name(self) -> &'static str {
        OpType::NAMES.iter().find(|(t, _)| *t == self).unwrap().1
    }

    pub fn parse(s: &str) -> Option<OpType> {
        Some(OpType::NAMES.into_iter().find(|&(_, n)| n == s)?.0)
    }

    /// A pipeline send or receive.
    pub fn is_p2p(self) -> bool {
        matches!(
            self,
            OpType::ForwardSend | OpType::ForwardRecv | OpType::BackwardSend | OpType::BackwardRecv
        )
    }

    pub fn is_compute(self) -> bool {
        matches!(self, OpType::ForwardCompute | OpType::BackwardCompute)
    }

    /// A data-parallel collective (synchronised across a stage's DP ranks).
    pub fn is_dp_comm(self) -> bool {
        matches!(
            self,
            OpType::GradsReduceScatter | OpType::ParamsAllGather | OpType::SeparateGradsAllReduce
        )
    }

    /// Communication, whose "no straggler" time is the median (compute takes the mean).
    pub fn is_comm(self) -> bool {
        self.is_p2p()
            || self.is_dp_comm()
            || matches!(
                self,
                OpType::LayernormGradsAllReduce
                    | OpType::EmbeddingGradsAllReduce
                    | OpType::OptimizerClipMainGrad
            )
    }

    /// The key an attribution by op type uses: sends and receives grouped by direction.
    pub fn attribution_key(self) -> &'static str {
        match self {
            OpType::ForwardSend | OpType::ForwardRecv => "forward-pp-comm",
            OpType::BackwardSend | OpType::BackwardRecv => "backward-pp-comm",
            other => other.name(),
        }
    }
}

/// One recorded op. Times are seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Record {
    pub dp_rank: u32,
    pub stage: u32,
    pub rank: u32,
    pub step: i64,
    pub optype: OpType,
    pub start: f64,
    pub duration: f64,
    pub seq_id: u32,
    pub mc: i32,
    pub mb_id: i32,
    pub gmc: i32,
}

/// Largest dp_rank, stage, rank, seq_id or chunk accepted: far above any real job, low enough
/// that sizes derived from them stay small.
pub const MAX_INDEX: i64 = 1 << 20;

/// Checks one row's values; `at` names the row in a message.
pub fn record(fields: &RawRecord, at: &dyn Fn() -> String) -> Result<Record> {
    let index = |name: &str, v: i64, min: i64| -> Result<i64> {
        if !(min..=MAX_INDEX).contains(&v) {
            bail!(
                "{}: {name} = {v} is out of range ({min} to {MAX_INDEX})",
                at()
            );
        }
        Ok(v)
    };
    let optype = OpType::parse(&fields.optype).with_context(|| {
        format!(
            "{}: optype {:?} is not an op type of the artifact's schema ({})",
            at(),
            crate::sanitize::console(&fields.optype, 64),
            OpType::NAMES.map(|(_, n)| n).join(", ")
        )
    })?;
    for (name, v) in [("start_ts", fields.start), ("duration", fields.duration)] {
        if !v.is_finite() || v.abs() > 1e9 {
            bail!("{}: {name} = {v} is not a time in seconds", at());
        }
    }
    if fields.duration < 0.0 {
        bail!("{}: duration = {} is negative", at(), fields.duration);
    }
    Ok(Record {
        dp_rank: index("dp_rank", fields.dp_rank, 0)? as u32,
        stage: index("stage", fields.stage, 0)? as u32,
        rank: index("rank", fields.rank, 0)? as u32,
        step: fields.step,
        optype,
        start: fields.start,
        duration: fields.duration,
        seq_id: index("seq_id", fields.seq_id, 0)? as u32,
        mc: index("mc", fields.mc, -1)? as i32,
        mb_id: index("mb_id", fields.mb_id, -1)? as i32,
        gmc: index("gmc", fields.gmc, -1)? as i32,
    })
}

/// A row as read, before its checks.
#[derive(Debug, Clone, Default)]
pub struct RawRecord {
    pub dp_rank: i64,
    pub stage: i64,
    pub rank: i64,
    pub step: i64,
    pub optype: String,
    pub start: f64,
    pub duration: f64,
    pub seq_id: i64,
    pub mc: i64,
    pub mb_id: i64,
    pub gmc: i64,
}
