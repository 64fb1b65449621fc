//! The bootstrap of a multi-rank run over TCP, the way NCCL's bootstrap and torchrun's
//! rendezvous work (no MPI library needed): rank 0 listens, every other rank connects and
//! registers (its version, host, rank, world size, the address it is reached at, its adapter
//! and RDMA devices), and rank 0 answers each with the whole roster, or with the error that
//! ends the run. Every wait is bounded, every message is length-prefixed and bounded before
//! anything is allocated from it, and every error names the ranks involved.

use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::auth::{self, Trust};
use super::error::ClusterError;
use super::frame::{receive, send, Channel, End};

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

/// How long a connection may take to prove itself and register before it is refused as a
/// stranger. Each connection has its own budget, on a thread of its own, so idle sockets hold
/// up nothing but themselves. A rank on a lossy path needs room: each lost segment of the
/// handshake costs TCP's retransmission timeout (200 ms at least, doubling); at 2 s about one
/// `links --local 2` in thirty on a loopback dropping 5% of its packets failed to meet.
const REGISTER_WAIT: Duration = Duration::from_secs(5);
/// The most connections proving themselves at once beyond the world's: more are dropped.
const SPARE_HANDSHAKES: usize = 64;
/// The stack of a handshake's thread.
const HANDSHAKE_STACK: usize = 256 << 10;
/// The longest of a registration's strings (its version, adapter, devices) believed.
const MAX_FIELD: usize = 256;
/// The most RDMA devices a rank may name.
const MAX_DEVICES: usize = 64;

#[derive(Debug, Serialize, Deserialize)]
enum Message {
    Register(Registration),
    Roster(Vec<Registration>),
    Error(String),
}

impl Registration {
    /// What is wrong with a registration's fields, if anything: every string bounded, the
    /// host name a valid one (it names a node in verdicts, drain lists, CSVs and `scontrol`).
    pub fn fault(&self) -> Option<String> {
        if !crate::sanitize::valid_hostname(&self.hostname) {
            return Some(format!(
                "its host name {:?} is not a valid host name (RFC 1123)",
                crate::sanitize::console(&self.hostname, 64)
            ));
        }
        let long = [&self.version, &self.address]
            .into_iter()
            .chain(&self.adapter)
            .chain(&self.rdma_devices)
            .any(|f| f.len() > MAX_FIELD);
        if long || self.rdma_devices.len() > MAX_DEVICES {
            return Some(format!(
                "a field is over {MAX_FIELD} bytes or over {MAX_DEVICES} RDMA devices"
            ));
        }
        None
    }
}

/// What one connection came to, from its handshake thread.
type Arrival = (SocketAddr, anyhow::Result<(Registration, Channel)>);

/// One connection's handshake and registration, within its own budget.
fn admit(
    stream: TcpStream,
    trust: &Trust,
    deadline: Instant,
) -> anyhow::Result<(Registration, Channel)> {
    stream.set_nonblocking(false)?;
    let until = deadline.min(Instant::now() + REGISTER_WAIT);
    let key = auth::accept(&stream, trust, until)?;
    let ch = Channel::new(stream, key, End::Root);
    match receive(&ch, until) {
        Ok(Message::Register(r)) => Ok((r, ch)),
        Ok(_) => {
            let _ = send(&ch, &Message::Error("expected a registration".into()));
            Err(anyhow::anyhow!("it sent a message out of turn"))
        }
        Err(e) => Err(anyhow::anyhow!("it {e} instead of registering")),
    }
}

