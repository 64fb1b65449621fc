//! The links between neighbouring stages: one TCP connection per pair (stage s connects to
//! s + 1), activations downstream, gradients upstream, and an acknowledgement for every
//! message once the receiver holds it whole. A reader thread per connection checks every
//! message (its magic, kind, iteration and microbatch, the exact size) and files it in an
//! inbox; a lost, repeated or misordered message ends the run with an error naming it.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const MAGIC: [u8; 4] = *b"MBP1";
pub const ACT: u8 = 0;
pub const GRAD: u8 = 1;
const ACK: u8 = 2;

/// (kind, iteration, microbatch); an acknowledgement is filed under (ACK + 10 * kind, ...).
type Key = (u8, u32, u32);

#[derive(Default)]
struct Shelf {
    items: HashMap<Key, Vec<f32>>,
    /// The next microbatch expected per (kind, iteration): messages come in microbatch order.
    next: HashMap<(u8, u32), u32>,
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

    /// Waits until `key` arrives (or the link fails, or `deadline`).
    fn take(&self, key: Key, deadline: Instant, what: &str) -> Result<Vec<f32>, String> {
        let mut s = self.shelf.lock().expect("inbox lock");
        loop {
            if let Some(v) = s.items.remove(&key) {
                return Ok(v);
            }
            if let Some(e) = &s.error {
                return Err(e.clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("{what} never arrived (waited until the limit)"));
            }
            s = self.ready.wait_timeout(s, left).expect("inbox lock").0;
        }
    }
}

/// One end of a link between neighbouring stages.
pub struct Link {
    writer: Arc<Mutex<TcpStream>>,
    inbox: Arc<Inbox>,
    /// Who is at the other end, for messages.
    pub peer: String,
    elements: usize,
    timeout: Duration,
}

fn frame(kind: u8, iter: u32, mb: u32, payload: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(20 + payload.len() * 4);
    out.extend_from_slice(&MAGIC);
    out.push(kind);
    out.extend_from_slice(&[0, 0, 0]);
    out.extend_from_slice(&iter.to_le_bytes());
    out.extend_from_slice(&mb.to_le_bytes());
    out.extend_from_slice(&((payload.len() * 4) as u32).to_le_bytes());
    out.extend_from_slice(bytemuck::cast_slice(payload));
    out
}

impl Link {
    /// Wraps a connected stream; `incoming` is the data kind this end receives (ACT from the
    /// previous stage, GRAD from the next).
    pub fn new(
        stream: TcpStream,
        incoming: u8,
        peer: String,
        elements: usize,
        microbatches: u32,
        timeout: Duration,
    ) -> Result<Link, String> {
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let reader = stream.try_clone().map_err(|e| e.to_string())?;
        let writer = Arc::new(Mutex::new(stream));
        let inbox = Arc::new(Inbox::default());
        {
            let (inbox, writer, peer) = (inbox.clone(), writer.clone(), peer.clone());
            std::thread::spawn(move || {
                if let Err(e) = read_loop(reader, &inbox, &writer, incoming, elements, microbatches)
                {
                    inbox.fail(format!("the link to {peer}: {e}"));
                }
            });
        }
        Ok(Link {
            writer,
            inbox,
            peer,
            elements,
            timeout,
        })
    }

    /// Sends a data message and waits for its acknowledgement; returns µs from the start of
    /// the write to the acknowledgement.
    pub fn send(&self, kind: u8, iter: u32, mb: u32, data: &[f32]) -> Result<f64, String> {
        assert_eq!(data.len(), self.elements, "a whole activation");
        let bytes = frame(kind, iter, mb, data);
        let t0 = Instant::now();
        self.writer
            .lock()
            .expect("writer lock")
            .write_all(&bytes)
            .map_err(|e| format!("the link to {}: {e}", self.peer))?;
        let what = format!("the acknowledgement of microbatch {mb} from {}", self.peer);
        self.inbox.take(
            (ACK + 10 * kind, iter, mb),
            Instant::now() + self.timeout,
            &what,
        )?;
        Ok(t0.elapsed().as_secs_f64() * 1e6)
    }

