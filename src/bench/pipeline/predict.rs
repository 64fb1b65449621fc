//! The pipeline's plan and prediction: each case planned by the simulator on calibrated op
//! times, and each timed iteration set against the simulator run on its own measured times.

use anyhow::{anyhow, Result};

use super::exec::{self, Comm, StageTimes};
use super::plan::{Calibration, Case, OpOrder};
use super::shape::Shape;
use crate::sim::{evaluate, CommModel, Executed, Layout, Op, OpKind, Run, Scenario};

/// Puts a rank's op times on rank 0's clock.
pub(super) fn shift(t: &mut StageTimes, offset_us: f64) {
    for o in &mut t.ops {
        o.start_us -= offset_us;
        o.end_us -= offset_us;
        o.queue_end_us -= offset_us;
    }
}

/// Iteration time, bubble per stage and the measured run as the simulator's `Run`, from every
/// stage's op times of one iteration (ms from the iteration's first start).
pub(super) fn measured_run(times: &[StageTimes]) -> (f64, Vec<f64>, Run) {
    let t0 = times
        .iter()
        .flat_map(|t| t.ops.iter().map(|o| o.start_us))
        .fold(f64::INFINITY, f64::min);
    let t_end = times
        .iter()
        .flat_map(|t| t.ops.iter().map(|o| o.queue_end_us))
        .fold(f64::NEG_INFINITY, f64::max);
    let iteration = (t_end - t0) / 1e3;
    let mut ops = Vec::new();
    let mut busy = Vec::new();
    for (s, t) in times.iter().enumerate() {
        let mut b = 0.0;
        for o in &t.ops {
            b += (o.end_us - o.start_us) / 1e3;
            ops.push(Executed {
                op: Op {
                    chunk: o.chunk as usize,
                    ..Op::new(o.kind, s, o.mb as usize)
                },
                start: (o.start_us - t0) / 1e3,
                end: (o.end_us - t0) / 1e3,
                queue_end: (o.queue_end_us - t0) / 1e3,
                arrival: (o.queue_end_us - t0) / 1e3,
            });
        }
        busy.push(b);
    }
    let bubble = busy.iter().map(|b| 1.0 - b / iteration).collect();
    let run = Run {
        ops,
        iteration_ms: iteration,
        busy_ms: busy,
        peak_in_flight: Vec::new(),
        peak_activation_bytes: Vec::new(),
    };
    (iteration, bubble, run)
}

/// An iteration's sends, every stage's.
fn sends(it: &[StageTimes]) -> impl Iterator<Item = &exec::SendTime> {
    it.iter().flat_map(|t| t.sends.iter())
}

/// The median over iterations of each iteration's mean of `values` (0 where none has any).
fn typical(iters: &[Vec<StageTimes>], values: impl Fn(&[StageTimes]) -> Vec<f64>) -> f64 {
    let mut means: Vec<f64> = iters
        .iter()
        .filter_map(|it| {
            let v = values(it);
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        })
        .collect();
    if means.is_empty() {
        return 0.0;
    }
    crate::stats::robust::median_in_place(&mut means)
}

