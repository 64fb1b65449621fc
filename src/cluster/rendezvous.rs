//! The bootstrap of a multi-rank run over TCP, the way NCCL's bootstrap and torchrun's
//! rendezvous work (no MPI library needed): rank 0 listens, every other rank connects and
//! registers (its version, host, rank, world size, the address it is reached at, its adapter
//! and RDMA devices), and rank 0 answers each with the whole roster, or with the error that
//! ends the run. Every wait is bounded, every message is length-prefixed and bounded before
//! anything is allocated from it, and every error names the ranks involved.

use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::error::ClusterError;
use super::frame::{receive, send};

/// One rank, as it registers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    pub version: String,
    pub hostname: String,
    pub rank: u32,
    pub world: u32,
    /// Where the others reach this rank; empty: the local address of its connection to rank 0.
    pub address: String,
    /// The port of this rank's data listener (0: none).
    pub port: u16,
    pub adapter: Option<String>,
    pub rdma_devices: Vec<String>,
}

/// How long a connection may take to register before it is refused as a stranger.
const REGISTER_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, Serialize, Deserialize)]
enum Message {
    Register(Registration),
    Roster(Vec<Registration>),
    Error(String),
}

/// Rank 0: waits until `timeout` for the other `me.world - 1` ranks on `listener`, checks that
/// they agree with it and with each other, and sends every rank the roster (ordered by rank).
/// On any error, every rank that registered is told it before this returns it. Returns the
/// roster and the connections to ranks 1.., which stay open as the run's control channel.
pub fn serve(
    listener: &TcpListener,
    me: Registration,
    timeout: Duration,
) -> Result<(Vec<Registration>, Vec<TcpStream>), ClusterError> {
    let deadline = Instant::now() + timeout;
    let io = |e: std::io::Error| ClusterError::Io(format!("the rendezvous: {e}"));
    listener.set_nonblocking(true).map_err(io)?;
    widen_backlog(listener, me.world);
    let mut ranks: Vec<Option<(Registration, TcpStream)>> = (0..me.world).map(|_| None).collect();
    let mut roster0 = me.clone();
    if roster0.address.is_empty() {
        roster0.address = listener
            .local_addr()
            .map(|a| a.ip().to_string())
            .unwrap_or_default();
    }
    let fail = |ranks: &mut Vec<Option<(Registration, TcpStream)>>, why: ClusterError| {
        for (_, s) in ranks.iter_mut().flatten() {
            let _ = send(s, &Message::Error(why.to_string()));
        }
        Err(why)
    };
    let mut arrived = 1;
    while arrived < me.world {
        // The deadline holds however many strangers keep the listener busy.
        if Instant::now() >= deadline {
            let missing: Vec<String> = (1..me.world)
                .filter(|&r| ranks[r as usize].is_none())
                .map(|r| r.to_string())
                .collect();
            let why = format!(
                "rank(s) {} of {} never arrived within {:.0} s: check that they were launched \
                 and can reach {}",
                missing.join(", "),
                me.world,
                timeout.as_secs_f64(),
                listener
                    .local_addr()
                    .map(|a| a.to_string())
                    .unwrap_or_default()
            );
            return fail(&mut ranks, ClusterError::Rendezvous(why));
        }
        let (stream, peer) = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            Err(e) => {
                return fail(
                    &mut ranks,
                    ClusterError::Io(format!("the rendezvous listener failed: {e}")),
                )
            }
        };
        stream.set_nonblocking(false).map_err(io)?;
        // A peer gets a short while to register; a silent or garbled one is refused and
        // dropped (a rank registers at once: it connected to do so).
        let registered = receive(&stream, deadline.min(Instant::now() + REGISTER_WAIT));
        let mut reg = match registered {
            Ok(Message::Register(r)) => r,
            // A stranger (a port scan, a stray HTTP request, an old client) is refused and
            // logged; the run goes on waiting for its ranks.
            Ok(_) => {
                let _ = send(&stream, &Message::Error("expected a registration".into()));
                tracing::warn!("rendezvous: refused {peer}: it sent a message out of turn");
                continue;
            }
            Err(e) => {
                tracing::warn!("rendezvous: refused {peer}: it {e} instead of registering");
                continue;
            }
        };
        if reg.address.is_empty() {
            reg.address = peer.ip().to_string();
        }
        let why = refusal(&reg, &me, &ranks);
        if let Some(why) = why {
            let _ = send(&stream, &Message::Error(why.to_string()));
            return fail(&mut ranks, why);
        }
        let r = reg.rank as usize;
        ranks[r] = Some((reg, stream));
        arrived += 1;
    }
    let mut roster = vec![roster0];
    roster.extend(ranks.iter().flatten().map(|(r, _)| r.clone()));
    roster.sort_by_key(|r| r.rank);
    let mut streams = Vec::new();
    // Encoded once: a roster of 4,096 ranks is about 1 MB, and every rank gets the same one.
    let frame = super::frame::encode(&Message::Roster(roster.clone())).map_err(io)?;
    for (reg, stream) in ranks.into_iter().flatten() {
        super::frame::send_encoded(&stream, &frame).map_err(|e| {
            ClusterError::Rendezvous(format!(
                "rank {} ({}) dropped out before the roster: {e}",
                reg.rank, reg.hostname
            ))
        })?;
        streams.push(stream);
    }
    Ok((roster, streams))
}

