//! PyTorch's schedule files as PyTorch 2.15 itself writes them (tests/data/torch: p = 4,
//! m = 8, seven schedule classes, `_dump_csv`'s compute_only and default compute_comms
//! formats): every one read, the two formats of one schedule the same orders, the faulty 1F1B
//! refused as PyTorch's validator refuses it, and the round trip kept.

use std::path::PathBuf;

use super::model::Layout;
use super::torch_csv::{format, parse};

fn read(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/torch")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
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
    let e = parse(&read("1F1B_p4_m8.csv")).unwrap_err();
    assert!(
        e.to_string().contains("rank 3, step 1 (3B0)")
            && e.to_string()
                .contains("Full Backward for stage 3, microbatch 0 without first running Forward"),
        "{e}"
    );
}

#[test]
fn messages_name_the_rank_the_step_the_action_and_each_limit() {
    let e = parse("0F0,0F1,0F1,0B0,0B1\n1F0,1F1,1B0,1B1\n").unwrap_err();
    assert!(
        e.to_string().contains("rank 0, step 2 (0F1)")
            && e.to_string().contains("runs a second time"),
        "{e}"
    );
    let e = parse("0F0,0F1,0B0\n1F0,1F1,1B0,1B1\n").unwrap_err();
    assert!(
        e.to_string().contains("stage 0 on rank 0")
            && e.to_string().contains("no backward for microbatch 1"),
        "{e}"
    );
    let e = parse("0F0,0F1,0F2,0B0,0B1,0B2\n1F0,1F1,1F7,1B0,1B1,1B7\n").unwrap_err();
    assert!(e.to_string().contains("microbatches are 0 to 2"), "{e}");
    let rows: String = (0..1100).map(|r| format!("{r}F0,{r}B0\n")).collect();
    let e = parse(&rows).unwrap_err();
    assert!(
        e.to_string().contains("1100 rows") && e.to_string().contains("at most 1024"),
        "{e}"
    );
    // PyTorch's current steps parse as steps, not as a W.
    parse("0F0,0SEND_F0,0RECV_B0,0B0,0WAIT_SEND_F0,0REDUCE_GRAD,0WAIT_REDUCE_GRAD\n1RECV_F0,1WAIT_RECV_F0,1F0,1B0,1SEND_B0,1WAIT_SEND_B0\n")
        .unwrap();
}
