//! Moving host buffers to a peer: the `Transport` trait (send with an end-to-end check), a TCP
//! implementation, the wire format, and the receiving sink. Knows nothing of the GPU.

#[doc(hidden)]
// The transports' shared test suite: for unit tests and, with test-hooks, tests/rdma.rs.
#[cfg(any(test, feature = "test-hooks"))]
pub mod conformance;
pub mod factory;
pub mod rdma;
pub mod sink;
pub mod tcp;
pub mod tcp_info;
pub mod wire;

use std::time::Duration;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum TransportError {
    #[error(
        "cannot connect to {addr}: {source}. Is `morphbench sink --listen {addr}` running there?"
    )]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("the peer timed out after {0:?} (it stopped answering)")]
    Timeout(Duration),
    #[error("the peer closed the connection")]
    Closed,
    #[error("protocol error: {0}")]
    Protocol(String),
    #[error("payload {seq} arrived corrupted (checksum mismatch)")]
    Corrupt { seq: u64 },
    #[error("payload of {len} bytes exceeds the peer's limit of {max} bytes")]
    TooLarge { len: u64, max: u64 },
    #[error("RDMA: {0}")]
    Rdma(String),
    #[error("I/O error: {0}")]
    Io(std::io::Error),
}

impl From<std::io::Error> for TransportError {
    fn from(e: std::io::Error) -> Self {
        use std::io::ErrorKind::*;
        match e.kind() {
            UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe => {
                TransportError::Closed
            }
            WouldBlock | TimedOut => TransportError::Timeout(Duration::ZERO),
            _ => TransportError::Io(e),
        }
    }
}

/// Which transport carries offloaded bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    #[default]
    Tcp,
    Rdma,
}

impl std::fmt::Display for TransportKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TransportKind::Tcp => "tcp",
            TransportKind::Rdma => "rdma",
        })
    }
}

/// Where the time of one send went, in microseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct SendTiming {
    /// Handing the bytes to the transport (the socket write, the RDMA post).
    pub send_us: f64,
    /// From the end of the send until the peer confirmed the payload intact.
    pub receive_us: f64,
}

impl SendTiming {
    /// A send that started at `start`, handed its bytes over by `sent`, and was confirmed now.
    pub fn since(start: std::time::Instant, sent: std::time::Instant) -> SendTiming {
        SendTiming {
            send_us: (sent - start).as_secs_f64() * 1e6,
            receive_us: sent.elapsed().as_secs_f64() * 1e6,
        }
    }
}

impl TransportError {
    /// Refuses a payload over the peer's limit before anything is sent.
    pub fn check_fits(len: usize, max: u64) -> Result<(), TransportError> {
        let len = len as u64;
        if len > max {
            return Err(TransportError::TooLarge { len, max });
        }
        Ok(())
    }

    /// Puts the limit that ran out into a timeout (lower layers do not know it).
    pub fn with_timeout(self, limit: Duration) -> TransportError {
        match self {
            TransportError::Timeout(_) => TransportError::Timeout(limit),
            other => other,
        }
    }
}

/// Sends host buffers to a peer. Every payload is checked by the receiver, and `send`
/// returns only once the peer has confirmed it arrived intact.
pub trait Transport: Send {
    /// Sends one payload and waits for the peer's confirmation (what `send` wraps).
    fn send_payload(&mut self, payload: &[u8]) -> Result<SendTiming, TransportError>;
    /// The limit on any one read or write, named in a timeout error.
    fn io_timeout(&self) -> Duration;
    /// Sends one payload; a timeout error names the limit that ran out.
    fn send(&mut self, payload: &[u8]) -> Result<SendTiming, TransportError> {
        let io = self.io_timeout();
        self.send_payload(payload).map_err(|e| e.with_timeout(io))
    }
    /// Ends the session cleanly.
    fn close(&mut self) -> Result<(), TransportError>;
    fn name(&self) -> &'static str;
}

/// Receives payloads into a host buffer, checking and acknowledging each.
pub trait Receiver: Send {
    /// The next payload's sequence number, or `None` once the sender said goodbye.
    fn recv(&mut self, buf: &mut Vec<u8>) -> Result<Option<u64>, TransportError>;
    /// Lets the wait for the next payload sleep once `spin` has passed with nothing (a
    /// transport that busy-polls would otherwise hold a core between payloads far apart).
    /// Waits that block in the kernel already do; they ignore this.
    fn yield_when_idle(&mut self, _spin: Duration) {}
}

#[cfg(test)]
mod tests;
