//! The offload `Transport` over RDMA: the sender copies each payload behind a frame header into
//! its registered buffer (registered once, at connect) and RDMA-WRITEs both into the receiver's
//! buffer WITH IMM, which raises a completion there. The receiver checks the header (length
//! bounded by the agreed maximum) and the checksum, and answers with a SEND carrying the same
//! ack frame the TCP transport uses.

use std::time::{Duration, Instant};

use super::oob::{OobChannel, Params, Purpose};
use super::verbs::{Completion, QpCaps, VerbsError, WriteFlags};
use super::{client_hello, server_hello, DeviceChoice, Link, LinkShape, RdmaError};
use crate::transport::wire::{checksum, FrameKind, Header, SeqCheck, HEADER_BYTES, MAX_PAYLOAD};
use crate::transport::{Receiver, SendTiming, Transport, TransportError};

const WR_WRITE: u64 = 1;
const WR_ACK_RECV: u64 = 2;
const WR_ACK_SEND: u64 = 3;
const WR_DATA_RECV: u64 = 4;

/// Where the ack frame lives in each side's buffer: after the largest frame, 64-byte aligned.
fn ack_offset(max_payload: u64) -> usize {
    (HEADER_BYTES + max_payload as usize).next_multiple_of(64)
}

/// Both sides register the same layout; only the receiver's frame area is open to the peer.
fn shape(max_payload: u64, exposed: usize) -> LinkShape {
    LinkShape {
        buffer: ack_offset(max_payload) + 64,
        exposed,
        remote_min: HEADER_BYTES as u64,
        caps: QpCaps {
            send_depth: 16,
            recv_depth: 16,
            max_inline: 64,
        },
    }
}

impl From<RdmaError> for TransportError {
    fn from(e: RdmaError) -> Self {
        match e {
            RdmaError::Timeout(_) | RdmaError::Verbs(VerbsError::Timeout(_)) => {
                TransportError::Timeout(Duration::ZERO)
            }
            other => TransportError::Rdma(other.to_string()),
        }
    }
}

impl From<VerbsError> for TransportError {
    fn from(e: VerbsError) -> Self {
        RdmaError::from(e).into()
    }
}

pub struct RdmaTransport {
    link: Link,
    seq: u64,
    peer_max: u64,
    ack_at: usize,
    io: Duration,
}

impl RdmaTransport {
    /// Connects to `sink --transport rdma` (or an in-process sink) at `addr`.
    pub fn connect(
        addr: &str,
        choice: &DeviceChoice,
        max_payload: u64,
        io: Duration,
    ) -> Result<RdmaTransport, TransportError> {
        let oob = OobChannel::connect(addr, Duration::from_secs(5), io)?;
        Self::over(oob, choice, max_payload, io)
    }

    /// Sets up the queue pair over an out-of-band channel already connected to a receiver.
    pub fn over(
        mut oob: OobChannel,
        choice: &DeviceChoice,
        max_payload: u64,
        io: Duration,
    ) -> Result<RdmaTransport, TransportError> {
        let max_payload = max_payload.min(MAX_PAYLOAD);
        let params = Params {
            tests: 0,
            iters: 1,
            warmup: 0,
            window: 1,
            inline_size: 0,
            sizes: vec![max_payload.max(1)],
        };
        client_hello(&mut oob, Purpose::Transport, &params)?;
        let link = Link::establish(oob, choice, shape(max_payload, HEADER_BYTES))?;
        let peer_max = (link.remote.len - HEADER_BYTES as u64).min(max_payload);
        let ack_at = ack_offset(max_payload);
        link.qp
            .post_recv(&link.mr, ack_at, HEADER_BYTES, WR_ACK_RECV)?;
        Ok(RdmaTransport {
            link,
            seq: 0,
            peer_max,
            ack_at,
            io,
        })
    }

    fn write_frame(&mut self, header: &Header, payload: &[u8]) -> Result<(), TransportError> {
        let l = &self.link;
        l.mr.write(0, &header.encode())?;
        l.mr.write(HEADER_BYTES, payload)?;
        let flags = WriteFlags {
            signaled: true,
            inline: false,
            imm: Some(header.seq as u32),
            wr_id: WR_WRITE,
        };
        l.qp.write(&l.mr, 0, HEADER_BYTES + payload.len(), &l.remote, 0, flags)?;
        Ok(())
    }
}

impl Transport for RdmaTransport {
    fn send_payload(&mut self, payload: &[u8]) -> Result<SendTiming, TransportError> {
        TransportError::check_fits(payload.len(), self.peer_max)?;
        self.seq += 1;
        let header = Header::data(self.seq, payload);
        let t0 = Instant::now();
        self.write_frame(&header, payload)?;
        let t1 = Instant::now();
        // The write's completion (the buffer is free again) and the ack, in either order.
        let (mut written, mut acked) = (false, false);
        while !(written && acked) {
            let c = self.link.cq.wait(self.io)?;
            match c.wr_id {
                WR_WRITE => written = true,
                WR_ACK_RECV => acked = true,
                other => {
                    return Err(TransportError::Protocol(format!(
                        "unexpected completion {other}"
                    )))
                }
            }
        }
        let ack_at = self.ack_at;
        let mut b = [0u8; HEADER_BYTES];
        self.link.mr.read(ack_at, &mut b)?;
        self.link
            .qp
            .post_recv(&self.link.mr, ack_at, HEADER_BYTES, WR_ACK_RECV)?;
        Header::expect_ack(&b, self.seq)?;
        Ok(SendTiming::since(t0, t1))
    }

