//! The what-if against the OSDI '25 artifact's own answers on its real trace ST (tests/data/
//! whatif), and on small hand-made traces whose answers have closed forms.

use std::path::PathBuf;

use super::analysis::{Answer, Splits};
use super::job::{Job, Sizes};
use super::trace::{OpType, Record};

const ALL: Splits = Splits {
    optype: true,
    dp_rank: true,
    stage: true,
    worker: true,
};

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/whatif")
        .join(name)
}

fn json(name: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(data(name)).unwrap()).unwrap()
}

fn st(file: &str) -> (Job, Answer) {
    let records = super::load::read(&data(file), 64, None).unwrap();
    let sizes =
        super::meta::sizes(Some(&data("meta-ST.yaml")), &Default::default(), &records).unwrap();
    let job = Job::new(&records, sizes, None).unwrap();
    let answer = job.analyse(ALL).unwrap();
    (job, answer)
}

fn close(what: &str, ours: f64, theirs: f64, rel: f64) {
    let err = (ours - theirs).abs() / theirs.abs();
    assert!(
        err <= rel,
        "{what}: ours {ours}, theirs {theirs}, off by {:.3}%",
        err * 100.0
    );
}

fn matches_the_artifact(file: &str) {
    let (_, a) = st(file);
    let r = json("result-ST.json");
    for (what, ours, key) in [
        ("S", a.blocking_slowdown, "blocking_slowdown"),
        ("launch", a.launch_slowdown, "launch_slowdown"),
    ] {
        close(what, ours, r[key].as_f64().unwrap(), 0.005);
    }
    for (dim, field) in [
        ("optype", "blocking_decompose_by_optype"),
        ("dp_rank", "blocking_decompose_by_dp_rank"),
        ("stage", "blocking_decompose_by_stage"),
    ] {
        let theirs = r[field].as_object().unwrap();
        let ours: Vec<_> = a
            .attribution
            .iter()
            .filter(|g| g.dimension == dim)
            .collect();
        assert_eq!(
            ours.len(),
            theirs.len(),
            "{dim}: keys {ours:?} against {theirs:?}"
        );
        for g in ours {
            let t = theirs
                .get(&g.key)
                .unwrap_or_else(|| panic!("{dim} {} not theirs", g.key));
            close(
                &format!("{dim} {}", g.key),
                g.slowdown,
                t.as_f64().unwrap(),
                0.01,
            );
        }
    }
    for s in &a.steps {
        let k = s.step.to_string();
        for (what, ours, key) in [
            ("base", s.base_s, "step_t_base"),
            ("nodelay", s.nodelay_s, "step_t_nodelay"),
            ("ideal", s.ideal_s, "step_t_noblk"),
            ("step S", s.slowdown, "blocking_step_slowdown"),
        ] {
            close(what, ours, r[key][&k].as_f64().unwrap(), 0.005);
        }
    }
    let ms = json("ms-ST.json")["Ms"].as_f64().unwrap();
    let mw = json("mw-ST.json")["Mw"].as_f64().unwrap();
    let (ours_ms, ours_mw) = (a.m_s.unwrap().rem, a.m_w.unwrap().rem);
    assert!(
        (ours_ms - ms).abs() <= 0.01,
        "M_S ours {ours_ms} theirs {ms}"
    );
    assert!(
        (ours_mw - mw).abs() <= 0.01,
        "M_W ours {ours_mw} theirs {mw}"
    );
}

#[test]
fn st_parquet_matches_the_artifact() {
    matches_the_artifact("trace-ST.parquet");
}

#[test]
fn st_csv_matches_the_artifact() {
    matches_the_artifact("trace-ST.csv");
}

