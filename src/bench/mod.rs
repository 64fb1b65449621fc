//! One file or folder per bench: its plan (with `Default`, the one place for its defaults),
//! its measurement loop, its CSV row types. Each implements [`Bench`], so the run
//! orchestrator (`suite`) runs any of them without knowing their insides.

pub mod d2h;
pub mod hol;
pub mod kernels;
pub mod rdma;
pub mod sim;

use anyhow::Result;

use crate::export::RunDir;
use crate::gpu::Gpu;
use crate::output::Progress;

/// What a bench leaves in meta.json's `notes`: its key and value pairs.
pub type Notes = serde_json::Map<String, serde_json::Value>;

/// A planned bench, ready to run.
pub trait Bench {
    /// The bench's name, as in its config table and its CSV.
    fn name(&self) -> &'static str;
    /// Whether the run must open a GPU adapter for it.
    fn needs_gpu(&self) -> bool {
        true
    }
    /// Progress steps, known before it starts.
    fn points(&self) -> u64;
    /// Measures, writing its tables into `run` row by row; returns its notes for meta.json.
    /// `gpu` is `Some` whenever `needs_gpu` says so.
    fn run(&self, gpu: Option<&Gpu>, run: &RunDir, progress: &Progress) -> Result<Notes>;
}

/// The GPU of a bench that needs one (the orchestrator opens it first).
pub(crate) fn need_gpu<'g>(gpu: Option<&'g Gpu>, bench: &str) -> Result<&'g Gpu> {
    gpu.ok_or_else(|| anyhow::anyhow!("internal error: {bench} ran without a GPU"))
}

/// One note.
pub(crate) fn note(key: &str, value: impl serde::Serialize) -> Result<Notes> {
    let mut n = Notes::new();
    n.insert(key.into(), serde_json::to_value(value)?);
    Ok(n)
}
