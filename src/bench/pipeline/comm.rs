//! The links between neighbouring stages, over the project's `Transport` (TCP or RDMA): per
//! pair of neighbours one connection each way (activations downstream, gradients upstream),
//! opened by the sender with a preamble naming its rank. The transport checks every payload
//! end to end and its `send` returns once the peer confirmed the payload intact: the
//! acknowledgement a blocking send waits for. A reader thread per incoming connection checks
//! every message (its magic, kind, iteration and microbatch, the exact size) and files it in
//! an inbox; a lost, repeated or misordered message ends the run with an error naming it.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::cluster::auth::{self, Trust};
use crate::cluster::rendezvous::dial;
use crate::transport::factory::{receiver_for, sender_over};
use crate::transport::rdma::DeviceChoice;
use crate::transport::{Receiver, Transport, TransportKind};

const MAGIC: [u8; 4] = *b"MBP1";
/// What a stage writes first on a connection it opens, then its rank.
const PREAMBLE: [u8; 4] = *b"MBPL";
/// Magic, kind, the receiver's model chunk (and 2 bytes of padding), iteration, microbatch.
const HEADER: usize = 16;
pub const ACT: u8 = 0;
pub const GRAD: u8 = 1;

/// (kind, the receiver's chunk, iteration, microbatch).
type Key = (u8, u8, u32, u32);

/// What a link takes: the kinds of data that come in over it and the chunks of this stage
/// they may be for.
#[derive(Debug, Clone, Copy)]
pub struct Accepts {
    pub act: bool,
    pub grad: bool,
    pub chunks: u8,
}

#[derive(Default)]
struct Shelf {
    items: HashMap<Key, Vec<f32>>,
    /// The next microbatch expected per (kind, chunk, iteration): each chunk's messages come
    /// in microbatch order.
    next: HashMap<(u8, u8, u32), u32>,
    error: Option<String>,
}

/// What one connection has delivered, shared by its reader thread and the stage.
#[derive(Default)]
pub struct Inbox {
    shelf: Mutex<Shelf>,
    ready: Condvar,
}

impl Inbox {
    fn fail(&self, why: String) {
        let mut s = self.shelf.lock().expect("inbox lock");
        s.error.get_or_insert(why);
        self.ready.notify_all();
    }

    /// Waits until `key` arrives (or the link fails, or `deadline`); `what` names it if it
    /// never does (made only then: a wait is on the path between two ops).
    fn take(
        &self,
        key: Key,
        deadline: Instant,
        what: impl FnOnce() -> String,
    ) -> anyhow::Result<Vec<f32>> {
        let mut s = self.shelf.lock().expect("inbox lock");
        loop {
            if let Some(v) = s.items.remove(&key) {
                return Ok(v);
            }
            if let Some(e) = &s.error {
                return Err(anyhow::anyhow!(e.clone()));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(anyhow::anyhow!(
                    "{} never arrived (waited until the limit)",
                    what()
                ));
            }
            s = self.ready.wait_timeout(s, left).expect("inbox lock").0;
        }
    }