/// The simulator's scenario from what was measured: per stage the F, B and W compute times
/// and per link the send (copy to host and write to acknowledgement, injected delay included,
/// under the comm model that matches the run), each the mean over an iteration's ops (an
/// iteration is a sum of ops, and a sum follows the mean of what it adds), then the median
/// over the timed iterations, as the measured iteration is their median: one disturbed
/// iteration moves neither.
pub(super) fn measured_scenario(
    stages: usize,
    shape: &Shape,
    comm: Comm,
    iters: &[Vec<StageTimes>],
    (fused, layout): (bool, Layout),
) -> Result<Scenario> {
    // The simulator gives each of a rank's chunks 1/chunks of its stage's time.
    let chunks = layout.chunks() as f64;
    let per = |s: usize, k: OpKind| -> f64 {
        typical(iters, |it| {
            it[s]
                .ops
                .iter()
                .filter(|o| o.kind == k)
                .map(|o| (o.end_us - o.start_us) / 1e3)
                .collect()
        })
        .max(1e-3)
            * chunks
    };
    let tf: Vec<f64> = (0..stages).map(|s| per(s, OpKind::F)).collect();
    let tb: Vec<f64> = (0..stages).map(|s| per(s, OpKind::B)).collect();
    let tw: Vec<f64> = (0..stages)
        .map(|s| if fused { 0.0 } else { per(s, OpKind::W) })
        .collect();
    let d2h_ms = typical(iters, |it| sends(it).map(|s| s.d2h_us / 1e3).collect());
    let link = |l: usize| -> f64 {
        typical(iters, |it| {
            let on = sends(it).filter(|s| s.link as usize == l);
            match comm {
                Comm::Inline => on.map(|s| (s.d2h_us + s.send_us) / 1e3).collect(),
                Comm::Offload => on.map(|s| s.send_us / 1e3).collect(),
            }
        })
    };
    // The links the run used: the neighbours' and, interleaved, the wrap link.
    let used = match layout {
        Layout::Interleaved(_) => crate::sim::links_of(stages),
        _ => stages.saturating_sub(1),
    };
    let slow: Vec<(usize, f64)> = (0..used).map(|l| (l, link(l))).collect();
    let model = match comm {
        Comm::Inline => CommModel::Queue,
        Comm::Offload => CommModel::Offload,
    };
    Scenario::builder(stages, shape.microbatches as usize)
        .times(&tf, &tb, &tw)
        .slow(&slow)
        .comm(model, d2h_ms)
        .build()
        .map_err(|e| anyhow!("the measured scenario: {e}"))
}

/// One case as planned: the simulator's plan, each stage's op order, and where the model's
/// chunks live.
pub(super) struct PlannedCase {
    pub(super) name: String,
    pub(super) orders: Vec<OpOrder>,
    pub(super) split: bool,
    pub(super) layout: Layout,
    /// What the plan was made on: each stage's calibrated op times, the copy to the host as
    /// every link's cost, and the injected delay.
    pub(super) planning: Scenario,
}

/// What one case measured: each timed iteration's stage times, its iteration time and the
/// last one as a `Run`, and the gradients' error after the last.
#[derive(Default)]
pub(super) struct Measured {
    pub(super) timed: Vec<Vec<StageTimes>>,
    pub(super) iteration_us: Vec<f64>,
    pub(super) last: Option<(f64, Vec<f64>, Run)>,
    pub(super) grad_err: f64,
}

/// Plans `case` with the calibrated op times and the injected delay.
pub(super) fn plan_case(case: &Case, cals: &[Calibration], shape: &Shape) -> Result<PlannedCase> {
    let n = cals.len();
    let schedule = case.schedule.clone();
    let ms = |us: f64| (us / 1e3).max(1e-3);
    let model = match case.comm {
        Comm::Inline => CommModel::Queue,
        Comm::Offload => CommModel::Offload,
    };
    let slow: Vec<(usize, f64)> = case.slow.iter().map(|&(l, d)| (l as usize, d)).collect();
    let d2h = ms(cals.iter().map(|c| c.d2h).sum::<f64>() / n as f64);
    let planning = Scenario::builder(n, shape.microbatches as usize)
        .times(
            &cals.iter().map(|c| ms(c.f)).collect::<Vec<_>>(),
            &cals.iter().map(|c| ms(c.b)).collect::<Vec<_>>(),
            &cals.iter().map(|c| ms(c.w)).collect::<Vec<_>>(),
        )
        .link_ms(d2h)
        .slow(&slow)
        .comm(model, d2h)
        .build()
        .map_err(|e| anyhow!("{e}"))?;
    let mem = crate::sim::default_mem_limit(&planning);
    let (name, planned) =
        evaluate(&schedule, &planning, mem).map_err(|e| anyhow!("{schedule}: {e}"))?;
    let split = planned.ops.iter().any(|e| e.op.kind == OpKind::W);
    Ok(PlannedCase {
        name,
        orders: planned.orders(n),
        split,
        layout: schedule.layout(n),
        planning,
    })
}