/// Rank 0: waits until `timeout` for the other `me.world - 1` ranks on `listener`, each of
/// which must prove it holds the job's secret (`trust`), and sends every rank the roster
/// (ordered by rank). A connection that fails its proof, or whose registration is refused, is
/// logged with its address and dropped, and the run goes on; if a rank is still missing at the
/// deadline, the refusals are named with it. A rank is reached at the address its
/// registration came from. Returns the roster and the channels to ranks 1.., which stay open
/// as the run's control channel.
pub fn serve(
    listener: &TcpListener,
    me: Registration,
    trust: &Trust,
    timeout: Duration,
) -> Result<(Vec<Registration>, Vec<Channel>), ClusterError> {
    let deadline = Instant::now() + timeout;
    let io = |e: std::io::Error| ClusterError::Io(format!("the rendezvous: {e}"));
    listener.set_nonblocking(true).map_err(io)?;
    widen_backlog(listener, me.world);
    let mut ranks: Vec<Option<(Registration, Channel)>> = (0..me.world).map(|_| None).collect();
    let mut roster0 = me.clone();
    if roster0.address.is_empty() {
        roster0.address = listener
            .local_addr()
            .map(|a| a.ip().to_string())
            .unwrap_or_default();
    }
    let (tx, arrivals) = std::sync::mpsc::channel::<Arrival>();
    let in_flight = Arc::new(AtomicUsize::new(0));
    let cap = me.world as usize + SPARE_HANDSHAKES;
    let mut refused: Vec<String> = Vec::new();
    let mut arrived = 1;
    while arrived < me.world {
        // The deadline holds however many strangers keep the listener busy.
        if Instant::now() >= deadline {
            return Err(never_arrived(listener, &me, &ranks, &refused, timeout));
        }
        let mut idle = true;
        match listener.accept() {
            Ok((stream, peer)) => {
                idle = false;
                if in_flight.load(Ordering::SeqCst) >= cap {
                    tracing::warn!("rendezvous: dropped {peer}: {cap} connections are already proving themselves");
                } else {
                    in_flight.fetch_add(1, Ordering::SeqCst);
                    let (tx, trust, in_flight) =
                        (tx.clone(), trust.clone(), Arc::clone(&in_flight));
                    let spawned = std::thread::Builder::new()
                        .stack_size(HANDSHAKE_STACK)
                        .spawn(move || {
                            let _ = tx.send((peer, admit(stream, &trust, deadline)));
                            in_flight.fetch_sub(1, Ordering::SeqCst);
                        });
                    if let Err(e) = spawned {
                        tracing::warn!("rendezvous: dropped {peer}: no thread to hear it ({e})");
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => {
                let why = ClusterError::Io(format!("the rendezvous listener failed: {e}"));
                return fail(&ranks, why);
            }
        }
        while let Ok((peer, admitted)) = arrivals.try_recv() {
            idle = false;
            let (mut reg, ch) = match admitted {
                Ok(a) => a,
                Err(why) => {
                    tracing::warn!("rendezvous: refused {peer}: {why}");
                    refused.push(format!("{peer}: {why}"));
                    continue;
                }
            };
            // Reached where it came from: a registration cannot send the others elsewhere.
            reg.address = peer.ip().to_string();
            if let Some(why) = refusal(&reg, &me, &ranks) {
                let _ = send(&ch, &Message::Error(why.to_string()));
                tracing::warn!("rendezvous: refused {peer}: {why}");
                refused.push(format!("{peer}: {why}"));
                continue;
            }
            let r = reg.rank as usize;
            ranks[r] = Some((reg, ch));
            arrived += 1;
        }
        if idle {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let mut roster = vec![roster0];
    roster.extend(ranks.iter().flatten().map(|(r, _)| r.clone()));
    roster.sort_by_key(|r| r.rank);
    let mut channels = Vec::new();
    // Encoded once: a roster of 4,096 ranks is about 1 MB, and every rank gets the same one.
    let frame = super::frame::encode(&Message::Roster(roster.clone())).map_err(io)?;
    for (reg, ch) in ranks.into_iter().flatten() {
        super::frame::send_encoded(&ch, &frame).map_err(|e| {
            ClusterError::Rendezvous(format!(
                "rank {} ({}) dropped out before the roster: {e}",
                reg.rank, reg.hostname
            ))
        })?;
        channels.push(ch);
    }
    Ok((roster, channels))
}

/// Tells every rank that registered why the run ends, and returns it.
fn fail<T>(
    ranks: &[Option<(Registration, Channel)>],
    why: ClusterError,
) -> Result<T, ClusterError> {
    for (_, ch) in ranks.iter().flatten() {
        let _ = send(ch, &Message::Error(why.to_string()));
    }
    Err(why)
}

/// The error of a rendezvous whose deadline passed: who is missing, and what was refused.
fn never_arrived(
    listener: &TcpListener,
    me: &Registration,
    ranks: &[Option<(Registration, Channel)>],
    refused: &[String],
    timeout: Duration,
) -> ClusterError {
    let missing: Vec<String> = (1..me.world)
        .filter(|&r| ranks[r as usize].is_none())
        .map(|r| r.to_string())
        .collect();
    let mut why = format!(
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
    if !refused.is_empty() {
        let shown: Vec<&str> = refused.iter().take(5).map(String::as_str).collect();
        why.push_str(&format!(
            "; {} connection(s) refused: {}",
            refused.len(),
            shown.join("; ")
        ));
    }
    let why = ClusterError::Rendezvous(why);
    let _ = fail::<()>(ranks, why.clone());
    why
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

/// Why rank 0 refuses a registration, if it does: a bad field, another version, another world
/// size, a rank out of range or one already taken.
fn refusal(
    reg: &Registration,
    me: &Registration,
    ranks: &[Option<(Registration, Channel)>],
) -> Option<ClusterError> {
    if let Some(fault) = reg.fault() {
        Some(ClusterError::Rendezvous(format!(
            "rank {}'s registration is refused: {fault}",
            reg.rank
        )))
    } else if reg.version != me.version {
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

/// What a rank has once it joined: the roster, its channel to rank 0, and the trust its
/// other connections use (under MUNGE, the run's secret it learned from rank 0).
pub type Joined = (Vec<Registration>, Channel, Trust);

/// Proves this rank to rank 0 (and rank 0 to it) on a connection, registers, and waits until
/// `timeout` for the roster.
pub fn register(
    stream: TcpStream,
    mut me: Registration,
    trust: &Trust,
    timeout: Duration,
) -> Result<Joined, ClusterError> {
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
    let (key, learned) = auth::prove_learning(&stream, trust, deadline)
        .map_err(|e| ClusterError::Rendezvous(format!("rank 0 at {addr} is refused: {e}")))?;
    let settled = match learned {
        Some(secret) => Trust::Secret(Arc::new(secret)),
        None => trust.settled(),
    };
    let ch = Channel::new(stream, key, End::Rank);
    send(&ch, &Message::Register(me.clone()))
        .map_err(|e| ClusterError::Rendezvous(format!("rank 0 at {addr}: {e}")))?;
    let roster = match receive(&ch, deadline) {
        Ok(Message::Roster(r)) => r,
        Ok(Message::Error(why)) => {
            return Err(ClusterError::Aborted(
                crate::sanitize::console(&why, 2000).into_owned(),
            ))
        }
        Ok(Message::Register(_)) => {
            return Err(ClusterError::Protocol(
                "rank 0 sent a registration, not a roster".into(),
            ))
        }
        Err(e) => {
            return Err(ClusterError::Rendezvous(format!(
                "rank 0 at {addr} {e} before sending the roster"
            )))
        }
    };
    let ordered = r_ordered(&roster);
    if roster.len() != me.world as usize || !ordered {
        return Err(ClusterError::Protocol(format!(
            "rank 0 sent a roster of {} ranks{} for a world of {}",
            roster.len(),
            if ordered { "" } else { " out of order" },
            me.world
        )));
    }
    if let Some((r, why)) = roster.iter().find_map(|r| r.fault().map(|f| (r.rank, f))) {
        return Err(ClusterError::Protocol(format!(
            "rank 0's roster names rank {r} badly: {why}"
        )));
    }
    Ok((roster, ch, settled))
}

/// Whether a roster holds each rank once, in order.
fn r_ordered(roster: &[Registration]) -> bool {
    roster.iter().enumerate().all(|(i, r)| r.rank as usize == i)
}

/// [`connect`] then [`register`].
pub fn join(
    addr: &str,
    me: Registration,
    trust: &Trust,
    timeout: Duration,
) -> Result<Joined, ClusterError> {
    let started = Instant::now();
    let stream = connect(addr, timeout)?;
    let left = timeout.saturating_sub(started.elapsed());
    register(stream, me, trust, left.max(Duration::from_millis(1)))
}

#[cfg(test)]
#[path = "rendezvous_tests.rs"]
mod tests;
