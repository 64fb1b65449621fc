//! The receiving side: `morphbench sink` on another node, or an in-process sink on loopback.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::factory::{check_available, receiver_for};
use super::{Receiver, TransportError, TransportKind};
use crate::transport::rdma::DeviceChoice;

/// What one connection delivered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkStats {
    pub payloads: u64,
    pub bytes: u64,
    /// Checksum of the last payload, so a caller can compare it with what it meant to send.
    pub last_checksum: u64,
}

/// Receives until the sender says goodbye; every payload is verified before it is acked.
pub fn drain(rx: &mut dyn Receiver) -> Result<SinkStats, TransportError> {
    let mut buf = Vec::new();
    let mut stats = SinkStats::default();
    while rx.recv(&mut buf)?.is_some() {
        stats.payloads += 1;
        stats.bytes += buf.len() as u64;
        stats.last_checksum = super::wire::checksum(&buf);
    }
    Ok(stats)
}

/// Makes a receiver of an accepted connection (completing its hello).
pub type AcceptFn<'a> = dyn Fn(TcpStream) -> Result<Box<dyn Receiver>, TransportError> + Sync + 'a;

/// The most connections a sink serves at once; one more is closed at once, and said so.
pub const MAX_CONNECTIONS: usize = 64;

/// Serves connections until `stop` is set (or, with `once`, serves one and returns). Each
/// connection has its own thread, so a slow or silent client never delays another; each frame
/// has a deadline (the receiver's), so none holds its thread for long. `report` is told about
/// each finished connection.
pub fn serve(
    listener: TcpListener,
    accept: &AcceptFn<'_>,
    once: bool,
    stop: Arc<AtomicBool>,
    report: impl Fn(SocketAddr, Result<SinkStats, TransportError>) + Sync,
) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    let open = AtomicUsize::new(0);
    std::thread::scope(|scope| -> std::io::Result<()> {
        while !stop.load(Ordering::Relaxed) {
            let (stream, peer) = match listener.accept() {
                Ok(pair) => pair,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
                Err(e) => return Err(e),
            };
            stream.set_nonblocking(false)?;
            let serve_one =
                |stream: TcpStream| accept(stream).and_then(|mut rx| drain(rx.as_mut()));
            if once {
                report(peer, serve_one(stream));
                break;
            }
            if open.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
                drop(stream);
                report(
                    peer,
                    Err(TransportError::Protocol(format!(
                        "refused: {MAX_CONNECTIONS} connections are open already"
                    ))),
                );
                continue;
            }
            open.fetch_add(1, Ordering::SeqCst);
            let (open, report) = (&open, &report);
            scope.spawn(move || {
                report(peer, serve_one(stream));
                open.fetch_sub(1, Ordering::SeqCst);
            });
        }
        Ok(())
    })
}

/// An in-process sink on an ephemeral loopback port that serves one connection.
pub fn spawn_loopback(
    transport: TransportKind,
    rdma: DeviceChoice,
    max_payload: u64,
    io: Duration,
) -> std::io::Result<(SocketAddr, JoinHandle<Result<SinkStats, TransportError>>)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let accept = receiver_for(transport, rdma, max_payload, io);
    let handle = std::thread::spawn(move || {
        let (stream, _) = listener.accept()?;
        let mut rx = accept(stream)?;
        drain(rx.as_mut())
    });
    Ok((addr, handle))
}

/// `morphbench sink`: listens (loopback unless told otherwise) and reports each connection.
pub fn run_cli(
    listen: &str,
    max_payload: u64,
    io: Duration,
    once: bool,
    quiet: bool,
    transport: TransportKind,
    rdma: &DeviceChoice,
) -> anyhow::Result<()> {
    check_available(transport, rdma)?;
    let listener = TcpListener::bind(listen).map_err(|e| {
        anyhow::anyhow!("cannot listen on {listen}: {e}. Choose another --listen HOST:PORT")
    })?;
    if !quiet {
        println!(
            "sink listening on {} (max payload {max_payload} B)",
            listener.local_addr()?
        );
    }
    let failed = std::sync::Mutex::new(None);
    let accept = receiver_for(transport, rdma.clone(), max_payload, io);
    serve(
        listener,
        &accept,
        once,
        Arc::new(AtomicBool::new(false)),
        |peer, r| match r {
            Ok(s) => {
                if !quiet {
                    println!(
                        "{peer}: {} payloads, {} bytes, all verified",
                        s.payloads, s.bytes
                    )
                }
            }
            Err(e) => {
                eprintln!("{peer}: {e}");
                *failed.lock().unwrap() = Some(format!("{peer}: {e}"));
            }
        },
    )?;
    match (once, failed.into_inner().unwrap()) {
        (true, Some(e)) => Err(anyhow::anyhow!(e)),
        _ => Ok(()),
    }
}
