//! keep_cost's estimates: slower costs more, failures said as rows.

use super::*;
use crate::bench::fleet::table::{FleetFigures, FleetParams};

fn failed_row(rank: u32, test: &str, value: f64, expected: f64) -> Row {
    (
        FleetParams {
            rank,
            host: format!("n{rank}"),
            test: test.into(),
            figure: "x".into(),
            ..Default::default()
        },
        FleetFigures {
            value: Some(value),
            expected: Some(expected),
            verdict: FAIL,
            ..Default::default()
        },
    )
}

/// A cost's change in throughput (%) under schedule `s`.
fn pct(c: &KeepCost, s: &str) -> f64 {
    c.iter()
        .find(|(p, _)| p.schedule == s)
        .and_then(|(_, f)| f.throughput_pct)
        .unwrap()
}

#[test]
fn a_lossy_node_is_priced_by_its_drawn_stalls_and_says_so() {
    let c = estimate_lossy((2, "n2", "node"), (0.02, 200.0), 4, None);
    assert_eq!(c.len(), 2);
    for (p, f) in &c {
        assert_eq!((p.kind.as_str(), p.stage), ("node", 2));
        assert!(
            f.kept_ms > f.healthy_ms && f.throughput_pct < Some(0.0),
            "{f:?}"
        );
        assert_eq!(f.error, None);
        assert_eq!((f.stall_share, f.stall_ms), (Some(0.02), Some(200.0)));
    }
    assert!(
        line(&c).contains("lossy: 2.00% of its sends stall 200 ms"),
        "{}",
        line(&c)
    );
    // The same inputs, the same estimate (a fixed seed).
    assert_eq!(c, estimate_lossy((2, "n2", "node"), (0.02, 200.0), 4, None));
    // A link between two healthy nodes: its one middle link.
    let l = estimate_lossy((1, "n1-n2", "link"), (0.01, 100.0), 4, None);
    assert!(l.iter().all(|(_, f)| f.throughput_pct <= Some(0.0)));
}

#[test]
fn a_slower_node_costs_more_and_a_silent_one_has_no_estimate() {
    let rows = vec![
        failed_row(1, "gemm", 50.0, 100.0),
        failed_row(2, "gemm", 80.0, 100.0),
        failed_row(3, "d2h", 1.0, 2.0),
    ];
    let failed: Vec<(u32, String)> = (1..=4).map(|r| (r, format!("n{r}"))).collect();
    let costs = estimate(&rows, &failed, 4, None);
    // Rank 4 failed without a figure (it did not answer): nothing to estimate.
    assert_eq!(costs.len(), 3);
    assert!(costs.iter().all(|c| failures(c).next().is_none()));
    let (half, slight, copy) = (&costs[0], &costs[1], &costs[2]);
    assert_eq!(half[0].0.stages, 4);
    // A stage of half the speed: 1F1B's steady state runs at the slowest stage's pace.
    assert!(pct(half, "1f1b") < -30.0, "{half:?}");
    assert!(
        pct(half, "1f1b") < pct(slight, "1f1b"),
        "{half:?} {slight:?}"
    );
    assert!(pct(slight, "1f1b") < 0.0);
    // A copy at half speed costs a compute-bound pipeline little.
    assert!(pct(copy, "1f1b") > pct(slight, "1f1b"), "{copy:?}");
    assert!(pct(copy, "1f1b") <= 0.0);
    // Keeping a failed node never reads as a gain, under either runtime.
    for c in [half, slight, copy] {
        assert!(
            c.iter().all(|(_, f)| f.throughput_pct <= Some(0.0)),
            "{c:?}"
        );
    }
    assert!(line(half).starts_with("keeping n1: -"), "{}", line(half));
    assert!(line(half).contains("throughput with adaptive"));
}

#[test]
fn a_slow_link_costs_1f1b_more_than_adaptive_and_more_when_slower() {
    let costs = estimate_links(
        &[(0, "a-b".into(), 20_000.0), (2, "c-d".into(), 2_000.0)],
        4,
        None,
    );
    assert_eq!(costs.len(), 2);
    let (bad, mild) = (&costs[0], &costs[1]);
    assert_eq!(bad[0].0.kind, "link");
    assert_eq!(bad[0].1.link_extra_ms, 20.0);
    assert!(pct(bad, "1f1b") < pct(mild, "1f1b"), "{bad:?} {mild:?}");
    assert!(pct(bad, "1f1b") < -10.0, "{bad:?}");
    // PipeMorph's point: the adaptive schedule absorbs part of a slow link.
    assert!(pct(bad, "adaptive") > pct(bad, "1f1b"), "{bad:?}");
}