/// Where a delayed case's prediction comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Basis {
    /// The case of the same schedule and comm without a delay, measured in the same run.
    Healthy,
    /// Rank 0's timing of each op alone before the run (no healthy case to go by).
    Calibration,
    /// A case without a delay: its own op and link times.
    Itself,
}

impl Basis {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Basis::Healthy => "healthy",
            Basis::Calibration => "calibration",
            Basis::Itself => "itself",
        }
    }
}

/// The scenario a delayed case is predicted on, from what a user knows before the fault: the
/// healthy case's measured op and link times (`healthy`: its scenario and whether its
/// backward was fused) with the injected delay added to its link, or without a healthy case
/// the plan's calibrated times. A healthy case measured with a fused backward lends its B
/// split by the calibrated B : W ratio to a case that splits it.
pub(super) fn predicting_scenario(
    pc: &PlannedCase,
    healthy: Option<(&Scenario, bool)>,
    slow: Option<(u32, f64)>,
) -> (Scenario, Basis) {
    let Some((sc, fused)) = healthy else {
        return (pc.planning.clone(), Basis::Calibration);
    };
    let mut sc = sc.clone();
    if fused && pc.split {
        let plan = &pc.planning;
        for i in 0..sc.stages {
            let share = plan.tw[i] / (plan.tb[i] + plan.tw[i]).max(1e-12);
            sc.tw[i] = sc.tb[i] * share;
            sc.tb[i] -= sc.tw[i];
        }
    }
    let Some((link, ms)) = slow else {
        return (sc, Basis::Itself);
    };
    let mut delays = sc.delay_ms.clone();
    let l = link as usize;
    if l < crate::sim::links_of(sc.stages) {
        delays.resize(delays.len().max(l + 1), 0.0);
        delays[l] += ms;
    }
    (sc.with_delays(delays), Basis::Healthy)
}