/// Lets every rank's connection wait in the listener's queue at once: the standard library
/// listens with a backlog of 128, and the ranks of a large world connect within moments of
/// each other, so the rest would see their SYNs dropped and retry after 1, 3, 7, 15 s (a
/// 4,096-rank rendezvous took 38 s). The kernel caps it at `net.core.somaxconn`, which is
/// said when it is lower than the world.
#[allow(unsafe_code)]
fn widen_backlog(listener: &TcpListener, world: u32) {
    use std::os::fd::AsRawFd;
    let backlog = world.clamp(128, i32::MAX as u32) as i32;
    // SAFETY: listen on the listener's own open socket, already listening: Linux takes a
    // second listen as a new backlog and touches nothing else.
    let rc = unsafe { libc::listen(listener.as_raw_fd(), backlog) };
    if rc != 0 {
        tracing::warn!(
            "rendezvous: could not widen the listen queue to {backlog}: {}",
            std::io::Error::last_os_error()
        );
    }
    let cap = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    if let Some(cap) = cap.filter(|&c| c < world) {
        eprintln!(
            "note: net.core.somaxconn is {cap}, below the {world} ranks that connect to rank 0 \
             at once: the others retry (seconds of rendezvous); `sysctl -w \
             net.core.somaxconn={}` on rank 0's host raises it",
            world.next_power_of_two()
        );
    }
}

/// Why rank 0 refuses a registration, if it does: another version, another world size, a rank
/// out of range or one already taken.
fn refusal(
    reg: &Registration,
    me: &Registration,
    ranks: &[Option<(Registration, TcpStream)>],
) -> Option<ClusterError> {
    if reg.version != me.version {
        Some(ClusterError::Version {
            who: format!("rank {} ({})", reg.rank, reg.hostname),
            theirs: reg.version.clone(),
            ours: me.version.clone(),
        })
    } else if reg.world != me.world {
        Some(ClusterError::Rendezvous(format!(
            "rank {} ({}) says the world is {} ranks, rank 0 says {}: launch them together",
            reg.rank, reg.hostname, reg.world, me.world
        )))
    } else if reg.rank == 0 || reg.rank >= me.world {
        Some(ClusterError::Rendezvous(format!(
            "{} registered as rank {}, which is {}",
            reg.hostname,
            reg.rank,
            if reg.rank == 0 {
                "rank 0's own"
            } else {
                "not below the world size"
            }
        )))
    } else if let Some((first, _)) = &ranks[reg.rank as usize] {
        Some(ClusterError::Rendezvous(format!(
            "rank {} registered twice (from {} and {}): each rank must be launched once",
            reg.rank, first.hostname, reg.hostname
        )))
    } else {
        None
    }
}

