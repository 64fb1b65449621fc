//! What a rank needs to play its pairs of a wave, and the playing: the lower rank of a pair
//! serves, the higher drives, and the machine's load is sampled around it.

use super::options::LinksOptions;
use super::pair;
use super::pair::{Measured, PairPlan};
use crate::cluster::world::World;
use crate::noise::rank as load;
use crate::transport::rdma::DeviceChoice;

/// What a rank needs to play its pairs, owned, so rank 0 can play in a thread while it
/// listens to the others (and stops as soon as one fails).
pub(super) struct PairContext {
    listener: std::net::TcpListener,
    addresses: Vec<String>,
    names: Vec<String>,
    me: u32,
    choice: DeviceChoice,
    machine: String,
    trust: crate::cluster::auth::Trust,
}

impl PairContext {
    pub(super) fn of(world: &World, opts: &LinksOptions) -> anyhow::Result<PairContext> {
        Ok(PairContext {
            listener: world
                .data
                .try_clone()
                .map_err(|e| anyhow::anyhow!("the data listener: {e}"))?,
            addresses: (0..world.size()).map(|r| world.data_address(r)).collect(),
            names: (0..world.size()).map(|r| world.describe(r)).collect(),
            me: world.rank(),
            choice: opts.choice.clone(),
            machine: crate::host::machine_id(),
            trust: world.trust.clone(),
        })
    }

    /// [`Self::play`] with this rank's machine sampled around it.
    pub(super) fn play_loaded(
        &self,
        plan: &PairPlan,
        round: u32,
        active: &[(u32, u32)],
    ) -> anyhow::Result<(Vec<Measured>, load::RankLoad)> {
        let before = crate::noise::load::Sample::now();
        let m = self.play(plan, round, active)?;
        let after = crate::noise::load::Sample::now();
        Ok((
            m,
            load::RankLoad::between(self.me, &self.machine, &before, &after),
        ))
    }

    /// This rank's pair in `round` (if it has one): the lower rank serves, the higher drives.
    fn play(
        &self,
        plan: &PairPlan,
        round: u32,
        active: &[(u32, u32)],
    ) -> anyhow::Result<Vec<Measured>> {
        let me = self.me;
        let Some(peer) = partner(active, me) else {
            return Ok(Vec::new());
        };
        let p = peer as usize;
        let result = if me < peer {
            pair::serve(
                &self.listener,
                plan,
                me,
                peer,
                round,
                &self.choice,
                &self.trust,
            )
        } else {
            pair::drive(
                &self.addresses[p],
                plan,
                me,
                peer,
                round,
                &self.choice,
                &self.trust,
            )
        };
        result.map_err(|e| {
            anyhow::anyhow!(
                "the link between {} and {}: {e}",
                self.names[me as usize],
                self.names[p]
            )
        })
    }
}

fn partner(round: &[(u32, u32)], me: u32) -> Option<u32> {
    round.iter().find_map(|&(a, b)| match me {
        _ if me == a => Some(b),
        _ if me == b => Some(a),
        _ => None,
    })
}