#[test]
fn a_node_the_links_blame_pays_for_its_sends() {
    // 12.5 MB/s against the fleet's 1 GB/s: a 1 MiB send is about 83 ms late.
    let rows = vec![failed_row(5, "links", 0.0125, 1.0)];
    let costs = estimate(&rows, &[(5, "n5".into())], 4, None);
    assert_eq!(costs.len(), 1);
    let (p, f) = &costs[0][0];
    assert_eq!(p.kind, "node");
    assert!((82.0..84.0).contains(&f.link_extra_ms), "{f:?}");
    assert!(f.throughput_pct < Some(-10.0), "{f:?}");
}

#[test]
fn a_profile_sets_the_modelled_pipeline() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/pipemorph-7b-single.csv");
    let profile = Profile::load(&path).unwrap();
    assert_eq!((profile.stages, profile.microbatches), (4, 12));
    let rows = vec![failed_row(1, "gemm", 50.0, 100.0)];
    let failed = [(1, "n1".to_string())];
    let with = estimate(&rows, &failed, 16, Some(&profile));
    let without = estimate(&rows, &failed, 16, None);
    assert_eq!(with[0][0].0.stages, 4);
    assert_eq!(without[0][0].0.stages, MAX_STAGES);
    // The profile's 8-10 ms forwards, 12 microbatches: a healthy 1F1B iteration of about
    // (12 + 3) x 25 ms, not the default's 8 stages of 30 ms.
    let h = with[0][0].1.healthy_ms.unwrap();
    assert!((300.0..450.0).contains(&h), "{h}");
}

#[test]
fn a_model_failure_is_a_row_with_its_cause_and_the_other_schedule_stays() {
    // A profile adaptive's planner refuses (an op of negative length) and 1F1B still runs.
    let mut profile = Profile::default_for(4);
    profile.tf[1] = -1.0;
    let rows = vec![failed_row(2, "gemm", 50.0, 100.0)];
    let costs = estimate(&rows, &[(2, "n2".into())], 4, Some(&profile));
    assert_eq!(costs.len(), 1, "the node is not dropped: {costs:?}");
    let said: Vec<(&str, &str)> = failures(&costs[0]).collect();
    assert_eq!(said.len(), 1, "{costs:?}");
    assert_eq!(said[0].0, "adaptive");
    assert!(said[0].1.contains("durations must be"), "{said:?}");
    let (_, adaptive) = costs[0]
        .iter()
        .find(|(p, _)| p.schedule == "adaptive")
        .unwrap();
    assert_eq!((adaptive.kept_ms, adaptive.throughput_pct), (None, None));
    assert!(line(&costs[0]).contains("no estimate with adaptive (the model failed: "));
    // A pipeline the simulator refuses: both schedules of a lossy estimate say why.
    let mut one = Profile::default_for(2);
    one.stages = 1;
    let lossy = estimate_lossy((0, "n0", "node"), (0.01, 100.0), 2, Some(&one));
    assert_eq!(failures(&lossy).count(), 2, "{lossy:?}");
    assert!(failures(&lossy).all(|(_, e)| e.starts_with("the modelled pipeline: ")));
}

#[test]
fn a_failed_row_reads_back_from_keep_cost_csv() {
    use crate::record::csv::{read_table, CsvSink, Line};
    let dir = std::env::temp_dir().join(format!("keep-cost-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("keep_cost.csv");
    let mut one = Profile::default_for(2);
    one.stages = 1;
    let lossy = estimate_lossy((0, "n0", "node"), (0.01, 100.0), 2, Some(&one));
    let mut sink = CsvSink::<KeepCostTable>::create(&path).unwrap();
    for (p, f) in &lossy {
        sink.write(&Line::new(
            "run",
            p.schedule.clone(),
            p.clone(),
            None,
            f.clone(),
        ))
        .unwrap();
    }
    drop(sink);
    let back = read_table::<KeepCostTable>(&path).unwrap();
    assert_eq!(back.len(), 2);
    assert!(back
        .iter()
        .all(|l| l.figures.error.is_some() && l.figures.kept_ms.is_none()));
    std::fs::remove_dir_all(&dir).unwrap();
}