/// Any other rank: connects to rank 0 at `addr`, retrying until `timeout` (rank 0 may start
/// later).
pub fn connect(addr: &str, timeout: Duration) -> Result<TcpStream, ClusterError> {
    dial(addr, Instant::now() + timeout)
        .map_err(|e| ClusterError::Rendezvous(format!("the rendezvous address {addr}: {e}")))?
        .ok_or_else(|| {
            ClusterError::Rendezvous(format!(
                "rank 0 never answered at {addr} within {:.0} s: check --rendezvous and that \
                 rank 0 was launched",
                timeout.as_secs_f64()
            ))
        })
}

/// Connects to `addr`, retrying until `deadline` (the peer may start later), each attempt
/// bounded by the time left; `None` once the deadline passed. An address that does not
/// resolve is an error at once.
pub fn dial(addr: &str, deadline: Instant) -> std::io::Result<Option<TcpStream>> {
    let targets: Vec<SocketAddr> = addr.to_socket_addrs()?.collect();
    loop {
        let attempt = targets.iter().find_map(|t| {
            let left = deadline.saturating_duration_since(Instant::now());
            TcpStream::connect_timeout(t, left.max(Duration::from_millis(1))).ok()
        });
        match attempt {
            Some(s) => return Ok(Some(s)),
            None if Instant::now() >= deadline => return Ok(None),
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Registers on a connection to rank 0 and waits until `timeout` for the roster.
pub fn register(
    stream: &mut TcpStream,
    mut me: Registration,
    timeout: Duration,
) -> Result<Vec<Registration>, ClusterError> {
    let deadline = Instant::now() + timeout;
    let addr = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    if me.address.is_empty() {
        me.address = stream
            .local_addr()
            .map(|a| a.ip().to_string())
            .unwrap_or_default();
    }
    send(stream, &Message::Register(me.clone()))
        .map_err(|e| ClusterError::Rendezvous(format!("rank 0 at {addr}: {e}")))?;
    match receive(stream, deadline) {
        Ok(Message::Roster(r)) if r.len() == me.world as usize => Ok(r),
        Ok(Message::Roster(r)) => Err(ClusterError::Protocol(format!(
            "rank 0 sent a roster of {} ranks for a world of {}",
            r.len(),
            me.world
        ))),
        Ok(Message::Error(why)) => Err(ClusterError::Aborted(why)),
        Ok(Message::Register(_)) => Err(ClusterError::Protocol(
            "rank 0 sent a registration, not a roster".into(),
        )),
        Err(e) => Err(ClusterError::Rendezvous(format!(
            "rank 0 at {addr} {e} before sending the roster"
        ))),
    }
}

/// [`connect`] then [`register`]; returns the roster and the connection to rank 0.
pub fn join(
    addr: &str,
    me: Registration,
    timeout: Duration,
) -> Result<(Vec<Registration>, TcpStream), ClusterError> {
    let started = Instant::now();
    let mut stream = connect(addr, timeout)?;
    let left = timeout.saturating_sub(started.elapsed());
    let roster = register(&mut stream, me, left.max(Duration::from_millis(1)))?;
    Ok((roster, stream))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::frame::MAGIC;
    use std::io::Write;

    fn reg(rank: u32, world: u32) -> Registration {
        Registration {
            version: "0.1.0".into(),
            hostname: format!("host{rank}"),
            rank,
            world,
            address: String::new(),
            port: 0,
            adapter: Some("llvmpipe".into()),
            rdma_devices: vec![],
        }
    }

    type Outcome = Result<Vec<Registration>, ClusterError>;

    /// Rank 0 on a loopback port, the others in threads; returns rank 0's result and theirs.
    fn run(others: Vec<Registration>, world: u32, timeout: Duration) -> (Outcome, Vec<Outcome>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let joins: Vec<_> = others
            .into_iter()
            .map(|r| {
                let a = addr.clone();
                std::thread::spawn(move || {
                    join(&a, r, timeout + Duration::from_secs(2)).map(|(roster, _)| roster)
                })
            })
            .collect();
        let zero = serve(&listener, reg(0, world), timeout).map(|(roster, _)| roster);
        (zero, joins.into_iter().map(|j| j.join().unwrap()).collect())
    }

    #[test]
    fn four_ranks_get_one_roster() {
        let (zero, others) = run(
            (1..4).map(|r| reg(r, 4)).collect(),
            4,
            Duration::from_secs(10),
        );
        let roster = zero.unwrap();
        assert_eq!(
            roster.iter().map(|r| r.rank).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        assert!(
            roster.iter().all(|r| r.address == "127.0.0.1"),
            "{roster:?}"
        );
        for o in others {
            assert_eq!(o.unwrap(), roster);
        }
    }

    #[test]
    fn faults_are_named_and_bounded() {
        let t = Duration::from_millis(800);
        // A rank that never arrives.
        let started = Instant::now();
        let (zero, others) = run(vec![reg(1, 3)], 3, t);
        let e = zero.unwrap_err();
        assert!(matches!(e, ClusterError::Rendezvous(_)), "{e:?}");
        let e = e.to_string();
        assert!(e.contains("rank(s) 2 of 3 never arrived"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(others[0]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("never arrived"));
        // A duplicate rank, a world mismatch, a version mismatch.
        let (zero, _) = run(vec![reg(1, 3), reg(1, 3)], 3, t);
        assert!(zero
            .unwrap_err()
            .to_string()
            .contains("rank 1 registered twice"));
        let (zero, others) = run(vec![reg(1, 3)], 2, t);
        assert!(zero
            .unwrap_err()
            .to_string()
            .contains("says the world is 3 ranks, rank 0 says 2"));
        assert!(others[0]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("rank 0 ended the run"));
        let mut old = reg(1, 2);
        old.version = "0.0.9".into();
        let (zero, _) = run(vec![old], 2, t);
        let e = zero.unwrap_err();
        assert!(matches!(e, ClusterError::Version { .. }), "{e:?}");
        assert!(e.to_string().contains("runs morphbench 0.0.9"));
        // Garbage, and a huge announced length, from a stranger: refused, and the run goes on
        // to meet its real rank 1.
        for junk in [
            b"GET / HTTP/1.1\r\n\r\n".to_vec(),
            [&MAGIC[..], &u32::MAX.to_be_bytes()].concat(),
        ] {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let peer = std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                s.write_all(&junk).unwrap();
                std::thread::sleep(Duration::from_millis(200));
                join(&addr.to_string(), reg(1, 2), Duration::from_secs(5)).map(|(r, _)| r)
            });
            let (roster, _) = serve(&listener, reg(0, 2), Duration::from_secs(5)).unwrap();
            assert_eq!(roster.len(), 2);
            assert_eq!(peer.join().unwrap().unwrap(), roster);
        }
        // A stranger that sends a valid header, then a byte every 300 ms, is cut off: rank 0
        // still ends at its own deadline.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let drip = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            let _ = s.write_all(&[&MAGIC[..], &100u32.to_be_bytes()].concat());
            for _ in 0..40 {
                std::thread::sleep(Duration::from_millis(300));
                if s.write_all(b" ").is_err() {
                    break;
                }
            }
        });
        let started = Instant::now();
        let e = serve(&listener, reg(0, 2), Duration::from_secs(3)).unwrap_err();
        assert!(e.to_string().contains("never arrived"), "{e}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        drop(listener);
        drip.join().unwrap();
        // No rank 0 at all.
        let free = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .to_string();
        let e = join(&free, reg(1, 2), Duration::from_millis(300))
            .unwrap_err()
            .to_string();
        assert!(e.contains("rank 0 never answered"), "{e}");
    }
}
