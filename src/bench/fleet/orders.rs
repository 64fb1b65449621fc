//! What rank 0 and the other ranks of a gate say to each other: the gate's own orders and
//! replies, and those of the links and pipeline it leads inside its session.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::checks::{Batch, Inventory, TestSpec};
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
    Written(Result<PathBuf, String>),
}
