//! Cluster mode: many ranks, launched by Slurm, Open MPI or by hand. `launch` says who this
//! process is and where the ranks meet, `rendezvous` and `world` bring them together (with
//! `frame` the wire format of their messages), and `links` measures every pair of them
//! (`pair`), flags slow links and nodes (`flag`, `nodes`) and writes links.csv and nodes.csv
//! (`tables`). The multi-stage `pipeline` will be built on the same world (issue 15).

pub mod flag;
pub mod frame;
pub mod launch;
pub mod links;
pub mod nodes;
pub mod pair;
pub mod rendezvous;
pub mod tables;
pub mod world;
