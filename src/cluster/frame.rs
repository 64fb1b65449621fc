//! The framing of every message between ranks (rendezvous and control): the magic `MBR1`, a
//! big-endian u32 length, that many bytes of JSON, then (on an authenticated connection) a
//! 32-byte MAC of the message (see [`super::auth::tag`]): its direction, its sequence number on
//! the connection and its body, so a message altered, replayed, reordered or reflected fails.
//! A length is checked against the cap before anything is allocated from it, and every read is
//! bounded by a deadline.

use std::io::{IoSlice, Write};
use std::net::TcpStream;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::auth::{self, SessionKey, TAG};
use super::deadline::{read_until, Until};
use super::error::WireError;

/// The largest message either side reads: a roster of MAX_WORLD short entries fits.
pub const MAX_MESSAGE: u32 = 4 << 20;
pub(crate) const MAGIC: [u8; 4] = *b"MBR1";

/// Which end of a control connection this is: the direction byte of what it sends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum End {
    /// Rank 0's end (or the accepting end).
    Root,
    /// Any other rank's end.
    Rank,
}

impl End {
    fn byte(self) -> u8 {
        match self {
            End::Root => b'D',
            End::Rank => b'U',
        }
    }

    fn other(self) -> End {
        match self {
            End::Root => End::Rank,
            End::Rank => End::Root,
        }
    }
}

/// One control connection, after its handshake: the stream, its key, and each direction's
/// sequence number. Shared (`&Channel`, as `&TcpStream` allows) by the threads that write
/// orders and heartbeats and read replies: a send holds the sending side's lock, so frames
/// never interleave and their numbers follow the order they were written in.
pub struct Channel {
    stream: TcpStream,
    key: SessionKey,
    end: End,
    sent: Mutex<u64>,
    heard: Mutex<u64>,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Channel({}, {:?})", self.peer(), self.end)
    }
}

impl Channel {
    pub fn new(stream: TcpStream, key: SessionKey, end: End) -> Channel {
        Channel {
            stream,
            key,
            end,
            sent: Mutex::new(0),
            heard: Mutex::new(0),
        }
    }

    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    pub fn peer(&self) -> String {
        self.stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_default()
    }
}

/// A message encoded once for many ranks (a roster of 4,096 ranks is about 1 MB): its frame
/// and its body's digest, from which each connection's tag is cheap.
pub struct Encoded {
    frame: Vec<u8>,
    digest: [u8; 32],
}

/// Writes one message.
pub fn send<M: Serialize>(ch: &Channel, m: &M) -> std::io::Result<()> {
    send_encoded(ch, &encode(m)?)
}

/// One message's frame, encoded once for many ranks.
pub fn encode<M: Serialize>(m: &M) -> std::io::Result<Encoded> {
    let body = serde_json::to_vec(m).map_err(std::io::Error::other)?;
    if body.len() > MAX_MESSAGE as usize {
        return Err(std::io::Error::other(format!(
            "a message of {} bytes is over the {MAX_MESSAGE}-byte cap",
            body.len()
        )));
    }
    let digest = auth::digest(&body);
    let mut frame = Vec::with_capacity(8 + body.len());
    frame.extend_from_slice(&MAGIC);
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    Ok(Encoded { frame, digest })
}

/// Writes a frame from [`encode`], with its tag, in one write where the socket takes it (a
/// tag written apart would wait on Nagle's algorithm behind the frame).
pub fn send_encoded(ch: &Channel, e: &Encoded) -> std::io::Result<()> {
    let mut seq = lock(&ch.sent);
    let tag = ch
        .key
        .as_ref()
        .map(|k| auth::tag(k, ch.end.byte(), *seq, &e.digest));
    let parts: &[&[u8]] = match &tag {
        Some(t) => &[&e.frame, t],
        None => &[&e.frame],
    };
    write_all_vectored(&ch.stream, parts)?;
    *seq += 1;
    Ok(())
}

fn write_all_vectored(mut stream: &TcpStream, parts: &[&[u8]]) -> std::io::Result<()> {
    let (mut part, mut at) = (0, 0);
    while part < parts.len() {
        let mut slices = vec![IoSlice::new(&parts[part][at..])];
        slices.extend(parts[part + 1..].iter().map(|p| IoSlice::new(p)));
        match stream.write_vectored(&slices) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(mut n) => {
                while part < parts.len() && n >= parts[part].len() - at {
                    n -= parts[part].len() - at;
                    part += 1;
                    at = 0;
                }
                at += n;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reads one message by `deadline`; the error says what the peer did. The deadline holds for
/// the whole message: a peer that drips a byte at a time is cut off at it, not after it. On an
/// authenticated connection a message whose tag does not verify is refused unread.
pub fn receive<M: DeserializeOwned>(ch: &Channel, deadline: Instant) -> Result<M, WireError> {
    receive_until(ch, &mut Until::at(deadline))
}

/// Reads one message from a peer that should never be quiet for `silence` (it sends
/// heartbeats), by `by` at the latest: see [`super::deadline::Until::heard_within`].
pub fn receive_live<M: DeserializeOwned>(
    ch: &Channel,
    silence: Duration,
    by: Instant,
) -> Result<M, WireError> {
    let segments = super::deadline::segments_in(&ch.stream);
    receive_until(ch, &mut Until::heard_within(silence, by, segments))
}

fn receive_until<M: DeserializeOwned>(ch: &Channel, until: &mut Until) -> Result<M, WireError> {
    let mut seq = lock(&ch.heard);
    let stream = &ch.stream;
    let mut head = [0u8; 8];
    read_until(stream, &mut head, until)?;
    if head[..4] != MAGIC {
        return Err(WireError::NotOurs);
    }
    let len = u32::from_be_bytes(head[4..].try_into().expect("4 bytes"));
    if len > MAX_MESSAGE {
        return Err(WireError::TooLarge(len, MAX_MESSAGE));
    }
    let mut body = vec![0u8; len as usize];
    read_until(stream, &mut body, until)?;
    if let Some(key) = &ch.key {
        let mut tag = [0u8; TAG];
        read_until(stream, &mut tag, until)?;
        let from = ch.end.other().byte();
        if !auth::tag_ok(key, from, *seq, &auth::digest(&body), &tag) {
            return Err(WireError::Forged);
        }
    }
    *seq += 1;
    serde_json::from_slice(&body).map_err(|e| WireError::Malformed(e.to_string()))
}
