//! RDMA over libibverbs: the safe verbs layer (`verbs`, the only unsafe code), the out-of-band
//! connection setup (`oob`), perftest-style latency and bandwidth (`perf`, `morphbench rdma`),
//! and the RDMA implementation of the offload `Transport` (`transport`).

pub mod counters;
pub mod oob;
pub mod perf;
pub mod transport;
pub mod verbs;

use rand::Rng;
use thiserror::Error;

use oob::{OobChannel, Purpose};
use verbs::{
    CompletionQueue, Device, Endpoint, MemoryRegion, ProtectionDomain, QpCaps, QueuePair,
    VerbsError,
};

#[derive(Debug, Error)]
pub enum RdmaError {
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    #[error("out-of-band exchange: {0}")]
    Oob(String),
    #[error("timed out: {0}")]
    Timeout(String),
    #[error("the peer reported a failure {0}; see its output")]
    PeerFailed(String),
    #[error("data check failed: {0}")]
    Verify(String),
    #[error("out-of-band connection: {0}")]
    Io(#[from] std::io::Error),
}

/// Which device, port and GID a connection uses.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeviceChoice {
    /// Device name (None: the first device).
    pub device: Option<String>,
    pub port: u8,
    pub gid_index: u8,
}

impl Default for DeviceChoice {
    fn default() -> Self {
        DeviceChoice {
            device: None,
            port: 1,
            gid_index: 0,
        }
    }
}

impl DeviceChoice {
    /// Opens the device and checks the port and GID index, so a wrong choice is reported
    /// before any peer is involved.
    pub fn check(&self) -> Result<(), RdmaError> {
        let device = Device::open(self.device.as_deref())?;
        device.port(self.port)?;
        device.gid(self.port, self.gid_index as i32)?;
        Ok(())
    }
}

/// A connected RC queue pair with one registered buffer on each side. Dropping it releases
/// every verbs resource in order.
pub struct Link {
    pub qp: QueuePair,
    pub cq: std::sync::Arc<CompletionQueue>,
    pub mr: MemoryRegion,
    pub remote: Endpoint,
    pub oob: OobChannel,
    pub device_name: String,
    /// The device's port it was made on (from 1).
    pub port: u8,
}

/// Sizes of the link's queues and buffer.
#[derive(Debug, Clone, Copy)]
pub struct LinkShape {
    pub buffer: usize,
    /// The leading bytes of the buffer the peer may write (advertised in the endpoint).
    pub exposed: usize,
    /// The peer's buffer must be at least this large.
    pub remote_min: u64,
    pub caps: QpCaps,
}

impl Link {
    /// Creates this side's resources, swaps endpoints over `oob`, connects, and meets the peer
    /// at barrier 0 so neither side posts before the other is ready.
    pub fn establish(
        mut oob: OobChannel,
        choice: &DeviceChoice,
        shape: LinkShape,
    ) -> Result<Link, RdmaError> {
        // On any error `oob` is dropped, which tells the peer this side gave up.
        let (qp, cq, mr, device_name) = Self::build(choice, shape)?;
        let psn = rand::thread_rng().gen::<u32>() & 0xff_ffff;
        let mut local = qp.endpoint(&mr, psn)?;
        local.len = shape.exposed.min(shape.buffer) as u64;
        oob.send_endpoint(&local)?;
        let remote = oob.recv_endpoint(shape.remote_min)?;
        qp.connect(&local, &remote)?;
        oob.barrier(0, true)?;
        Ok(Link {
            qp,
            cq,
            mr,
            remote,
            oob,
            device_name,
            port: choice.port,
        })
    }

    /// This end's port counters.
    pub fn counters(&self) -> counters::Port {
        counters::Port {
            root: crate::host::sysfs_root(),
            device: self.device_name.clone(),
            port: self.port,
        }
    }

    #[allow(clippy::type_complexity)]
    fn build(
        choice: &DeviceChoice,
        shape: LinkShape,
    ) -> Result<
        (
            QueuePair,
            std::sync::Arc<CompletionQueue>,
            MemoryRegion,
            String,
        ),
        RdmaError,
    > {
        let device = Device::open(choice.device.as_deref())?;
        let pd = ProtectionDomain::new(&device)?;
        let depth = (shape.caps.send_depth + shape.caps.recv_depth) as i32;
        let cq = CompletionQueue::new(&device, depth)?;
        let mr = MemoryRegion::new(&pd, shape.buffer)?;
        let qp = QueuePair::new(&pd, &cq, shape.caps, choice.port, choice.gid_index)?;
        Ok((qp, cq, mr, device.name().to_string()))
    }
}

/// The client side of the hello: says what it connects for and waits for the server's answer.
pub fn client_hello(
    oob: &mut OobChannel,
    purpose: Purpose,
    params: &oob::Params,
) -> Result<(), RdmaError> {
    oob.send_hello(purpose)?;
    oob.send_params(params)?;
    oob.expect_hello(purpose)
}

/// The server side: checks the client's hello and parameters (bounded as they are read), then
/// answers.
pub fn server_hello(oob: &mut OobChannel, purpose: Purpose) -> Result<oob::Params, RdmaError> {
    oob.expect_hello(purpose)?;
    let params = oob.recv_params()?;
    oob.send_hello(purpose)?;
    Ok(params)
}
