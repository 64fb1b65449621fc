//! PyTorch's schedule files as PyTorch 2.15 itself writes them (tests/data/torch: p = 4,
//! m = 8, seven schedule classes, `_dump_csv`'s compute_only and default compute_comms
//! formats): every one read, the two formats of one schedule the same orders, the
//! compute_comms calls run as transfers, the faulty 1F1B refused as PyTorch's validator refuses
//! it, and the round trip kept.

use std::path::PathBuf;

use super::model::{Layout, OpKind};
use super::torch_csv::{format, parse};

fn read(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/torch")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `text` is refused with a message holding each of `wants`.
fn refused(text: &str, wants: &[&str]) {
    let e = crate::testing::err_text(parse(text));
    for want in wants {
        assert!(e.contains(want), "{e}");
    }
}

#[test]
fn every_file_pytorch_writes_is_read_in_both_formats() {
    let cases = [
        ("GPipe", Layout::Linear, false),
        ("Interleaved1F1B", Layout::Interleaved(2), true),
        ("LoopedBFS", Layout::Interleaved(2), true),
        ("InterleavedZeroBubble", Layout::Interleaved(2), true),
        ("ZBVZeroBubble", Layout::Vee, true),
        ("DualPipeV", Layout::Vee, true),
    ];
    for (name, layout, has_comms) in cases {
        let compute =
            parse(&read(&format!("{name}_p4_m8.csv"))).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((compute.ranks, compute.microbatches), (4, 8), "{name}");
        assert_eq!(compute.layout, layout, "{name}");
        if has_comms {
            let comms = parse(&read(&format!("{name}_p4_m8.comms.csv")))
                .unwrap_or_else(|e| panic!("{name} comms: {e}"));
            assert_eq!(
                comms.orders, compute.orders,
                "{name}: the two formats differ"
            );
            assert_eq!(comms.layout, compute.layout, "{name}");
        }
        // Written back in the compute-only format and read again: the same orders.
        let text = format(
            &compute.orders,
            &compute.together,
            compute.split,
            compute.layout,
        );
        let again = parse(&text).unwrap_or_else(|e| panic!("{name} round trip: {e}"));
        assert_eq!(again.orders, compute.orders, "{name} round trip");
    }
}

#[test]
fn pytorchs_faulty_1f1b_last_rank_is_refused_as_its_validator_refuses_it() {
    // Schedule1F1B.pipeline_order in 2.15 starts the last rank with 3F1, 3B0.
    refused(
        &read("1F1B_p4_m8.csv"),
        &[
            "rank 3, step 1 (3B0)",
            "Full Backward for stage 3, microbatch 0 without first running Forward",
        ],
    );
}

#[test]
fn messages_name_the_rank_the_step_the_action_and_each_limit() {
    refused(
        "0F0,0F1,0F1,0B0,0B1\n1F0,1F1,1B0,1B1\n",
        &["rank 0, step 2 (0F1)", "runs a second time"],
    );
    refused(
        "0F0,0F1,0B0\n1F0,1F1,1B0,1B1\n",
        &["stage 0 on rank 0", "no backward for microbatch 1"],
    );
    refused(
        "0F0,0F1,0F2,0B0,0B1,0B2\n1F0,1F1,1F7,1B0,1B1,1B7\n",
        &["microbatches are 0 to 2"],
    );
    let rows: String = (0..1100).map(|r| format!("{r}F0,{r}B0\n")).collect();
    refused(&rows, &["1100 rows", "at most 1024"]);
    // PyTorch's current steps parse as steps, not as a W.
    parse("0F0,0SEND_F0,0RECV_B0,0B0,0WAIT_SEND_F0,0REDUCE_GRAD,0WAIT_REDUCE_GRAD\n1RECV_F0,1WAIT_RECV_F0,1F0,1B0,1SEND_B0,1WAIT_SEND_B0\n")
        .unwrap();
}

/// A parsed file as the engine runs it.
fn policy(t: &super::torch_csv::TorchSchedule) -> crate::sim::Policy {
    crate::sim::Policy::Fixed {
        orders: t.orders.clone(),
        split: t.split,
        layout: t.layout,
        together: t.together.clone(),
        comms: t.comms.clone(),
    }
}

fn scenario(p: usize, m: usize, link_ms: f64) -> crate::sim::Scenario {
    crate::sim::Scenario::builder(p, m)
        .times(&[1.0], &[2.0], &[1.0])
        .link_ms(link_ms)
        .build()
        .unwrap()
}

/// How `rank`'s op `kind` of microbatch `mb` ran.
fn op_of(
    run: &crate::sim::Run,
    rank: usize,
    kind: super::model::OpKind,
    mb: usize,
) -> crate::sim::Executed {
    *run.ops
        .iter()
        .find(|e| (e.op.stage, e.op.kind, e.op.mb) == (rank, kind, mb))
        .unwrap()
}

fn start_of(run: &crate::sim::Run, rank: usize, kind: super::model::OpKind, mb: usize) -> f64 {
    op_of(run, rank, kind, mb).start
}

#[test]
fn a_transfer_starts_once_both_ends_are_posted_and_a_wait_holds_the_rank() {
    use super::model::OpKind::F;
    let sc = scenario(2, 2, 0.5);
    // Rank 1 posts the receive of F1 only after its B0: F1's data waits for it, then crosses.
    let late = "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n\
                1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n";
    let comms = parse(late).unwrap();
    assert!(comms.comms.is_some());
    let mut compute_only = comms.clone();
    compute_only.comms = None;
    let with = crate::sim::simulate(&sc, &policy(&comms)).unwrap();
    let without = crate::sim::simulate(&sc, &policy(&compute_only)).unwrap();
    let b0_end = |run: &crate::sim::Run| op_of(run, 1, super::model::OpKind::B, 0).end;
    assert_eq!(start_of(&without, 1, F, 1), b0_end(&without));
    assert!((start_of(&with, 1, F, 1) - (b0_end(&with) + 0.5)).abs() < 1e-9);
    assert!(with.iteration_ms > without.iteration_ms);
    // A wait on its own send holds rank 0 until the transfer is done.
    let wait = "0F0,0SEND_F0,0WAIT_SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n\
                1RECV_F0,1RECV_F1,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n";
    let run = crate::sim::simulate(&sc, &policy(&parse(wait).unwrap())).unwrap();
    assert!((start_of(&run, 0, F, 1) - (1.0 + 0.5)).abs() < 1e-9);
    // Rank 0 waits on F0's send, whose receive rank 1 posts only after F1, which rank 0
    // makes after its wait: a deadlock, named by where each rank is held.
    let stuck = "0F0,0SEND_F0,0WAIT_SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n\
                 1RECV_F1,1F1,1RECV_F0,1F0,1B0,1SEND_B0,1B1,1SEND_B1\n";
    let e = crate::sim::simulate(&sc, &policy(&parse(stuck).unwrap()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("deadlock") && e.contains("rank 0 is held at step 2 (0WAIT_SEND_F0)"),
        "{e}"
    );
}

#[test]
fn pytorchs_compute_comms_files_run_their_calls() {
    // The calls only ever hold an op back: each file's iteration is at least its compute-only
    // twin's; LoopedBFS, whose receives are posted just before their forwards, pays for it.
    let sc = scenario(4, 8, 1.0);
    for name in [
        "Interleaved1F1B",
        "LoopedBFS",
        "InterleavedZeroBubble",
        "ZBVZeroBubble",
        "DualPipeV",
    ] {
        let comms = parse(&read(&format!("{name}_p4_m8.comms.csv"))).unwrap();
        let compute = parse(&read(&format!("{name}_p4_m8.csv"))).unwrap();
        let with = crate::sim::simulate(&sc, &policy(&comms)).unwrap();
        let without = crate::sim::simulate(&sc, &policy(&compute)).unwrap();
        assert!(
            with.iteration_ms >= without.iteration_ms - 1e-9,
            "{name}: {} < {}",
            with.iteration_ms,
            without.iteration_ms
        );
        if name == "LoopedBFS" {
            assert!(with.iteration_ms > without.iteration_ms + 1.0, "{name}");
        }
    }
}

#[test]
fn calls_that_cannot_pair_are_refused_naming_rank_step_and_call() {
    refused(
        "0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1B0,1SEND_B0\n",
        &["rank 1", "1F0", "no 1RECV_F0"],
    );
    refused(
        "0F0,0SEND_F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n",
        &["rank 0, step 2 (0SEND_F0)", "second time"],
    );
    refused(
        "0F0,0WAIT_SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n",
        &["rank 0, step 1 (0WAIT_SEND_F0)", "not posted"],
    );
    refused(
        "0F0,0SEND_B0,0B0\n1F0,1B0\n",
        &["rank 0, step 1 (0SEND_B0)"],
    );
    refused(
        "0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1RECV_F0,1B0,1SEND_B0\n",
        &["no 1RECV_F0 is posted before it"],
    );
}

#[test]
fn a_full_backward_among_split_ones_runs_as_both_halves() {
    let t = parse("0F0,0I0,0W0,0F1,0B1\n1F0,1B0,1F1,1I1,1W1\n").unwrap();
    assert!(t.split);
    let kinds: Vec<OpKind> = t.orders[0].iter().map(|o| o.kind).collect();
    use OpKind::*;
    assert_eq!(kinds, [F, B, W, F, B, W]);
    // Communication and overlapped pairs: the compute in turn.
    let t = parse(
        "0F0,0SEND_F0,0RECV_B0,(0F1;0B0)OVERLAP_F_B,0SEND_F1,0RECV_B1,0B1\n\
         1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n",
    )
    .unwrap();
    assert_eq!(t.orders[0].len(), 4);
}

#[test]
fn an_invalid_schedule_is_refused_naming_rank_step_and_action() {
    refused(
        "0F0,0F1,0B0,0B1\n1F0,1B1,1F1,1B0\n",
        &["rank 1, step 1 (1B1)", "without first running Forward"],
    );
    refused(
        "0F0,0W0,0I0\n1F0,1I0,1W0\n",
        &["rank 0, step 1 (0W0)", "Backward Input"],
    );
    refused(
        "0F0,0B0\n0F1,0B1\n",
        &["rank 1, step 0", "both rank 1 and rank 0"],
    );
    refused(
        "0F0,0F1,0B0,0B1\n1F0,1B0\n",
        &["got 1 F microbatches for stage 1, expected 2"],
    );
    refused(
        "0F0,0X0\n1F0\n",
        &["rank 0, step 1: '0X0' is not an action"],
    );
    refused("0F0,0B0\n2F0,2B0\n", &["every stage from 0"]);
}
