//! The wire format shared by every transport: a hello exchange at connect, then frames with a
//! fixed 32-byte header (magic, kind, sequence, length, checksum). Lengths are bounded by the
//! limit agreed in the hello before any buffer is sized from them.

use std::io::{Read, Write};

use super::TransportError;

pub const PROTOCOL_VERSION: u16 = 1;
const HELLO_MAGIC: [u8; 4] = *b"MBH1";
const FRAME_MAGIC: [u8; 4] = *b"MBF1";
pub const HEADER_BYTES: usize = 32;
/// The largest payload either side ever accepts (1 GiB), whatever the peer says.
pub const MAX_PAYLOAD: u64 = 1 << 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    Data = 1,
    Ack = 2,
    Bye = 3,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: FrameKind,
    pub seq: u64,
    pub len: u64,
    /// Payload checksum for data; status for acks (0 = verified).
    pub check: u64,
}

/// Ack status values.
pub const ACK_OK: u64 = 0;
pub const ACK_BAD_CHECKSUM: u64 = 1;

/// A fast 64-bit checksum over the payload (8 bytes a step, then the tail): enough to tell a
/// corrupted or truncated transfer from a good one at memory speed.
pub fn checksum(data: &[u8]) -> u64 {
    let mut h: u64 = 0x9e37_79b9_7f4a_7c15 ^ data.len() as u64;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        h = (h ^ w).wrapping_mul(0x0100_0000_01b3).rotate_left(29);
    }
    for &b in chunks.remainder() {
        h = (h ^ b as u64)
            .wrapping_mul(0x0100_0000_01b3)
            .rotate_left(29);
    }
    h
}

impl Header {
    /// The header in front of payload `seq`.
    pub fn data(seq: u64, payload: &[u8]) -> Header {
        Header {
            kind: FrameKind::Data,
            seq,
            len: payload.len() as u64,
            check: checksum(payload),
        }
    }

    /// The sender's goodbye after payload `seq`.
    pub fn bye(seq: u64) -> Header {
        Header {
            kind: FrameKind::Bye,
            seq,
            len: 0,
            check: 0,
        }
    }

    /// The receiver's answer to payload `seq`: intact or not.
    pub fn ack(seq: u64, intact: bool) -> Header {
        Header {
            kind: FrameKind::Ack,
            seq,
            len: 0,
            check: if intact { ACK_OK } else { ACK_BAD_CHECKSUM },
        }
    }

    /// Checks that these bytes are the receiver's ack of payload `seq`, and that it arrived
    /// intact.
    pub fn expect_ack(b: &[u8; HEADER_BYTES], seq: u64) -> Result<(), TransportError> {
        let ack = Header::decode(b, 0)?;
        if ack.kind != FrameKind::Ack || ack.seq != seq {
            return Err(TransportError::Protocol(format!(
                "expected the ack of payload {seq}, got {:?} {}",
                ack.kind, ack.seq
            )));
        }
        if ack.check == ACK_BAD_CHECKSUM {
            return Err(TransportError::Corrupt { seq });
        }
        Ok(())
    }

    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0..4].copy_from_slice(&FRAME_MAGIC);
        b[4] = self.kind as u8;
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.len.to_le_bytes());
        b[24..32].copy_from_slice(&self.check.to_le_bytes());
        b
    }

    /// Parses and checks a header; `max_len` bounds the payload length field.
    pub fn decode(b: &[u8; HEADER_BYTES], max_len: u64) -> Result<Header, TransportError> {
        if b[0..4] != FRAME_MAGIC {
            return Err(TransportError::Protocol(format!(
                "bad frame magic {:02x?} (peer is not morphbench, or the stream is corrupt)",
                &b[0..4]
            )));
        }
        let kind = match b[4] {
            1 => FrameKind::Data,
            2 => FrameKind::Ack,
            3 => FrameKind::Bye,
            k => return Err(TransportError::Protocol(format!("unknown frame kind {k}"))),
        };
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let len = u64_at(16);
        if len > max_len {
            return Err(TransportError::Protocol(format!(
                "frame length {len} exceeds the agreed maximum of {max_len} bytes"
            )));
        }
        Ok(Header {
            kind,
            seq: u64_at(8),
            len,
            check: u64_at(24),
        })
    }
}

