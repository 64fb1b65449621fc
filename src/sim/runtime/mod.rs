//! How real pipeline runtimes run a schedule under slow links, beyond "an op waits for its
//! input": a delay as pure latency or as occupancy of a link's channels, what a pending
//! transfer blocks, which stream a transfer queues on, and what the host offload path costs.
//! The four systems of the PipeMorph artifact (1F1B, ZB, ZB-CPU, ZB-CPU-ReSchedule) are
//! presets of these mechanisms (docs/simulator.md, "How close is the simulator").
//!
//! Each stage is a program (compute ops and communication calls in the order its host issues
//! them); a runtime model turns the programs into one max-plus graph and solves it exactly.

pub mod dag;
mod exec;
pub mod program;

use std::fmt;
use std::str::FromStr;

pub use exec::execute;
#[cfg(test)]
use exec::injected_delay;
use program::{Instr, Orders};

use super::engine::{simulate, Policy, PriorityPolicy};
use super::model::{OpKind, Scenario};
use super::schedules::pipemorph_warmup;
use super::zb::zb_runtime_lists;

/// Where a transfer travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Path {
    /// GPU to GPU (NCCL): a kernel on the stage's communication stream.
    Device,
    /// Copied to host memory, sent by host sender processes, copied back to the GPU.
    Offload,
}

/// What a slow link's delay is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkModel {
    /// Pure latency: transfers overlap freely, each arrives the delay later.
    Latency,
    /// Occupancy, FIFO: each transfer holds a channel for its delay plus bytes / bandwidth
    /// (the device path: the sender's communication stream; offload: one of k host senders).
    Occupancy,
}

/// What a pending transfer blocks besides the op that needs its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Blocking {
    /// Nothing.
    None,
    /// The sender's host, until each of its sends is delivered.
    Sender,
    /// The receiver's consumer waits for the whole batch its receive was posted in.
    Receiver,
    /// The whole stage: every call returns only when all its transfers are done (Megatron's
    /// blocking combined send/receive).
    Stage,
}

/// How many communication streams a stage's transfers queue on (device path).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Streams {
    PerRank,
    PerLink,
}

/// How the delay injector reads a send's peer: two-rank communicators (peer 0 the previous
/// stage, 1 the next: right) or the pipeline group's (peer numbers are stages, so stage 2's
/// sends to stage 1 are taken for sends to stage 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PeerNumbering {
    Pair,
    Group,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RuntimeModel {
    pub path: Path,
    pub link: LinkModel,
    pub blocking: Blocking,
    pub streams: Streams,
    pub numbering: PeerNumbering,
    /// The offload path's copies and host send take time (bytes over the machine's rates).
    pub offload_cost: bool,
    /// The device has one hardware queue for every stream (`CUDA_DEVICE_MAX_CONNECTIONS=1`,
    /// as Megatron sets it): a communication kernel not yet launched (behind its stream, or
    /// behind the injector's sleep) holds every compute kernel issued after it.
    pub single_queue: bool,
}

/// Documented constants of the machine a run ran on (docs/simulator.md: where each comes from).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Machine {
    /// GPU-to-GPU transfer rate (NCCL), GB/s.
    pub device_gbps: f64,
    /// Device-to-host and host-to-device copy rate, GB/s.
    pub pcie_gbps: f64,
    /// One host sender's rate (gloo over TCP), GB/s.
    pub host_gbps: f64,
}

impl Machine {
    /// The PipeMorph artifact's cluster: host_gbps from its `experiments/overhead` runs
    /// (every transfer offloaded, no delay), the others nominal (they move the healthy and
    /// the slow iteration alike).
    pub const ARTIFACT: Machine = Machine {
        device_gbps: 20.0,
        pcie_gbps: 20.0,
        host_gbps: 1.6,
    };
}

/// One iteration to run: per-stage op times, per-link delays, the activation's bytes.
#[derive(Debug, Clone)]
pub struct Job<'a> {
    pub stages: usize,
    pub microbatches: usize,
    pub tf: &'a [f64],
    pub tb: &'a [f64],
    pub tw: &'a [f64],
    /// Extra delay per link (stages - 1).
    pub delay: &'a [f64],
    pub activation_bytes: f64,
    /// Host senders per direction of a link on the offload path.
    pub channels: usize,

    /// B carries W's work too (1F1B).
    pub fused_backward: bool,
    /// A measured run's own: each stage's op order to replay, and how long each send holds
    /// the stage's queue (copy, send, acknowledgement), in place of the machine's rates.
    pub measured: Option<Replay<'a>>,
}