    fn io_timeout(&self) -> Duration {
        self.io
    }

    fn close(&mut self) -> Result<(), TransportError> {
        self.write_frame(&Header::bye(self.seq), &[])?;
        let c = self
            .link
            .cq
            .wait(self.io)
            .map_err(|e| TransportError::from(e).with_timeout(self.io))?;
        if c.wr_id != WR_WRITE {
            return Err(TransportError::Protocol(format!(
                "unexpected completion {} while closing",
                c.wr_id
            )));
        }
        Ok(())
    }

    fn name(&self) -> &'static str {
        "rdma"
    }
}

/// The receiving end of one RDMA transport connection.
pub struct RdmaReceiver {
    link: Link,
    max_payload: u64,
    io: Duration,
    /// The last ack's SEND has not completed yet, so its buffer is not free. Its completion
    /// may come after the sender's next frame, which the ack released.
    ack_in_flight: bool,
    seq: SeqCheck,
    /// How long to busy-poll before sleeping between polls; `None`: always busy-poll.
    spin: Option<Duration>,
}

impl RdmaReceiver {
    /// Completes the hello on an accepted out-of-band connection; accepts payloads of at most
    /// `max_payload` bytes (or less, if the sender asked for less).
    pub fn accept(
        mut oob: OobChannel,
        choice: &DeviceChoice,
        max_payload: u64,
        io: Duration,
    ) -> Result<RdmaReceiver, TransportError> {
        let params = server_hello(&mut oob, Purpose::Transport)?;
        let max_payload = params.largest().min(max_payload).min(MAX_PAYLOAD);
        let exposed = HEADER_BYTES + max_payload as usize;
        let link = Link::establish(oob, choice, shape(max_payload, exposed))?;
        link.qp.post_recv(
            &link.mr,
            ack_offset(max_payload),
            HEADER_BYTES,
            WR_DATA_RECV,
        )?;
        Ok(RdmaReceiver {
            link,
            max_payload,
            io,
            ack_in_flight: false,
            seq: SeqCheck::default(),
            spin: None,
        })
    }

    fn wait(&self) -> Result<Completion, TransportError> {
        Ok(match self.spin {
            None => self.link.cq.wait(self.io)?,
            Some(spin) => self.link.cq.wait_patiently(self.io, spin)?,
        })
    }

    /// The next frame's completion, reaping the last ack's on the way.
    fn next_frame(&mut self) -> Result<Completion, TransportError> {
        loop {
            let c = self.wait()?;
            match c.wr_id {
                WR_ACK_SEND if self.ack_in_flight => self.ack_in_flight = false,
                WR_DATA_RECV if c.imm.is_some() => return Ok(c),
                other => {
                    return Err(TransportError::Protocol(format!(
                        "expected a frame (RDMA WRITE WITH IMM), got completion {other}"
                    )))
                }
            }
        }
    }

    /// Waits until the last ack's buffer is free again.
    fn reap_ack(&mut self) -> Result<(), TransportError> {
        while self.ack_in_flight {
            let c = self.wait()?;
            if c.wr_id != WR_ACK_SEND {
                return Err(TransportError::Protocol(format!(
                    "unexpected completion {} while an ack was in flight",
                    c.wr_id
                )));
            }
            self.ack_in_flight = false;
        }
        Ok(())
    }

    fn recv_inner(&mut self, buf: &mut Vec<u8>) -> Result<Option<u64>, TransportError> {
        let c = self.next_frame()?;
        let mut b = [0u8; HEADER_BYTES];
        self.link.mr.read(0, &mut b)?;
        // The length is checked against our limit before the buffer is sized from it.
        let h = Header::decode(&b, self.max_payload)?;
        self.seq.check(&h)?;
        if c.imm != Some(h.seq as u32) {
            return Err(TransportError::Protocol(format!(
                "frame {} arrived with immediate {:?}",
                h.seq, c.imm
            )));
        }
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
        self.link.mr.read(HEADER_BYTES, buf)?;
        let ok = checksum(buf) == h.check;
        let ack_at = ack_offset(self.max_payload);
        // Re-arm before acking: the sender's next frame follows the ack.
        self.link
            .qp
            .post_recv(&self.link.mr, ack_at, HEADER_BYTES, WR_DATA_RECV)?;
        self.reap_ack()?;
        self.link
            .mr
            .write(ack_at + 32, &Header::ack(h.seq, ok).encode())?;
        self.link
            .qp
            .send(&self.link.mr, ack_at + 32, HEADER_BYTES, WR_ACK_SEND)?;
        self.ack_in_flight = true;
        if !ok {
            return Err(TransportError::Corrupt { seq: h.seq });
        }
        Ok(Some(h.seq))
    }
}

impl Receiver for RdmaReceiver {
    fn recv(&mut self, buf: &mut Vec<u8>) -> Result<Option<u64>, TransportError> {
        let io = self.io;
        self.recv_inner(buf).map_err(|e| e.with_timeout(io))
    }

    fn yield_when_idle(&mut self, spin: Duration) {
        self.spin = Some(spin);
    }
}
