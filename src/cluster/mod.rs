//! The world of a multi-rank run, and nothing that measures: `launch` says who this process is
//! and where the ranks meet (each launcher's environment), `rendezvous` and `world` bring them
//! together (`frame` is the wire format of their messages), `clock` puts every rank's times on
//! rank 0's clock, `local` starts ranks on this machine (`--local N`), `limits` raises and checks the
//! per-process limits the world's size drives, and `session` is the one
//! skeleton every multi-rank bench runs in (`Ranked`, `run_ranked`). Errors are `error`'s types.

pub mod auth;
pub mod clock;
pub mod deadline;
pub mod error;
pub mod frame;
pub mod hostlist;
pub mod launch;
pub mod limits;
pub mod local;
pub mod munge;
pub mod rendezvous;
pub mod session;
pub mod topology;
pub mod world;

pub use error::{ClusterError, LaunchError, Who, WireError};
pub use session::{run_ranked, Crew, Ranked, SessionOptions};
