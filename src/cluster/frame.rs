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
/// heartbeats), by `by` at the latest: see [`Until::heard_within`].
pub fn receive_live<M: DeserializeOwned>(
    ch: &Channel,
    silence: Duration,
    by: Instant,
) -> Result<M, WireError> {
    let segments = segments_in(&ch.stream);
    receive_until(ch, &mut Until::heard_within(silence, by, segments))
}

fn segments_in(s: &TcpStream) -> Option<u32> {
    crate::transport::tcp_info::data_segments_received(s)
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
        return Err(WireError::TooLarge(len));
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

/// Fills `buf` by `deadline`, each read given only the time left.
pub(crate) fn read_by(
    stream: &TcpStream,
    buf: &mut [u8],
    deadline: Instant,
) -> Result<(), WireError> {
    read_until(stream, buf, &mut Until::at(deadline))
}

/// When a read gives up: at a deadline, or (from a peer that sends heartbeats) once it has
/// been quiet too long.
#[derive(Debug, Clone, Copy)]
struct Until {
    /// The latest, whatever comes.
    by: Instant,
    quiet: Option<Quiet>,
}

/// When the peer counts as quiet, and what it has sent so far.
#[derive(Debug, Clone, Copy)]
struct Quiet {
    at: Instant,
    silence: Duration,
    /// The data segments this host's kernel had received from the peer when `at` was set.
    segments: Option<u32>,
}

impl Until {
    fn at(by: Instant) -> Until {
        Until { by, quiet: None }
    }

    /// Gives up after `silence` without the message, unless the peer's packets are still
    /// reaching this host's kernel (its count of data segments received, `segments` now, has
    /// grown): then the peer is alive, and its stream waits behind a lost segment for TCP to
    /// send it again, which can take seconds (docs/cluster.md, "Silence"); each time they are
    /// seen to grow, it waits another `silence`. A stopped or hung peer sends nothing, so it is
    /// still named after `silence`.
    fn heard_within(silence: Duration, by: Instant, segments: Option<u32>) -> Until {
        let at = Instant::now() + silence;
        Until {
            by,
            quiet: Some(Quiet {
                at,
                silence,
                segments,
            }),
        }
    }

    /// The time left at `now` (`segments`: the kernel's count now, None where it cannot say;
    /// asked only once the peer is quiet); None when the wait is over.
    fn left(&mut self, now: Instant, segments: impl FnOnce() -> Option<u32>) -> Option<Duration> {
        if let Some(q) = &mut self.quiet {
            if now >= q.at {
                let now_in = segments();
                match (q.segments, now_in) {
                    (Some(then), Some(seen)) if seen != then => {
                        *q = Quiet {
                            at: now + q.silence,
                            silence: q.silence,
                            segments: now_in,
                        };
                    }
                    _ => return None,
                }
            }
        }
        let end = self.quiet.map_or(self.by, |q| q.at.min(self.by));
        Some(end.saturating_duration_since(now)).filter(|d| !d.is_zero())
    }
}

/// Fills `buf` before `until` runs out, each read given only the time left.
fn read_until(mut stream: &TcpStream, buf: &mut [u8], until: &mut Until) -> Result<(), WireError> {
    use std::io::Read;
    let mut got = 0;
    while got < buf.len() {
        let Some(left) = until.left(Instant::now(), || segments_in(stream)) else {
            return Err(WireError::TimedOut);
        };
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

#[cfg(test)]
mod tests {
    use super::{Quiet, Until};
    use std::time::{Duration, Instant};

    const S: Duration = Duration::from_secs(3);

    fn quiet_from(t0: Instant, by: Duration) -> Until {
        Until {
            by: t0 + by,
            quiet: Some(Quiet {
                at: t0 + S,
                silence: S,
                segments: Some(10),
            }),
        }
    }

    #[test]
    fn a_peer_quiet_for_the_silence_is_given_up_on() {
        let t0 = Instant::now();
        let mut u = quiet_from(t0, Duration::from_secs(15));
        let half = t0 + S / 2;
        assert_eq!(u.left(half, || panic!("not asked")), Some(S / 2));
        // No packet of its since the wait began, or the OS cannot say: quiet.
        assert_eq!(u.left(t0 + S, || Some(10)), None);
        let mut u = quiet_from(t0, Duration::from_secs(15));
        assert_eq!(u.left(t0 + S, || None), None);
    }

    #[test]
    fn a_peer_whose_packets_still_arrive_is_waited_for_until_they_stop() {
        let t0 = Instant::now();
        let mut u = quiet_from(t0, Duration::from_secs(15));
        // Two segments arrived behind a hole the reader cannot pass: another silence.
        assert_eq!(u.left(t0 + S, || Some(12)), Some(S));
        assert_eq!(u.left(t0 + S * 2, || Some(13)), Some(S));
        // Then nothing more: quiet.
        assert_eq!(u.left(t0 + S * 3, || Some(13)), None);
    }

    #[test]
    fn no_wait_outlasts_its_deadline() {
        let t0 = Instant::now();
        let mut u = quiet_from(t0, Duration::from_secs(4));
        assert_eq!(u.left(t0 + S, || Some(11)), Some(Duration::from_secs(1)));
        assert_eq!(u.left(t0 + Duration::from_secs(4), || Some(12)), None);
        let mut plain = Until::at(t0 + S);
        assert_eq!(
            plain.left(t0 + S, || panic!("a plain deadline asks nothing")),
            None
        );
    }
}
