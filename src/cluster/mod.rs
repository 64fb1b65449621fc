//! Cluster mode: many ranks, launched by Slurm, Open MPI or by hand. `launch` says who this
//! process is and where the ranks meet; the rendezvous, the `links` matrix and the multi-stage
//! `pipeline` are built on it (issues 14 and 15).

pub mod launch;
pub mod rendezvous;