    /// Checks one message and files it.
    fn file(
        &self,
        bytes: &[u8],
        accepts: Accepts,
        elements: usize,
        microbatches: u32,
    ) -> anyhow::Result<()> {
        if bytes.len() < HEADER || bytes[..4] != MAGIC {
            return Err(anyhow::anyhow!(
                "sent something that is not a pipeline message"
            ));
        }
        let (kind, chunk) = (bytes[4], bytes[5]);
        let word = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        let (iter, mb) = (word(8), word(12));
        if !((kind == ACT && accepts.act) || (kind == GRAD && accepts.grad)) {
            return Err(anyhow::anyhow!(
                "sent a message of kind {kind}, which this end does not take"
            ));
        }
        if chunk >= accepts.chunks {
            return Err(anyhow::anyhow!(
                "sent a message for model chunk {chunk}, past this stage's last ({})",
                accepts.chunks - 1
            ));
        }
        if mb >= microbatches {
            return Err(anyhow::anyhow!(
                "sent microbatch {mb}, past the last ({})",
                microbatches - 1
            ));
        }
        let len = bytes.len() - HEADER;
        if len != elements * 4 {
            return Err(anyhow::anyhow!(
                "sent {len} bytes for a message of {}",
                elements * 4
            ));
        }
        let mut shelf = self.shelf.lock().expect("inbox lock");
        let next = shelf.next.entry((kind, chunk, iter)).or_insert(0);
        if mb != *next {
            let what = describe(kind, chunk, accepts.chunks);
            return Err(if mb < *next {
                anyhow::anyhow!("sent {what} {mb} of iteration {iter} twice")
            } else {
                anyhow::anyhow!("sent {what} {mb} of iteration {iter} before {}", *next)
            });
        }
        *next += 1;
        shelf.items.insert(
            (kind, chunk, iter, mb),
            bytemuck::pod_collect_to_vec::<u8, f32>(&bytes[HEADER..]),
        );
        self.ready.notify_all();
        Ok(())
    }
}

/// One end of a link between neighbouring stages.
pub struct Link {
    sender: Mutex<Box<dyn Transport>>,
    inbox: Arc<Inbox>,
    /// Who is at the other end, for messages.
    pub peer: String,
    elements: usize,
    timeout: Duration,
    /// This stage's model chunks, for messages.
    chunks: u8,
}

/// "activation" or "gradient", naming the chunk where a stage has several.
fn describe(kind: u8, chunk: u8, chunks: u8) -> String {
    let name = if kind == ACT {
        "activation"
    } else {
        "gradient"
    };
    match chunks {
        0 | 1 => name.to_string(),
        _ => format!("chunk {chunk}'s {name}"),
    }
}

fn frame(kind: u8, chunk: u8, iter: u32, mb: u32, payload: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + payload.len() * 4);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[kind, chunk, 0, 0]);
    out.extend_from_slice(&iter.to_le_bytes());
    out.extend_from_slice(&mb.to_le_bytes());
    out.extend_from_slice(bytemuck::cast_slice(payload));
    out
}

/// The bytes of the largest message: a whole activation behind its header.
pub fn max_message(elements: usize) -> u64 {
    (HEADER + elements * 4) as u64
}

impl Link {
    /// Joins the two connections with a neighbour; `accepts` says what this end receives (ACT
    /// from the previous stage, GRAD from the next; both where the neighbour is both, as
    /// interleaving's wrap makes it with two stages).
    pub fn new(
        sender: Box<dyn Transport>,
        mut receiver: Box<dyn Receiver>,
        accepts: Accepts,
        peer: String,
        elements: usize,
        microbatches: u32,
        timeout: Duration,
    ) -> Link {
        let inbox = Arc::new(Inbox::default());
        {
            let (inbox, peer) = (inbox.clone(), peer.clone());
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let why = loop {
                    match receiver.recv(&mut buf) {
                        Ok(Some(_)) => {
                            if let Err(e) = inbox.file(&buf, accepts, elements, microbatches) {
                                break format!("{e:#}");
                            }
                        }
                        // The peer closing is the end of the run (or its failure, which the
                        // control channel names); a wait for a message that never comes fails.
                        Ok(None) => break "the peer closed the link".to_string(),
                        Err(e) => break e.to_string(),
                    }
                };
                inbox.fail(format!("the link to {peer}: {why}"));
            });
        }
        Link {
            sender: Mutex::new(sender),
            inbox,
            peer,
            elements,
            timeout,
            chunks: accepts.chunks,
        }
    }

    /// Sends a data message for the peer's model chunk `chunk` and waits for the peer's
    /// confirmation; returns µs from the start of the send to the confirmation.
    pub fn send(
        &self,
        (kind, chunk): (u8, u8),
        iter: u32,
        mb: u32,
        data: &[f32],
    ) -> anyhow::Result<f64> {
        assert_eq!(data.len(), self.elements, "a whole activation");
        let bytes = frame(kind, chunk, iter, mb, data);
        let t0 = Instant::now();
        self.sender
            .lock()
            .expect("sender lock")
            .send(&bytes)
            .map_err(|e| anyhow::anyhow!("the link to {}: {e}", self.peer))?;
        Ok(t0.elapsed().as_secs_f64() * 1e6)
    }

    /// Waits for a data message for this stage's model chunk `chunk`.
    pub fn receive(&self, (kind, chunk): (u8, u8), iter: u32, mb: u32) -> anyhow::Result<Vec<f32>> {
        let what = || {
            let name = describe(kind, chunk, self.chunks);
            format!("{name} {mb} of iteration {iter} from {}", self.peer)
        };
        self.inbox
            .take((kind, chunk, iter, mb), Instant::now() + self.timeout, what)
    }
}

