//! The transport tests: payloads verified end to end, and every fault a peer can cause
//! gives an error in bounded time.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::conformance::{self, Fixture};
use super::sink::spawn_loopback;
use super::tcp::{TcpReceiver, TcpTransport, Timeouts};
use super::wire::{checksum, read_hello, write_hello, Header, HEADER_BYTES};
use super::{Receiver, Transport, TransportError};

fn quick() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(2),
        io: Duration::from_millis(500),
    }
}

/// Connected TCP pairs on loopback, for the transport conformance kit.
struct TcpFixture;

impl Fixture for TcpFixture {
    fn pair(
        &self,
        sender_max: u64,
        receiver_max: u64,
        io: Duration,
    ) -> (Box<dyn Transport>, Box<dyn Receiver>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let rx = std::thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            TcpReceiver::accept(s, receiver_max, io).unwrap()
        });
        let timeouts = Timeouts {
            connect: Duration::from_secs(2),
            io,
        };
        let tx = TcpTransport::connect(&addr, sender_max, timeouts).unwrap();
        (Box::new(tx), Box::new(rx.join().unwrap()))
    }
}

#[test]
fn tcp_passes_the_conformance_kit() {
    conformance::run_all(&TcpFixture);
}

#[test]
fn connection_refused_is_clear() {
    // Bind then drop to find a port nothing listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let err = TcpTransport::connect(&addr, 1024, quick()).err().unwrap();
    let msg = err.to_string();
    assert!(
        msg.contains("cannot connect") && msg.contains("morphbench sink"),
        "{msg}"
    );
}

/// A fake peer: accepts one connection and runs `script` on it.
fn fake_peer(script: impl FnOnce(TcpStream) + Send + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        script(s);
    });
    addr
}

#[test]
fn receiver_closing_early_is_an_error() {
    let addr = fake_peer(|mut s| {
        read_hello(&mut s).unwrap();
        write_hello(&mut s, 1 << 20).unwrap();
        // Read one header, then hang up without an ack.
        let mut b = [0u8; HEADER_BYTES];
        let _ = s.read_exact(&mut b);
    });
    let mut t = TcpTransport::connect(&addr, 1 << 20, quick()).unwrap();
    let err = t.send(&[1u8; 100]).unwrap_err();
    assert!(
        matches!(err, TransportError::Closed | TransportError::Io(_)),
        "{err}"
    );
}

#[test]
fn silent_peer_times_out_in_bounded_time() {
    let addr = fake_peer(|mut s| {
        read_hello(&mut s).unwrap();
        write_hello(&mut s, 1 << 20).unwrap();
        std::thread::sleep(Duration::from_secs(3));
    });
    let mut t = TcpTransport::connect(&addr, 1 << 20, quick()).unwrap();
    let t0 = Instant::now();
    let err = t.send(&[1u8; 100]).unwrap_err();
    assert!(matches!(err, TransportError::Timeout(_)), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(2));
}

#[test]
fn wrong_hello_is_refused_by_both_sides() {
    let addr = fake_peer(|mut s| {
        let mut b = [0u8; 16];
        s.read_exact(&mut b).unwrap();
        s.write_all(b"MBH1\x09\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00")
            .unwrap();
    });
    let err = TcpTransport::connect(&addr, 1024, quick()).err().unwrap();
    assert!(err.to_string().contains("version 9"), "{err}");
    let addr = fake_peer(|mut s| {
        s.write_all(b"HTTP/1.1 200 OK\r\n\r\n").unwrap();
    });
    let err = TcpTransport::connect(&addr, 1024, quick()).err().unwrap();
    assert!(err.to_string().contains("bad hello"), "{err}");
}

/// A raw client against a real sink, sending what a broken sender might.
fn raw_client(
    max: u64,
    frames: impl FnOnce(&mut TcpStream),
) -> Result<super::sink::SinkStats, TransportError> {
    let (addr, sink) = spawn_loopback(
        super::TransportKind::Tcp,
        Default::default(),
        max,
        Duration::from_millis(500),
    )
    .unwrap();
    let mut s = TcpStream::connect(addr).unwrap();
    write_hello(&mut s, max).unwrap();
    read_hello(&mut s).unwrap();
    frames(&mut s);
    sink.join().unwrap()
}

