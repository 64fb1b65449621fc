//! The rendezvous's tests: one roster for every rank, and each fault named and bounded.
use super::*;
use crate::cluster::frame::MAGIC;
use crate::testing::err_text;
use std::io::Write;

fn reg(rank: u32, world: u32) -> Registration {
    Registration {
        version: "0.1.0".into(),
        hostname: format!("host{rank}"),
        rank,
        world,
        address: String::new(),
        port: 0,
        adapter: Some("llvmpipe".into()),
        rdma_devices: vec![],
    }
}

type Outcome = Result<Vec<Registration>, ClusterError>;

/// Rank 0 on a loopback port, the others in threads; returns rank 0's result and theirs.
fn trust() -> Trust {
    Trust::Secret(Arc::new(
        auth::Secret::from_token("the job's own secret token").unwrap(),
    ))
}

fn run(others: Vec<Registration>, world: u32, timeout: Duration) -> (Outcome, Vec<Outcome>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let joins: Vec<_> = others
        .into_iter()
        .map(|r| {
            let a = addr.clone();
            std::thread::spawn(move || {
                join(&a, r, &trust(), timeout + Duration::from_secs(2)).map(|(roster, ..)| roster)
            })
        })
        .collect();
    let zero = serve(&listener, reg(0, world), &trust(), timeout).map(|(roster, _)| roster);
    (zero, joins.into_iter().map(|j| j.join().unwrap()).collect())
}

#[test]
fn four_ranks_get_one_roster() {
    let (zero, others) = run(
        (1..4).map(|r| reg(r, 4)).collect(),
        4,
        Duration::from_secs(10),
    );
    let roster = zero.unwrap();
    assert_eq!(
        roster.iter().map(|r| r.rank).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    assert!(
        roster.iter().all(|r| r.address == "127.0.0.1"),
        "{roster:?}"
    );
    for o in others {
        assert_eq!(o.unwrap(), roster);
    }
}

#[test]
fn faults_are_named_and_bounded() {
    let t = Duration::from_millis(800);
    // A rank that never arrives.
    let started = Instant::now();
    let (zero, others) = run(vec![reg(1, 3)], 3, t);
    let e = zero.unwrap_err();
    assert!(matches!(e, ClusterError::Rendezvous(_)), "{e:?}");
    let e = e.to_string();
    assert!(e.contains("rank(s) 2 of 3 never arrived"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(err_text(others[0].as_ref()).contains("never arrived"));
    // A duplicate rank, a world mismatch, a version mismatch.
    let (zero, _) = run(vec![reg(1, 3), reg(1, 3)], 3, t);
    assert!(err_text(zero).contains("rank 1 registered twice"));
    let (zero, others) = run(vec![reg(1, 3)], 2, t);
    let e = err_text(zero);
    assert!(e.contains("says the world is 3 ranks, rank 0 says 2"));
    let e = err_text(others[0].as_ref());
    assert!(e.contains("rank 0 ended the run"));
    let mut old = reg(1, 2);
    old.version = "0.0.9".into();
    let (zero, _) = run(vec![old], 2, t);
    let e = zero.unwrap_err();
    assert!(e.to_string().contains("runs morphbench 0.0.9"), "{e}");
    // Garbage, and a huge announced length, from a stranger: refused, and the run goes on
    // to meet its real rank 1.
    for junk in [
        b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        [&MAGIC[..], &u32::MAX.to_be_bytes()].concat(),
    ] {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let peer = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&junk).unwrap();
            std::thread::sleep(Duration::from_millis(200));
            join(
                &addr.to_string(),
                reg(1, 2),
                &trust(),
                Duration::from_secs(5),
            )
            .map(|(r, ..)| r)
        });
        let (roster, _) = serve(&listener, reg(0, 2), &trust(), Duration::from_secs(5)).unwrap();
        assert_eq!(roster.len(), 2);
        assert_eq!(peer.join().unwrap().unwrap(), roster);
    }
    // A stranger that sends a valid header, then a byte every 300 ms, is cut off: rank 0
    // still ends at its own deadline.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let drip = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        let _ = s.write_all(&[&MAGIC[..], &100u32.to_be_bytes()].concat());
        for _ in 0..40 {
            std::thread::sleep(Duration::from_millis(300));
            if s.write_all(b" ").is_err() {
                break;
            }
        }
    });
    let started = Instant::now();
    let e = serve(&listener, reg(0, 2), &trust(), Duration::from_secs(3)).unwrap_err();
    assert!(e.to_string().contains("never arrived"), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    drop(listener);
    drip.join().unwrap();
    // No rank 0 at all.
    let free = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let e = err_text(join(&free, reg(1, 2), &trust(), Duration::from_millis(300)));
    assert!(e.contains("rank 0 never answered"), "{e}");
}