impl Drop for Link {
    /// Says goodbye, so the peer's reader ends without waiting out its limit.
    fn drop(&mut self) {
        if let Ok(mut s) = self.sender.lock() {
            let _ = s.close();
        }
    }
}

/// How links are made: the transport, its device, the largest message and the limits.
#[derive(Debug, Clone)]
pub struct Wiring {
    pub transport: TransportKind,
    pub rdma: DeviceChoice,
    pub max_message: u64,
    /// Any one send, and connecting.
    pub timeout: Duration,
    /// How long a reader may wait for the next message (the run's pauses between cases).
    pub idle: Duration,
    /// The job's secret each connection proves before its preamble.
    pub trust: Trust,
}

/// How long an accepted connection has to prove the job's secret.
const PROOF_WAIT: Duration = Duration::from_secs(2);

/// The two ends this stage holds with one neighbour: its sender and its receiver.
pub type Connection = (Box<dyn Transport>, Box<dyn Receiver>);

/// A neighbour to connect to.
pub struct Peer {
    pub rank: u32,
    /// Its data listener.
    pub address: String,
}

/// Opens this stage's connections with `peers`: a sender to each (after the preamble) and a
/// receiver from each (accepted on `listener` while the senders connect, in any order).
/// Returns (sender, receiver) per peer, in the order given.
pub fn connect(
    listener: &TcpListener,
    me: u32,
    peers: &[Peer],
    w: &Wiring,
) -> anyhow::Result<Vec<Connection>> {
    let deadline = Instant::now() + w.timeout;
    let expected: Vec<u32> = peers.iter().map(|p| p.rank).collect();
    let (senders, receivers) = std::thread::scope(|sc| {
        let acceptor = sc.spawn(|| accept_from(listener, me, &expected, w, deadline));
        let senders: anyhow::Result<Vec<Box<dyn Transport>>> = peers
            .iter()
            .map(|p| {
                let mut s = dial(&p.address, deadline)
                    .map_err(|e| anyhow::anyhow!("the address of stage {}: {e}", p.rank))?
                    .ok_or_else(|| {
                        anyhow::anyhow!("cannot reach stage {} at {}", p.rank, p.address)
                    })?;
                auth::prove(&s, &w.trust, deadline).map_err(|e| {
                    anyhow::anyhow!("stage {} at {} is refused: {e}", p.rank, p.address)
                })?;
                let mut pre = PREAMBLE.to_vec();
                pre.extend_from_slice(&me.to_le_bytes());
                s.write_all(&pre)
                    .map_err(|e| anyhow::anyhow!("the link to stage {}: {e}", p.rank))?;
                sender_over(w.transport, &w.rdma, s, w.max_message, w.timeout)
                    .map_err(|e| anyhow::anyhow!("the link to stage {}: {e}", p.rank))
            })
            .collect();
        let receivers = acceptor
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the acceptor panicked")));
        (senders, receivers)
    });
    let (senders, mut receivers) = (senders?, receivers?);
    Ok(senders
        .into_iter()
        .zip(peers)
        .map(|(s, p)| {
            (
                s,
                receivers.remove(&p.rank).expect("accepted from every peer"),
            )
        })
        .collect())
}