/// A hand-made DP 2 x PP 2 trace with VPP 2 and one microbatch: the step is a chain through
/// the four chunks forward and back (F c0, c1, c2, c3 then B c3, c2, c1, c0 on stages 0, 1,
/// 0, 1, ...), every transfer 0, then gc, layernorm, embedding, reduce-scatter, clip (all 0 s)
/// and the optimizer (1 s). Forwards take 1 s and backwards 2 s, except on worker 1:1 (DP rank
/// 1, stage 1), where they take `slow` times longer. `late` delays DP rank 0 stage 0's
/// optimizer launch.
fn hand_trace(slow: f64, late: f64) -> Vec<Record> {
    let mut out = Vec::new();
    let chain = [
        (0u32, OpType::ForwardCompute, 0i32),
        (1, OpType::ForwardCompute, 1),
        (0, OpType::ForwardCompute, 2),
        (1, OpType::ForwardCompute, 3),
        (1, OpType::BackwardCompute, 3),
        (0, OpType::BackwardCompute, 2),
        (1, OpType::BackwardCompute, 1),
        (0, OpType::BackwardCompute, 0),
    ];
    let mut ends = [0.0f64; 2];
    for d in 0..2u32 {
        let mut seq = std::collections::HashMap::new();
        let mut rec = |s: u32, t: OpType, gmc: i32, start: f64, dur: f64| {
            let n = seq.entry((s, t)).or_insert(0u32);
            let op = hand_op(d, s, t, start, dur);
            out.push(Record {
                seq_id: *n,
                mc: if gmc < 0 { op.mc } else { gmc / 2 },
                gmc,
                ..op
            });
            *n += 1;
        };
        for s in 0..2 {
            rec(s, OpType::ParamsAllGather, -1, 0.0, 0.0);
        }
        let mut clock = 0.0;
        let mut last_compute_end = [0.0f64; 2];
        for (s, t, gmc) in chain {
            let (recv, send) = match t {
                OpType::ForwardCompute => (OpType::ForwardRecv, OpType::ForwardSend),
                _ => (OpType::BackwardRecv, OpType::BackwardSend),
            };
            let base = if t == OpType::ForwardCompute {
                1.0
            } else {
                2.0
            };
            let dur = if (d, s) == (1, 1) { base * slow } else { base };
            rec(s, recv, gmc, clock, 0.0);
            rec(s, t, gmc, clock, dur);
            clock += dur;
            last_compute_end[s as usize] = clock;
            rec(s, send, gmc, clock, 0.0);
        }
        ends[d as usize] = clock;
        for s in 0..2 {
            let t = last_compute_end[s as usize];
            rec(s, OpType::Gc, -1, t, 0.0);
            rec(s, OpType::LayernormGradsAllReduce, -1, t, 0.0);
            rec(s, OpType::EmbeddingGradsAllReduce, -1, t, clock - t);
        }
    }
    let e = ends[0].max(ends[1]);
    for d in 0..2u32 {
        for s in 0..2u32 {
            let mut push = |t: OpType, start: f64, dur: f64| out.push(hand_op(d, s, t, start, dur));
            let own = ends[d as usize];
            push(OpType::GradsReduceScatter, own, e - own);
            push(OpType::OptimizerClipMainGrad, e, 0.0);
            let delay = if (d, s) == (0, 0) { late } else { 0.0 };
            push(OpType::Optimizer, e + delay, 1.0);
        }
    }
    out
}

/// One op of the hand-made trace: worker d:s of step 7, the first of its type, no chunk but
/// the DP collectives' (chunk 0).
fn hand_op(d: u32, s: u32, t: OpType, start: f64, duration: f64) -> Record {
    Record {
        dp_rank: d,
        stage: s,
        rank: d * 2 + s,
        step: 7,
        optype: t,
        start,
        duration,
        seq_id: 0,
        mc: if t.is_dp_comm() { 0 } else { -1 },
        mb_id: if t.is_compute() { 0 } else { -1 },
        gmc: -1,
    }
}

fn hand_sizes() -> Sizes {
    Sizes {
        dp: 2,
        pp: 2,
        tp: 1,
        vpp: 2,
        dsp: 1,
    }
}

fn of(a: &Answer, dim: &str, key: &str) -> f64 {
    a.attribution
        .iter()
        .find(|g| g.dimension == dim && g.key == key)
        .unwrap_or_else(|| panic!("no {dim} {key}"))
        .slowdown
}