#[test]
fn sink_rejects_garbage_oversized_and_corrupt_frames() {
    let err = raw_client(1024, |s| s.write_all(&[0xAB; HEADER_BYTES]).unwrap()).unwrap_err();
    assert!(err.to_string().contains("magic"), "{err}");
    let huge = Header {
        len: u64::MAX,
        check: 0,
        ..Header::data(1, &[])
    };
    let err = raw_client(1024, |s| s.write_all(&huge.encode()).unwrap()).unwrap_err();
    assert!(err.to_string().contains("exceeds"), "{err}");
    let payload = [5u8; 64];
    let bad = Header {
        check: checksum(&payload) ^ 1,
        ..Header::data(1, &payload)
    };
    let err = raw_client(1024, |s| {
        s.write_all(&bad.encode()).unwrap();
        s.write_all(&payload).unwrap();
    })
    .unwrap_err();
    assert!(matches!(err, TransportError::Corrupt { seq: 1 }), "{err}");
    // A sender that vanishes mid-payload.
    let cut = Header {
        check: 0,
        ..Header::data(1, &payload)
    };
    let err = raw_client(1024, |s| {
        s.write_all(&cut.encode()).unwrap();
        s.write_all(&payload[..10]).unwrap();
        s.shutdown(std::net::Shutdown::Both).unwrap();
    })
    .unwrap_err();
    assert!(matches!(err, TransportError::Closed), "{err}");
}

/// A data frame `seq` carrying `payload`.
fn frame(seq: u64, payload: &[u8]) -> [u8; HEADER_BYTES] {
    Header::data(seq, payload).encode()
}

#[test]
fn sink_rejects_duplicate_and_out_of_order_frames() {
    let p = [7u8; 16];
    let read_ack = |s: &mut TcpStream| {
        let mut b = [0u8; HEADER_BYTES];
        s.read_exact(&mut b).unwrap();
    };
    let err = raw_client(1024, |s| {
        s.write_all(&frame(1, &p)).unwrap();
        s.write_all(&p).unwrap();
        read_ack(s);
        s.write_all(&frame(1, &p)).unwrap();
        s.write_all(&p).unwrap();
    })
    .unwrap_err();
    assert!(err.to_string().contains("frame 1 is a duplicate"), "{err}");
    let err = raw_client(1024, |s| {
        s.write_all(&frame(3, &p)).unwrap();
        s.write_all(&p).unwrap();
    })
    .unwrap_err();
    assert!(
        err.to_string().contains("out of order: expected 1"),
        "{err}"
    );
}

#[test]
fn a_frame_that_trickles_in_meets_its_deadline() {
    // One byte every 100 ms never trips a per-read timeout of 500 ms, but the whole frame
    // must arrive within it.
    let t0 = Instant::now();
    let err = raw_client(1024, |s| {
        for b in frame(1, &[1u8; 64]) {
            if s.write_all(&[b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    })
    .unwrap_err();
    assert!(matches!(err, TransportError::Timeout(_)), "{err}");
    assert!(
        t0.elapsed() < Duration::from_millis(2500),
        "{:?}",
        t0.elapsed()
    );
}

#[test]
fn a_silent_client_does_not_delay_another() {
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Mutex};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(Mutex::new(Vec::new()));
    let server = {
        let (stop, done) = (stop.clone(), done.clone());
        std::thread::spawn(move || {
            let accept = super::factory::receiver_for(
                super::TransportKind::Tcp,
                Default::default(),
                1024,
                Duration::from_secs(3),
            );
            super::sink::serve(listener, &accept, false, stop, |_, r| {
                done.lock().unwrap().push((Instant::now(), r.is_ok()))
            })
            .unwrap();
        })
    };
    // The silent one: says hello, then nothing.
    let mut silent = TcpStream::connect(&addr).unwrap();
    write_hello(&mut silent, 1024).unwrap();
    read_hello(&mut silent).unwrap();
    let t0 = Instant::now();
    let mut tx = TcpTransport::connect(&addr, 1024, quick()).unwrap();
    for k in 0..3u8 {
        tx.send(&[k; 100]).unwrap();
    }
    tx.close().unwrap();
    let served = t0.elapsed();
    // The busy client finished while the silent one still held its connection.
    assert!(served < Duration::from_secs(2), "{served:?}");
    std::thread::sleep(Duration::from_millis(3500));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    server.join().unwrap();
    let done = done.lock().unwrap();
    assert_eq!(done.len(), 2, "both connections end");
    assert!(done.iter().any(|(_, ok)| *ok) && done.iter().any(|(_, ok)| !*ok));
    drop(silent);
}
