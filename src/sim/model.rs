//! The pipeline being simulated: stages, microbatches, op durations, links and how a transfer
//! uses the sender's compute queue. Times are in milliseconds (f64).

use std::fmt;

use thiserror::Error;

use super::memory::ActivationBytes;

/// What an op is, from the pipeline's wire through the simulator to the timeline CSVs and
/// the Gantt charts (written `F`, `B`, `W`).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
pub enum OpKind {
    /// Forward.
    #[default]
    F,
    /// Backward for the input gradient (the whole backward when fused).
    B,
    /// Backward for the weight gradient (only when backward is split).
    W,
}

impl OpKind {
    /// F, B, W as 0, 1, 2 (the Gantt charts' colours).
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OpKind::F => "F",
            OpKind::B => "B",
            OpKind::W => "W",
        })
    }
}

/// One op: its kind, the rank (`stage`) that runs it, its microbatch, and which of the rank's
/// model chunks it runs (0 unless the schedule's [`Layout`] gives a rank several).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Op {
    pub kind: OpKind,
    pub stage: usize,
    pub mb: usize,
    #[serde(default, skip_serializing_if = "is_first_chunk")]
    pub chunk: usize,
}

fn is_first_chunk(chunk: &usize) -> bool {
    *chunk == 0
}

impl Op {
    /// An op of a rank's only (or first) chunk.
    pub fn new(kind: OpKind, stage: usize, mb: usize) -> Op {
        Op {
            kind,
            stage,
            mb,
            chunk: 0,
        }
    }
}

/// One op as it ran.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Executed {
    pub op: Op,
    pub start: f64,
    /// End of the computation.
    pub end: f64,
    /// End of the time the op holds its stage's queue (compute plus any send on the queue).
    pub queue_end: f64,
    /// When its output reaches the next stage (equal to `end` if it sends nothing).
    pub arrival: f64,
}

/// How the model is cut into virtual stages and which rank runs each: the schedule decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Layout {
    /// One chunk per rank: virtual stage r on rank r.
    #[default]
    Linear,
    /// Megatron's interleaving: V chunks per rank, virtual stage c·p + r on rank r (the last
    /// rank's output wraps round to the first).
    Interleaved(usize),
    /// The same placement as Zero Bubble's bubble-rate script accounts it (`efficiency.py`,
    /// `get_interleave_schedule`: `elif _rk == 0 and v > 0`): a hop over the wrap link binds
    /// only the first microbatch of each group of G (the second field); the others start as
    /// if their input were there. What their published interleaved column measures.
    InterleavedAsPublished(usize, usize),
    /// Zero Bubble's ZB-V and DualPipeV: two chunks per rank, rank r holding virtual stages r
    /// and 2p - 1 - r (the model goes down the ranks and back up).
    Vee,
}

impl Layout {
    /// Model chunks per rank.
    pub fn chunks(self) -> usize {
        match self {
            Layout::Linear => 1,
            Layout::Interleaved(v) | Layout::InterleavedAsPublished(v, _) => v,
            Layout::Vee => 2,
        }
    }

    /// The virtual stage rank `rank`'s chunk `chunk` runs, of `p` ranks.
    pub fn virtual_stage(self, p: usize, rank: usize, chunk: usize) -> usize {
        match self {
            Layout::Linear => rank,
            Layout::Interleaved(_) | Layout::InterleavedAsPublished(..) => chunk * p + rank,
            Layout::Vee if chunk == 0 => rank,
            Layout::Vee => 2 * p - 1 - rank,
        }
    }

    /// Whether the hop of microbatch `mb` from rank `from` to rank `to` binds its receiver
    /// (always, except over the wrap under [`Layout::InterleavedAsPublished`]).
    pub fn binds(self, p: usize, from: usize, to: usize, mb: usize) -> bool {
        match self {
            Layout::InterleavedAsPublished(_, g) if p > 1 => {
                let wrap = (from == p - 1 && to == 0) || (from == 0 && to == p - 1);
                !wrap || mb.is_multiple_of(g)
            }
            _ => true,
        }
    }

    /// Which of its rank's chunks virtual stage `vs` is.
    pub fn chunk_of(self, p: usize, vs: usize) -> usize {
        self.place(p, vs).1
    }

    /// The (rank, chunk) that runs virtual stage `vs`.
    pub fn place(self, p: usize, vs: usize) -> (usize, usize) {
        match self {
            Layout::Linear => (vs, 0),
            Layout::Interleaved(_) | Layout::InterleavedAsPublished(..) => (vs % p, vs / p),
            Layout::Vee if vs < p => (vs, 0),
            Layout::Vee => (2 * p - 1 - vs, 1),
        }
    }
}