/// Sends our hello: magic, protocol version, the largest payload we accept.
/// A receiver's check that data frames come numbered 1, 2, 3, ... with none repeated or
/// skipped, and that the goodbye follows the last of them.
#[derive(Debug, Default)]
pub struct SeqCheck {
    last: u64,
}

impl SeqCheck {
    pub fn check(&mut self, h: &Header) -> Result<(), TransportError> {
        let expected = match h.kind {
            FrameKind::Data => self.last + 1,
            _ => self.last,
        };
        if h.seq != expected {
            let what = if h.seq <= self.last && h.kind == FrameKind::Data {
                "a duplicate"
            } else {
                "out of order"
            };
            return Err(TransportError::Protocol(format!(
                "frame {} is {what}: expected {expected}",
                h.seq
            )));
        }
        self.last = expected;
        Ok(())
    }
}

pub fn write_hello(w: &mut impl Write, max_payload: u64) -> Result<(), TransportError> {
    let mut b = [0u8; 16];
    b[0..4].copy_from_slice(&HELLO_MAGIC);
    b[4..6].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    b[8..16].copy_from_slice(&max_payload.min(MAX_PAYLOAD).to_le_bytes());
    w.write_all(&b)?;
    w.flush()?;
    Ok(())
}

/// Reads and checks the peer's hello; returns the largest payload it accepts.
pub fn read_hello(r: &mut impl Read) -> Result<u64, TransportError> {
    let mut b = [0u8; 16];
    r.read_exact(&mut b)?;
    if b[0..4] != HELLO_MAGIC {
        return Err(TransportError::Protocol(format!(
            "bad hello {:02x?}: the peer is not a morphbench sink or sender",
            &b[0..4]
        )));
    }
    let version = u16::from_le_bytes([b[4], b[5]]);
    if version != PROTOCOL_VERSION {
        return Err(TransportError::Protocol(format!(
            "peer speaks protocol version {version}, we speak {PROTOCOL_VERSION}: run the same morphbench version on both nodes"
        )));
    }
    let max = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
    Ok(max.min(MAX_PAYLOAD))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::err_text;

    #[test]
    fn header_round_trip_and_bounds() {
        let h = Header {
            kind: FrameKind::Data,
            seq: 7,
            len: 4096,
            check: 42,
        };
        assert_eq!(Header::decode(&h.encode(), 4096).unwrap(), h);
        let err = err_text(Header::decode(&h.encode(), 4095));
        assert!(err.contains("exceeds"), "{err}");
        let mut garbage = h.encode();
        garbage[0] = b'X';
        assert!(Header::decode(&garbage, 1 << 20).is_err());
        let mut kind = h.encode();
        kind[4] = 9;
        assert!(err_text(Header::decode(&kind, 1 << 20)).contains("kind"));
    }

    #[test]
    fn checksum_sees_any_change() {
        let mut data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let c = checksum(&data);
        data[999] ^= 1;
        assert_ne!(checksum(&data), c);
        data[999] ^= 1;
        data.truncate(999);
        assert_ne!(checksum(&data), c);
    }

    #[test]
    fn hello_checks_magic_and_version() {
        let mut buf = Vec::new();
        write_hello(&mut buf, 1 << 40).unwrap();
        assert_eq!(read_hello(&mut &buf[..]).unwrap(), MAX_PAYLOAD);
        let mut wrong = buf.clone();
        wrong[4] = 99;
        assert!(err_text(read_hello(&mut &wrong[..])).contains("version 99"));
        assert!(read_hello(&mut &b"GET / HTTP/1.1\r\n"[..]).is_err());
    }
}
