//! `morphbench fleet`: a bring-up gate over every rank of a job (one per GPU). Each rank
//! reports its inventory, then runs its level's tests (each with its own deadline); ranks
//! that share a machine take turns on what they share. Rank 0 judges every figure against the
//! fleet (and a baseline, when given), writes fleet.csv, each rank's run under `ranks/`,
//! `drain.txt` with the failed hosts, and ends with an exit code a scheduler can act on: 0 all
//! pass, 1 some node fails, 2 the gate could not run. A rank that dies, stops or does not
//! answer is a FAIL with why; the others' rows are written all the same.

pub mod args;
pub mod baseline;
mod charts;
pub mod checks;
pub mod cost;
mod gate;
mod inventory;
mod inventory_rows;
mod nested;
pub mod network;
pub mod ops;
mod options;
mod orders;
mod pcie;
mod pipeline;
pub mod rank;
mod report;
mod summary;
pub mod table;
pub mod verdict;
mod views;

use crate::reported::Reported;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::cluster::world::World;
use crate::cluster::{run_ranked, ClusterError, Crew, Ranked};
use crate::record::run_dir::RunDir;
use baseline::Baseline;
use checks::{Batch, Inventory, TestSpec};
use rank::RankOutcome;

pub use options::FleetOptions;
pub use orders::{GateOrder, GateReply, Order, Reply};
pub use report::Outcome;

use gate::Fleet;
use options::Step;

/// Runs the gate on this rank. Rank 0 returns the outcome (its folder, its exit code and its
/// summary); the others return None.
pub fn run(opts: &FleetOptions) -> Result<Option<Outcome>> {
    if let Some(only) = &opts.only {
        checks::check_only(opts.level, only)?;
    }
    let mut bench = Fleet {
        opts: opts.clone(),
        baseline: None,
        profile: None,
        gpu: None,
        outcome: None,
        busy: Vec::new(),
        links: None,
        pipeline: None,
    };
    run_ranked(&mut bench, &opts.session)?;
    Ok(bench.outcome)
}

impl Ranked for Fleet {
    type Order = Order;
    type Reply = Reply;

    fn prepare(&mut self, _world: &World) -> Result<Option<serde_json::Value>> {
        if self.opts.slurm {
            crate::slurm::Scontrol::find()?;
        }
        if let Some(dir) = &self.opts.textfile {
            crate::record::metrics::check_dir(dir)?;
        }
        if let Some(path) = &self.opts.baseline {
            self.baseline = Some(Baseline::load(path)?);
        }
        if let Some(path) = &self.opts.profile {
            self.profile = Some(cost::Profile::load(path)?);
        }
        Ok(None)
    }

    fn config(&self, world: &World) -> serde_json::Value {
        serde_json::json!({
            "level": self.opts.level.to_string(),
            "tests": self.opts.tests(),
            "links": self.opts.links().map(|l| serde_json::json!({
                "pattern": l.pattern.to_string(), "plan": l.plan, "deadline_s": l.deadline_s,
            })),
            "baseline": self.opts.baseline,
            "profile": self.opts.profile,
            "launcher": world.launch.launcher.to_string(),
            "roster": world.roster,
        })
    }

    fn banner(&self, world: &World) -> String {
        let hosts: std::collections::BTreeSet<&str> =
            world.roster.iter().map(|r| r.hostname.as_str()).collect();
        format!(
            "fleet {}: {} rank{} on {} host{} ({})",
            self.opts.level,
            world.size(),
            if world.size() == 1 { "" } else { "s" },
            hosts.len(),
            if hosts.len() == 1 { "" } else { "s" },
            world.launch.launcher
        )
    }