/// How a transfer between stages uses the sender's single compute queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CommModel {
    /// Pure latency, off the compute queue.
    Latency,
    /// The sender's queue is blocked for the whole transfer (head-of-line blocking).
    Queue,
    /// The sender pays a device-to-host copy on its queue; the rest travels off the queue.
    Offload,
}

impl fmt::Display for CommModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CommModel::Latency => "latency",
            CommModel::Queue => "queue",
            CommModel::Offload => "offload",
        })
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum ScenarioError {
    #[error("{0} must be at least 1")]
    TooFew(&'static str),
    #[error("{what} = {value} is over the cap of {cap}{why}")]
    TooMany {
        what: &'static str,
        value: usize,
        cap: usize,
        why: &'static str,
    },
    #[error("{field} has {got} values; give one value or one per stage ({stages})")]
    WrongLength {
        field: &'static str,
        got: usize,
        stages: usize,
    },
    #[error("{field} = {value}: durations must be finite, >= 0 and at most {MAX_MS} ms{extra}")]
    BadDuration {
        field: &'static str,
        value: f64,
        extra: &'static str,
    },
    #[error("link {link} does not exist: with {stages} stages links are 0..={max} (link i joins stages i and i+1; with 3 or more, link {stages_less_one} is the wrap link from the last stage to the first, which interleaved schedules cross)", stages_less_one = stages.saturating_sub(1))]
    NoSuchLink {
        link: usize,
        stages: usize,
        max: i64,
    },
}

/// The most stages a scenario may have.
pub const MAX_STAGES: usize = 1024;
/// The most microbatches a scenario may have.
pub const MAX_MICROBATCHES: usize = 65_536;
/// The most stages x microbatches: a schedule's run holds about 3 ops each, and the adaptive
/// planner several runs, so this keeps one `sim` under about 1 GiB.
pub const MAX_STAGE_MICROBATCHES: usize = 1 << 19;
/// The longest duration or delay accepted, in ms (about 17 minutes): far beyond any real op or
/// link, and small enough that sums of many stay exact in f64.
pub const MAX_MS: f64 = 1e6;

/// The links `stages` ranks have: one between each pair of neighbours, and from 3 ranks on
/// the wrap link from the last rank back to the first (with 2 it is link 0 again).
pub fn links_of(stages: usize) -> usize {
    match stages {
        0 | 1 => 0,
        2 => 1,
        p => p,
    }
}

/// The link between ranks `from` and `to` of `stages`: link i joins ranks i and i + 1, the
/// wrap link (`stages - 1`) the last rank and the first. None for the same rank.
pub fn link_between(stages: usize, from: usize, to: usize) -> Option<usize> {
    match from.abs_diff(to) {
        0 => None,
        1 => Some(from.min(to)),
        _ => Some(stages - 1),
    }
}

/// One simulated iteration's inputs.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Scenario {
    pub stages: usize,
    pub microbatches: usize,
    pub tf: Vec<f64>,
    pub tb: Vec<f64>,
    pub tw: Vec<f64>,
    /// Base latency of every link.
    pub link_ms: f64,
    /// Extra straggler delay per link: stages - 1 entries, or `stages` when the wrap link
    /// (last rank to first, [`Scenario::link_between`]) has one.
    pub delay_ms: Vec<f64>,
    pub comm: CommModel,
    /// Queue time of the device-to-host copy under `CommModel::Offload`.
    pub d2h_ms: f64,
    /// Per link, the time a transfer holds it (bytes / bandwidth): each direction of a link is
    /// one FIFO channel, so back-to-back sends queue behind each other; 0 for none.
    pub occupancy_ms: Vec<f64>,
    /// Per stage, DualPipe's overlapped forward-and-backward (one chunk's forward with another's
    /// whole backward) as one op: F + B + W unless told (`with_tfb`).
    pub tfb: Vec<f64>,
    /// Extra time each transfer took this iteration (a stall drawn by `sim --stall`), indexed
    /// by [`Scenario::transfer_index`]; empty for none. Schedules plan without it: a stall is
    /// not known before it happens.
    pub stall_ms: Vec<f64>,
    /// Extra time each transfer held its sender this iteration (a send that waits for its
    /// acknowledgement: a stall on the way out or on the acknowledgement's way back), indexed
    /// as `stall_ms`; empty for none.
    pub hold_ms: Vec<f64>,
    /// What a microbatch's forward keeps on a stage, in bytes (from a `[model]` shape); None
    /// when no shape was given (memory is then counted in microbatches only).
    pub activation: Option<ActivationBytes>,
    /// The most activation bytes a stage may hold (`--mem-limit SIZE`, the parameters taken
    /// off): the adaptive planner keeps to it.
    pub activation_limit: Option<f64>,
}

