//! The framing of every message between ranks (rendezvous and control): the magic `MBR1`, a
//! big-endian u32 length, then that many bytes of JSON. A length is checked against the cap
//! before anything is allocated from it, and every read is bounded by a deadline.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use serde::de::DeserializeOwned;
use serde::Serialize;

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

/// Reads one message by `deadline`; the error says what the peer did ("timed out", "closed
/// the connection", "sent something that is not ...").
pub fn receive<M: DeserializeOwned>(
    stream: &mut TcpStream,
    deadline: Instant,
) -> Result<M, String> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err("timed out".into());
    }
    stream
        .set_read_timeout(Some(left))
        .map_err(|e| e.to_string())?;
    let mut head = [0u8; 8];
    stream.read_exact(&mut head).map_err(describe)?;
    if head[..4] != MAGIC {
        return Err("sent something that is not a morphbench message".into());
    }
    let len = u32::from_be_bytes(head[4..].try_into().expect("4 bytes"));
    if len > MAX_MESSAGE {
        return Err(format!(
            "announced a {len}-byte message, over the {MAX_MESSAGE}-byte cap"
        ));
    }
    let mut body = vec![0u8; len as usize];
    stream.read_exact(&mut body).map_err(describe)?;
    serde_json::from_slice(&body).map_err(|e| format!("sent a malformed message: {e}"))
}

fn describe(e: std::io::Error) -> String {
    use std::io::ErrorKind::*;
    match e.kind() {
        WouldBlock | TimedOut => "timed out".to_string(),
        UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe => {
            "closed the connection".to_string()
        }
        _ => e.to_string(),
    }
}