    fn lead(&mut self, crew: &mut Crew<Order, Reply>, dir: &RunDir) -> Result<()> {
        let started = Instant::now();
        let world = crew.world();
        let mut ranks: Vec<RankOutcome> = (0..world.size())
            .map(|r| RankOutcome::new(r, &world.roster[r as usize].hostname))
            .collect();
        let mine = self.inventory(crew.world());
        ranks[0].inventory = Some(mine);
        let others = crew.others();
        let heard = order_and_hear(
            crew,
            &mut ranks,
            &others,
            |_| Order::Gate(GateOrder::Inventory),
            self.opts.level.inventory_wait(),
        );
        for (r, reply) in heard {
            match reply {
                Reply::Gate(GateReply::Inventory(i)) if i.rank == r => {
                    ranks[r as usize].inventory = Some(*i)
                }
                _ => ranks[r as usize].failure = Some("answered the inventory out of turn".into()),
            }
        }
        let tests = self.opts.tests();
        let steps = plan(&ranks, |_| tests.clone());
        // Every figure retested at worst: the same steps again.
        let links = self.opts.links().map_or(Duration::ZERO, |l| l.allowance());
        let margin = self.opts.level.setup_margin();
        let bound = steps
            .iter()
            .map(|s| step_bound(s, margin))
            .sum::<Duration>()
            * 2
            + links
            + self.opts.pipeline().unwrap_or_default()
            + self.opts.level.inventory_wait();
        let quiet = self.opts.session.quiet;
        if !quiet {
            println!("{}", report::plan_line(&ranks, &steps, &self.opts, bound));
        }
        for step in &steps {
            self.play_step(crew, &mut ranks, step, false);
        }
        // Confirm before blaming: what failed is measured again, in the same turns.
        let suspects = verdict::suspects(&ranks, self.baseline.as_ref());
        let retests = plan(&ranks, |o| {
            let names = suspects.get(&o.rank).cloned().unwrap_or_default();
            tests
                .iter()
                .copied()
                .filter(|t| names.iter().any(|n| n == t.kind.name()))
                .map(|t| TestSpec { retest: true, ..t })
                .collect()
        });
        if !quiet && !suspects.is_empty() {
            println!("{}", report::retest_line(&suspects));
        }
        for step in &retests {
            self.play_step(crew, &mut ranks, step, true);
        }
        let links = self.lead_links(crew, &mut ranks, dir);
        let pipeline = self.lead_pipeline(crew, &mut ranks, dir);
        let gathered = report::Gathered {
            ranks: &ranks,
            links: &links,
            pipeline: &pipeline,
            level: self.opts.level,
            baseline: self.baseline.as_ref(),
            profile: self.profile.as_ref(),
            took: started.elapsed(),
        };
        let outcome = report::write(dir, &gathered, self.opts.session.quiet)?;
        self.operate(crew, &outcome, started.elapsed());
        self.outcome = Some(outcome);
        self.busy.extend(
            ranks
                .iter()
                .filter(|o| o.busy())
                .map(|o| (format!("fleet r{} {}", o.rank, o.host), o.busy_reason())),
        );
        Ok(())
    }

    fn follow(&mut self, world: &World, order: Order) -> Result<Reply> {
        let order = match order {
            Order::Gate(o) => o,
            Order::Links(o) => {
                let bench = self.links_bench(Vec::new()).ok_or_else(|| {
                    anyhow::anyhow!("rank 0 sent a links order at a level without links")
                })?;
                return bench.follow(world, o).map(Reply::Links);
            }
            Order::Pipeline(o) => {
                let bench = self.pipeline_bench(world.size() as usize).ok_or_else(|| {
                    anyhow::anyhow!("rank 0 sent a pipeline order at a level without one")
                })?;
                return bench.follow(world, o).map(Reply::Pipeline);
            }
        };
        match order {
            GateOrder::Inventory => Ok(Reply::Gate(GateReply::Inventory(Box::new(
                self.inventory(world),
            )))),
            GateOrder::Textfile(file) => {
                let written = match &self.opts.textfile {
                    Some(dir) if file.figures.len() <= ops::MAX_FIGURES => file.write(dir).into(),
                    Some(_) => Reported::failed(format!("more than {} figures", ops::MAX_FIGURES)),
                    None => Reported::failed("this rank was not given --textfile"),
                };
                Ok(Reply::Gate(GateReply::Written(written)))
            }
            GateOrder::Run(tests) => {
                if tests.len() > 16
                    || tests
                        .iter()
                        .any(|t| !(0.0..=3600.0).contains(&t.deadline_s))
                {
                    anyhow::bail!("rank 0 sent a batch this gate never plans: {tests:?}");
                }
                let batch = checks::run_batch(self.my_gpu(), &tests);
                Ok(Reply::Gate(GateReply::Batch(Box::new(batch))))
            }
        }
    }

