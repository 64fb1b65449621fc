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

/// Writes one message. A stream is read and written through a shared reference (as
/// `&TcpStream` allows), so rank 0 needs one descriptor per rank, not one per thread that
/// talks to it.
pub fn send<M: Serialize>(stream: &TcpStream, m: &M) -> std::io::Result<()> {
    send_encoded(stream, &encode(m)?)
}

/// One message's frame, encoded once for many ranks (a roster of 4,096 ranks is about 1 MB).
pub fn encode<M: Serialize>(m: &M) -> std::io::Result<Vec<u8>> {
    let body = serde_json::to_vec(m).map_err(std::io::Error::other)?;
    if body.len() > MAX_MESSAGE as usize {
        return Err(std::io::Error::other(format!(
            "a message of {} bytes is over the {MAX_MESSAGE}-byte cap",
            body.len()
        )));
    }
    let mut frame = Vec::with_capacity(8 + body.len());
    frame.extend_from_slice(&MAGIC);
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// Writes a frame from [`encode`].
pub fn send_encoded(mut stream: &TcpStream, frame: &[u8]) -> std::io::Result<()> {
    stream.write_all(frame)
}

/// Reads one message by `deadline`; the error says what the peer did. The deadline holds for
/// the whole message: a peer that drips a byte at a time is cut off at it, not after it.
pub fn receive<M: DeserializeOwned>(stream: &TcpStream, deadline: Instant) -> Result<M, WireError> {
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
fn read_by(mut stream: &TcpStream, buf: &mut [u8], deadline: Instant) -> Result<(), WireError> {
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
