//! `roll-call` (test builds only): the smallest multi-rank command, and the proof that a new
//! one is a file plus its word in the registry. Every rank answers rank 0 with its rank and
//! process id; rank 0 keeps the roll in meta.json's notes. `--local N` starts N ranks here.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::Args;
use serde::{Deserialize, Serialize};

use crate::bench::descriptor::{parsed, After, CommandSpec, Descriptor, LaunchArgs, Local, Ran};
use crate::cluster::world::World;
use crate::cluster::{run_ranked, Crew, Ranked};
use crate::record::RunDir;

pub const DESCRIPTOR: Descriptor = Descriptor {
    name: "roll-call",
    from_toml: None,
    command: CommandSpec::runs(
        "Every rank answers rank 0 (test builds only)",
        "Examples:\n  morphbench roll-call --local 2",
        RollCallArgs::augment_args,
        |m, g| {
            let a: RollCallArgs = parsed(m)?;
            let dir = run_ranked(&mut RollCall::default(), &a.launch.session(g, Vec::new()))?;
            Ok(Ran::wrote(dir, After::Summary))
        },
    )
    .local(Local {
        max: crate::cluster::launch::MAX_LOCAL,
        gate: false,
        check: None,
    }),
    tables: Vec::new,
};

#[derive(Debug, Args)]
struct RollCallArgs {
    #[command(flatten)]
    launch: LaunchArgs,
}

/// One rank's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Present {
    rank: u32,
    pid: u32,
}

#[derive(Default)]
struct RollCall {
    roll: Vec<Present>,
}

impl Ranked for RollCall {
    type Order = ();
    type Reply = Present;

    fn config(&self, world: &World) -> serde_json::Value {
        serde_json::json!({ "world": world.size() })
    }

    fn banner(&self, world: &World) -> String {
        format!("roll-call: {} ranks", world.size())
    }

    fn lead(&mut self, crew: &mut Crew<(), Present>, _dir: &RunDir) -> Result<()> {
        crew.order_all(())?;
        let others = crew.hear_all(Instant::now() + Duration::from_secs(30))?;
        self.roll.push(Present {
            rank: 0,
            pid: std::process::id(),
        });
        for (i, p) in others.into_iter().enumerate() {
            // A rank answers for itself alone.
            if p.rank != i as u32 + 1 {
                bail!("rank {} answered as rank {}", i + 1, p.rank);
            }
            self.roll.push(p);
        }
        Ok(())
    }

    fn follow(&mut self, world: &World, _order: ()) -> Result<Present> {
        Ok(Present {
            rank: world.rank(),
            pid: std::process::id(),
        })
    }

    fn patience(&self, _world: &World) -> Duration {
        Duration::from_secs(30)
    }

    fn notes(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut notes = serde_json::Map::new();
        notes.insert("roll".into(), serde_json::json!(self.roll));
        notes
    }
}