    fn notes(&self) -> serde_json::Map<String, serde_json::Value> {
        crate::noise::load::busy_notes(&self.busy)
    }

    fn patience(&self, world: &World) -> Duration {
        // A follower waits through every other rank's turns, and their retests.
        self.opts.rank_bound() * world.size() + self.opts.level.inventory_wait() * 2
    }
}

impl Fleet {
    /// One step of the plan: its ranks' batches at once, rank 0's own in a thread beside the
    /// others'; each rank's reply (kept among its retests when `retest`) or failure recorded
    /// on its own.
    fn play_step(
        &self,
        crew: &mut Crew<Order, Reply>,
        ranks: &mut [RankOutcome],
        step: &Step,
        retest: bool,
    ) {
        let keep = |o: &mut RankOutcome, b: Batch| {
            if retest {
                o.retests.push(b)
            } else {
                o.batches.push(b)
            }
        };
        let tests: BTreeMap<u32, Vec<TestSpec>> = step
            .iter()
            .filter(|(r, _)| ranks[*r as usize].failure.is_none())
            .cloned()
            .collect();
        let wait = step_bound(step, self.opts.level.setup_margin());
        let others: Vec<u32> = tests.keys().copied().filter(|&r| r != 0).collect();
        let gpu = self.my_gpu();
        let (mine, heard) = std::thread::scope(|s| {
            let own = tests
                .get(&0)
                .map(|t| s.spawn(move || checks::run_batch(gpu, t)));
            let heard = order_and_hear(
                crew,
                ranks,
                &others,
                |r| Order::Gate(GateOrder::Run(tests[&r].clone())),
                wait,
            );
            (own.map(|h| h.join()), heard)
        });
        match mine {
            Some(Ok(b)) => keep(&mut ranks[0], b),
            Some(Err(_)) => ranks[0].failure = Some("rank 0's tests panicked".into()),
            None => {}
        }
        for (r, reply) in heard {
            match reply {
                Reply::Gate(GateReply::Batch(b)) => match b.fault(&tests[&r]) {
                    None => keep(&mut ranks[r as usize], *b),
                    Some(why) => {
                        ranks[r as usize].failure =
                            Some(format!("answered a batch rank 0 refuses: {why}"))
                    }
                },
                _ => ranks[r as usize].failure = Some("answered a test out of turn".into()),
            }
        }
    }
}

/// Sends each of `to` its order and hears each reply by `wait`; a rank that cannot be
/// reached, dies, stops or does not answer gets its failure, and the replies of the rest are
/// returned.
fn order_and_hear(
    crew: &mut Crew<Order, Reply>,
    ranks: &mut [RankOutcome],
    to: &[u32],
    order: impl Fn(u32) -> Order,
    wait: Duration,
) -> Vec<(u32, Reply)> {
    let mut sent = Vec::new();
    let able: Vec<u32> = to
        .iter()
        .copied()
        .filter(|&r| ranks[r as usize].failure.is_none())
        .collect();
    for r in able {
        match crew.order(r, order(r)) {
            Ok(()) => sent.push(r),
            Err(e) => ranks[r as usize].failure = Some(e.to_string()),
        }
    }
    let mut replies = Vec::new();
    for (r, heard) in crew.hear_each(&sent, Instant::now() + wait) {
        match heard {
            Ok(reply) => replies.push((r, reply)),
            Err(ClusterError::NoAnswer { .. }) => {
                ranks[r as usize].failure =
                    Some(format!("no answer within {:.0} s", wait.as_secs_f64()))
            }
            Err(e) => ranks[r as usize].failure = Some(e.to_string()),
        }
    }
    replies
}

/// How long rank 0 waits for a step: its longest batch and the margin.
fn step_bound(step: &Step, margin: Duration) -> Duration {
    step.iter()
        .map(|(_, t)| checks::batch_bound(t, margin))
        .max()
        .unwrap_or_default()
}

