//! TCP transport: one connection, hello exchange, framed payloads acknowledged after the
//! receiver verified their checksum.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::wire::{checksum, read_hello, write_hello, FrameKind, Header, SeqCheck, HEADER_BYTES};
use super::{Receiver, SendTiming, Transport, TransportError};

/// How long connecting, and any single read or write, may take.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    pub io: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(5),
            io: Duration::from_secs(30),
        }
    }
}

pub struct TcpTransport {
    stream: TcpStream,
    seq: u64,
    peer_max: u64,
    io: Duration,
}

impl TcpTransport {
    pub fn connect(
        addr: &str,
        max_payload: u64,
        t: Timeouts,
    ) -> Result<TcpTransport, TransportError> {
        let err = |source| TransportError::Connect {
            addr: addr.to_string(),
            source,
        };
        let resolved: Vec<SocketAddr> = addr.to_socket_addrs().map_err(err)?.collect();
        let first = resolved.first().copied().ok_or_else(|| {
            err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no address",
            ))
        })?;
        let stream = TcpStream::connect_timeout(&first, t.connect).map_err(err)?;
        Self::over(stream, max_payload, t.io)
    }

    /// Says hello on a stream already connected to a receiver.
    pub fn over(
        mut stream: TcpStream,
        max_payload: u64,
        io: Duration,
    ) -> Result<TcpTransport, TransportError> {
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(io))?;
        stream.set_write_timeout(Some(io))?;
        write_hello(&mut stream, max_payload).map_err(|e| e.with_timeout(io))?;
        let peer_max = read_hello(&mut stream).map_err(|e| e.with_timeout(io))?;
        Ok(TcpTransport {
            stream,
            seq: 0,
            peer_max,
            io,
        })
    }
}

impl Transport for TcpTransport {
    fn send_payload(&mut self, payload: &[u8]) -> Result<SendTiming, TransportError> {
        TransportError::check_fits(payload.len(), self.peer_max)?;
        self.seq += 1;
        let header = Header::data(self.seq, payload);
        let t0 = Instant::now();
        self.stream.write_all(&header.encode())?;
        self.stream.write_all(payload)?;
        let t1 = Instant::now();
        let mut b = [0u8; HEADER_BYTES];
        self.stream.read_exact(&mut b)?;
        Header::expect_ack(&b, self.seq)?;
        Ok(SendTiming::since(t0, t1))
    }

    fn io_timeout(&self) -> Duration {
        self.io
    }

    fn close(&mut self) -> Result<(), TransportError> {
        self.stream.write_all(&Header::bye(self.seq).encode())?;
        Ok(())
    }

    fn name(&self) -> &'static str {
        "tcp"
    }
}

/// The receiving end of one TCP connection.
pub struct TcpReceiver {
    stream: TcpStream,
    max_payload: u64,
    /// How long one whole frame may take to arrive, however it trickles in.
    io: Duration,
    seq: SeqCheck,
}

/// Reads exactly `buf.len()` bytes before `deadline`, whatever the pace of the peer: a peer
/// that sends a byte now and then cannot stretch a frame past its deadline.
fn read_by(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Instant,
) -> Result<(), TransportError> {
    let mut done = 0;
    while done < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(TransportError::Timeout(Duration::ZERO));
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut buf[done..]) {
            Ok(0) => return Err(TransportError::Closed),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

impl TcpReceiver {
    /// Completes the hello on an accepted connection.
    pub fn accept(
        mut stream: TcpStream,
        max_payload: u64,
        io: Duration,
    ) -> Result<TcpReceiver, TransportError> {
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(io))?;
        stream.set_write_timeout(Some(io))?;
        read_hello(&mut stream).map_err(|e| e.with_timeout(io))?;
        write_hello(&mut stream, max_payload).map_err(|e| e.with_timeout(io))?;
        Ok(TcpReceiver {
            stream,
            max_payload,
            io,
            seq: SeqCheck::default(),
        })
    }

    fn recv_inner(&mut self, buf: &mut Vec<u8>) -> Result<Option<u64>, TransportError> {
        let deadline = Instant::now() + self.io;
        let mut b = [0u8; HEADER_BYTES];
        read_by(&mut self.stream, &mut b, deadline)?;
        // The length is checked against our limit before the buffer is sized from it.
        let h = Header::decode(&b, self.max_payload)?;
        self.seq.check(&h)?;
        match h.kind {
            FrameKind::Bye => return Ok(None),
            FrameKind::Ack => {
                return Err(TransportError::Protocol(
                    "unexpected ack from the sender".into(),
                ))
            }
            FrameKind::Data => {}
        }
        buf.resize(h.len as usize, 0);
        read_by(&mut self.stream, buf, deadline)?;
        let ok = checksum(buf) == h.check;
        self.stream.write_all(&Header::ack(h.seq, ok).encode())?;
        if !ok {
            return Err(TransportError::Corrupt { seq: h.seq });
        }
        Ok(Some(h.seq))
    }
}

impl Receiver for TcpReceiver {
    fn recv(&mut self, buf: &mut Vec<u8>) -> Result<Option<u64>, TransportError> {
        let io = self.io;
        self.recv_inner(buf).map_err(|e| e.with_timeout(io))
    }
}
