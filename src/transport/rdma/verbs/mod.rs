//! A safe layer over libibverbs (rdma-sys): the only place in morphbench with unsafe verbs
//! calls (this folder: its files are one module's parts, split by resource). Every resource is an RAII handle that holds an `Arc` of what it was created from, so
//! teardown runs in the right order (QP, then CQ and MR, then PD, then the device) on every
//! path, errors included.
//!
//! Registered memory is written by the NIC behind the compiler's back, so it is never lent out
//! as a Rust slice: reads and writes go through `MemoryRegion` methods that copy with raw
//! pointers (and volatile loads for spinning on a byte).
#![allow(unsafe_code)]

mod device;
mod error;
mod memory;
mod qp;
mod queue;

pub use device::{
    format_gid, list_devices, mtu_bytes, port_state_name, Device, DeviceInfo, GidInfo, PortAttr,
    PortInfo,
};
pub use error::VerbsError;
pub use memory::{MemoryRegion, ProtectionDomain};
pub use qp::{Endpoint, QpCaps, QueuePair, WriteFlags};
pub use queue::{Completion, CompletionQueue};