/// The steps of the gate for each rank's `tests`. First every rank's tests that need only its
/// own GPU, all at once (a GEMM on an adapter of its own); then the tests that load what a
/// machine's ranks share (memory, CPU; everything on a CPU driver), in turns: turn i holds the
/// i-th rank of every machine, so machines run side by side and ranks of one machine one after
/// another.
fn plan(ranks: &[RankOutcome], tests: impl Fn(&RankOutcome) -> Vec<TestSpec>) -> Vec<Step> {
    let able: Vec<&RankOutcome> = ranks
        .iter()
        .filter(|o| o.failure.is_none() && o.inventory.is_some())
        .collect();
    let split = |o: &RankOutcome, shared: bool| -> Vec<TestSpec> {
        let cpu = o.inventory.as_ref().is_some_and(Inventory::cpu_adapter);
        tests(o)
            .into_iter()
            .filter(|t| t.kind.shares_host(cpu) == shared)
            .collect()
    };
    let mut steps = Vec::new();
    let alone: Step = able
        .iter()
        .map(|o| (o.rank, split(o, false)))
        .filter(|(_, t)| !t.is_empty())
        .collect();
    if !alone.is_empty() {
        steps.push(alone);
    }
    let mut per_machine: BTreeMap<&str, Vec<&RankOutcome>> = BTreeMap::new();
    for o in &able {
        let id = o.inventory.as_ref().map_or("", |i| i.machine_id.as_str());
        per_machine.entry(id).or_default().push(o);
    }
    let turns = per_machine.values().map(Vec::len).max().unwrap_or(0);
    for i in 0..turns {
        let turn: Step = per_machine
            .values()
            .filter_map(|v| v.get(i))
            .map(|o| (o.rank, split(o, true)))
            .filter(|(_, t)| !t.is_empty())
            .collect();
        if !turn.is_empty() {
            steps.push(turn);
        }
    }
    steps
}

/// The `fleet` bench, for the registry (a multi-rank command of its own).
pub const DESCRIPTOR: crate::bench::descriptor::Descriptor = crate::bench::descriptor::Descriptor {
    name: "fleet",
    from_toml: None,
    command: args::command(|m, g| {
        use crate::bench::descriptor::{After, Ran};
        let a: args::FleetArgs = crate::bench::descriptor::parsed(m)?;
        let Some(outcome) = run(&a.options(g))? else {
            return Ok(Ran::done());
        };
        Ok(Ran {
            dir: Some(outcome.dir),
            code: outcome.exit_code,
            after: After::Report,
            json: Some(outcome.summary),
        })
    }),
    tables: || {
        vec![
            crate::record::TableSpec::of::<table::FleetTable>()
                .headlines(views::headlines)
                .charts(crate::record::Charts::OfFirst(charts::fleet_charts)),
            crate::record::TableSpec::of::<cost::KeepCostTable>(),
        ]
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::links;
    use crate::bench::pipeline::Order as PipelineOrder;
    use checks::Level;

    /// The orders travel untagged: each must read back as its own bench's, whatever the
    /// others' variants are called (links and the pipeline both have a `Plan`).
    #[test]
    fn every_order_reads_back_as_its_own_benchs() {
        let back = |o: &Order| -> Order {
            serde_json::from_str(&serde_json::to_string(o).unwrap()).unwrap()
        };
        let pair_plan = Level::Standard.links().unwrap().plan;
        let cases = [
            Order::Gate(GateOrder::Inventory),
            Order::Gate(GateOrder::Run(Level::Quick.tests())),
            Order::Links(links::Order::Plan(pair_plan)),
            Order::Links(links::Order::Round(2, vec![(0, 1)])),
            Order::Pipeline(PipelineOrder::Plan(pipeline::plan(4))),
            Order::Pipeline(PipelineOrder::Iter(3)),
            Order::Pipeline(PipelineOrder::Verify),
        ];
        for o in &cases {
            let same = matches!(
                (o, back(o)),
                (Order::Gate(_), Order::Gate(_))
                    | (Order::Links(_), Order::Links(_))
                    | (Order::Pipeline(_), Order::Pipeline(_))
            );
            assert!(same, "{o:?} read back as another bench's");
        }
    }
}
