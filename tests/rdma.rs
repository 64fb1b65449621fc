//! Verbs integration tests: they need a real RDMA device, so each is `#[ignore]`d and shows
//! as ignored in a plain `cargo test`. The Soft-RoCE guest of `scripts/rdma-test` runs them
//! with `--ignored`, and there a missing device fails them. The OOB and transport logic they
//! share is covered by the unit tests on any host.
//!
//! Device choice: MORPHBENCH_RDMA_DEVICE (default: the first), MORPHBENCH_RDMA_GID (default 1,
//! the IPv4-mapped GID of a Soft-RoCE device).
//! MORPHBENCH_BIN: the morphbench binary to run (default: the one cargo built).
#![cfg(feature = "test-hooks")]

use std::net::TcpListener;
use std::time::{Duration, Instant};

use morphbench::transport::conformance::{self, Fixture};
use morphbench::transport::rdma::oob::{OobChannel, Params, Purpose};
use morphbench::transport::rdma::perf::{self, Role, Session};
use morphbench::transport::rdma::transport::{RdmaReceiver, RdmaTransport};
use morphbench::transport::rdma::verbs::{list_devices, VerbsError};
use morphbench::transport::rdma::{client_hello, server_hello, DeviceChoice, Link, RdmaError};
use morphbench::transport::{Receiver, Transport};

const NEEDS_DEVICE: &str =
    "needs an RDMA device: run inside the Soft-RoCE guest (scripts/rdma-test)";

/// The device to test on; a test run with `--ignored` and no device fails here.
fn choice() -> DeviceChoice {
    match list_devices() {
        Ok(d) if !d.is_empty() => {}
        Ok(_) => panic!("{NEEDS_DEVICE}: no RDMA devices here"),
        Err(e) => panic!("{NEEDS_DEVICE}: {e}"),
    }
    DeviceChoice {
        device: std::env::var("MORPHBENCH_RDMA_DEVICE").ok(),
        port: 1,
        gid_index: std::env::var("MORPHBENCH_RDMA_GID")
            .ok()
            .and_then(|g| g.parse().ok())
            .unwrap_or(1),
    }
}

struct RdmaFixture(DeviceChoice);

impl Fixture for RdmaFixture {
    fn pair(
        &self,
        sender_max: u64,
        receiver_max: u64,
        io: Duration,
    ) -> (Box<dyn Transport>, Box<dyn Receiver>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let c = self.0.clone();
        let rx = std::thread::spawn(move || {
            let (oob, _) = OobChannel::accept(&listener, Some(io), io).unwrap();
            RdmaReceiver::accept(oob, &c, receiver_max, io).unwrap()
        });
        let tx = RdmaTransport::connect(&addr, &self.0, sender_max, io).unwrap();
        (Box::new(tx), Box::new(rx.join().unwrap()))
    }
}

#[test]
#[ignore = "needs an RDMA device: run inside the Soft-RoCE guest (scripts/rdma-test)"]
fn rdma_passes_the_conformance_kit() {
    let c = choice();
    conformance::run_all(&RdmaFixture(c));
}

/// A server thread and a client in this process, connected for a bench.
fn bench_pair(c: &DeviceChoice, params: Params) -> (Link, std::thread::JoinHandle<Link>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let shape = perf::shape(&params);
    let server_choice = c.clone();
    let server = std::thread::spawn(move || {
        let io = Duration::from_secs(10);
        let (mut oob, _) = OobChannel::accept(&listener, Some(io), io).unwrap();
        server_hello(&mut oob, Purpose::Bench).unwrap();
        Link::establish(oob, &server_choice, shape).unwrap()
    });
    let io = Duration::from_secs(10);
    let mut oob = OobChannel::connect(&addr, io, io).unwrap();
    client_hello(&mut oob, Purpose::Bench, &params).unwrap();
    let link = Link::establish(oob, c, shape).unwrap();
    (link, server)
}

#[test]
#[ignore = "needs an RDMA device: run inside the Soft-RoCE guest (scripts/rdma-test)"]
fn latency_and_bandwidth_run_verified() {
    let c = choice();
    let sizes = vec![2, 64, 4096, 65536];
    let params = Params {
        tests: 3,
        iters: 50,
        warmup: 5,
        window: 16,
        inline_size: 220,
        sizes: sizes.clone(),
    };
    let (mut link, server) = bench_pair(&c, params.clone());
    let mut server_link = server.join().unwrap();
    let t = std::thread::spawn(move || {
        let mut s = Session::new(&mut server_link, Role::Server, Duration::from_secs(10));
        for &n in &[2, 64, 4096, 65536] {
            s.latency(n, 50, 5).unwrap();
        }
        for &n in &[2, 64, 4096, 65536] {
            assert!(s.bandwidth(n, 50, 16).unwrap().is_none());
        }
    });
    let mut s = Session::new(&mut link, Role::Client, Duration::from_secs(10));
    for &n in &sizes {
        let r = s.latency(n, 50, 5).unwrap();
        assert_eq!(r.samples_us.len(), 50);
        assert!(r.samples_us.iter().all(|&x| x > 0.0));
        assert_eq!(r.inline, n <= s.link.qp.max_inline() as u64);
    }
    for &n in &sizes {
        let r = s.bandwidth(n, 50, 16).unwrap().unwrap();
        assert!(
            r.avg_gbps > 0.0 && r.peak_gbps >= r.avg_gbps,
            "{} {}",
            r.avg_gbps,
            r.peak_gbps
        );
        assert_eq!(r.iters, 50);
    }
    t.join().unwrap();
}

