//! One multi-rank run's membership: who this process is ([`launch`]), the roster agreed at
//! [`rendezvous`], this rank's data listener (for links between ranks), and the control
//! channel to rank 0 that stays open for the whole run, so a rank that dies is noticed and
//! named.

use std::net::{IpAddr, SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::auth::{Trust, TrustSource};
use super::error::{ClusterError, Who};
use super::frame::{self, Channel};
use super::launch::{self, Launch};
use super::rendezvous::{self, Registration};

/// How long rank 0 still listens after the first failure, to name the dead rank.
pub const GRACE: Duration = Duration::from_millis(300);
/// How often a rank at work on an order tells rank 0 it is alive.
pub const HEARTBEAT: Duration = Duration::from_millis(500);
/// How long rank 0 waits for a word (a heartbeat or the reply) from a rank at work before it
/// takes it for stopped; and how long any other rank waits for a word (rank 0's heartbeat, an
/// order) before it takes rank 0 for stopped.
pub const SILENCE: Duration = Duration::from_secs(3);
/// The longest a message may take from a peer whose packets still reach this host (its stream
/// waiting behind a lost segment for TCP to send it again; see [`frame::receive_live`]) before
/// the peer is taken for stopped all the same.
pub const HOLE: Duration = Duration::from_secs(15);

/// The next message that is not a heartbeat, by `deadline`; silence for [`SILENCE`] (no
/// packet of the peer's reaching this host either) is a timeout even before it.
fn hear_through_heartbeats<M: DeserializeOwned>(
    s: &Channel,
    deadline: Instant,
    alive: fn(&M) -> bool,
) -> Result<M, super::error::WireError> {
    loop {
        let by = deadline.min(Instant::now() + HOLE);
        let m: M = frame::receive_live(s, SILENCE, by)?;
        if !alive(&m) {
            return Ok(m);
        }
    }
}

/// The stack of each of rank 0's reader threads (one a rank in a gather).
const READER_STACK: usize = 256 << 10;

/// How much longer than rank 0's wait a rank waits for the roster.
const ROSTER_SLACK: Duration = Duration::from_secs(5);

/// How to join the run.
#[derive(Debug, Clone)]
pub struct WorldOptions {
    /// `--rank R --world N`, when given.
    pub explicit: Option<(u32, u32)>,
    /// `--rendezvous HOST:PORT`, when given.
    pub rendezvous: Option<String>,
    /// How long rank 0 waits for the others (and they for it).
    pub timeout: Duration,
    pub adapter: Option<String>,
    pub rdma_devices: Vec<String>,
    /// Where the job's secret comes from (the environment is read too).
    pub trust: TrustSource,
}

/// The environment variable through which a launcher hands rank 0 its listening socket
/// already bound (`--local`, `health`), so there is no gap between the launcher's choice of
/// port and rank 0's bind in which another process could take the port.
pub const LISTEN_FD_ENV: &str = "MORPHBENCH_LISTEN_FD";

/// The connections to rank 0 (from any other rank) or to every other rank (at rank 0).
pub enum Control {
    /// At rank 0: the connection to rank i is `peers[i - 1]`, shared (not duplicated) by the
    /// threads that write orders and heartbeats and read replies: one descriptor a rank.
    Root(Vec<Arc<Channel>>),
    Leaf(Arc<Channel>),
}

pub struct World {
    pub launch: Launch,
    /// Where the rendezvous address came from (flag, environment, node list).
    pub rendezvous_from: &'static str,
    pub roster: Vec<Registration>,
    /// This rank's data listener, on the address the others reach it at.
    pub data: TcpListener,
    pub control: Control,
    /// How this run's connections prove themselves: the pair connections of a bench use it
    /// too.
    pub trust: Trust,
}

fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, ClusterError> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| ClusterError::Rendezvous(format!("the rendezvous host {host}: {e}")))?
        .collect();
    if addrs.is_empty() {
        return Err(ClusterError::Rendezvous(format!(
            "the rendezvous host {host} has no address"
        )));
    }
    Ok(addrs)
}