    /// Waits for a data message.
    pub fn receive(&self, kind: u8, iter: u32, mb: u32) -> Result<Vec<f32>, String> {
        let what = format!(
            "{} {mb} of iteration {iter} from {}",
            if kind == ACT {
                "activation"
            } else {
                "gradient"
            },
            self.peer
        );
        self.inbox
            .take((kind, iter, mb), Instant::now() + self.timeout, &what)
    }
}

fn read_loop(
    mut s: TcpStream,
    inbox: &Inbox,
    writer: &Mutex<TcpStream>,
    incoming: u8,
    elements: usize,
    microbatches: u32,
) -> Result<(), String> {
    loop {
        let mut head = [0u8; 20];
        match s.read_exact(&mut head) {
            Ok(()) => {}
            // The peer closing between messages is the end of the run (or its death, which
            // the control channel names); a wait for a message that never comes then fails.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err("the peer closed the link".into())
            }
            Err(e) => return Err(e.to_string()),
        }
        if head[..4] != MAGIC {
            return Err("sent something that is not a pipeline message".into());
        }
        let kind = head[4];
        let word = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
        let (iter, mb, len) = (word(8), word(12), word(16) as usize);
        let is_ack = kind != incoming;
        if !(kind == incoming || kind == ACK + 10 * (1 - incoming)) {
            return Err(format!(
                "sent a message of kind {kind}, which this end does not take"
            ));
        }
        if mb >= microbatches {
            return Err(format!(
                "sent microbatch {mb}, past the last ({})",
                microbatches - 1
            ));
        }
        let want = if is_ack { 0 } else { elements * 4 };
        if len != want {
            return Err(format!("sent {len} bytes for a message of {want}"));
        }
        let mut payload = vec![0u8; len];
        s.read_exact(&mut payload).map_err(|e| e.to_string())?;
        let key = (kind, iter, mb);
        {
            let mut shelf = inbox.shelf.lock().expect("inbox lock");
            let next = shelf.next.entry((kind, iter)).or_insert(0);
            if mb != *next {
                let what = if is_ack {
                    "acknowledgement"
                } else if kind == ACT {
                    "activation"
                } else {
                    "gradient"
                };
                return Err(if mb < *next {
                    format!("sent {what} {mb} of iteration {iter} twice")
                } else {
                    format!("sent {what} {mb} of iteration {iter} before {}", *next)
                });
            }
            *next += 1;
            shelf
                .items
                .insert(key, bytemuck::pod_collect_to_vec::<u8, f32>(&payload));
            inbox.ready.notify_all();
        }
        if !is_ack {
            let ack = frame(ACK + 10 * kind, iter, mb, &[]);
            writer
                .lock()
                .expect("writer lock")
                .write_all(&ack)
                .map_err(|e| e.to_string())?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (Link, Link) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        let t = Duration::from_secs(5);
        (
            Link::new(a, GRAD, "next".into(), 4, 3, t).unwrap(),
            Link::new(b, ACT, "prev".into(), 4, 3, t).unwrap(),
        )
    }

    #[test]
    fn messages_arrive_acknowledged_and_in_order() {
        let (up, down) = pair();
        let sender = std::thread::spawn(move || {
            for mb in 0..3 {
                up.send(ACT, 0, mb, &[mb as f32; 4]).unwrap();
            }
            up.receive(GRAD, 0, 0).unwrap()
        });
        for mb in 0..3 {
            assert_eq!(down.receive(ACT, 0, mb).unwrap(), vec![mb as f32; 4]);
        }
        down.send(GRAD, 0, 0, &[9.0; 4]).unwrap();
        assert_eq!(sender.join().unwrap(), vec![9.0; 4]);
    }

    #[test]
    fn a_misordered_or_repeated_message_fails_by_name() {
        for order in [[1u32, 0], [0, 0]] {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let mut raw = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (b, _) = l.accept().unwrap();
            let down = Link::new(b, ACT, "stage 0".into(), 2, 4, Duration::from_secs(2)).unwrap();
            for mb in order {
                raw.write_all(&frame(ACT, 0, mb, &[1.0, 2.0])).unwrap();
            }
            let e = down.receive(ACT, 0, 3).unwrap_err();
            assert!(
                e.contains("stage 0") && (e.contains("before 0") || e.contains("twice")),
                "{e}"
            );
        }
    }
}
