use super::*;
use std::sync::Arc;

fn trust() -> Trust {
    Trust::Secret(Arc::new(
        auth::Secret::from_token("the pair tests' job secret").unwrap(),
    ))
}

/// A connection to `addr` that proved the job's secret, as a rank's would.
fn proven(addr: std::net::SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    auth::prove(&s, &trust(), Instant::now() + Duration::from_secs(5)).unwrap();
    s
}

fn plan() -> PairPlan {
    PairPlan {
        transports: vec![TransportKind::Tcp],
        sizes: vec![8, 65536],
        iters: 50,
        budget_ms: 30,
        bidir: true,
        io_timeout_s: 5,
    }
}

#[test]
fn a_pair_measures_every_test_over_loopback() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let p = plan();
    let choice = crate::transport::rdma::DeviceChoice::default();
    let server = {
        let (p, c) = (p.clone(), choice.clone());
        std::thread::spawn(move || serve(&listener, &p, 0, 1, 0, &c, &trust()))
    };
    let rows = drive(&addr, &p, 1, 0, 0, &choice, &trust()).unwrap();
    assert!(server.join().unwrap().unwrap().is_empty());
    // Per size: ping-pong, 1->0, 0->1, both.
    assert_eq!(rows.len(), 8, "{rows:?}");
    let dirs: Vec<(u32, u32, &str)> = rows[..4]
        .iter()
        .map(|m| (m.src, m.dst, m.direction.as_str()))
        .collect();
    assert_eq!(
        dirs,
        [
            (0, 1, "pingpong"),
            (1, 0, "oneway"),
            (0, 1, "oneway"),
            (0, 1, "bidir")
        ]
    );
    for m in &rows {
        assert!(m.summary.n >= MIN_SAMPLES && m.summary.n <= 50, "{m:?}");
        assert!(m.summary.p50 > 0.0);
        assert_eq!(m.gbps.is_some(), m.direction != "pingpong");
    }
}

#[test]
fn a_stranger_is_dropped_and_a_wrong_round_refused() {
    let choice = crate::transport::rdma::DeviceChoice::default();
    // A stranger (no proof, or a wrong secret) is dropped, and the real rank still measures.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let peer = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\n").unwrap();
        let wrong = Trust::Secret(Arc::new(
            auth::Secret::from_token("not the job's secret").unwrap(),
        ));
        let s2 = TcpStream::connect(addr).unwrap();
        assert!(auth::prove(&s2, &wrong, Instant::now() + Duration::from_secs(5)).is_err());
        let c = crate::transport::rdma::DeviceChoice::default();
        drive(&addr.to_string(), &plan(), 1, 0, 0, &c, &trust())
    });
    serve(&listener, &plan(), 0, 1, 0, &choice, &trust()).unwrap();
    assert_eq!(peer.join().unwrap().unwrap().len(), 8);
    // A proven rank that says it is another, or in another round, is refused by name.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let peer = std::thread::spawn(move || {
        let mut s = proven(addr);
        let mut h = HELLO.to_vec();
        h.extend([2, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0]);
        s.write_all(&h).unwrap();
        std::thread::sleep(Duration::from_millis(200));
    });
    let e = serve(&listener, &plan(), 0, 1, 0, &choice, &trust()).unwrap_err();
    assert!(matches!(e, PairError::Protocol(_)), "{e:?}");
    assert!(e.to_string().contains("expected rank 1 in round 0"), "{e}");
    peer.join().unwrap();
}

#[test]
fn a_header_outside_the_plan_is_refused_before_allocating() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let peer = std::thread::spawn(move || {
        let mut s = proven(addr);
        let mut hello = HELLO.to_vec();
        hello.extend([1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        s.write_all(&hello).unwrap();
        s.write_all(&header(OP_SINK, 1, 1 << 40)).unwrap();
        std::thread::sleep(Duration::from_millis(200));
    });
    let choice = crate::transport::rdma::DeviceChoice::default();
    let e = serve(&listener, &plan(), 0, 1, 0, &choice, &trust())
        .unwrap_err()
        .to_string();
    assert!(e.contains("outside the plan"), "{e}");
    peer.join().unwrap();
}

#[test]
fn stamps_catch_reordering() {
    let mut m = vec![0u8; 16];
    stamp(&mut m, 3);
    assert!(check_stamp(&m, 3, "t").is_ok());
    assert!(check_stamp(&m, 4, "t").is_err());
    let mut tiny = vec![0u8; 2];
    stamp(&mut tiny, 258);
    assert!(check_stamp(&tiny, 258, "t").is_ok());
    assert!(check_stamp(&tiny, 257, "t").is_err());
}

#[test]
fn a_retest_plan_is_a_part_of_the_plan_and_nothing_else_is() {
    let plan = PairPlan {
        transports: vec![TransportKind::Tcp],
        sizes: vec![8, 65536, 4 << 20],
        iters: 100,
        budget_ms: 250,
        bidir: false,
        io_timeout_s: 30,
    };
    let part = plan.part(&[("tcp".into(), 65536), ("tcp".into(), 8)]);
    assert_eq!(part.sizes, [8, 65536]);
    assert_eq!(part.transports, [TransportKind::Tcp]);
    assert!(part.is_part_of(&plan));
    // A size, a transport or a budget the plan does not have is refused.
    let mut odd = part.clone();
    odd.sizes.push(3);
    assert!(!odd.is_part_of(&plan));
    let mut odd = part.clone();
    odd.budget_ms = 60_000;
    assert!(!odd.is_part_of(&plan));
    assert!(!plan.part(&[("rdma".into(), 8)]).is_part_of(&plan));
}