pub(super) fn per_stage(
    field: &'static str,
    v: &[f64],
    stages: usize,
) -> Result<Vec<f64>, ScenarioError> {
    let out = match v.len() {
        1 => vec![v[0]; stages],
        n if n == stages => v.to_vec(),
        got => return Err(ScenarioError::WrongLength { field, got, stages }),
    };
    for &x in &out {
        non_negative(field, x)?;
    }
    Ok(out)
}

pub(super) fn non_negative(field: &'static str, x: f64) -> Result<f64, ScenarioError> {
    if !x.is_finite() || !(0.0..=MAX_MS).contains(&x) {
        return Err(ScenarioError::BadDuration {
            field,
            value: x,
            extra: "",
        });
    }
    Ok(x)
}

/// `per_link` with each `(link, ms)` added to its link's entry (the wrap link's made on first
/// use), each addend and each sum checked as `field`.
pub(super) fn add_per_link(
    mut per_link: Vec<f64>,
    stages: usize,
    added: &[(usize, f64)],
    field: &'static str,
) -> Result<Vec<f64>, ScenarioError> {
    for &(link, ms) in added {
        if link >= links_of(stages) {
            return Err(ScenarioError::NoSuchLink {
                link,
                stages,
                max: links_of(stages) as i64 - 1,
            });
        }
        if link >= per_link.len() {
            per_link.resize(link + 1, 0.0);
        }
        per_link[link] += non_negative(field, ms)?;
        non_negative(field, per_link[link])?;
    }
    Ok(per_link)
}

impl Scenario {
    /// The same scenario with each link held `occupancy` ms by every transfer over it
    /// (`(link, ms)` pairs, added up per link).
    pub fn with_occupancy(mut self, occupancy: &[(usize, f64)]) -> Result<Scenario, ScenarioError> {
        self.occupancy_ms = add_per_link(self.occupancy_ms, self.stages, occupancy, "occupy")?;
        Ok(self)
    }

    /// The same scenario with other straggler delays (one per link, the wrap link's
    /// optional).
    pub fn with_delays(&self, delay_ms: Vec<f64>) -> Scenario {
        assert!((self.stages - 1..=links_of(self.stages)).contains(&delay_ms.len()));
        Scenario {
            delay_ms,
            ..self.clone()
        }
    }

    /// Compute time of a group of ops that end together on rank `s`: a forward with a backward
    /// takes the overlapped time, a whole backward (B with its W) the two's.
    pub fn group_compute(&self, group: &[Op], s: usize, split: bool, layout: Layout) -> f64 {
        let overlapped = group.iter().any(|o| o.kind == OpKind::F) && group.len() > 1;
        if overlapped {
            self.tfb[s] / layout.chunks() as f64
        } else {
            group.iter().map(|&o| self.compute(o, split, layout)).sum()
        }
    }

    /// Compute time of an op on its rank; `split` says whether backward is split into B and W.
    /// A rank with several model chunks spends 1/chunks of its stage's time on each.
    pub fn compute(&self, op: Op, split: bool, layout: Layout) -> f64 {
        let i = op.stage;
        let t = match (op.kind, split) {
            (OpKind::F, _) => self.tf[i],
            (OpKind::B, true) => self.tb[i],
            (OpKind::B, false) => self.tb[i] + self.tw[i],
            (OpKind::W, _) => self.tw[i],
        };
        t / layout.chunks() as f64
    }

    /// Where an op's output goes: the (rank, chunk) of the next virtual stage for F, the
    /// previous one for B; None for W, the last stage's F (its own B takes it) and the first
    /// stage's B.
    pub fn next_of(&self, op: Op, layout: Layout) -> Option<(usize, usize)> {
        let p = self.stages;
        let vs = layout.virtual_stage(p, op.stage, op.chunk);
        match op.kind {
            OpKind::F if vs + 1 < p * layout.chunks() => Some(layout.place(p, vs + 1)),
            OpKind::B if vs > 0 => Some(layout.place(p, vs - 1)),
            _ => None,
        }
    }

    /// The link between two ranks: link i joins ranks i and i + 1; the wrap link
    /// (`stages - 1`) joins the last rank and the first. None for the same rank.
    pub fn link_between(&self, from: usize, to: usize) -> Option<usize> {
        link_between(self.stages, from, to)
    }

    /// The link an op's output crosses, if any.
    pub fn out_link(&self, op: Op, layout: Layout) -> Option<usize> {
        let (to, _) = self.next_of(op, layout)?;
        self.link_between(op.stage, to)
    }

    /// The same scenario with the overlapped forward-and-backward taking `tfb` ms (one value
    /// or one per stage).
    pub fn with_tfb(mut self, tfb: &[f64]) -> Result<Scenario, ScenarioError> {
        self.tfb = per_stage("tfb", tfb, self.stages)?;
        if let Some(&x) = self.tfb.iter().find(|&&x| x <= 0.0) {
            return Err(ScenarioError::BadDuration {
                field: "tfb",
                value: x,
                extra: " and it must take > 0",
            });
        }
        Ok(self)
    }

