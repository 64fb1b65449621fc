//! Which ranks a stage exchanges data with, under every layout the run's cases use (one
//! chunk per rank: its neighbours; interleaved: the wrap from the last rank to the first
//! too), the links to them, and each case's delays on those links.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

use super::comm::{self, Link, ACT, GRAD};
use super::exec::{self, Neighbours};
use super::plan::{Case, PipelinePlan};
use crate::cluster::world::World;
use crate::sim::Layout;

/// The least time a link's reader waits for the next message: between cases rank 0 checks
/// gradients and predicts, which can take a while on big shapes.
const IDLE: Duration = Duration::from_secs(600);

/// This stage's links: to each neighbouring rank, its link index and the link.
pub(super) type Links = Vec<(u32, u32, Arc<Link>)>;
/// The ranks this stage exchanges data with under any of `layouts`, and what each sends it:
/// the previous virtual stage's activations, the next one's gradients.
fn peers_of(me: u32, stages: u32, layouts: &[Layout]) -> Vec<(u32, comm::Accepts)> {
    let p = stages as usize;
    let mut peers: Vec<(u32, comm::Accepts)> = Vec::new();
    let most = layouts.iter().map(|l| l.chunks()).max().unwrap_or(1) as u8;
    let mut add = |rank: usize, kind: u8| {
        if rank == me as usize {
            return;
        }
        let at = match peers.iter().position(|(r, _)| *r as usize == rank) {
            Some(i) => i,
            None => {
                let none = comm::Accepts {
                    act: false,
                    grad: false,
                    chunks: most,
                };
                peers.push((rank as u32, none));
                peers.len() - 1
            }
        };
        match kind {
            ACT => peers[at].1.act = true,
            _ => peers[at].1.grad = true,
        }
    };
    for &layout in layouts {
        let total = p * layout.chunks();
        for c in 0..layout.chunks() {
            let vs = layout.virtual_stage(p, me as usize, c);
            if vs > 0 {
                add(layout.place(p, vs - 1).0, ACT);
            }
            if vs + 1 < total {
                add(layout.place(p, vs + 1).0, GRAD);
            }
        }
    }
    peers.sort_by_key(|(r, _)| *r);
    peers
}

/// Connects this stage to its neighbours under every layout of the plan, one connection each
/// way per neighbour, over the plan's transport.
pub(super) fn connect(
    world: &World,
    plan: &PipelinePlan,
    rdma: &crate::transport::rdma::DeviceChoice,
) -> Result<Links> {
    let (me, n) = (world.rank(), world.size());
    let timeout = Duration::from_secs(plan.timeout_s);
    let wiring = comm::Wiring {
        transport: plan.transport,
        rdma: rdma.clone(),
        max_message: comm::max_message(plan.shape.elements()),
        timeout,
        idle: timeout.max(IDLE),
        trust: world.trust.clone(),
    };
    let layouts = plan.layouts(n)?;
    let wanted = peers_of(me, n, &layouts);
    let peers: Vec<comm::Peer> = wanted
        .iter()
        .map(|&(rank, _)| comm::Peer {
            rank,
            address: world.data_address(rank),
        })
        .collect();
    let links = comm::connect(&world.data, me, &peers, &wiring)?;
    Ok(links
        .into_iter()
        .zip(wanted)
        .map(|((tx, rx), (rank, accepts))| {
            let index = crate::sim::link_between(n as usize, me as usize, rank as usize)
                .expect("a peer is another rank") as u32;
            let link = Link::new(
                tx,
                rx,
                accepts,
                world.describe(rank),
                plan.shape.elements(),
                plan.shape.microbatches,
                timeout,
            );
            (rank, index, Arc::new(link))
        })
        .collect())
}

/// This stage's links for case `c`, each with the delay the case injects on it.
pub(super) fn neighbours(world: &World, links: &Links, c: &Case, layout: Layout) -> Neighbours {
    let delay = |link: u32| match c.slow {
        Some((l, ms)) if l == link => Duration::from_secs_f64(ms / 1e3),
        _ => Duration::ZERO,
    };
    Neighbours {
        links: links
            .iter()
            .map(|(rank, index, link)| exec::NeighbourLink {
                rank: *rank,
                link: link.clone(),
                index: *index,
                delay: delay(*index),
            })
            .collect(),
        stages: world.size(),
        layout,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaving_adds_the_wrap_link_and_two_ranks_share_one() {
        let kinds = |p: &[(u32, comm::Accepts)]| -> Vec<(u32, bool, bool)> {
            p.iter().map(|(r, a)| (*r, a.act, a.grad)).collect()
        };
        let linear = [Layout::Linear];
        assert_eq!(kinds(&peers_of(0, 4, &linear)), [(1, false, true)]);
        assert_eq!(
            kinds(&peers_of(2, 4, &linear)),
            [(1, true, false), (3, false, true)]
        );
        // Rank 0 of 4 also takes the last rank's activations (and rank 3 rank 0's gradients).
        let both = [Layout::Linear, Layout::Interleaved(2)];
        assert_eq!(
            kinds(&peers_of(0, 4, &both)),
            [(1, false, true), (3, true, false)]
        );
        assert_eq!(
            kinds(&peers_of(3, 4, &both)),
            [(0, false, true), (2, true, false)]
        );
        // With two ranks the wrap is the same neighbour: one link carrying both kinds.
        let two = peers_of(0, 2, &[Layout::Interleaved(2)]);
        assert_eq!(kinds(&two), [(1, true, true)]);
        assert_eq!(two[0].1.chunks, 2);
    }
}
