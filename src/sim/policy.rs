//! How a stage picks its next op: a fixed order to replay, or rules over what is ready.

use std::sync::Arc;

use super::comms::CommOrder;
use super::model::{Layout, Op, OpKind};

/// How a stage picks its next op.
#[derive(Debug, Clone, PartialEq)]
pub enum Policy {
    /// Replays a fixed per-stage order; a stage waits for its next listed op, never skipping.
    /// The layout says which model chunks each rank holds (the hand schedules' orders name
    /// chunks; every other policy runs one chunk per rank).
    Fixed {
        orders: Vec<Vec<Op>>,
        split: bool,
        layout: Layout,
        /// `together[s][i]`: op i of stage s runs with op i - 1 as one op, all ending together:
        /// a whole backward (B and its W, the gradient sent when both are done), or DualPipe's
        /// overlapped forward-and-backward (taking the scenario's `tfb`); empty for none.
        together: Vec<Vec<bool>>,
        /// The ranks' communication calls, where the order lists them (PyTorch's lowered
        /// program); without them each input arrives the link's time after its op.
        comms: Option<Arc<CommOrder>>,
    },
    /// Runs the highest-priority ready op, within a warm-up rule and an in-flight cap.
    Priority(PriorityPolicy),
}

#[derive(Debug, Clone, PartialEq)]
pub struct PriorityPolicy {
    /// Backward split into B (input gradient) and W (weight gradient)?
    pub split: bool,
    /// Forwards stage i runs before its first backward.
    pub warmup: Vec<usize>,
    /// Most activations in flight (F done, B not yet) per stage; `usize::MAX` for no cap.
    pub cap: Vec<usize>,
    /// Kinds from most to least preferred when several are ready.
    pub priority: [OpKind; 3],
    /// After its warm-up forwards a stage starts no forward until its first backward has run
    /// (PipeMorph's runtime policy); without it the in-flight cap alone limits forwards.
    pub hold_after_warmup: bool,
}

impl Policy {
    pub fn split(&self) -> bool {
        match self {
            Policy::Fixed { split, .. } => *split,
            Policy::Priority(p) => p.split,
        }
    }

    pub fn layout(&self) -> Layout {
        match self {
            Policy::Fixed { layout, .. } => *layout,
            Policy::Priority(_) => Layout::Linear,
        }
    }
}
