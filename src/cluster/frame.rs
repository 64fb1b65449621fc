//! The framing of every message between ranks (rendezvous and control): the magic `MBR1`, a
//! big-endian u32 length, then that many bytes of JSON. A length is checked against the cap
//! before anything is allocated from it, and every read is bounded by a deadline.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::error::WireError;

/// The largest message either side reads: a roster of MAX_WORLD short entries fits.
pub const MAX_MESSAGE: u32 = 4 << 20;
pub(crate) const MAGIC: [u8; 4] = *b"MBR1";

/// Writes one message.
pub fn send<M: Serialize>(stream: &mut TcpStream, m: &M) -> std::io::Result<()> {
    let body = serde_json::to_vec(m).map_err(std::io::Error::other)?;
    let mut frame = Vec::with_capacity(8 + body.len());
    frame.extend_from_slice(&MAGIC);
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    stream.write_all(&frame)
}

/// Reads one message by `deadline`; the error says what the peer did. The deadline holds for
/// the whole message: a peer that drips a byte at a time is cut off at it, not after it.
pub fn receive<M: DeserializeOwned>(
    stream: &mut TcpStream,
    deadline: Instant,
) -> Result<M, WireError> {
    let mut head = [0u8; 8];
    read_by(stream, &mut head, deadline)?;
    if head[..4] != MAGIC {
        return Err(WireError::NotOurs);
    }
    let len = u32::from_be_bytes(head[4..].try_into().expect("4 bytes"));
    if len > MAX_MESSAGE {
        return Err(WireError::TooLarge(len));
    }
    let mut body = vec![0u8; len as usize];
    read_by(stream, &mut body, deadline)?;
    serde_json::from_slice(&body).map_err(|e| WireError::Malformed(e.to_string()))
}

/// Fills `buf` by `deadline`, each read given only the time left.
fn read_by(stream: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> Result<(), WireError> {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(WireError::TimedOut);
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|e| WireError::Io(e.to_string()))?;
        match stream.read(&mut buf[got..]) {
            Ok(0) => return Err(WireError::Closed),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(WireError::from_io(&e)),
        }
    }
    Ok(())
}