    /// The same scenario with activations counted in bytes.
    pub fn with_activation(mut self, activation: ActivationBytes) -> Scenario {
        self.activation = Some(activation);
        self
    }

    /// Bytes an op adds to its rank's activations when it ends (negative: frees), 1/chunks of
    /// the stage's for a rank with several chunks; 0 without a `[model]` shape.
    pub fn activation_delta(&self, op: Op, split: bool, layout: Layout) -> f64 {
        let Some(a) = self.activation else {
            return 0.0;
        };
        let bytes = match (op.kind, split) {
            (OpKind::F, _) => a.held,
            (OpKind::B, true) => -(a.held - a.weight_part),
            (OpKind::B, false) => -a.held,
            (OpKind::W, _) => -a.weight_part,
        };
        bytes / layout.chunks() as f64
    }

    /// Latency of link `l` (between ranks l and l + 1, or the wrap link).
    pub fn link(&self, l: usize) -> f64 {
        self.link_ms + self.delay_ms.get(l).copied().unwrap_or(0.0)
    }

    /// Where a transfer's stall sits in `stall_ms`: F and B of each virtual stage and
    /// microbatch.
    pub fn transfer_index(&self, op: Op, layout: Layout) -> usize {
        let stages = self.stages * layout.chunks();
        let vs = layout.virtual_stage(self.stages, op.stage, op.chunk);
        (usize::from(op.kind == OpKind::B) * stages + vs) * self.microbatches + op.mb
    }

    /// The number of slots `stall_ms` has when it is set.
    pub fn transfer_slots(&self, layout: Layout) -> usize {
        2 * self.stages * layout.chunks() * self.microbatches
    }

    /// (extra time the sender's queue stays busy after compute, arrival delay after compute).
    pub fn send_costs(&self, op: Op, layout: Layout) -> (f64, f64) {
        match self.out_link(op, layout) {
            None => (0.0, 0.0),
            Some(l) => {
                let drawn = |v: &[f64]| v.get(self.transfer_index(op, layout)).copied();
                let stall = drawn(&self.stall_ms).unwrap_or(0.0);
                let hold = drawn(&self.hold_ms).unwrap_or(0.0);
                let c = self.link(l) + stall;
                match self.comm {
                    CommModel::Latency => (hold, c),
                    CommModel::Queue => (self.link(l) + hold, c),
                    CommModel::Offload => (self.d2h_ms, self.d2h_ms + c),
                }
            }
        }
    }

    /// Per link, the time a transfer holds it (the wrap link's, when one was given).
    pub fn occupancy(&self, l: usize) -> f64 {
        self.occupancy_ms.get(l).copied().unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_input_naming_the_field() {
        let ok = |s, n, tf: &[f64], slow: &[(usize, f64)]| {
            Scenario::builder(s, n)
                .times(tf, &[1.0], &[1.0])
                .slow(slow)
                .build()
        };
        assert_eq!(ok(0, 4, &[1.0], &[]), Err(ScenarioError::TooFew("stages")));
        assert_eq!(
            ok(2, 0, &[1.0], &[]),
            Err(ScenarioError::TooFew("microbatches"))
        );
        assert!(ok(2, 4, &[1.0, 2.0, 3.0], &[])
            .unwrap_err()
            .to_string()
            .contains("tf"));
        assert!(ok(2, 4, &[-1.0], &[])
            .unwrap_err()
            .to_string()
            .contains("tf"));
        assert!(ok(2, 4, &[f64::NAN], &[]).is_err());
        assert!(ok(2, 4, &[0.0], &[]).is_err());
        let e = ok(4, 4, &[1.0], &[(4, 1.0)]).unwrap_err().to_string();
        assert!(e.contains("link 4") && e.contains("0..=3"), "{e}");
        let e = ok(2, 4, &[1.0], &[(1, 1.0)]).unwrap_err().to_string();
        assert!(e.contains("link 1") && e.contains("0..=0"), "{e}");
        // Link 3 of 4 ranks is the wrap link: its delay is kept apart.
        let wrap = ok(4, 4, &[1.0], &[(3, 2.0)]).unwrap();
        assert_eq!((wrap.delay_ms.len(), wrap.link(3)), (4, 2.0));
        assert_eq!(ok(4, 4, &[1.0], &[]).unwrap().delay_ms.len(), 3);
        assert!(ok(4, 4, &[1.0], &[(2, -5.0)]).is_err());
        let s = ok(4, 4, &[1.0], &[(1, 5.0), (1, 2.5)]).unwrap();
        assert_eq!(s.delay_ms, vec![0.0, 7.5, 0.0]);
    }
}
