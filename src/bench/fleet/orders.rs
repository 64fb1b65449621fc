//! What rank 0 and the other ranks of a gate say to each other: the gate's own orders and
//! replies, and those of the links and pipeline it leads inside its session.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::checks::{Batch, Inventory, Measured, TestSpec};
use crate::bench::links;

/// Rank 0's orders: the gate's own, or those of the `links` it leads inside its session
/// (untagged, so they travel as links' own do: [`Crew::nested`]).
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Order {
    Gate(GateOrder),
    Links(links::Order),
    Pipeline(crate::bench::pipeline::Order),
}

#[derive(Debug, Serialize, Deserialize)]
pub enum GateOrder {
    /// Open the adapter (by local rank) and say what this rank is.
    Inventory,
    /// Run these tests, in order, each until its samples or its deadline.
    Run(Vec<TestSpec>),
    /// Write this host's metrics into the `--textfile` folder.
    Textfile(Box<crate::record::metrics::Textfile>),
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Reply {
    Gate(GateReply),
    Links(links::Reply),
    Pipeline(crate::bench::pipeline::Reply),
}

#[derive(Debug, Serialize, Deserialize)]
pub enum GateReply {
    Inventory(Box<Inventory>),
    Batch(Box<Batch>),
    /// The textfile written, or why not.
    Written(crate::reported::Reported<PathBuf>),
}

/// The longest text a rank's result may carry (an error, a note, why it was skipped).
const MAX_TEXT: usize = 2000;

/// What rank 0 believes of a rank's batch.
impl Batch {
    /// Why rank 0 refuses a rank's batch, if it does: a result of a test it was not ordered,
    /// more results than a test gives, a figure that is not a finite, non-negative number, or
    /// text over [`MAX_TEXT`].
    pub fn fault(&self, ordered: &[TestSpec]) -> Option<String> {
        let texts = |m: &Measured| {
            [&m.error, &m.skipped, &m.note]
                .into_iter()
                .flatten()
                .chain([&m.figure, &m.unit])
                .any(|t| t.len() > MAX_TEXT)
        };
        let bad_number = |x: Option<f64>| x.is_some_and(|v| !v.is_finite() || v < 0.0);
        if self.results.len() > 4 * ordered.len().max(1) {
            return Some(format!(
                "{} results for {} tests",
                self.results.len(),
                ordered.len()
            ));
        }
        self.results.iter().find_map(|m| {
            if !ordered.iter().any(|t| t.kind == m.test) {
                Some(format!(
                    "a result of {}, which it was not ordered",
                    m.test.name()
                ))
            } else if [m.value, m.p50_us, m.p99_us].into_iter().any(bad_number) {
                Some(format!(
                    "{} {}: a figure that is not a finite number",
                    m.test.name(),
                    m.figure
                ))
            } else if texts(m) {
                Some(format!("{}: text over {MAX_TEXT} bytes", m.test.name()))
            } else {
                None
            }
        })
    }
}