#[test]
#[ignore = "needs an RDMA device: run inside the Soft-RoCE guest (scripts/rdma-test)"]
fn a_peer_that_dies_mid_test_fails_in_bounded_time() {
    let c = choice();
    let params = Params {
        tests: 1,
        iters: 1000,
        warmup: 0,
        window: 16,
        inline_size: 0,
        sizes: vec![64],
    };
    let (mut link, server) = bench_pair(&c, params);
    // The server joins the size's barrier, then dies: its queue pair and socket are gone.
    let mut server_link = server.join().unwrap();
    let t = std::thread::spawn(move || {
        let _ = server_link.oob.barrier(1, true);
        drop(server_link);
    });
    let t0 = Instant::now();
    let mut s = Session::new(&mut link, Role::Client, Duration::from_secs(3));
    let err = s.latency(64, 1000, 0).unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
    assert!(
        matches!(
            err,
            RdmaError::Timeout(_) | RdmaError::Verbs(_) | RdmaError::Oob(_)
        ),
        "{err}"
    );
    eprintln!("dead peer reported as: {err}");
    t.join().unwrap();
}

#[test]
#[ignore = "needs an RDMA device: run inside the Soft-RoCE guest (scripts/rdma-test)"]
fn wrong_device_port_or_gid_is_a_clear_error() {
    let c = choice();
    let bad_device = DeviceChoice {
        device: Some("no_such_dev".into()),
        ..c.clone()
    };
    let err = bad_device.check().unwrap_err();
    assert!(
        matches!(err, RdmaError::Verbs(VerbsError::UnknownDevice { .. })),
        "{err}"
    );
    let bad_port = DeviceChoice {
        port: 9,
        ..c.clone()
    };
    assert!(bad_port
        .check()
        .unwrap_err()
        .to_string()
        .contains("--ib-port"));
    let bad_gid = DeviceChoice {
        gid_index: 250,
        ..c.clone()
    };
    assert!(bad_gid
        .check()
        .unwrap_err()
        .to_string()
        .contains("--gid-index"));
    c.check().unwrap();
}

#[test]
#[ignore = "needs an RDMA device: run inside the Soft-RoCE guest (scripts/rdma-test)"]
fn device_listing_has_ports_and_gids() {
    choice();
    let devices = list_devices().unwrap();
    assert!(devices.iter().all(|d| !d.ports.is_empty()));
    assert!(devices
        .iter()
        .any(|d| d.ports.iter().any(|p| !p.gids.is_empty())));
}

/// `morphbench sink --transport rdma` (the binary, as a user runs it) receives and verifies
/// what an RDMA transport sends. In the guest the binary is MORPHBENCH_BIN.
#[test]
#[ignore = "needs an RDMA device: run inside the Soft-RoCE guest (scripts/rdma-test)"]
fn the_sink_command_receives_over_rdma() {
    let c = choice();
    let bin = std::env::var("MORPHBENCH_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_morphbench").to_string());
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut cmd = std::process::Command::new(&bin);
    cmd.args(["sink", "--transport", "rdma", "--once", "--listen", &addr])
        .args(["--gid-index", &c.gid_index.to_string()])
        .stdout(std::process::Stdio::piped());
    if let Some(d) = &c.device {
        cmd.args(["--device", d]);
    }
    let sink = cmd.spawn().unwrap();
    // Connect once the sink listens.
    let t0 = Instant::now();
    let mut tx = loop {
        match RdmaTransport::connect(&addr, &c, 1 << 20, Duration::from_secs(10)) {
            Ok(t) => break t,
            Err(e) if t0.elapsed() < Duration::from_secs(20) => {
                eprintln!("waiting for the sink: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("{e}"),
        }
    };
    let mut total = 0;
    for n in [1usize, 4096, 1 << 20] {
        let payload: Vec<u8> = (0..n).map(|i| (i % 253) as u8).collect();
        tx.send(&payload).unwrap();
        total += n;
    }
    tx.close().unwrap();
    let out = sink.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!("3 payloads, {total} bytes, all verified")),
        "{text}"
    );
}