/// What a measured run of morphbench's own pipeline gives the model of its runtime.
#[derive(Debug, Clone, Copy)]
pub struct Replay<'a> {
    pub orders: &'a Orders,
    pub send_ms: &'a [f64],
}

/// A real runtime, as the artifact's experiments name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum System {
    /// Megatron's 1F1B over NCCL.
    OneFOneB,
    /// Zero Bubble's runtime over NCCL.
    Zb,
    /// ZB, every transfer offloaded to the host once a delay is seen, schedule kept.
    ZbCpu,
    /// ZB-CPU-ReSchedule (PipeMorph): offloaded, and re-planned for the delay.
    Pipemorph,
    /// morphbench's own `pipeline --comm inline`: after an op the stage copies, sends (the
    /// delay as latency) and waits for the acknowledgement; its orders replayed.
    MorphbenchInline,
    /// `pipeline --comm offload`: the stage pays the copy, a host thread sends.
    MorphbenchOffload,
}

impl fmt::Display for System {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            System::OneFOneB => "1F1B",
            System::Zb => "ZB",
            System::ZbCpu => "ZB-CPU",
            System::Pipemorph => "ZB-CPU-ReSchedule",
            System::MorphbenchInline => "morphbench-inline",
            System::MorphbenchOffload => "morphbench-offload",
        })
    }
}

impl FromStr for System {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<System> {
        match s.trim().to_ascii_lowercase().as_str() {
            "1f1b" | "megatron-1f1b" => Ok(System::OneFOneB),
            "zb" => Ok(System::Zb),
            "zb-cpu" => Ok(System::ZbCpu),
            "zb-cpu-reschedule" | "pipemorph" => Ok(System::Pipemorph),
            "morphbench-inline" => Ok(System::MorphbenchInline),
            "morphbench-offload" => Ok(System::MorphbenchOffload),
            other => Err(anyhow::anyhow!(
                "unknown system '{other}': choose 1F1B, ZB, ZB-CPU or ZB-CPU-ReSchedule (pipemorph)"
            )),
        }
    }
}

/// Each mechanism of the presets, to switch off one at a time (the ablation in docs/simulator.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mechanisms {
    /// Megatron's combined send/receive calls hold the stage (else: nothing blocks).
    pub combined_calls_block: bool,
    /// A delay occupies the sender's stream or channel (else: pure latency).
    pub delay_occupies: bool,
    /// Megatron's batched calls share one communication stream a rank (else: one per link).
    pub one_stream_per_rank: bool,
    /// The injector's peer numbering under Megatron's batched calls (else: always right).
    pub group_numbering: bool,
    /// ZB's consumer waits for its receive's whole batch (else: for its receive).
    pub batch_waits: bool,
    /// One hardware queue for all streams (else: compute overlaps pending communication).
    pub single_queue: bool,
    /// The offload path's copies and host send take time.
    pub offload_cost: bool,
    /// ZB runs its own planner's order (else: today's zb-fill).
    pub zb_plan: bool,
    /// ZB-CPU and PipeMorph run ZB on the device path until a delay appears (else: their
    /// healthy iteration is their own offloaded one).
    pub healthy_on_device: bool,
}

impl Mechanisms {
    pub const ALL: Mechanisms = Mechanisms {
        combined_calls_block: true,
        delay_occupies: true,
        one_stream_per_rank: true,
        group_numbering: true,
        batch_waits: true,
        single_queue: true,
        offload_cost: true,
        zb_plan: true,
        healthy_on_device: true,
    };

    /// Every mechanism with its name, each switched off in turn.
    pub fn ablations() -> Vec<(&'static str, Mechanisms)> {
        let off = |switch: fn(&mut Mechanisms)| {
            let mut m = Mechanisms::ALL;
            switch(&mut m);
            m
        };
        vec![
            (
                "combined calls block the stage",
                off(|m| m.combined_calls_block = false),
            ),
            (
                "delay occupies stream/channel",
                off(|m| m.delay_occupies = false),
            ),
            (
                "one comm stream per rank",
                off(|m| m.one_stream_per_rank = false),
            ),
            (
                "injector's group peer numbering",
                off(|m| m.group_numbering = false),
            ),
            ("one hardware queue", off(|m| m.single_queue = false)),
            ("ZB waits for whole batches", off(|m| m.batch_waits = false)),
            ("offload path cost", off(|m| m.offload_cost = false)),
            ("ZB's own plan", off(|m| m.zb_plan = false)),
            (
                "healthy on the device path",
                off(|m| m.healthy_on_device = false),
            ),
        ]
    }

