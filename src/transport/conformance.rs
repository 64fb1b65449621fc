//! The behaviour every `Transport` must show, written once and run against each
//! implementation: TCP in the unit tests, RDMA in `tests/rdma.rs` (inside the Soft-RoCE guest).
//! Each check panics with what went wrong.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::sink::{drain, SinkStats};
use super::wire::checksum;
use super::{Receiver, Transport, TransportError};

/// Makes connected pairs of one transport.
pub trait Fixture {
    /// A sender offering `sender_max` bytes and a receiver accepting at most `receiver_max`,
    /// both giving up on a silent peer after `io`.
    fn pair(
        &self,
        sender_max: u64,
        receiver_max: u64,
        io: Duration,
    ) -> (Box<dyn Transport>, Box<dyn Receiver>);
}

fn drain_in_thread(mut rx: Box<dyn Receiver>) -> JoinHandle<Result<SinkStats, TransportError>> {
    std::thread::spawn(move || drain(rx.as_mut()))
}

fn payload(n: usize, salt: usize) -> Vec<u8> {
    (0..n).map(|i| ((i * 31 + salt * 7) % 251) as u8).collect()
}

/// Payloads of many sizes, empty included, arrive intact and in order.
pub fn payloads_arrive_verified(f: &dyn Fixture) {
    let (mut tx, rx) = f.pair(1 << 22, 1 << 22, Duration::from_secs(10));
    let sink = drain_in_thread(rx);
    let sizes = [0usize, 1, 7, 4096, 65_537, 1 << 20, 1 << 22, 3];
    for (k, &n) in sizes.iter().enumerate() {
        let data = payload(n, k);
        let t0 = Instant::now();
        let timing = tx.send(&data).unwrap();
        let wall_us = t0.elapsed().as_secs_f64() * 1e6;
        // The parts of a send lie inside the call, and the confirmation takes a round trip.
        let parts = timing.send_us + timing.receive_us;
        assert!(
            timing.receive_us > 0.0 && parts <= wall_us + 1.0,
            "send {n} B: send {} µs + receive {} µs against {wall_us} µs of wall clock",
            timing.send_us,
            timing.receive_us
        );
    }
    tx.close().unwrap();
    let stats = sink.join().unwrap().unwrap();
    assert_eq!(stats.payloads, sizes.len() as u64);
    assert_eq!(stats.bytes, sizes.iter().sum::<usize>() as u64);
    let last = sizes.len() - 1;
    assert_eq!(stats.last_checksum, checksum(&payload(sizes[last], last)));
}

/// Many small payloads back to back: a sender whose next frame overtakes the receiver's
/// bookkeeping of the last ack (as an RDMA completion can) must still be handled.
pub fn many_payloads_back_to_back(f: &dyn Fixture) {
    let (mut tx, rx) = f.pair(4096, 4096, Duration::from_secs(10));
    let sink = drain_in_thread(rx);
    let n = 1000;
    for k in 0..n {
        tx.send(&payload(64, k)).unwrap();
    }
    tx.close().unwrap();
    let stats = sink.join().unwrap().unwrap();
    assert_eq!(stats.payloads, n as u64);
    assert_eq!(stats.last_checksum, checksum(&payload(64, n - 1)));
}

/// A payload over the receiver's limit is refused before anything is sent.
pub fn oversized_payload_is_refused(f: &dyn Fixture) {
    let (mut tx, rx) = f.pair(1 << 20, 1024, Duration::from_secs(5));
    let sink = drain_in_thread(rx);
    let err = tx.send(&[0u8; 2048]).unwrap_err();
    assert!(
        matches!(
            err,
            TransportError::TooLarge {
                len: 2048,
                max: 1024
            }
        ),
        "{err}"
    );
    // The connection is still usable.
    tx.send(&[9u8; 1024]).unwrap();
    tx.close().unwrap();
    assert_eq!(sink.join().unwrap().unwrap().payloads, 1);
}

/// A receiver that goes away makes the next send fail, within bounded time.
pub fn receiver_gone_is_an_error(f: &dyn Fixture) {
    let (mut tx, rx) = f.pair(1 << 20, 1 << 20, Duration::from_secs(2));
    drop(rx);
    let t0 = Instant::now();
    let err = tx.send(&[1u8; 100]).unwrap_err();
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t0.elapsed()
    );
    assert!(
        !matches!(err, TransportError::TooLarge { .. }),
        "unexpected {err}"
    );
}

/// A receiver that is there but never answers makes the send time out.
pub fn silent_receiver_times_out(f: &dyn Fixture) {
    let (mut tx, rx) = f.pair(1 << 20, 1 << 20, Duration::from_millis(500));
    let t0 = Instant::now();
    let err = tx.send(&[1u8; 100]).unwrap_err();
    assert!(matches!(err, TransportError::Timeout(_)), "{err}");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t0.elapsed()
    );
    drop(rx);
}

/// Every check above, in turn.
pub fn run_all(f: &dyn Fixture) {
    payloads_arrive_verified(f);
    many_payloads_back_to_back(f);
    oversized_payload_is_refused(f);
    receiver_gone_is_an_error(f);
    silent_receiver_times_out(f);
}
