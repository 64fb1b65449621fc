//! What a verbs call can fail with, and the checks that turn return codes into it.

use std::time::Duration;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum VerbsError {
    #[error(
        "no RDMA verbs support in this kernel ({0}): it has no InfiniBand/RoCE drivers. Run on a \
         host with an RDMA NIC, or load Soft-RoCE (`rdma link add rxe0 type rxe netdev IFACE`); \
         scripts/rdma-test runs one under qemu"
    )]
    NoVerbs(std::io::Error),
    #[error(
        "no RDMA devices found. Load a driver for the NIC, or create a Soft-RoCE device with \
         `rdma link add rxe0 type rxe netdev IFACE`"
    )]
    NoDevices,
    #[error("RDMA device {wanted:?} not found; devices here: {have}. Pick one with --device")]
    UnknownDevice { wanted: String, have: String },
    #[error("{call} failed: {source}")]
    Call {
        call: &'static str,
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(String),
    #[error(
        "work request {wr_id} completed with {status} (opcode {opcode}, vendor error {vendor_err})"
    )]
    Completion {
        status: String,
        wr_id: u64,
        opcode: u32,
        vendor_err: u32,
    },
    #[error("no completion within {0:?} (the peer may have died or stalled)")]
    Timeout(Duration),
}

pub(super) type Result<T> = std::result::Result<T, VerbsError>;

pub(super) fn last_os_error(call: &'static str) -> VerbsError {
    VerbsError::Call {
        call,
        source: std::io::Error::last_os_error(),
    }
}

/// Checks the return code of a verbs call that returns 0 or an errno (or -1 with errno set).
pub(super) fn check(call: &'static str, rc: i32) -> Result<()> {
    match rc {
        0 => Ok(()),
        rc if rc > 0 => Err(VerbsError::Call {
            call,
            source: std::io::Error::from_raw_os_error(rc),
        }),
        _ => Err(last_os_error(call)),
    }
}