/// Joins the run: reads rank and world from the launcher, meets the others at rank 0's
/// address, and opens this rank's data listener.
pub fn establish(
    opts: &WorldOptions,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<World, ClusterError> {
    let launch = launch::detect(opts.explicit, env)?;
    let trust = super::auth::resolve(&opts.trust, launch.world, env)
        .map_err(|e| ClusterError::Rendezvous(e.to_string()))?;
    // Before anyone meets: a limit that cannot hold this world refuses here, not mid-run.
    super::limits::settle(launch.rank, launch.world)?;
    let (host, port, from) = launch::rendezvous(opts.rendezvous.as_deref(), env, &launch.nodes)?;
    let hostname = crate::host::HostInfo::probe().hostname;
    // A rank's host name names its node in verdicts, drain lists, CSVs and `scontrol`: one that
    // is not a host name is refused here, at every rank, as rank 0 refuses it from a peer.
    if !crate::sanitize::valid_hostname(&hostname) {
        return Err(ClusterError::Rendezvous(format!(
            "this host's name {:?} is not a valid host name (RFC 1123: letters, digits, hyphens \
             and dots), and a rank's host name names its node in verdicts, drain lists and \
             scontrol: give the host a valid name",
            crate::sanitize::console(&hostname, 80)
        )));
    }
    let me = Registration {
        version: env!("CARGO_PKG_VERSION").to_string(),
        hostname,
        rank: launch.rank,
        world: launch.world,
        address: String::new(),
        port: 0,
        adapter: opts.adapter.clone(),
        rdma_devices: opts.rdma_devices.clone(),
    };
    let (roster, data, control, trust) = if launch.rank == 0 {
        // Rank 0 listens where the others were told to look (the flag, the environment or
        // the node list), never on a wildcard address.
        let listener = match handed_listener(env, port)? {
            Some(l) => l,
            None => {
                let addrs = resolve(&host, port)?;
                TcpListener::bind(&addrs[..]).map_err(|e| {
                    ClusterError::Rendezvous(format!(
                        "rank 0 cannot listen on {host}:{port} ({from}): {e}. Rank 0 must run \
                         on the rendezvous host; give --rendezvous with one of its addresses \
                         and a free port"
                    ))
                })?
            }
        };
        let ip = listener.local_addr().map_err(io)?.ip();
        let data = bind_data(ip)?;
        let mut me = me;
        me.address = ip.to_string();
        me.port = data.local_addr().map_err(io)?.port();
        let trust = trust.for_root();
        let (roster, peers) = rendezvous::serve(&listener, me, &trust, opts.timeout)?;
        for p in &peers {
            // A rank that does not read for this long (stopped, its buffers full) fails the
            // write that would block: rank 0 names it instead of hanging with every other
            // rank's heartbeats held behind it.
            p.stream().set_write_timeout(Some(SILENCE)).map_err(io)?;
        }
        (
            roster,
            data,
            Control::Root(peers.into_iter().map(Arc::new).collect()),
            trust.settled(),
        )
    } else {
        let addr = format!("{host}:{port}");
        let stream = rendezvous::connect(&addr, opts.timeout)?;
        // Reached at the address its connection to rank 0 leaves from.
        let ip = stream.local_addr().map_err(io)?.ip();
        let data = bind_data(ip)?;
        let mut me = me;
        me.address = ip.to_string();
        me.port = data.local_addr().map_err(io)?.port();
        // Rank 0 was listening before this rank reached it, and it answers within its own
        // wait (the roster, or why the run ends): waiting that long and a little more for its
        // answer means rank 0 names a missing rank here too, rather than a race of two clocks.
        let (roster, ch, trust) =
            rendezvous::register(stream, me, &trust, opts.timeout + ROSTER_SLACK)?;
        (roster, data, Control::Leaf(Arc::new(ch)), trust)
    };
    Ok(World {
        launch,
        rendezvous_from: from,
        roster,
        data,
        control,
        trust,
    })
}

/// Rank 0's listening socket as its launcher handed it over ([`LISTEN_FD_ENV`]), if it did:
/// it must be a socket listening on the rendezvous port.
#[allow(unsafe_code)]
fn handed_listener(
    env: &dyn Fn(&str) -> Option<String>,
    port: u16,
) -> Result<Option<TcpListener>, ClusterError> {
    use std::os::fd::FromRawFd;
    let Some(fd) = env(LISTEN_FD_ENV) else {
        return Ok(None);
    };
    let bad = |why: String| {
        ClusterError::Rendezvous(format!(
            "{LISTEN_FD_ENV}={fd}: {why}; it is set by the launcher of --local and health \
             only: unset it"
        ))
    };
    let fd: i32 = fd
        .parse()
        .ok()
        .filter(|&n| n > 2)
        .ok_or_else(|| bad("not a descriptor number above 2".into()))?;
    let mut listening: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `listening`; an fd that is not a
    // socket makes it fail, and nothing is taken over then.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ACCEPTCONN,
            (&mut listening as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc != 0 || listening == 0 {
        return Err(bad("not a listening socket".into()));
    }
    // SAFETY: the descriptor is a listening socket this process was handed at its start and
    // nothing else in it owns: the launcher put it there for rank 0 alone.
    let listener = unsafe { TcpListener::from_raw_fd(fd) };
    let at = listener.local_addr().map_err(|e| bad(e.to_string()))?;
    if at.port() != port {
        return Err(bad(format!("it listens on port {}, not {port}", at.port())));
    }
    Ok(Some(listener))
}

/// Calls `tick` each [`HEARTBEAT`] on a thread of its own until `tick` returns false or the
/// ticker is dropped. The thread sleeps on a channel: it wakes once a heartbeat (not in
/// between, beside timed work) and at once when dropped; dropping it joins the thread, so
/// every tick is done before what follows.
pub struct Ticker {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Ticker {
    pub fn start(mut tick: impl FnMut() -> bool + Send + 'static) -> Ticker {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            use std::sync::mpsc::RecvTimeoutError::Timeout;
            while let Err(Timeout) = stopped.recv_timeout(HEARTBEAT) {
                if !tick() {
                    return;
                }
            }
        });
        Ticker {
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn io(e: std::io::Error) -> ClusterError {
    ClusterError::Io(e.to_string())
}

fn cannot_reach(who: Who, e: std::io::Error) -> ClusterError {
    ClusterError::Died {
        who,
        how: format!("cannot reach it: {e}"),
    }
}

fn bind_data(ip: IpAddr) -> Result<TcpListener, ClusterError> {
    TcpListener::bind((ip, 0))
        .map_err(|e| ClusterError::Io(format!("cannot open a data listener on {ip}: {e}")))
}

impl World {
    pub fn rank(&self) -> u32 {
        self.launch.rank
    }

    pub fn size(&self) -> u32 {
        self.launch.world
    }

    /// This rank's place among the ranks on its host: the launcher's local rank, else its
    /// index among the roster's ranks with its host name (ranks started by hand or `--local`).
    pub fn local_rank(&self) -> u32 {
        self.launch.local_rank.unwrap_or_else(|| {
            let me = self.rank();
            let host = self.roster.get(me as usize).map(|r| r.hostname.as_str());
            self.roster
                .iter()
                .filter(|r| r.rank < me && Some(r.hostname.as_str()) == host)
                .count() as u32
        })
    }

    /// "rank 3 (gpu04)", for messages.
    pub fn describe(&self, rank: u32) -> String {
        match self.roster.get(rank as usize) {
            Some(r) => format!("rank {rank} ({})", r.hostname),
            None => format!("rank {rank}"),
        }
    }

    /// Where rank `rank` listens for links.
    pub fn data_address(&self, rank: u32) -> String {
        let r = &self.roster[rank as usize];
        match r.address.parse::<IpAddr>() {
            Ok(ip) => SocketAddr::new(ip, r.port).to_string(),
            Err(_) => format!("{}:{}", r.address, r.port),
        }
    }

    /// Rank `rank` as errors name it.
    pub fn who(&self, rank: u32) -> Who {
        Who {
            rank,
            name: self.describe(rank),
        }
    }

    /// Rank 0: sends `m` to every other rank (best effort for the ones already gone when
    /// `best_effort`; otherwise the first that cannot be reached is named).
    pub fn broadcast<M: Serialize>(
        &mut self,
        m: &M,
        best_effort: bool,
    ) -> Result<(), ClusterError> {
        let whos: Vec<Who> = (1..self.size()).map(|r| self.who(r)).collect();
        let frame = frame::encode(m).map_err(|e| ClusterError::Io(e.to_string()))?;
        let Control::Root(peers) = &self.control else {
            return Err(ClusterError::Protocol("only rank 0 broadcasts".into()));
        };
        for (s, who) in peers.iter().zip(whos) {
            if let Err(e) = frame::send_encoded(s, &frame) {
                if !best_effort {
                    return Err(cannot_reach(who, e));
                }
            }
        }
        Ok(())
    }

    /// Rank 0: sends `m` to one rank.
    pub fn send_to<M: Serialize>(&mut self, rank: u32, m: &M) -> Result<(), ClusterError> {
        let who = self.who(rank);
        let Control::Root(peers) = &self.control else {
            return Err(ClusterError::Protocol("only rank 0 sends to ranks".into()));
        };
        frame::send(&peers[rank as usize - 1], m).map_err(|e| cannot_reach(who, e))
    }

    /// Rank 0: one message from each of `ranks` (none of them 0) by `deadline`, or why not: a
    /// rank that closed its connection (died), timed out or sent garbage, named.
    /// The ranks are heard at once (a thread each); as soon as one reply is a failure by
    /// `failed`, the others get [`GRACE`] more (a death is often reported by its peer first)
    /// and the ones still silent are left out (None). After that the run must end: a reader
    /// left behind may take the next message.
    ///
    /// A message for which `alive` is true is a heartbeat: it is skipped, and a rank that sends
    /// neither one nor its reply for [`SILENCE`] is named as stopped (SIGSTOP, a hung host)
    /// long before `deadline`.
    pub fn gather<M>(
        &mut self,
        ranks: &[u32],
        deadline: Instant,
        alive: fn(&M) -> bool,
        failed: impl Fn(&Result<M, ClusterError>) -> bool,
    ) -> Vec<Option<Result<M, ClusterError>>>
    where
        M: DeserializeOwned + Send + 'static,
    {
        let whos: Vec<Who> = ranks.iter().map(|&r| self.who(r)).collect();
        let Control::Root(peers) = &self.control else {
            return vec![Some(Err(ClusterError::Protocol(
                "only rank 0 gathers".into(),
            )))];
        };
        let (tx, rx) = std::sync::mpsc::channel();
        for (i, (&rank, who)) in ranks.iter().zip(whos).enumerate() {
            let stream = Arc::clone(&peers[rank as usize - 1]);
            let (tx, failed_tx) = (tx.clone(), tx.clone());
            // A small stack: a reader parses one reply, and at 4,096 ranks there are 4,095.
            let spawned = std::thread::Builder::new()
                .stack_size(READER_STACK)
                .spawn(move || {
                    let m = hear_through_heartbeats(&stream, deadline, alive).map_err(|e| {
                        ClusterError::from_wire(who, e, "its connection to rank 0 closed")
                    });
                    let _ = tx.send((i, m));
                });
            if let Err(e) = spawned {
                let _ = failed_tx.send((
                    i,
                    Err(ClusterError::Io(format!(
                        "rank 0 cannot start a thread to hear rank {rank}: {e} (see `ulimit -u`)"
                    ))),
                ));
            }
        }
        drop(tx);
        let mut out: Vec<Option<Result<M, ClusterError>>> = ranks.iter().map(|_| None).collect();
        let mut until = deadline + Duration::from_secs(1);
        let mut left = ranks.len();
        while left > 0 {
            let wait = until.saturating_duration_since(Instant::now());
            let Ok((i, m)) = rx.recv_timeout(wait) else {
                break;
            };
            if failed(&m) {
                until = until.min(Instant::now() + GRACE);
            }
            out[i] = Some(m);
            left -= 1;
        }
        out
    }

    /// Any other rank: sends `m` to rank 0.
    pub fn tell_root<M: Serialize>(&mut self, m: &M) -> Result<(), ClusterError> {
        let who = self.who(0);
        let Control::Leaf(s) = &self.control else {
            return Err(ClusterError::Protocol("rank 0 does not tell itself".into()));
        };
        frame::send(s, m).map_err(|e| cannot_reach(who, e))
    }

    /// Rank 0: sends `beat` to every other rank each [`HEARTBEAT`] until the ticker is
    /// dropped, whatever rank 0 itself is doing, so a follower deep in a test notices a
    /// stopped rank 0 by its silence (see [`SILENCE`]). None at any other rank.
    pub fn heartbeats<M: Serialize + Send + 'static>(&self, beat: M) -> Option<Ticker> {
        let Control::Root(peers) = &self.control else {
            return None;
        };
        let mut peers: Vec<Option<Arc<Channel>>> = peers.iter().cloned().map(Some).collect();
        let frame = frame::encode(&beat).ok()?;
        Some(Ticker::start(move || {
            for peer in peers.iter_mut() {
                // A rank that cannot be written to is gone: rank 0's own reads name it.
                if peer
                    .as_ref()
                    .is_some_and(|s| frame::send_encoded(s, &frame).is_err())
                {
                    *peer = None;
                }
            }
            true
        }))
    }

    /// Any other rank: a second handle on the channel to rank 0 (for heartbeats).
    pub fn root_stream(&self) -> Option<Arc<Channel>> {
        match &self.control {
            Control::Leaf(s) => Some(Arc::clone(s)),
            Control::Root(_) => None,
        }
    }
}
