//! Behaviour of the simulator: closed forms, invariants over random scenarios, and the domino
//! effect that adaptation removes.

use proptest::prelude::*;

use super::engine::{simulate, Run};
use super::model::{CommModel, Layout, OpKind, Scenario};
use super::schedules::{default_mem_limit, evaluate, policy_of, static_policy, Schedule};

fn uniform(s: usize, n: usize, t: f64, slow: &[(usize, f64)], comm: CommModel) -> Scenario {
    Scenario::builder(s, n)
        .times(&[t], &[t], &[t])
        .slow(slow)
        .comm(comm, 0.0)
        .build()
        .unwrap()
}

fn run(schedule: &str, sc: &Scenario) -> Run {
    evaluate(&schedule.parse().unwrap(), sc, default_mem_limit(sc))
        .unwrap()
        .1
}

#[test]
fn one_f_one_b_closed_form() {
    for (s, n) in [(4, 12), (1, 5), (8, 8), (3, 20), (6, 2)] {
        let sc = uniform(s, n, 10.0, &[], CommModel::Latency);
        let r = run("1f1b", &sc);
        let expect = (n + s - 1) as f64 * 30.0;
        assert!(
            (r.iteration_ms - expect).abs() < 1e-9,
            "S={s} N={n}: {}",
            r.iteration_ms
        );
        let bubble = (s - 1) as f64 / (n + s - 1) as f64;
        for b in r.bubble_ratios() {
            assert!((b - bubble).abs() < 1e-9);
        }
        // 1F1B holds at most min(S - i, N) activations on stage i.
        for (i, &p) in r.peak_in_flight.iter().enumerate() {
            assert_eq!(p, (s - i).min(n));
        }
    }
}

#[test]
fn gpipe_holds_every_microbatch_and_zero_bubble_beats_1f1b() {
    let sc = uniform(4, 12, 10.0, &[], CommModel::Latency);
    let g = run("gpipe", &sc);
    assert_eq!(g.peak_in_flight, vec![12; 4]);
    let one = run("1f1b", &sc);
    let zb = run("zb-h1", &sc);
    assert!(
        zb.iteration_ms < one.iteration_ms,
        "{} vs {}",
        zb.iteration_ms,
        one.iteration_ms
    );
    // ZB-H1 keeps 1F1B's memory.
    assert_eq!(zb.peak_in_flight, one.peak_in_flight);
}

#[test]
fn domino_effect_and_adaptation() {
    // One slow link: the static 1F1B replay loses more than the delay per iteration, because
    // the delay is paid again by every microbatch that waits behind it.
    for link in [0usize, 2] {
        let calm = uniform(4, 12, 10.0, &[], CommModel::Latency);
        let slow = uniform(4, 12, 10.0, &[(link, 40.0)], CommModel::Latency);
        let base = run("1f1b", &calm).iteration_ms;
        let static_1f1b = run("static:1f1b", &slow).iteration_ms;
        assert!(
            static_1f1b - base > 40.0,
            "link {link}: lost only {}",
            static_1f1b - base
        );
        let adaptive = run("adaptive", &slow).iteration_ms;
        assert!(adaptive < static_1f1b, "link {link}");
        assert!(adaptive <= run("static:zb-h1", &slow).iteration_ms + 1e-9);
    }
}

#[test]
fn queue_model_blocks_the_sender_and_offload_unblocks_it() {
    let q = uniform(4, 8, 10.0, &[(1, 30.0)], CommModel::Queue);
    let l = uniform(4, 8, 10.0, &[(1, 30.0)], CommModel::Latency);
    let o = Scenario {
        comm: CommModel::Offload,
        d2h_ms: 0.5,
        ..l.clone()
    };
    let (tq, tl, to) = (
        run("static:1f1b", &q).iteration_ms,
        run("static:1f1b", &l).iteration_ms,
        run("static:1f1b", &o).iteration_ms,
    );
    assert!(tq > tl, "head-of-line blocking costs time: {tq} vs {tl}");
    assert!(to < tq && to >= tl, "offload sits between: {to}");
    // The send shows in the queue: stage 1's forwards hold its queue for the link time.
    let r = run("static:1f1b", &q);
    let f = r
        .ops
        .iter()
        .find(|e| e.op.stage == 1 && e.op.kind == OpKind::F)
        .unwrap();
    assert!((f.queue_end - f.end - 30.0).abs() < 1e-9);
}

