//! Reads against a deadline, for every connection between ranks: a deadline that holds for a
//! whole message (a peer that drips a byte at a time is cut off at it), or a silence after
//! which a peer that sends heartbeats is taken for stopped.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::error::WireError;

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
pub(crate) struct Until {
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
    pub(crate) fn at(by: Instant) -> Until {
        Until { by, quiet: None }
    }

    /// Gives up after `silence` without the message, unless the peer's packets are still
    /// reaching this host's kernel (its count of data segments received, `segments` now, has
    /// grown): then the peer is alive, and its stream waits behind a lost segment for TCP to
    /// send it again, which can take seconds (docs/cluster.md, "Silence"); each time they are
    /// seen to grow, it waits another `silence`. A stopped or hung peer sends nothing, so it is
    /// still named after `silence`.
    pub(crate) fn heard_within(silence: Duration, by: Instant, segments: Option<u32>) -> Until {
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
                        (q.at, q.segments) = (now + q.silence, now_in);
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
pub(crate) fn read_until(
    mut stream: &TcpStream,
    buf: &mut [u8],
    until: &mut Until,
) -> Result<(), WireError> {
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

pub(crate) fn segments_in(s: &TcpStream) -> Option<u32> {
    crate::transport::tcp_info::data_segments_received(s)
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
