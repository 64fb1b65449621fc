//! The out-of-band TCP exchange that sets up an RDMA connection, as perftest does it: a
//! version check, agreement on the test parameters, the exchange of each side's queue pair and
//! buffer (LID, QPN, PSN, RKEY, VADDR, GID), and barriers. Records are fixed-size little-endian
//! binary; every field received is validated and bounded before use.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::verbs::Endpoint;
use super::RdmaError;

/// Bumped when any record changes.
pub const OOB_VERSION: u32 = 2;
/// The largest message a peer may ask for (and so the largest buffer it makes us register).
pub const MAX_MESSAGE: u64 = 1 << 30;
pub const MAX_SIZES: usize = 64;
pub const MAX_ITERS: u32 = 10_000_000;
pub const MAX_WINDOW: u32 = 4096;
pub const MAX_INLINE: u32 = 1024;

const HELLO: &[u8; 4] = b"MBRH";
const PARAMS: &[u8; 4] = b"MBRP";
const ENDPOINT: &[u8; 4] = b"MBRE";
const SYNC: &[u8; 4] = b"MBRS";

/// What the connection is for; both sides must agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Bench = 1,
    Transport = 2,
}

/// The test parameters the client proposes and the server accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params {
    /// Bit 0: latency, bit 1: bandwidth (0 for a transport connection).
    pub tests: u32,
    pub iters: u32,
    pub warmup: u32,
    pub window: u32,
    /// Largest message sent inline (perftest's -I); the device may grant less.
    pub inline_size: u32,
    /// Message sizes in bytes (for a transport: one entry, the largest payload).
    pub sizes: Vec<u64>,
}

impl Params {
    pub fn validate(&self) -> Result<(), RdmaError> {
        let bad = |m: String| Err(RdmaError::Oob(m));
        if self.sizes.is_empty() || self.sizes.len() > MAX_SIZES {
            return bad(format!(
                "{} message sizes; 1 to {MAX_SIZES} are allowed",
                self.sizes.len()
            ));
        }
        if let Some(s) = self.sizes.iter().find(|&&s| s == 0 || s > MAX_MESSAGE) {
            return bad(format!(
                "message size {s} B is outside 1 B ..= {MAX_MESSAGE} B"
            ));
        }
        if self.tests > 3 {
            return bad(format!("unknown test mask {}", self.tests));
        }
        if self.iters == 0 || self.iters > MAX_ITERS || self.warmup > MAX_ITERS {
            return bad(format!(
                "iterations {} (warm-up {}) outside 1 ..= {MAX_ITERS}",
                self.iters, self.warmup
            ));
        }
        if self.window == 0 || self.window > MAX_WINDOW {
            return bad(format!("window {} outside 1 ..= {MAX_WINDOW}", self.window));
        }
        if self.inline_size > MAX_INLINE {
            return bad(format!(
                "inline size {} over {MAX_INLINE} bytes",
                self.inline_size
            ));
        }
        Ok(())
    }

    pub fn largest(&self) -> u64 {
        self.sizes.iter().copied().max().unwrap_or(0)
    }
}

/// One TCP connection carrying the exchange; it stays open for barriers during the test.
pub struct OobChannel {
    stream: TcpStream,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

impl OobChannel {
    /// Connects to a server; `io` bounds every later read and write.
    pub fn connect(addr: &str, connect: Duration, io: Duration) -> Result<OobChannel, RdmaError> {
        let target: SocketAddr = addr
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| RdmaError::Oob(format!("cannot resolve {addr}")))?;
        let stream = TcpStream::connect_timeout(&target, connect).map_err(|e| {
            RdmaError::Oob(format!(
                "cannot connect to {addr}: {e}. Is `morphbench rdma --server` (or `sink \
                 --transport rdma`) listening there?"
            ))
        })?;
        Self::from_stream(stream, io)
    }

