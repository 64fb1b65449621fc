//! Runtime mechanisms on cases solved by hand, and the presets on the artifact's runs.

use super::program::{from_orders, megatron_1f1b, Instr, Xfer};
use super::*;

const FAST: Machine = Machine {
    device_gbps: 1e12,
    pcie_gbps: 1e12,
    host_gbps: 1e12,
};

fn job<'a>(tf: &'a [f64], tb: &'a [f64], tw: &'a [f64], delay: &'a [f64], n: usize) -> Job<'a> {
    Job {
        stages: tf.len(),
        microbatches: n,
        tf,
        tb,
        tw,
        delay,
        activation_bytes: 0.0,
        channels: 1,
        fused_backward: false,
        measured: None,
    }
}

fn model(path: Path, link: LinkModel, blocking: Blocking) -> RuntimeModel {
    RuntimeModel {
        path,
        link,
        blocking,
        streams: Streams::PerRank,
        numbering: PeerNumbering::Pair,
        offload_cost: true,
        single_queue: false,
    }
}

/// Two stages, two microbatches, F and B 1 ms, W free, 10 ms on link 0; stage 1 runs F, B in
/// turn. The offload path with k senders: k = 1 serialises the two transfers of a direction
/// (34 ms, solved on paper below), k = 2 or pure latency lets them overlap (26 ms).
#[test]
fn occupancy_with_k_channels_against_pure_latency() {
    use OpKind::*;
    let orders = vec![
        vec![(F, 0), (F, 1), (B, 0), (B, 1), (W, 0), (W, 1)],
        vec![(F, 0), (B, 0), (F, 1), (B, 1), (W, 0), (W, 1)],
    ];
    let p = from_orders(&orders, 2);
    let (one, zero) = ([1.0, 1.0], [0.0, 0.0]);
    let mut j = job(&one, &one, &zero, &[10.0], 2);
    let occupancy = model(Path::Offload, LinkModel::Occupancy, Blocking::Receiver);
    let latency = model(Path::Offload, LinkModel::Latency, Blocking::Receiver);
    // k = 1: F0 arrives 11, F1 waits for the sender: 11 -> 21; B0 leaves 13 -> 23, B1
    // waits: 23 -> 33; stage 0 runs B0 at 23, B1 at 33 -> 34.
    assert_eq!(execute(&p, &j, &occupancy, &FAST).unwrap(), 34.0);
    assert_eq!(execute(&p, &j, &latency, &FAST).unwrap(), 26.0);
    j.channels = 2;
    assert_eq!(execute(&p, &j, &occupancy, &FAST).unwrap(), 26.0);
    // The offload path's own cost: 1 MB at 1 GB/s is 1 ms for each copy and for the send.
    let slow_host = Machine {
        device_gbps: 1.0,
        pcie_gbps: 1.0,
        host_gbps: 1.0,
    };
    j.activation_bytes = 1e6;
    assert_eq!(execute(&p, &j, &occupancy, &slow_host).unwrap(), 33.0);
}

/// The same case with the sender's host held until each send is delivered (a blocking
/// call): stage 0's F1 starts only at 11, stage 1's F1 at 23, and the last B lands at 35.
#[test]
fn a_blocking_send_holds_the_stage() {
    use OpKind::*;
    let orders = vec![
        vec![(F, 0), (F, 1), (B, 0), (B, 1)],
        vec![(F, 0), (B, 0), (F, 1), (B, 1)],
    ];
    let p = from_orders(&orders, 2);
    let (one, zero) = ([1.0, 1.0], [0.0, 0.0]);
    let mut j = job(&one, &one, &zero, &[10.0], 2);
    j.channels = 2;
    let held = model(Path::Offload, LinkModel::Occupancy, Blocking::Stage);
    let free = model(Path::Offload, LinkModel::Occupancy, Blocking::Receiver);
    assert_eq!(execute(&p, &j, &held, &FAST).unwrap(), 36.0);
    assert_eq!(execute(&p, &j, &free, &FAST).unwrap(), 26.0);
}

/// Megatron's 1F1B on two stages, 10 ms on the link as a sleep before each send on the
/// sender's stream, calls blocking: F0 lands at 11; both combined calls sleep at once and
/// meet at 23; the last B leaves stage 1 at 25, sleeps to 35; stage 0's B1 ends at 36.
#[test]
fn megatron_calls_under_a_sleeping_send() {
    let p = megatron_1f1b(2, 2);
    let (one, zero) = ([1.0, 1.0], [0.0, 0.0]);
    let mut j = job(&one, &one, &zero, &[10.0], 2);
    j.fused_backward = true;
    let m = model(Path::Device, LinkModel::Occupancy, Blocking::Stage);
    assert_eq!(execute(&p, &j, &m, &FAST).unwrap(), 36.0);
    // Without the delay: F0, then F1 and the first B overlap the exchange: 1+1+1+1+... = 6.
    let calm = job(&one, &one, &zero, &[0.0], 2);
    let calm = Job {
        fused_backward: true,
        ..calm
    };
    assert_eq!(execute(&p, &calm, &m, &FAST).unwrap(), 6.0);
}