/// Accepts one connection from each rank in `from`, named by its preamble.
fn accept_from(
    listener: &TcpListener,
    me: u32,
    from: &[u32],
    w: &Wiring,
    deadline: Instant,
) -> anyhow::Result<HashMap<u32, Box<dyn Receiver>>> {
    let make = receiver_for(w.transport, w.rdma.clone(), w.max_message, w.idle);
    let mut got: HashMap<u32, Box<dyn Receiver>> = HashMap::new();
    listener.set_nonblocking(true)?;
    while got.len() < from.len() {
        let (mut s, addr) = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let missing: Vec<String> = from
                        .iter()
                        .filter(|r| !got.contains_key(r))
                        .map(|r| format!("stage {r}"))
                        .collect();
                    return Err(anyhow::anyhow!(
                        "{} never connected to stage {me}",
                        missing.join(" and ")
                    ));
                }
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            Err(e) => return Err(anyhow::anyhow!("accepting a stage's link: {e}")),
        };
        s.set_nonblocking(false)?;
        // A connection that does not prove the job's secret is logged and dropped; the stage
        // waits on for its neighbours.
        let until = deadline.min(Instant::now() + PROOF_WAIT);
        if let Err(e) = auth::accept(&s, &w.trust, until) {
            tracing::warn!("pipeline: refused {addr} on stage {me}'s listener: {e}");
            continue;
        }
        s.set_read_timeout(Some(w.timeout))?;
        let mut pre = [0u8; 8];
        s.read_exact(&mut pre)
            .map_err(|e| anyhow::anyhow!("a link from {addr} sent no preamble: {e}"))?;
        let rank = u32::from_le_bytes(pre[4..].try_into().expect("4 bytes"));
        if pre[..4] != PREAMBLE || !from.contains(&rank) || got.contains_key(&rank) {
            return Err(anyhow::anyhow!(
                "a connection from {addr} is not a link from a neighbour of stage {me} \
                 (expected one each from stage {from:?})"
            ));
        }
        let mut r = make(s).map_err(|e| anyhow::anyhow!("the link from stage {rank}: {e}"))?;
        r.yield_when_idle(Duration::from_micros(200));
        got.insert(rank, r);
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;

    const ACT_ONLY: Accepts = Accepts {
        act: true,
        grad: false,
        chunks: 1,
    };

    fn wiring() -> Wiring {
        Wiring {
            transport: TransportKind::Tcp,
            rdma: DeviceChoice {
                device: None,
                port: 1,
                gid_index: 0,
            },
            max_message: max_message(4),
            timeout: Duration::from_secs(5),
            idle: Duration::from_secs(5),
            trust: Trust::Secret(std::sync::Arc::new(
                auth::Secret::from_token("the pipeline tests' secret").unwrap(),
            )),
        }
    }

    /// Stage 0 and stage 1, linked through their own listeners.
    fn pair() -> (Link, Link) {
        let l0 = TcpListener::bind("127.0.0.1:0").unwrap();
        let l1 = TcpListener::bind("127.0.0.1:0").unwrap();
        let peer = |rank, l: &TcpListener| Peer {
            rank,
            address: l.local_addr().unwrap().to_string(),
        };
        let (p0, p1) = (peer(0, &l0), peer(1, &l1));
        let w = wiring();
        let t = w.timeout;
        let (a, b) = std::thread::scope(|sc| {
            let a = sc.spawn(|| connect(&l0, 0, &[p1], &w).unwrap().pop().unwrap());
            let b = sc.spawn(|| connect(&l1, 1, &[p0], &w).unwrap().pop().unwrap());
            (a.join().unwrap(), b.join().unwrap())
        });
        let only = |act, grad| Accepts {
            act,
            grad,
            chunks: 1,
        };
        (
            Link::new(a.0, a.1, only(false, true), "stage 1".into(), 4, 3, t),
            Link::new(b.0, b.1, only(true, false), "stage 0".into(), 4, 3, t),
        )
    }

    #[test]
    fn messages_arrive_confirmed_and_in_order() {
        let (up, down) = pair();
        let sender = std::thread::spawn(move || {
            for mb in 0..3 {
                up.send((ACT, 0), 0, mb, &[mb as f32; 4]).unwrap();
            }
            up.receive((GRAD, 0), 0, 0).unwrap()
        });
        for mb in 0..3 {
            assert_eq!(down.receive((ACT, 0), 0, mb).unwrap(), vec![mb as f32; 4]);
        }
        down.send((GRAD, 0), 0, 0, &[9.0; 4]).unwrap();
        assert_eq!(sender.join().unwrap(), vec![9.0; 4]);
    }

    #[test]
    fn a_misordered_or_repeated_message_fails_by_name() {
        for order in [[1u32, 0], [0, 0]] {
            let inbox = Inbox::default();
            let mut err = None;
            for mb in order {
                if let Err(e) = inbox.file(&frame(ACT, 0, 0, mb, &[1.0, 2.0]), ACT_ONLY, 2, 4) {
                    err = Some(e);
                }
            }
            let e = err.expect("the second message is refused");
            assert!(
                e.to_string().contains("before 0") || e.to_string().contains("twice"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_wrong_size_kind_or_microbatch_is_refused() {
        let inbox = Inbox::default();
        let cases = [
            (frame(ACT, 0, 0, 0, &[1.0]), "bytes"),
            (frame(GRAD, 0, 0, 0, &[1.0, 2.0]), "kind"),
            (frame(ACT, 0, 0, 9, &[1.0, 2.0]), "past the last"),
            (frame(ACT, 1, 0, 0, &[1.0, 2.0]), "model chunk 1"),
            (b"garbage".to_vec(), "not a pipeline message"),
        ];
        for (bytes, want) in cases {
            let e = inbox.file(&bytes, ACT_ONLY, 2, 4).unwrap_err();
            assert!(e.to_string().contains(want), "{e}");
        }
    }

    #[test]
    fn each_chunk_keeps_its_own_order_on_a_link_that_takes_both_kinds() {
        let both = Accepts {
            act: true,
            grad: true,
            chunks: 2,
        };
        let inbox = Inbox::default();
        // Chunk 1's activations interleave with chunk 0's gradients, each in order.
        for (kind, chunk, mb) in [(ACT, 1, 0), (GRAD, 0, 0), (ACT, 1, 1), (GRAD, 0, 1)] {
            inbox
                .file(&frame(kind, chunk, 0, mb, &[1.0, 2.0]), both, 2, 4)
                .unwrap();
        }
        let e = inbox
            .file(&frame(ACT, 1, 0, 1, &[1.0, 2.0]), both, 2, 4)
            .unwrap_err();
        assert!(
            e.to_string().contains("chunk 1's activation 1") && e.to_string().contains("twice"),
            "{e}"
        );
    }

    #[test]
    fn a_stranger_is_dropped_and_a_proven_stranger_named() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        // The unproven one is dropped; a proven one with no neighbour's preamble is named.
        let s2 = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let proving = std::thread::spawn(move || {
            auth::prove(
                &s2,
                &wiring().trust,
                Instant::now() + Duration::from_secs(5),
            )
            .unwrap();
            (&s2).write_all(b"MBPL\x07\0\0\0").unwrap();
            s2
        });
        let e = accept_from(
            &l,
            1,
            &[0],
            &wiring(),
            Instant::now() + Duration::from_secs(5),
        )
        .map(|_| ())
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("not a link from a neighbour of stage 1"),
            "{e}"
        );
        drop(proving.join().unwrap());
    }
}
