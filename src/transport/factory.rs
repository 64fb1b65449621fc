//! The one place that turns a [`TransportKind`] into a sender or a receiver, so benches and
//! the sink never name TCP or RDMA. A new transport is its file plus one arm in each match.

use std::net::TcpStream;
use std::time::Duration;

use super::tcp::{TcpReceiver, TcpTransport, Timeouts};
use super::{Receiver, Transport, TransportError, TransportKind};
use crate::transport::rdma::oob::OobChannel;
use crate::transport::rdma::transport::{RdmaReceiver, RdmaTransport};
use crate::transport::rdma::DeviceChoice;

/// Says, before anything connects, why `kind` cannot run here (no RDMA device, say).
pub fn check_available(kind: TransportKind, rdma: &DeviceChoice) -> anyhow::Result<()> {
    match kind {
        TransportKind::Tcp => Ok(()),
        TransportKind::Rdma => Ok(rdma.check()?),
    }
}

/// Connects a sender to a sink of the same kind at `addr`.
pub fn connect(
    kind: TransportKind,
    rdma: &DeviceChoice,
    addr: &str,
    max_payload: u64,
    timeouts: Timeouts,
) -> Result<Box<dyn Transport>, TransportError> {
    Ok(match kind {
        TransportKind::Tcp => Box::new(TcpTransport::connect(addr, max_payload, timeouts)?),
        TransportKind::Rdma => Box::new(RdmaTransport::connect(
            addr,
            rdma,
            max_payload,
            timeouts.io,
        )?),
    })
}

/// Makes a sender of `kind` over a stream already connected to a receiver (for callers that
/// open their own connections, as `pipeline` does), completing its hello.
pub fn sender_over(
    kind: TransportKind,
    rdma: &DeviceChoice,
    stream: TcpStream,
    max_payload: u64,
    io: Duration,
) -> Result<Box<dyn Transport>, TransportError> {
    Ok(match kind {
        TransportKind::Tcp => Box::new(TcpTransport::over(stream, max_payload, io)?),
        TransportKind::Rdma => {
            let oob = OobChannel::from_stream(stream, io)?;
            Box::new(RdmaTransport::over(oob, rdma, max_payload, io)?)
        }
    })
}

/// Makes the receiver of one accepted connection for `kind`, completing its hello.
pub fn receiver_for(
    kind: TransportKind,
    rdma: DeviceChoice,
    max_payload: u64,
    io: Duration,
) -> impl Fn(TcpStream) -> Result<Box<dyn Receiver>, TransportError> {
    move |stream| {
        Ok(match kind {
            TransportKind::Tcp => Box::new(TcpReceiver::accept(stream, max_payload, io)?),
            TransportKind::Rdma => {
                let oob = OobChannel::from_stream(stream, io)?;
                Box::new(RdmaReceiver::accept(oob, &rdma, max_payload, io)?)
            }
        })
    }
}