#[test]
fn the_injector_takes_peer_one_for_the_next_stage_in_a_group_communicator() {
    let delay = [0.0, 0.0, 7.0];
    let (one, zero) = ([1.0; 4], [0.0; 4]);
    let j = job(&one, &one, &zero, &delay, 4);
    let b_to_1 = Xfer::Send(OpKind::B, 0);
    let f_to_3 = Xfer::Send(OpKind::F, 0);
    // Stage 2's gradient to stage 1 goes to peer 1, read as stage 3: delayed by link 2_3.
    assert_eq!(injected_delay(2, b_to_1, &j, PeerNumbering::Group), 7.0);
    assert_eq!(injected_delay(2, b_to_1, &j, PeerNumbering::Pair), 0.0);
    assert_eq!(injected_delay(2, f_to_3, &j, PeerNumbering::Group), 7.0);
    assert_eq!(injected_delay(3, b_to_1, &j, PeerNumbering::Pair), 7.0);
    assert_eq!(
        injected_delay(1, Xfer::Send(OpKind::B, 0), &j, PeerNumbering::Group),
        0.0
    );
    assert_eq!(
        injected_delay(2, Xfer::Recv(OpKind::F, 0), &j, PeerNumbering::Group),
        0.0
    );
}

#[test]
fn a_call_no_peer_matches_is_a_deadlock_not_a_number() {
    let p = vec![
        vec![
            Instr::Post(vec![Xfer::Recv(OpKind::B, 0)]),
            Instr::Compute(OpKind::B, 0),
        ],
        vec![
            Instr::Post(vec![Xfer::Recv(OpKind::F, 0)]),
            Instr::Compute(OpKind::F, 0),
        ],
    ];
    let (one, zero) = ([1.0, 1.0], [0.0, 0.0]);
    let j = job(&one, &one, &zero, &[0.0], 1);
    let m = model(Path::Device, LinkModel::Occupancy, Blocking::Stage);
    // Receives with no sends complete at once in the graph (nothing to wait for), so a
    // deadlock needs a cycle: two blocking sends each behind the other's receive.
    assert!(execute(&p, &j, &m, &FAST).is_ok());
    let cyclic = vec![
        vec![
            Instr::Post(vec![Xfer::Recv(OpKind::B, 0)]),
            Instr::Post(vec![Xfer::Send(OpKind::F, 0)]),
        ],
        vec![
            Instr::Post(vec![Xfer::Recv(OpKind::F, 0)]),
            Instr::Post(vec![Xfer::Send(OpKind::B, 0)]),
        ],
    ];
    let e = execute(&cyclic, &j, &m, &FAST).unwrap_err();
    assert!(e.to_string().contains("deadlock"), "{e}");
}

#[test]
fn every_system_is_slower_under_a_delay_and_the_presets_parse() {
    let (tf, tb, tw) = ([8.0, 9.0, 10.0, 9.0], [10.0; 4], [5.0, 6.0, 6.0, 6.0]);
    let delay = [30.0, 0.0, 0.0];
    let mut j = job(&tf, &tb, &tw, &delay, 12);
    j.activation_bytes = 10_485_760.0;
    j.channels = 3;
    for name in ["1F1B", "zb", "ZB-CPU", "zb-cpu-reschedule", "pipemorph"] {
        let system: System = name.parse().unwrap();
        let p = predict(system, &j, &Machine::ARTIFACT, &Mechanisms::ALL).unwrap();
        assert!(p.slow_ms > p.healthy_ms, "{name}: {p:?}");
    }
    assert!("zb-h2"
        .parse::<System>()
        .unwrap_err()
        .to_string()
        .contains("ZB-CPU-ReSchedule"));
}

/// One hardware queue: stage 0's second forward cannot start while its first send waits out
/// the injector's 10 ms sleep (it is issued behind it): F1 runs at 11, its send sleeps to 22,
/// stage 1 ends at 23; with a queue per stream F1 overlaps the sleep and stage 1 ends at 22.
#[test]
fn one_hardware_queue_holds_compute_behind_a_sleeping_send() {
    use OpKind::F;
    let p = vec![
        vec![
            Instr::Compute(F, 0),
            Instr::Post(vec![Xfer::Send(F, 0)]),
            Instr::Compute(F, 1),
            Instr::Post(vec![Xfer::Send(F, 1)]),
        ],
        vec![
            Instr::Post(vec![Xfer::Recv(F, 0)]),
            Instr::Compute(F, 0),
            Instr::Post(vec![Xfer::Recv(F, 1)]),
            Instr::Compute(F, 1),
        ],
    ];
    let (one, zero) = ([1.0, 1.0], [0.0, 0.0]);
    let j = job(&one, &one, &zero, &[10.0], 2);
    let mut m = model(Path::Device, LinkModel::Occupancy, Blocking::None);
    assert_eq!(execute(&p, &j, &m, &FAST).unwrap(), 22.0);
    m.single_queue = true;
    assert_eq!(execute(&p, &j, &m, &FAST).unwrap(), 23.0);
}