    /// The device path; `group`: the calls run on the pipeline group's communicator (one
    /// stream a rank, peers numbered by stage: Megatron's batched p2p), else on two-rank
    /// communicators (a stream per link, peers 0 and 1: isend/irecv).
    fn device(&self, blocking: Blocking, group: bool) -> RuntimeModel {
        RuntimeModel {
            path: Path::Device,
            link: if self.delay_occupies {
                LinkModel::Occupancy
            } else {
                LinkModel::Latency
            },
            blocking,
            streams: if group && self.one_stream_per_rank {
                Streams::PerRank
            } else {
                Streams::PerLink
            },
            numbering: if group && self.group_numbering {
                PeerNumbering::Group
            } else {
                PeerNumbering::Pair
            },
            offload_cost: self.offload_cost,
            single_queue: self.single_queue,
        }
    }

    /// ZB's device path: two-rank communicators, a consumer waiting for its receive's batch.
    fn zb_device(&self) -> RuntimeModel {
        let blocking = if self.batch_waits {
            Blocking::Receiver
        } else {
            Blocking::None
        };
        self.device(blocking, false)
    }

    fn offload(&self) -> RuntimeModel {
        RuntimeModel {
            path: Path::Offload,
            blocking: Blocking::Receiver,
            ..self.device(Blocking::Receiver, false)
        }
    }
}

/// A system's healthy and slow iteration times.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prediction {
    pub healthy_ms: f64,
    pub slow_ms: f64,
}

/// The per-stage order PipeMorph's runtime policy gives under op times and link delays:
/// `warmup` forwards, no more until the first B, then the ready op, B before F before W.
fn planned_order(
    job: &Job,
    times: [&[f64]; 3],
    delay: &[f64],
    warmup: Vec<usize>,
) -> anyhow::Result<Orders> {
    let s = job.stages;
    let [tf, tb, tw] = times;
    let sc = Scenario::builder(s, job.microbatches)
        .times(tf, tb, tw)
        .slow(&slow_links(delay))
        .build()?;
    let policy = Policy::Priority(PriorityPolicy {
        split: true,
        warmup,
        cap: vec![usize::MAX; s],
        priority: [OpKind::B, OpKind::F, OpKind::W],
        hold_after_warmup: true,
    });
    let run = simulate(&sc, &policy)?;
    Ok(orders_of(&run, s))
}

/// The delayed links, as `(link, ms)` pairs.
fn slow_links(delay: &[f64]) -> Vec<(usize, f64)> {
    let all = delay.iter().copied().enumerate();
    all.filter(|d| d.1 > 0.0).collect()
}

fn orders_of(run: &super::Run, stages: usize) -> Orders {
    run.orders(stages)
        .into_iter()
        .map(|o| o.into_iter().map(|op| (op.kind, op.mb)).collect())
        .collect()
}

/// ZB's runtime lists (or, ablated, today's zb-fill order with receives posted when needed).
fn zb_programs(job: &Job, mech: &Mechanisms) -> anyhow::Result<Vec<Vec<Instr>>> {
    let (s, n) = (job.stages, job.microbatches);
    if mech.zb_plan {
        return Ok(program::from_steps(&zb_runtime_lists(s, n, 2 * s)?));
    }
    let sc = Scenario::builder(s, n).build()?;
    let policy = super::schedules::base_policy(&super::Schedule::ZbFill, &sc);
    let run = simulate(&sc, &policy)?;
    let mut end = vec![0.0; 3 * s * n];
    for e in &run.ops {
        end[(e.op.kind.index() * s + e.op.stage) * n + e.op.mb] = e.end;
    }
    Ok(program::from_steps(&super::zb::runtime_lists_from_ends(
        s, n, &end,
    )))
}

