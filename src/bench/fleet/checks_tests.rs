//! The levels' budgets and `--only`.

use super::*;

#[test]
fn the_health_level_fits_slurms_health_check_on_a_node_of_8_gpus() {
    let bound = Level::Health.gate_bound(HEALTH_PLAN_GPUS, false) + HEALTH_START;
    assert!(bound <= HEALTH_BUDGET, "{bound:?}");
    // A CPU driver runs every test in its one turn.
    assert!(Level::Health.gate_bound(1, true) < bound);
    assert!(HEALTH_BUDGET < Duration::from_secs(60));
    // Quick's sizes, so that a quick gate's baseline judges it.
    for (h, q) in Level::Health.tests().iter().zip(Level::Quick.tests()) {
        assert_eq!((h.kind, h.size), (q.kind, q.size));
        assert!(h.iters >= 3 && h.deadline_s < q.deadline_s);
    }
}

#[test]
fn every_level_with_its_retests_fits_its_node_budget() {
    for level in [
        Level::Health,
        Level::Quick,
        Level::Standard,
        Level::Extended,
    ] {
        let bound = rank_bound(
            &level.tests(),
            level.links().as_ref(),
            level.pipeline(),
            level.setup_margin(),
        );
        assert!(
            bound <= level.node_budget(),
            "{level}: {bound:?} over {:?}",
            level.node_budget()
        );
        assert!(level
            .tests()
            .iter()
            .all(|t| t.deadline_s > 0.0 && t.iters > 0));
    }
}

#[test]
fn only_takes_the_levels_tests_and_names_the_others() {
    let only = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(check_only(Level::Standard, &only(&["hol", "links"])).is_ok());
    let e = check_only(Level::Quick, &only(&["links"])).unwrap_err();
    assert!(e.to_string().contains("not a test of --level quick"), "{e}");
    let e = check_only(Level::Extended, &only(&["gemm", "nccl"])).unwrap_err();
    assert!(
        e.to_string()
            .contains("--only nccl: no such test; give some of memcpy,"),
        "{e}"
    );
}

#[test]
fn a_batch_with_results_it_was_not_ordered_or_bad_figures_is_refused() {
    let ordered = [TestSpec {
        kind: TestKind::Memcpy,
        size: 1 << 20,
        iters: 5,
        deadline_s: 1.0,
        retest: false,
    }];
    // Every result carries gbps, a GEMM's too.
    let measured = |test, value: f64, note: Option<String>| Measured {
        figure: "gbps".into(),
        unit: "GB/s".into(),
        value: Some(value),
        p50_us: Some(1.0),
        p99_us: Some(1.0),
        n: 5,
        note,
        ..Measured::of(test)
    };
    let batch = |results| Batch {
        results,
        cores: 2,
        ..Default::default()
    };
    assert_eq!(
        batch(vec![measured(TestKind::Memcpy, 12.0, None)]).fault(&ordered),
        None
    );
    for (bad, says) in [
        (measured(TestKind::Gemm, 12.0, None), "not ordered"),
        (measured(TestKind::Memcpy, f64::NAN, None), "not a finite"),
        (measured(TestKind::Memcpy, -1.0, None), "not a finite"),
        (
            measured(TestKind::Memcpy, 1.0, Some("x".repeat(5000))),
            "text over",
        ),
    ] {
        let why = batch(vec![bad]).fault(&ordered).unwrap();
        assert!(why.contains(says), "{why}");
    }
    let many = (0..9)
        .map(|_| measured(TestKind::Memcpy, 1.0, None))
        .collect();
    assert!(batch(many).fault(&ordered).unwrap().contains("9 results"));
}