    /// Waits for one client on `listener`, up to `accept` (None: forever).
    pub fn accept(
        listener: &TcpListener,
        accept: Option<Duration>,
        io: Duration,
    ) -> Result<(OobChannel, SocketAddr), RdmaError> {
        let start = std::time::Instant::now();
        listener.set_nonblocking(true)?;
        loop {
            match listener.accept() {
                Ok((stream, peer)) => {
                    stream.set_nonblocking(false)?;
                    return Ok((Self::from_stream(stream, io)?, peer));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if accept.is_some_and(|a| start.elapsed() > a) {
                        return Err(RdmaError::Timeout(format!(
                            "no client connected within {:?}",
                            accept.unwrap()
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Wraps an accepted connection; `io` bounds every read and write.
    pub fn from_stream(stream: TcpStream, io: Duration) -> Result<OobChannel, RdmaError> {
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(io))?;
        stream.set_write_timeout(Some(io))?;
        Ok(OobChannel { stream })
    }

    fn read_record(
        &mut self,
        magic: &[u8; 4],
        what: &str,
        buf: &mut [u8],
    ) -> Result<(), RdmaError> {
        self.stream.read_exact(buf).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => {
                RdmaError::Oob(format!("the peer closed the connection before its {what}"))
            }
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                RdmaError::Timeout(format!("the peer did not send its {what}"))
            }
            _ => RdmaError::Io(e),
        })?;
        if &buf[..4] != magic {
            return Err(RdmaError::Oob(format!(
                "expected the peer's {what}, got bytes {:02x?} (not a morphbench rdma peer, or \
                 out of step)",
                &buf[..4]
            )));
        }
        Ok(())
    }

    pub fn send_hello(&mut self, purpose: Purpose) -> Result<(), RdmaError> {
        let mut b = [0u8; 12];
        b[..4].copy_from_slice(HELLO);
        b[4..8].copy_from_slice(&OOB_VERSION.to_le_bytes());
        b[8..12].copy_from_slice(&(purpose as u32).to_le_bytes());
        self.stream.write_all(&b)?;
        Ok(())
    }

    pub fn expect_hello(&mut self, purpose: Purpose) -> Result<(), RdmaError> {
        let mut b = [0u8; 12];
        self.read_record(HELLO, "hello", &mut b)?;
        let version = u32_at(&b, 4);
        if version != OOB_VERSION {
            return Err(RdmaError::Oob(format!(
                "the peer speaks morphbench rdma protocol version {version}, we speak \
                 {OOB_VERSION}; run the same morphbench version on both sides"
            )));
        }
        let theirs = u32_at(&b, 8);
        if theirs != purpose as u32 {
            return Err(RdmaError::Oob(format!(
                "the peer connected for purpose {theirs}, we expected {purpose:?} ({}); \
                 `rdma --connect` talks to `rdma --server`, `hol --transport rdma` to `sink \
                 --transport rdma`",
                purpose as u32
            )));
        }
        Ok(())
    }

    pub fn send_params(&mut self, p: &Params) -> Result<(), RdmaError> {
        p.validate()?;
        let mut b = Vec::with_capacity(28 + 8 * p.sizes.len());
        b.extend_from_slice(PARAMS);
        for v in [
            p.tests,
            p.iters,
            p.warmup,
            p.window,
            p.sizes.len() as u32,
            p.inline_size,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for s in &p.sizes {
            b.extend_from_slice(&s.to_le_bytes());
        }
        self.stream.write_all(&b)?;
        Ok(())
    }

    pub fn recv_params(&mut self) -> Result<Params, RdmaError> {
        let mut b = [0u8; 28];
        self.read_record(PARAMS, "test parameters", &mut b)?;
        let n = u32_at(&b, 20) as usize;
        // Bound the count before reading (or allocating for) the list.
        if n == 0 || n > MAX_SIZES {
            return Err(RdmaError::Oob(format!(
                "the peer sent {n} message sizes; 1 to {MAX_SIZES} are allowed"
            )));
        }
        let mut sizes = vec![0u8; 8 * n];
        self.stream.read_exact(&mut sizes)?;
        let p = Params {
            tests: u32_at(&b, 4),
            iters: u32_at(&b, 8),
            warmup: u32_at(&b, 12),
            window: u32_at(&b, 16),
            inline_size: u32_at(&b, 24),
            sizes: (0..n).map(|i| u64_at(&sizes, 8 * i)).collect(),
        };
        p.validate()?;
        Ok(p)
    }

    pub fn send_endpoint(&mut self, e: &Endpoint) -> Result<(), RdmaError> {
        let mut b = [0u8; 56];
        b[..4].copy_from_slice(ENDPOINT);
        b[4..6].copy_from_slice(&e.lid.to_le_bytes());
        b[8..12].copy_from_slice(&e.qpn.to_le_bytes());
        b[12..16].copy_from_slice(&e.psn.to_le_bytes());
        b[16..20].copy_from_slice(&e.rkey.to_le_bytes());
        b[20..28].copy_from_slice(&e.addr.to_le_bytes());
        b[28..36].copy_from_slice(&e.len.to_le_bytes());
        b[36..52].copy_from_slice(&e.gid);
        b[52..56].copy_from_slice(&e.mtu.to_le_bytes());
        self.stream.write_all(&b)?;
        Ok(())
    }

    /// The peer's endpoint; its buffer must hold at least `min_len` bytes.
    pub fn recv_endpoint(&mut self, min_len: u64) -> Result<Endpoint, RdmaError> {
        let mut b = [0u8; 56];
        self.read_record(ENDPOINT, "queue pair endpoint", &mut b)?;
        let e = Endpoint {
            lid: u16::from_le_bytes([b[4], b[5]]),
            qpn: u32_at(&b, 8),
            psn: u32_at(&b, 12),
            rkey: u32_at(&b, 16),
            addr: u64_at(&b, 20),
            len: u64_at(&b, 28),
            gid: b[36..52].try_into().unwrap(),
            mtu: u32_at(&b, 52),
        };
        let bad = |m: String| {
            Err(RdmaError::Oob(format!(
                "the peer's endpoint is invalid: {m}"
            )))
        };
        if e.qpn == 0 || e.qpn > 0xff_ffff {
            return bad(format!("QPN {} is not a 24-bit queue pair number", e.qpn));
        }
        if e.psn > 0xff_ffff {
            return bad(format!("PSN {} is not 24-bit", e.psn));
        }
        if !(1..=5).contains(&e.mtu) {
            return bad(format!("MTU code {} is not 1..=5", e.mtu));
        }
        if e.len < min_len || e.len > MAX_MESSAGE + 4096 {
            return bad(format!(
                "its buffer of {} B is not between the {min_len} B the test needs and the \
                 {MAX_MESSAGE} B limit",
                e.len
            ));
        }
        if e.addr.checked_add(e.len).is_none() {
            return bad(format!(
                "buffer address {:#x} + {} overflows",
                e.addr, e.len
            ));
        }
        Ok(e)
    }

    /// Both sides meet at `step`; `ok = false` tells the peer this side failed.
    pub fn barrier(&mut self, step: u32, ok: bool) -> Result<(), RdmaError> {
        let mut b = [0u8; 12];
        b[..4].copy_from_slice(SYNC);
        b[4..8].copy_from_slice(&step.to_le_bytes());
        b[8..12].copy_from_slice(&u32::from(!ok).to_le_bytes());
        self.stream.write_all(&b)?;
        self.read_record(SYNC, &format!("barrier {step}"), &mut b)?;
        let theirs = u32_at(&b, 4);
        if theirs != step {
            return Err(RdmaError::Oob(format!(
                "barrier out of step: we are at {step}, the peer at {theirs}"
            )));
        }
        if u32_at(&b, 8) != 0 {
            return Err(RdmaError::PeerFailed(format!("at barrier {step}")));
        }
        Ok(())
    }

    /// The raw stream, for tests that play a broken peer.
    pub fn stream(&mut self) -> &mut TcpStream {
        &mut self.stream
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connected pair: (our channel, the raw peer socket).
    fn pair(io: Duration) -> (OobChannel, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let ours = OobChannel::connect(&addr, Duration::from_secs(2), io).unwrap();
        let (peer, _) = l.accept().unwrap();
        (ours, peer)
    }

    fn params() -> Params {
        Params {
            tests: 3,
            iters: 100,
            warmup: 2,
            window: 64,
            inline_size: 64,
            sizes: vec![2, 4096, 1 << 20],
        }
    }

    fn endpoint() -> Endpoint {
        Endpoint {
            lid: 7,
            qpn: 0x11,
            psn: 0xabcdef,
            rkey: 99,
            addr: 0x7000_0000,
            len: 8192,
            gid: [3; 16],
            mtu: 3,
        }
    }

    #[test]
    fn records_round_trip() {
        let (mut a, peer) = pair(Duration::from_secs(2));
        let mut b = OobChannel::from_stream(peer, Duration::from_secs(2)).unwrap();
        a.send_hello(Purpose::Bench).unwrap();
        a.send_params(&params()).unwrap();
        a.send_endpoint(&endpoint()).unwrap();
        b.expect_hello(Purpose::Bench).unwrap();
        assert_eq!(b.recv_params().unwrap(), params());
        assert_eq!(b.recv_endpoint(4096).unwrap(), endpoint());
        let t = std::thread::spawn(move || b.barrier(1, true));
        a.barrier(1, true).unwrap();
        t.join().unwrap().unwrap();
    }

    fn peer_sends(bytes: Vec<u8>) -> OobChannel {
        let (ours, mut peer) = pair(Duration::from_millis(300));
        peer.write_all(&bytes).unwrap();
        // Keep the socket open a while so a short record is a timeout, then close it.
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(600));
            drop(peer);
        });
        ours
    }

    fn hello(version: u32, purpose: u32) -> Vec<u8> {
        let mut b = HELLO.to_vec();
        b.extend_from_slice(&version.to_le_bytes());
        b.extend_from_slice(&purpose.to_le_bytes());
        b
    }

    #[test]
    fn version_purpose_and_garbage_are_refused() {
        for (bytes, want) in [
            (hello(9, 1), "version 9"),
            (hello(OOB_VERSION, 2), "purpose"),
            (b"GET / HTTP/1.1\r\n".to_vec(), "not a morphbench rdma peer"),
        ] {
            let err = peer_sends(bytes).expect_hello(Purpose::Bench).unwrap_err();
            assert!(err.to_string().contains(want), "{err}");
        }
    }

    #[test]
    fn truncated_and_silent_peers_fail_in_bounded_time() {
        let t0 = std::time::Instant::now();
        let err = peer_sends(HELLO[..2].to_vec())
            .expect_hello(Purpose::Bench)
            .unwrap_err();
        assert!(
            matches!(err, RdmaError::Timeout(_) | RdmaError::Oob(_)),
            "{err}"
        );
        assert!(t0.elapsed() < Duration::from_secs(3));
        let (mut ours, peer) = pair(Duration::from_millis(200));
        drop(peer);
        let err = ours.recv_endpoint(1).unwrap_err();
        assert!(err.to_string().contains("closed"), "{err}");
    }

    fn params_record(n: u32, sizes: &[u64], iters: u32) -> Vec<u8> {
        let mut b = PARAMS.to_vec();
        for v in [1, iters, 0, 16, n, 0] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for s in sizes {
            b.extend_from_slice(&s.to_le_bytes());
        }
        b
    }

    #[test]
    fn oversized_or_absurd_fields_are_bounded() {
        // A count far over the limit is refused before the list is read or allocated.
        for (record, want) in [
            (params_record(u32::MAX, &[], 10), "message sizes"),
            (params_record(1, &[u64::MAX], 10), "outside"),
            (params_record(1, &[64], 0), "iterations"),
        ] {
            let err = peer_sends(record).recv_params().unwrap_err();
            assert!(err.to_string().contains(want), "{err}");
        }

        let encode = |e: Endpoint| {
            let (mut a, peer) = pair(Duration::from_millis(300));
            a.send_endpoint(&e).unwrap();
            OobChannel::from_stream(peer, Duration::from_millis(300))
                .unwrap()
                .recv_endpoint(4096)
        };
        assert!(encode(endpoint()).is_ok());
        type Change = fn(&mut Endpoint);
        let bad: [(Change, &str); 4] = [
            (|e| e.qpn = 1 << 24, "QPN"),
            (|e| e.len = 100, "buffer"),
            (|e| e.len = u64::MAX, "buffer"),
            (|e| e.mtu = 9, "MTU"),
        ];
        for (change, want) in bad {
            let mut e = endpoint();
            change(&mut e);
            let err = encode(e).unwrap_err();
            assert!(err.to_string().contains(want), "{err}");
        }
    }

    #[test]
    fn a_failed_peer_is_reported_at_the_barrier() {
        let (mut a, peer) = pair(Duration::from_secs(2));
        let mut b = OobChannel::from_stream(peer, Duration::from_secs(2)).unwrap();
        let t = std::thread::spawn(move || b.barrier(4, false));
        let err = a.barrier(4, true).unwrap_err();
        assert!(matches!(err, RdmaError::PeerFailed(_)), "{err}");
        let _ = t.join();
    }
}
