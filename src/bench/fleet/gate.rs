//! The gate as one rank holds it: its options, what rank 0 read (baseline, profile), its
//! adapter, the links and pipeline it leads or follows, and rank 0's outcome.

use super::baseline::Baseline;
use super::checks::{self, Inventory};
use super::cost;
use super::options::FleetOptions;
use super::report::Outcome;
use crate::bench::links::Links;
use crate::bench::pipeline::Pipeline;
use crate::cluster::world::World;
use crate::gpu::Gpu;
use crate::noise::load::BusyWarning;

pub(super) struct Fleet {
    pub(super) opts: FleetOptions,
    pub(super) baseline: Option<Baseline>,
    pub(super) profile: Option<cost::Profile>,
    /// This rank's adapter, opened on the inventory order.
    pub(super) gpu: Option<anyhow::Result<Gpu>>,
    pub(super) outcome: Option<Outcome>,
    /// Rank 0: a warning per busy rank, for meta.json.
    pub(super) busy: Vec<BusyWarning>,
    /// The links between the ranks, at levels that measure them: rank 0 leads them; the
    /// others follow their orders.
    pub(super) links: Option<Links>,
    /// The short real pipeline, at the level that runs one.
    pub(super) pipeline: Option<Pipeline>,
}

impl Fleet {
    pub(super) fn inventory(&mut self, world: &World) -> Inventory {
        let local = world.local_rank();
        let (backend, adapter) = (self.opts.backend, self.opts.adapter.clone());
        let gpu = self.gpu.get_or_insert_with(|| {
            Gpu::open_local(backend, adapter.as_deref(), local).map_err(anyhow::Error::from)
        });
        checks::inventory(world.rank(), local, gpu.as_ref())
    }

    pub(super) fn my_gpu(&self) -> Option<&Gpu> {
        self.gpu.as_ref().and_then(|g| g.as_ref().ok())
    }
}