/// Activations in flight at most per stage (F done, its B not yet), from the orders.
pub(super) fn peak_in_flight(orders: &[Vec<Op>]) -> Vec<usize> {
    orders
        .iter()
        .map(|o| {
            let (mut now, mut peak) = (0usize, 0usize);
            for op in o {
                match op.kind {
                    OpKind::F => now += 1,
                    OpKind::B => now = now.saturating_sub(1),
                    OpKind::W => {}
                }
                peak = peak.max(now);
            }
            peak
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::pipeline::exec::{OpTime, SendTime};
    use crate::sim::{simulate, Policy};

    fn op(kind: OpKind, start_us: f64, end_us: f64, queue_end_us: f64) -> OpTime {
        OpTime {
            kind,
            mb: 0,
            chunk: 0,
            start_us,
            end_us,
            queue_end_us,
        }
    }

    /// Two stages, one microbatch, backward fused: F0, send, F1, B1, send, B0.
    fn two_stages(send_us: f64) -> Vec<StageTimes> {
        let f = 1000.0;
        let s0 = StageTimes {
            ops: vec![
                op(OpKind::F, 0.0, f, f + send_us),
                op(
                    OpKind::B,
                    3.0 * f + 2.0 * send_us,
                    4.0 * f + 2.0 * send_us,
                    4.0 * f + 2.0 * send_us,
                ),
            ],
            sends: vec![SendTime {
                link: 0,
                d2h_us: 0.0,
                send_us,
            }],
            gpu_clock: None,
            load: None,
        };
        let s1 = StageTimes {
            ops: vec![
                op(OpKind::F, f + send_us, 2.0 * f + send_us, 2.0 * f + send_us),
                op(
                    OpKind::B,
                    2.0 * f + send_us,
                    3.0 * f + send_us,
                    3.0 * f + 2.0 * send_us,
                ),
            ],
            sends: vec![SendTime {
                link: 0,
                d2h_us: 0.0,
                send_us,
            }],
            gpu_clock: None,
            load: None,
        };
        vec![s0, s1]
    }

    fn planned(split: bool, planning: Scenario) -> PlannedCase {
        PlannedCase {
            name: "1f1b".into(),
            orders: Vec::new(),
            split,
            layout: Layout::Linear,
            planning,
        }
    }

    #[test]
    fn a_delayed_case_is_predicted_from_the_healthy_one_and_the_delay_alone() {
        let sc = |tb: f64, tw: f64, links: &[(usize, f64)]| {
            Scenario::builder(3, 4)
                .times(&[1.0], &[tb], &[tw])
                .slow(links)
                .comm(CommModel::Queue, 0.0)
                .build()
                .unwrap()
        };
        // Healthy: links cost 0.5 and 0.7 ms as measured; the fault adds 20 ms to link 1.
        let healthy = sc(3.0, 0.0, &[(0, 0.5), (1, 0.7)]);
        let plan = planned(false, sc(2.0, 1.0, &[(1, 20.0)]));
        let (got, basis) = predicting_scenario(&plan, Some((&healthy, true)), Some((1, 20.0)));
        assert_eq!(basis, Basis::Healthy);
        assert_eq!(got.delay_ms, vec![0.5, 20.7]);
        assert_eq!((got.tb[0], got.tw[0]), (3.0, 0.0));
        // A case that splits backward takes the healthy fused B by the calibrated B : W (2 : 1).
        let split = planned(true, sc(2.0, 1.0, &[]));
        let (got, _) = predicting_scenario(&split, Some((&healthy, true)), Some((0, 5.0)));
        assert!((got.tb[0] - 2.0).abs() < 1e-12 && (got.tw[0] - 1.0).abs() < 1e-12);
        assert_eq!(got.delay_ms, vec![5.5, 0.7]);
        // No healthy case in the run: the plan's calibrated scenario, said.
        let (got, basis) = predicting_scenario(&plan, None, Some((1, 20.0)));
        assert_eq!((basis, got), (Basis::Calibration, plan.planning.clone()));
    }

    #[test]
    fn the_measured_iteration_and_bubbles_are_read_off_the_ops() {
        // 4 ms of compute and two 0.5 ms sends: 5 ms; each stage computes 2 of them.
        let (iteration, bubbles, run) = measured_run(&two_stages(500.0));
        assert!((iteration - 5.0).abs() < 1e-9, "{iteration}");
        assert!((bubbles[0] - 0.6).abs() < 1e-9 && (bubbles[1] - 0.6).abs() < 1e-9);
        assert_eq!(run.ops.len(), 4);
    }

    #[test]
    fn the_prediction_matches_a_case_solved_by_hand_and_moves_with_the_link() {
        let shape = Shape {
            layers: 1,
            hidden: 8,
            tokens: 8,
            microbatches: 1,
        };
        let orders = vec![
            vec![Op::new(OpKind::F, 0, 0), Op::new(OpKind::B, 0, 0)],
            vec![Op::new(OpKind::F, 1, 0), Op::new(OpKind::B, 1, 0)],
        ];
        let policy = Policy::Fixed {
            orders,
            split: false,
            layout: crate::sim::Layout::Linear,
            together: Vec::new(),
            comms: None,
        };
        // Inline sends hold the sender's queue: F0 1 + send + F1 1 + B1 1 + send + B0 1 (ms).
        for send_us in [500.0, 1500.0] {
            let times = two_stages(send_us);
            let sc = measured_scenario(2, &shape, Comm::Inline, &[times], (true, Layout::Linear))
                .unwrap();
            let predicted = simulate(&sc, &policy).unwrap().iteration_ms;
            let by_hand = 4.0 + 2.0 * send_us / 1e3;
            assert!(
                (predicted - by_hand).abs() < 1e-6,
                "{predicted} vs {by_hand}"
            );
        }
        // One disturbed iteration of three (its sends 20 times longer) moves neither the
        // measured iteration (their median) nor the prediction.
        let iters = [two_stages(500.0), two_stages(10_000.0), two_stages(500.0)];
        let sc =
            measured_scenario(2, &shape, Comm::Inline, &iters, (true, Layout::Linear)).unwrap();
        let predicted = simulate(&sc, &policy).unwrap().iteration_ms;
        assert!((predicted - 5.0).abs() < 1e-6, "{predicted}");
    }
}