#[test]
fn a_slow_worker_in_a_vpp_chain_has_its_closed_form() {
    // Worker 1:1 at 1.5x: DP rank 1's chain is 2x1 + 2x1.5 + 2x2 + 2x3 = 15 s, DP rank 0's 12 s;
    // the step (after the DP reduce-scatter and the 1 s optimizer) 16 s. Typical times are the
    // means, F 9/8 and B 18/8 s: the ideal chain 13.5 s, the ideal step 14.5 s.
    let job = Job::new(&hand_trace(1.5, 0.0), hand_sizes(), None).unwrap();
    let a = job.analyse(ALL).unwrap();
    let eq = |what: &str, ours: f64, want: f64| {
        assert!((ours - want).abs() < 1e-9, "{what}: {ours}, want {want}");
    };
    eq("base", a.steps[0].base_s, 16.0);
    eq("nodelay", a.steps[0].nodelay_s, 16.0);
    eq("ideal", a.steps[0].ideal_s, 14.5);
    eq("S", a.blocking_slowdown, 16.0 / 14.5);
    eq("launch", a.launch_slowdown, 1.0);
    // Stage 1 real: DP rank 1 runs 6.75 s on stage 0 (typical) and 9 s on stage 1.
    eq("stage 1", of(&a, "stage", "1"), 16.75 / 14.5);
    eq("stage 0", of(&a, "stage", "0"), 13.75 / 14.5);
    eq("dp 1", of(&a, "dp_rank", "1"), 16.0 / 14.5);
    eq("dp 0", of(&a, "dp_rank", "0"), 1.0);
    eq("worker 1:1", of(&a, "worker", "1:1"), 16.75 / 14.5);
    eq("worker 0:1", of(&a, "worker", "0:1"), 1.0);
    eq(
        "forward-compute",
        of(&a, "optype", "forward-compute"),
        15.0 / 14.5,
    );
    eq(
        "backward-compute",
        of(&a, "optype", "backward-compute"),
        15.5 / 14.5,
    );
    eq("pp comm", of(&a, "optype", "forward-pp-comm"), 1.0);
    // Removing the last stage's straggling: both chains 12.75 s, the step 13.75 s:
    // M_S = (16 - 13.75) / (16 - 14.5) = 1.5; M_W's one worker (4 x 3% rounds up to 1) is 1:1.
    eq("M_S", a.m_s.unwrap().rem, 1.5);
    assert_eq!(a.m_w_workers, vec!["1:1".to_string()]);
    eq("M_W", a.m_w.unwrap().rem, 1.5);
}

#[test]
fn a_late_launch_is_the_launch_slowdown_not_a_straggler() {
    let job = Job::new(&hand_trace(1.0, 0.5), hand_sizes(), None).unwrap();
    let a = job.analyse(ALL).unwrap();
    assert!((a.steps[0].base_s - 13.5).abs() < 1e-9, "{:?}", a.steps[0]);
    assert!((a.launch_slowdown - 13.5 / 13.0).abs() < 1e-9);
    assert!((a.blocking_slowdown - 1.0).abs() < 1e-9);
}

fn csv_of(records: &[Record]) -> String {
    let mut text =
        String::from("dp_rank,stage,rank,step,optype,start_ts,duration,seq_id,mc,mb_id,gmc\n");
    for r in records {
        text += &format!(
            "{},{},{},{},{},{},{},{},{},{},{}\n",
            r.dp_rank,
            r.stage,
            r.rank,
            r.step,
            r.optype.name(),
            r.start,
            r.duration,
            r.seq_id,
            r.mc,
            r.mb_id,
            r.gmc
        );
    }
    text
}

fn refused(text: &str, max_mb: u64) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.csv");
    std::fs::write(&path, text).unwrap();
    let err = match super::load::read(&path, max_mb, None) {
        Err(e) => e,
        Ok(records) => match Job::new(&records, hand_sizes(), None) {
            Err(e) => e,
            Ok(_) => panic!("accepted"),
        },
    };
    format!("{err:#}")
}