#[test]
fn static_replay_equals_the_schedule_without_delay() {
    let sc = uniform(5, 9, 3.0, &[], CommModel::Latency);
    for name in ["1f1b", "zb-fill", "gpipe", "greedy", "zb-h1"] {
        let inner: Schedule = name.parse().unwrap();
        let a = simulate(&sc, &policy_of(&inner, &sc).unwrap()).unwrap();
        let b = simulate(&sc, &static_policy(&inner, &sc).unwrap()).unwrap();
        assert!((a.iteration_ms - b.iteration_ms).abs() < 1e-9, "{name}");
    }
}

#[test]
fn schedule_names_parse_and_print() {
    for s in [
        "gpipe",
        "1f1b",
        "zb-h1",
        "zb-h2",
        "zb-fill",
        "interleaved:2",
        "interleaved:3:6",
        "interleaved-zb-paper:3",
        "greedy",
        "adaptive",
        "static:1f1b",
        "static:zb-fill",
        "static:zb-h1",
    ] {
        assert_eq!(s.parse::<Schedule>().unwrap().to_string(), s);
    }
    assert!("static:adaptive".parse::<Schedule>().is_err());
    assert!("2f2b"
        .parse::<Schedule>()
        .unwrap_err()
        .to_string()
        .contains("unknown schedule"));
}