/// Predicts `system`'s healthy iteration (no delay) and its iteration under `job.delay`.
pub fn predict(
    system: System,
    job: &Job,
    machine: &Machine,
    mech: &Mechanisms,
) -> anyhow::Result<Prediction> {
    let calm_delay = vec![0.0; job.delay.len()];
    let calm = Job {
        delay: &calm_delay,
        ..job.clone()
    };
    let split = Job {
        fused_backward: false,
        ..job.clone()
    };
    let calm_split = Job {
        fused_backward: false,
        ..calm.clone()
    };
    let run = |p: &[Vec<Instr>], j: &Job, m: &RuntimeModel| execute(p, j, m, machine);
    match system {
        System::MorphbenchInline | System::MorphbenchOffload => {
            let replay = job
                .measured
                .ok_or_else(|| anyhow::anyhow!("{system} predicts a measured pipeline run only"))?;
            let p = program::from_orders(replay.orders, job.stages);
            let m = RuntimeModel {
                path: Path::Offload,
                link: LinkModel::Latency,
                blocking: if system == System::MorphbenchInline {
                    Blocking::Stage
                } else {
                    Blocking::Receiver
                },
                streams: Streams::PerLink,
                numbering: PeerNumbering::Pair,
                offload_cost: true,
                single_queue: false,
            };
            Ok(Prediction {
                healthy_ms: run(&p, &calm, &m)?,
                slow_ms: run(&p, job, &m)?,
            })
        }
        System::OneFOneB => {
            let p = program::megatron_1f1b(job.stages, job.microbatches);
            let blocking = if mech.combined_calls_block {
                Blocking::Stage
            } else {
                Blocking::None
            };
            let m = mech.device(blocking, true);
            let fused = Job {
                fused_backward: true,
                ..job.clone()
            };
            let fused_calm = Job {
                fused_backward: true,
                ..calm.clone()
            };
            Ok(Prediction {
                healthy_ms: run(&p, &fused_calm, &m)?,
                slow_ms: run(&p, &fused, &m)?,
            })
        }
        System::Zb => {
            let p = zb_programs(job, mech)?;
            let m = mech.zb_device();
            Ok(Prediction {
                healthy_ms: run(&p, &calm_split, &m)?,
                slow_ms: run(&p, &split, &m)?,
            })
        }
        System::ZbCpu | System::Pipemorph => {
            let m = mech.offload();
            let s = job.stages;
            let orders = if system == System::ZbCpu {
                // Planned once, at the first iteration: every op 10 units, no delay known.
                let warm = (0..s)
                    .map(|i| (2 * (s - 1 - i) + 1).min(job.microbatches))
                    .collect();
                planned_order(job, [&[10.0], &[10.0], &[10.0]], &calm_delay, warm)?
            } else {
                best_replan(job, &split, &m, machine)?
            };
            let p = program::from_orders(&orders, s);
            let slow_ms = run(&p, &split, &m)?;
            let healthy_ms = if mech.healthy_on_device {
                run(&zb_programs(job, mech)?, &calm_split, &mech.zb_device())?
            } else {
                run(&p, &calm_split, &m)?
            };
            Ok(Prediction {
                healthy_ms,
                slow_ms,
            })
        }
    }
}

/// PipeMorph's re-plan: warm-up x(i) = x(i+1) + ceil(c(i) / tF(i)) + 2 for planning delays of
/// 0, 5, ... up to the real one (its search), each order replayed under the real runtime; the
/// fastest is the one it runs.
fn best_replan(
    job: &Job,
    split: &Job,
    m: &RuntimeModel,
    machine: &Machine,
) -> anyhow::Result<Orders> {
    let top = job.delay.iter().copied().fold(0.0, f64::max);
    let mut best: Option<(f64, Orders)> = None;
    let mut planned = 0.0f64;
    loop {
        let delay: Vec<f64> = job
            .delay
            .iter()
            .map(|&d| if d > 0.0 { planned.min(d) } else { 0.0 })
            .collect();
        let sc = Scenario::builder(job.stages, job.microbatches)
            .times(job.tf, job.tb, job.tw)
            .slow(&slow_links(&delay))
            .build()?;
        let warm = pipemorph_warmup(&sc, 2, job.microbatches);
        let order = planned_order(job, [job.tf, job.tb, job.tw], &delay, warm)?;
        let t = execute(&program::from_orders(&order, job.stages), split, m, machine)?;
        if best.as_ref().is_none_or(|b| t < b.0 - 1e-9) {
            best = Some((t, order));
        }
        if planned >= top {
            break;
        }
        planned += 5.0;
    }
    Ok(best.expect("one plan at least").1)
}

#[cfg(test)]
mod tests;