#[test]
fn bad_traces_are_refused_by_name() {
    let good = csv_of(&hand_trace(1.0, 0.0));
    // The CSV round trip itself is accepted.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("t.csv"), &good).unwrap();
    let records = super::load::read(&dir.path().join("t.csv"), 1, None).unwrap();
    Job::new(&records, hand_sizes(), None).unwrap();

    let e = refused(&good.replacen(",gmc\n", ",gmx\n", 1), 1);
    assert!(e.contains("no column \"gmc\""), "{e}");
    let e = refused(&good, 0);
    assert!(
        e.contains("over the cap of 0 MB") && e.contains("--max-trace-mb"),
        "{e}"
    );
    let e = refused(
        &good.replacen("optimizer-clip-main-grad", "optimiser", 1),
        1,
    );
    assert!(e.contains("\"optimiser\" is not an op type"), "{e}");
    let e = refused(
        &good.replacen(
            "0,0,0,7,params-all-gather,0,0",
            "0,0,0,7,params-all-gather,x,0",
            1,
        ),
        1,
    );
    assert!(
        e.contains("line 2: start_ts") && e.contains("not a number"),
        "{e}"
    );
    let e = refused("\u{0}\u{1}garbage\n\"", 1);
    assert!(!e.is_empty());
    // DP rank 1 lacks its stage-1 optimizer.
    let lacking: Vec<Record> = hand_trace(1.0, 0.0)
        .into_iter()
        .filter(|r| !(r.dp_rank == 1 && r.stage == 1 && r.optype == OpType::Optimizer))
        .collect();
    let e = refused(&csv_of(&lacking), 1);
    assert!(
        e.contains("step 7, worker 1:1 has no optimizer 0 of stage 1"),
        "{e}"
    );
    // Stage 1's moving forward receive gone: stage 0's send has no partner.
    let unpaired: Vec<Record> = hand_trace(1.0, 0.0)
        .into_iter()
        .filter(|r| !(r.stage == 1 && r.optype == OpType::ForwardRecv && r.seq_id == 1))
        .collect();
    let e = refused(&csv_of(&unpaired), 1);
    assert!(
        e.contains("step 7, worker 0:0: forward-send") && e.contains("no partner"),
        "{e}"
    );
    // Sizes that disagree with the trace.
    let records = hand_trace(1.0, 0.0);
    let wrong = Sizes {
        dp: 4,
        ..hand_sizes()
    };
    let e = format!("{:#}", Job::new(&records, wrong, None).err().unwrap());
    assert!(
        e.contains("DP 4 but the trace's dp_rank runs 0 to 1"),
        "{e}"
    );
    // --steps naming no step of the trace.
    let none = std::collections::BTreeSet::from([3i64]);
    let e = format!(
        "{:#}",
        Job::new(&records, hand_sizes(), Some(&none)).err().unwrap()
    );
    assert!(e.contains("has steps 7"), "{e}");
}

#[test]
fn a_truncated_parquet_file_is_an_error_not_a_panic() {
    let bytes = std::fs::read(data("trace-ST.parquet")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for cut in [bytes.len() / 2, bytes.len() - 9, 12] {
        let path = dir.path().join("cut.parquet");
        let mut b = bytes[..cut].to_vec();
        b.extend_from_slice(&bytes[bytes.len() - 8..]);
        std::fs::write(&path, &b).unwrap();
        assert!(
            super::load::read(&path, 64, None).is_err(),
            "a parquet cut at {cut} was read"
        );
    }
}

#[test]
fn steps_parse_as_lists_and_ranges() {
    let s = super::parse_steps("12, 20-23").unwrap();
    assert_eq!(s.into_iter().collect::<Vec<_>>(), vec![12, 20, 21, 22, 23]);
    assert!(super::parse_steps("5-2").is_err());
    assert!(super::parse_steps("x").is_err());
}

#[test]
fn a_what_if_over_its_cost_bound_is_refused_before_it_starts() {
    let job = Job::new(&hand_trace(1.0, 0.0), hand_sizes(), None).unwrap();
    job.check_cost(ALL, true).unwrap();
    let e = format!("{:#}", job.check_cost_within(ALL, true, 10.0).unwrap_err());
    assert!(
        e.contains("over the bound") && e.contains("--split without worker"),
        "{e}"
    );
}