fn check_invariants(sc: &Scenario, r: &Run, split: bool, layout: Layout) {
    let (s, n, v) = (sc.stages, sc.microbatches, layout.chunks());
    let per = if split { 3 } else { 2 };
    assert_eq!(r.ops.len(), s * n * v * per, "every op exactly once");
    let mut seen = std::collections::HashSet::new();
    let mut by_op = std::collections::HashMap::new();
    for e in &r.ops {
        assert!(seen.insert(e.op), "{:?} ran twice", e.op);
        by_op.insert(e.op, *e);
    }
    // The op of virtual stage `vs`.
    let get = |kind, vs: usize, mb| {
        let (stage, chunk) = layout.place(s, vs);
        by_op[&super::model::Op {
            kind,
            stage,
            mb,
            chunk,
        }]
    };
    for e in &r.ops {
        let (i, m) = (layout.virtual_stage(s, e.op.stage, e.op.chunk), e.op.mb);
        let after = match e.op.kind {
            OpKind::F if i > 0 => get(OpKind::F, i - 1, m).arrival,
            OpKind::F => 0.0,
            OpKind::B if i + 1 < s * v => get(OpKind::B, i + 1, m).arrival,
            OpKind::B => get(OpKind::F, i, m).end,
            OpKind::W => get(OpKind::B, i, m).end,
        };
        assert!(
            e.start + 1e-9 >= after,
            "{:?} started before its dependency",
            e.op
        );
    }
    for stage in 0..s {
        let mut ops: Vec<_> = r.ops.iter().filter(|e| e.op.stage == stage).collect();
        ops.sort_by(|a, b| a.start.total_cmp(&b.start));
        for w in ops.windows(2) {
            assert!(
                w[1].start + 1e-9 >= w[0].queue_end,
                "overlap on stage {stage}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn invariants_and_bounds_hold(
        s in 1usize..6,
        n in 1usize..14,
        tf in prop::collection::vec(0.5f64..5.0, 1..2),
        tb in 0.5f64..6.0,
        tw in 0.0f64..4.0,
        link in 0.0f64..2.0,
        slow in prop::collection::vec((0usize..5, 0.0f64..30.0), 0..3),
        comm in prop::sample::select(vec![CommModel::Latency, CommModel::Queue, CommModel::Offload]),
    ) {
        let slow: Vec<(usize, f64)> = slow.into_iter().filter(|(l, _)| l + 1 < s).collect();
        let sc = Scenario::builder(s, n).times(&tf, &[tb], &[tw]).link_ms(link).slow(&slow).comm(comm, 0.3).build().unwrap();
        let mem = default_mem_limit(&sc);
        for name in ["gpipe", "1f1b", "zb-h1", "zb-h2", "zb-fill", "greedy", "static:1f1b", "static:zb-fill", "static:gpipe", "adaptive"] {
            let schedule: Schedule = name.parse().unwrap();
            let (_, r) = evaluate(&schedule, &sc, mem).unwrap();
            let split = !matches!(name, "gpipe" | "1f1b" | "static:1f1b" | "static:gpipe");
            check_invariants(&sc, &r, split, Layout::Linear);
        }
        // Interleaving needs whole groups of ranks: n rounded down to a multiple of s.
        if n >= s {
            let sc = Scenario::builder(s, n / s * s).times(&tf, &[tb], &[tw]).link_ms(link).slow(&slow).comm(comm, 0.3).build().unwrap();
            for name in ["interleaved:2", "interleaved:3", "zb-v"] {
                let schedule: Schedule = name.parse().unwrap();
                let (_, r) = evaluate(&schedule, &sc, mem).unwrap();
                check_invariants(&sc, &r, name == "zb-v", schedule.layout(s));
            }
        }
        let adaptive = run("adaptive", &sc);
        prop_assert!(adaptive.peak_in_flight.iter().all(|&p| p <= mem));
        // Bounds no schedule can beat: the busiest stage's own work, and one microbatch's
        // forward down the pipeline and backward back up, with every hop's link time.
        let work = n as f64 * (tf[0] + tb + tw);
        let one_microbatch = s as f64 * (tf[0] + tb) + 2.0 * (s as f64 - 1.0) * link;
        for name in ["1f1b", "zb-h1", "zb-h2", "zb-fill", "greedy", "adaptive"] {
            let t = run(name, &sc).iteration_ms;
            prop_assert!(t + 1e-9 >= work, "{name}: {t} ms < the {work} ms one stage must compute");
            prop_assert!(t + 1e-9 >= one_microbatch, "{name}: {t} ms < one microbatch's {one_microbatch} ms");
        }
        // A fixed order replayed with a longer delay on a link can never finish sooner.
        if s > 1 {
            let mut slower = slow.clone();
            slower.push((0, 7.5));
            let sc2 = Scenario::builder(s, n).times(&tf, &[tb], &[tw]).link_ms(link).slow(&slower).comm(comm, 0.3).build().unwrap();
            for name in ["static:1f1b", "static:zb-fill", "zb-h1", "zb-h2"] {
                let (t1, t2) = (run(name, &sc).iteration_ms, run(name, &sc2).iteration_ms);
                prop_assert!(t2 + 1e-9 >= t1, "{name}: {t2} ms with more delay < {t1} ms");
            }
        }
    }
}

/// Occupancy on cases solved by hand: two stages, two microbatches, 1 ms ops, GPipe. Held 5 ms
/// by each transfer, F1 leaves when F0 has gone (6 -> 11) and B1 behind B0 (18 -> 23): 24 ms;
/// as 5 ms of pure latency the two overlap: 16 ms.
#[test]
fn occupancy_queues_sends_behind_each_other() {
    let base = Scenario::builder(2, 2)
        .times(&[1.0], &[1.0], &[0.0])
        .build()
        .unwrap();
    let held = base.clone().with_occupancy(&[(0, 5.0)]).unwrap();
    let latency = Scenario::builder(2, 2)
        .times(&[1.0], &[1.0], &[0.0])
        .link_ms(5.0)
        .build()
        .unwrap();
    assert_eq!(run("gpipe", &held).iteration_ms, 24.0);
    assert_eq!(run("gpipe", &latency).iteration_ms, 16.0);
    assert!(base.clone().with_occupancy(&[(1, 1.0)]).is_err());
    assert!(base.with_occupancy(&[(0, f64::NAN)]).is_err());
}

#[test]
fn zb_v_below_its_planners_rule_is_refused_naming_the_rule_and_the_fix() {
    let sc = uniform(8, 4, 1.0, &[], CommModel::Latency);
    let e = evaluate(&"zb-v".parse().unwrap(), &sc, default_mem_limit(&sc))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("at least as many microbatches as ranks (4 < 8)")
            && e.contains("--microbatches 8")
            && e.contains("--schedule-file"),
        "{e}"
    );
    let sc = uniform(8, 8, 1.0, &[], CommModel::Latency);
    run("zb-v", &sc);
}

#[test]
fn a_held_send_keeps_its_sender_not_its_receiver() {
    // Stage 0's F0 waits 50 ms for its acknowledgement: stage 0 runs nothing before that,
    // while stage 1 has its data on time.
    let mut sc = uniform(2, 2, 10.0, &[], CommModel::Latency);
    let policy = policy_of(&Schedule::Gpipe, &sc).unwrap();
    let healthy = simulate(&sc, &policy).unwrap();
    let f0 = super::model::Op::new(OpKind::F, 0, 0);
    let at = sc.transfer_index(f0, Layout::Linear);
    sc.hold_ms = vec![0.0; sc.transfer_slots(Layout::Linear)];
    sc.hold_ms[at] = 50.0;
    let held = simulate(&sc, &policy).unwrap();
    let start = |r: &Run, stage: usize, mb: usize| {
        r.ops
            .iter()
            .find(|e| (e.op.stage, e.op.kind, e.op.mb) == (stage, OpKind::F, mb))
            .unwrap()
            .start
    };
    assert_eq!(start(&held, 1, 0), start(&healthy, 1, 0));
    assert!((start(&held, 0, 1) - (start(&healthy, 0, 1) + 50.0)).abs() < 1e-9);
}
