//! One file or folder per bench: its plan (with `Default`, the one place for its defaults),
//! its measurement loop, its CSV row types. Each implements [`Bench`], so the run
//! orchestrator (`suite`) runs any of them without knowing their insides.

pub mod descriptor;
pub mod flags;
#[cfg(feature = "test-hooks")]
pub mod followers;
pub mod probe;
pub mod shared;

pub use descriptor::Descriptor;

/// Declares each bench's module and lists its descriptor in [`REGISTRY`].
macro_rules! registry {
    ($($(#[$only:meta])* $bench:ident),* $(,)?) => {
        $($(#[$only])* pub mod $bench;)*
        /// Every bench, in the order a suite runs them and the report lists their tables.
        pub const REGISTRY: &[Descriptor] = &[$($(#[$only])* $bench::DESCRIPTOR),*];
    };
}

// A new bench is its file or folder (with its `DESCRIPTOR`) and its name here.
registry!(
    peak,
    kernels,
    d2h,
    hol,
    rdma,
    sim,
    links,
    pipeline,
    fleet,
    health,
    clock,
    whatif,
    #[cfg(feature = "test-hooks")]
    roll_call,
);
