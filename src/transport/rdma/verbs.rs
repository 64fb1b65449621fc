//! A safe layer over libibverbs (rdma-sys): the only place in morphbench with unsafe verbs
//! calls. Every resource is an RAII handle that holds an `Arc` of what it was created from, so
//! teardown runs in the right order (QP, then CQ and MR, then PD, then the device) on every
//! path, errors included.
//!
//! Registered memory is written by the NIC behind the compiler's back, so it is never lent out
//! as a Rust slice: reads and writes go through `MemoryRegion` methods that copy with raw
//! pointers (and volatile loads for spinning on a byte).
#![allow(unsafe_code)]

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ffi::CStr;
use std::mem::zeroed;
use std::ptr::{self, null_mut};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_sys::*;
use serde::Serialize;
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

type Result<T> = std::result::Result<T, VerbsError>;

fn last_os_error(call: &'static str) -> VerbsError {
    VerbsError::Call {
        call,
        source: std::io::Error::last_os_error(),
    }
}

/// Checks the return code of a verbs call that returns 0 or an errno (or -1 with errno set).
fn check(call: &'static str, rc: i32) -> Result<()> {
    match rc {
        0 => Ok(()),
        rc if rc > 0 => Err(VerbsError::Call {
            call,
            source: std::io::Error::from_raw_os_error(rc),
        }),
        _ => Err(last_os_error(call)),
    }
}

/// The libibverbs device list, freed on drop.
struct DeviceList {
    list: *mut *mut ibv_device,
    len: usize,
}

impl DeviceList {
    fn get() -> Result<DeviceList> {
        let mut n = 0;
        // SAFETY: n is a valid out-pointer; a NULL result is handled below.
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() {
            let e = std::io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(38) => VerbsError::NoVerbs(e), // ENOSYS
                _ => VerbsError::Call {
                    call: "ibv_get_device_list",
                    source: e,
                },
            });
        }
        Ok(DeviceList {
            list,
            len: n.max(0) as usize,
        })
    }

    fn devices(&self) -> impl Iterator<Item = (String, *mut ibv_device)> + '_ {
        (0..self.len).map(move |i| {
            // SAFETY: i < len entries returned by ibv_get_device_list, each a valid device
            // whose name is a NUL-terminated string owned by the list.
            unsafe {
                let d = *self.list.add(i);
                let name = CStr::from_ptr(ibv_get_device_name(d))
                    .to_string_lossy()
                    .into_owned();
                (name, d)
            }
        })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: list came from ibv_get_device_list and is freed once.
        unsafe { ibv_free_device_list(self.list) };
    }
}

/// What `morphbench info` shows of one device.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceInfo {
    pub name: String,
    pub node_guid: String,
    pub max_qp_wr: i32,
    pub ports: Vec<PortInfo>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PortInfo {
    pub port: u8,
    pub state: &'static str,
    pub link_layer: &'static str,
    pub active_mtu: u32,
    pub lid: u16,
    /// The non-zero GIDs among the first few indices (reading all of them can be slow).
    pub gids: Vec<GidInfo>,
}

#[derive(Debug, Clone, Serialize)]
pub struct GidInfo {
    pub index: u32,
    pub gid: String,
}

/// How many GID indices `info` looks at per port.
const GIDS_LISTED: i32 = 8;

/// Every RDMA device with its ports and GIDs.
pub fn list_devices() -> Result<Vec<DeviceInfo>> {
    let list = DeviceList::get()?;
    let names: Vec<String> = list.devices().map(|(n, _)| n).collect();
    drop(list);
    names
        .iter()
        .map(|n| Device::open(Some(n))?.info())
        .collect()
}

pub fn port_state_name(s: u32) -> &'static str {
    match s {
        ibv_port_state::IBV_PORT_DOWN => "DOWN",
        ibv_port_state::IBV_PORT_INIT => "INIT",
        ibv_port_state::IBV_PORT_ARMED => "ARMED",
        ibv_port_state::IBV_PORT_ACTIVE => "ACTIVE",
        ibv_port_state::IBV_PORT_ACTIVE_DEFER => "ACTIVE_DEFER",
        _ => "NOP",
    }
}

fn link_layer_name(l: u8) -> &'static str {
    // IBV_LINK_LAYER_* are C macros that rdma-sys does not bind.
    match l {
        1 => "InfiniBand",
        2 => "Ethernet",
        _ => "unspecified",
    }
}

/// Path MTU in bytes from the verbs enum (256 << (mtu - 1)).
pub fn mtu_bytes(mtu: u32) -> u32 {
    if (1..=5).contains(&mtu) {
        256 << (mtu - 1)
    } else {
        0
    }
}

pub fn format_gid(raw: &[u8; 16]) -> String {
    raw.chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}

/// The attributes of one port that connection setup needs.
#[derive(Debug, Clone, Copy)]
pub struct PortAttr {
    pub state: u32,
    pub lid: u16,
    pub active_mtu: u32,
    pub link_layer: u8,
    pub gid_table_len: i32,
}

/// An opened RDMA device (verbs context).
pub struct Device {
    ctx: *mut ibv_context,
    name: String,
}

// SAFETY: libibverbs contexts and the objects created from them are thread-safe.
unsafe impl Send for Device {}
unsafe impl Sync for Device {}

impl Device {
    /// Opens the named device, or the first one when `name` is None.
    pub fn open(name: Option<&str>) -> Result<Arc<Device>> {
        let list = DeviceList::get()?;
        let all: Vec<(String, *mut ibv_device)> = list.devices().collect();
        if all.is_empty() {
            return Err(VerbsError::NoDevices);
        }
        let (found, dev) = match name {
            None => all[0].clone(),
            Some(want) => all
                .iter()
                .find(|(n, _)| n == want)
                .cloned()
                .ok_or_else(|| VerbsError::UnknownDevice {
                    wanted: want.to_string(),
                    have: all
                        .iter()
                        .map(|(n, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                })?,
        };
        // SAFETY: dev is a live entry of the list, which outlives this call.
        let ctx = unsafe { ibv_open_device(dev) };
        if ctx.is_null() {
            return Err(last_os_error("ibv_open_device"));
        }
        Ok(Arc::new(Device { ctx, name: found }))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn port(&self, port: u8) -> Result<PortAttr> {
        // SAFETY: ctx is open; attr is a zeroed out-struct of the size the call expects.
        let attr = unsafe {
            let mut attr: ibv_port_attr = zeroed();
            let rc = ___ibv_query_port(self.ctx, port, &mut attr);
            if rc != 0 {
                return Err(VerbsError::Invalid(format!(
                    "port {port} of {} cannot be queried ({}). Pick an existing port with \
                     --ib-port (ports start at 1)",
                    self.name,
                    std::io::Error::from_raw_os_error(rc.abs())
                )));
            }
            attr
        };
        Ok(PortAttr {
            state: attr.state,
            lid: attr.lid,
            active_mtu: attr.active_mtu,
            link_layer: attr.link_layer,
            gid_table_len: attr.gid_tbl_len,
        })
    }

    pub fn gid(&self, port: u8, index: i32) -> Result<[u8; 16]> {
        let table = self.port(port)?.gid_table_len;
        if index < 0 || index >= table {
            return Err(VerbsError::Invalid(format!(
                "GID index {index} is outside port {port}'s table of {table} entries on {}; \
                 pick one with --gid-index (see `morphbench info`)",
                self.name
            )));
        }
        // SAFETY: ctx is open and the index is inside the table.
        let gid = unsafe {
            let mut gid: ibv_gid = zeroed();
            check(
                "ibv_query_gid",
                ibv_query_gid(self.ctx, port, index, &mut gid),
            )?;
            gid.raw
        };
        if gid == [0; 16] {
            return Err(VerbsError::Invalid(format!(
                "GID index {index} on port {port} of {} is empty; pick a populated one with \
                 --gid-index (see `morphbench info`)",
                self.name
            )));
        }
        Ok(gid)
    }

    fn info(&self) -> Result<DeviceInfo> {
        // SAFETY: ctx is open; attr is a zeroed out-struct.
        let attr = unsafe {
            let mut attr: ibv_device_attr = zeroed();
            check("ibv_query_device", ibv_query_device(self.ctx, &mut attr))?;
            attr
        };
        let guid = u64::from_be(attr.node_guid);
        let mut ports = Vec::new();
        for p in 1..=attr.phys_port_cnt {
            let a = self.port(p)?;
            let mut gids = Vec::new();
            for i in 0..a.gid_table_len.min(GIDS_LISTED) {
                if let Ok(g) = self.gid(p, i) {
                    gids.push(GidInfo {
                        index: i as u32,
                        gid: format_gid(&g),
                    });
                }
            }
            ports.push(PortInfo {
                port: p,
                state: port_state_name(a.state),
                link_layer: link_layer_name(a.link_layer),
                active_mtu: mtu_bytes(a.active_mtu),
                lid: a.lid,
                gids,
            });
        }
        Ok(DeviceInfo {
            name: self.name.clone(),
            node_guid: format!(
                "{:04x}:{:04x}:{:04x}:{:04x}",
                guid >> 48,
                (guid >> 32) & 0xffff,
                (guid >> 16) & 0xffff,
                guid & 0xffff
            ),
            max_qp_wr: attr.max_qp_wr,
            ports,
        })
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: every child holds an Arc of this device, so none is alive any more.
        unsafe { ibv_close_device(self.ctx) };
    }
}

pub struct ProtectionDomain {
    pd: *mut ibv_pd,
    device: Arc<Device>,
}

// SAFETY: see Device.
unsafe impl Send for ProtectionDomain {}
unsafe impl Sync for ProtectionDomain {}

impl ProtectionDomain {
    pub fn new(device: &Arc<Device>) -> Result<Arc<ProtectionDomain>> {
        // SAFETY: the context is open.
        let pd = unsafe { ibv_alloc_pd(device.ctx) };
        if pd.is_null() {
            return Err(last_os_error("ibv_alloc_pd"));
        }
        Ok(Arc::new(ProtectionDomain {
            pd,
            device: device.clone(),
        }))
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }
}

impl Drop for ProtectionDomain {
    fn drop(&mut self) {
        // SAFETY: MRs and QPs hold an Arc of this PD, so none is alive any more.
        unsafe { ibv_dealloc_pd(self.pd) };
    }
}

/// A page-aligned, zeroed host buffer registered for local and remote access.
pub struct MemoryRegion {
    mr: *mut ibv_mr,
    buf: *mut u8,
    layout: Layout,
    _pd: Arc<ProtectionDomain>,
}

// SAFETY: the buffer is only touched through raw-pointer copies; see the module comment.
unsafe impl Send for MemoryRegion {}
unsafe impl Sync for MemoryRegion {}

impl MemoryRegion {
    pub fn new(pd: &Arc<ProtectionDomain>, len: usize) -> Result<MemoryRegion> {
        let layout = Layout::from_size_align(len.max(1), 4096)
            .map_err(|e| VerbsError::Invalid(format!("buffer of {len} bytes: {e}")))?;
        // SAFETY: the layout has a non-zero size.
        let buf = unsafe { alloc_zeroed(layout) };
        if buf.is_null() {
            return Err(VerbsError::Invalid(format!(
                "cannot allocate a {len}-byte buffer to register"
            )));
        }
        let access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
            | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE
            | ibv_access_flags::IBV_ACCESS_REMOTE_READ;
        // SAFETY: buf is a live allocation of layout.size() bytes that outlives the MR.
        let mr = unsafe { ibv_reg_mr(pd.pd, buf.cast(), layout.size(), access.0 as i32) };
        if mr.is_null() {
            let e = last_os_error("ibv_reg_mr");
            // SAFETY: allocated above with this layout, not registered.
            unsafe { dealloc(buf, layout) };
            return Err(e);
        }
        Ok(MemoryRegion {
            mr,
            buf,
            layout,
            _pd: pd.clone(),
        })
    }

    pub fn len(&self) -> usize {
        self.layout.size()
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn addr(&self) -> u64 {
        self.buf as u64
    }

    pub fn lkey(&self) -> u32 {
        // SAFETY: mr is registered for the lifetime of self.
        unsafe { (*self.mr).lkey }
    }

    pub fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.mr).rkey }
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(VerbsError::Invalid(format!(
                "range {offset}+{len} is outside the {}-byte registered buffer",
                self.len()
            ))),
        }
    }

    /// The scatter-gather entry for `len` bytes at `offset`, checked against the buffer.
    fn sge(&self, offset: usize, len: usize) -> Result<ibv_sge> {
        self.check_range(offset, len)?;
        Ok(ibv_sge {
            addr: self.addr() + offset as u64,
            length: u32::try_from(len).map_err(|_| {
                VerbsError::Invalid(format!("{len} bytes is over one work request's 4 GiB"))
            })?,
            lkey: self.lkey(),
        })
    }

    /// Copies `data` into the buffer at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check_range(offset, data.len())?;
        // SAFETY: in bounds; data cannot overlap the registered buffer we own.
        unsafe { ptr::copy_nonoverlapping(data.as_ptr(), self.buf.add(offset), data.len()) };
        fence(Ordering::Release);
        Ok(())
    }

    /// Copies out of the buffer at `offset` into `out`.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check_range(offset, out.len())?;
        fence(Ordering::Acquire);
        // SAFETY: in bounds; out cannot overlap the registered buffer we own.
        unsafe { ptr::copy_nonoverlapping(self.buf.add(offset), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// One byte, read afresh from memory every call (for spinning on a byte a peer writes).
    pub fn load_byte(&self, offset: usize) -> u8 {
        assert!(offset < self.len(), "byte {offset} outside the buffer");
        // SAFETY: in bounds; a volatile read so the loop re-reads what the NIC wrote.
        unsafe { ptr::read_volatile(self.buf.add(offset)) }
    }

    pub fn store_byte(&self, offset: usize, value: u8) {
        assert!(offset < self.len(), "byte {offset} outside the buffer");
        // SAFETY: in bounds.
        unsafe { ptr::write_volatile(self.buf.add(offset), value) };
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: deregistered before the memory is freed; both exactly once.
        unsafe {
            ibv_dereg_mr(self.mr);
            dealloc(self.buf, self.layout);
        }
    }
}

/// What a completion reports, for a successful work request.
#[derive(Debug, Clone, Copy)]
pub struct Completion {
    pub wr_id: u64,
    /// The immediate value of a received RDMA WRITE WITH IMM or SEND WITH IMM.
    pub imm: Option<u32>,
}

pub struct CompletionQueue {
    cq: *mut ibv_cq,
    _device: Arc<Device>,
}

// SAFETY: see Device.
unsafe impl Send for CompletionQueue {}
unsafe impl Sync for CompletionQueue {}

/// Polls between looks at the clock while waiting.
const POLLS_PER_CLOCK_CHECK: u32 = 256;

impl CompletionQueue {
    pub fn new(device: &Arc<Device>, depth: i32) -> Result<Arc<CompletionQueue>> {
        // SAFETY: the context is open; no channel, no context pointer.
        let cq = unsafe { ibv_create_cq(device.ctx, depth, null_mut(), null_mut(), 0) };
        if cq.is_null() {
            return Err(last_os_error("ibv_create_cq"));
        }
        Ok(Arc::new(CompletionQueue {
            cq,
            _device: device.clone(),
        }))
    }

    /// Takes at most one completion without waiting. A failed work request is an error
    /// naming its `ibv_wc_status`.
    pub fn poll(&self) -> Result<Option<Completion>> {
        // SAFETY: cq is live; wc is a valid out-struct for one entry.
        let wc = unsafe {
            let mut wc: ibv_wc = zeroed();
            let n = ibv_poll_cq(self.cq, 1, &mut wc);
            if n < 0 {
                return Err(VerbsError::Call {
                    call: "ibv_poll_cq",
                    source: std::io::Error::from_raw_os_error(-n),
                });
            }
            if n == 0 {
                return Ok(None);
            }
            wc
        };
        if wc.status != ibv_wc_status::IBV_WC_SUCCESS {
            // SAFETY: ibv_wc_status_str returns a static string for any value.
            let status = unsafe { CStr::from_ptr(ibv_wc_status_str(wc.status)) };
            return Err(VerbsError::Completion {
                status: format!("{} ({})", status.to_string_lossy(), wc.status),
                wr_id: wc.wr_id,
                opcode: wc.opcode,
                vendor_err: wc.vendor_err,
            });
        }
        let with_imm = wc.wc_flags & ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0;
        Ok(Some(Completion {
            wr_id: wc.wr_id,
            // SAFETY: the union holds imm_data when IBV_WC_WITH_IMM is set.
            imm: with_imm
                .then(|| u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data })),
        }))
    }

    /// Busy-polls (as perftest does) for the next completion, up to `timeout`.
    pub fn wait(&self, timeout: Duration) -> Result<Completion> {
        // The clock is first read once the completion is late (a read can cost microseconds).
        let mut start = None;
        loop {
            for _ in 0..POLLS_PER_CLOCK_CHECK {
                if let Some(c) = self.poll()? {
                    return Ok(c);
                }
                std::hint::spin_loop();
            }
            let start = *start.get_or_insert_with(Instant::now);
            if start.elapsed() > timeout {
                return Err(VerbsError::Timeout(timeout));
            }
        }
    }
}

impl CompletionQueue {
    /// Like [`wait`](Self::wait), but once `spin` has passed with nothing, polls every 50 µs
    /// and sleeps between: for a receiver whose messages are far apart on cores that compute
    /// meanwhile, where a busy poll would take a core from the work being measured.
    pub fn wait_patiently(&self, timeout: Duration, spin: Duration) -> Result<Completion> {
        let start = Instant::now();
        loop {
            for _ in 0..POLLS_PER_CLOCK_CHECK {
                if let Some(c) = self.poll()? {
                    return Ok(c);
                }
                std::hint::spin_loop();
            }
            let waited = start.elapsed();
            if waited > timeout {
                return Err(VerbsError::Timeout(timeout));
            }
            if waited > spin {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        // SAFETY: every QP using this CQ holds an Arc of it, so none is alive any more.
        unsafe { ibv_destroy_cq(self.cq) };
    }
}

/// Where one side's queue pair and buffer live, as exchanged out of band.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    pub lid: u16,
    pub qpn: u32,
    pub psn: u32,
    pub rkey: u32,
    pub addr: u64,
    pub len: u64,
    pub gid: [u8; 16],
    /// Active MTU as the verbs enum (1..=5).
    pub mtu: u32,
}

/// The sizes of a queue pair.
#[derive(Debug, Clone, Copy)]
pub struct QpCaps {
    pub send_depth: u32,
    pub recv_depth: u32,
    /// Inline data asked for; the device may give less (or none).
    pub max_inline: u32,
}

/// A reliable-connected queue pair.
pub struct QueuePair {
    qp: *mut ibv_qp,
    max_inline: u32,
    port: u8,
    gid_index: u8,
    pd: Arc<ProtectionDomain>,
    _cq: Arc<CompletionQueue>,
}

// SAFETY: see Device.
unsafe impl Send for QueuePair {}
unsafe impl Sync for QueuePair {}

/// Work-request options for an RDMA WRITE.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteFlags {
    pub signaled: bool,
    pub inline: bool,
    pub imm: Option<u32>,
    /// Returned in the completion.
    pub wr_id: u64,
}

impl QueuePair {
    /// Creates an RC queue pair on `port` using `gid_index` for its address, both checked.
    pub fn new(
        pd: &Arc<ProtectionDomain>,
        cq: &Arc<CompletionQueue>,
        caps: QpCaps,
        port: u8,
        gid_index: u8,
    ) -> Result<QueuePair> {
        let device = pd.device();
        let attr = device.port(port)?;
        device.gid(port, gid_index as i32)?;
        if attr.state != ibv_port_state::IBV_PORT_ACTIVE {
            return Err(VerbsError::Invalid(format!(
                "port {port} of {} is {}, not ACTIVE; bring its link up or pick another \
                 --ib-port",
                device.name(),
                port_state_name(attr.state)
            )));
        }
        let create = |inline: u32| {
            // SAFETY: init attributes are fully initialised; pd and cq are live.
            unsafe {
                let mut ia: ibv_qp_init_attr = zeroed();
                ia.send_cq = cq.cq;
                ia.recv_cq = cq.cq;
                ia.qp_type = ibv_qp_type::IBV_QPT_RC;
                ia.cap.max_send_wr = caps.send_depth;
                ia.cap.max_recv_wr = caps.recv_depth;
                ia.cap.max_send_sge = 1;
                ia.cap.max_recv_sge = 1;
                ia.cap.max_inline_data = inline;
                let qp = ibv_create_qp(pd.pd, &mut ia);
                (qp, ia.cap.max_inline_data)
            }
        };
        // Some devices refuse inline data; fall back to none rather than fail.
        let (mut qp, mut inline) = create(caps.max_inline);
        if qp.is_null() && caps.max_inline > 0 {
            (qp, inline) = create(0);
        }
        if qp.is_null() {
            return Err(last_os_error("ibv_create_qp"));
        }
        Ok(QueuePair {
            qp,
            // The device may grant more than asked (rxe does): what was asked is the limit, as
            // perftest's -I is, so --inline-size 0 sends nothing inline.
            max_inline: inline.min(caps.max_inline),
            port,
            gid_index,
            pd: pd.clone(),
            _cq: cq.clone(),
        })
    }

    pub fn max_inline(&self) -> u32 {
        self.max_inline
    }

    pub fn qpn(&self) -> u32 {
        // SAFETY: qp is live.
        unsafe { (*self.qp).qp_num }
    }

    /// This side's endpoint, advertising `mr` as the buffer the peer may write.
    pub fn endpoint(&self, mr: &MemoryRegion, psn: u32) -> Result<Endpoint> {
        let device = self.pd.device();
        let attr = device.port(self.port)?;
        Ok(Endpoint {
            lid: attr.lid,
            qpn: self.qpn(),
            psn: psn & 0xff_ffff,
            rkey: mr.rkey(),
            addr: mr.addr(),
            len: mr.len() as u64,
            gid: device.gid(self.port, self.gid_index as i32)?,
            mtu: attr.active_mtu,
        })
    }

    fn modify(
        &self,
        attr: &mut ibv_qp_attr,
        mask: ibv_qp_attr_mask,
        what: &'static str,
    ) -> Result<()> {
        // SAFETY: qp is live and attr is initialised for every bit in mask.
        check(what, unsafe { ibv_modify_qp(self.qp, attr, mask.0 as i32) })
    }

    /// INIT -> RTR -> RTS against the remote endpoint.
    pub fn connect(&self, local: &Endpoint, remote: &Endpoint) -> Result<()> {
        let access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
            | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE
            | ibv_access_flags::IBV_ACCESS_REMOTE_READ;
        // SAFETY (all three zeroed): ibv_qp_attr is plain data; zero is valid for every field.
        // SAFETY: ibv_qp_attr is a plain C struct for which all-zero bytes are valid.
        let mut a: ibv_qp_attr = unsafe { zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = self.port;
        a.qp_access_flags = access.0;
        self.modify(
            &mut a,
            ibv_qp_attr_mask::IBV_QP_STATE
                | ibv_qp_attr_mask::IBV_QP_PKEY_INDEX
                | ibv_qp_attr_mask::IBV_QP_PORT
                | ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS,
            "ibv_modify_qp(INIT)",
        )?;

        // SAFETY: ibv_qp_attr is a plain C struct for which all-zero bytes are valid.
        let mut a: ibv_qp_attr = unsafe { zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RTR;
        a.path_mtu = local.mtu.min(remote.mtu).max(1);
        a.dest_qp_num = remote.qpn;
        a.rq_psn = remote.psn;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 12;
        a.ah_attr.dlid = remote.lid;
        a.ah_attr.port_num = self.port;
        // RoCE needs a global route; on InfiniBand it is harmless when a GID is set.
        if remote.gid != [0; 16] {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid.raw = remote.gid;
            a.ah_attr.grh.sgid_index = self.gid_index;
            a.ah_attr.grh.hop_limit = 64;
        }
        self.modify(
            &mut a,
            ibv_qp_attr_mask::IBV_QP_STATE
                | ibv_qp_attr_mask::IBV_QP_AV
                | ibv_qp_attr_mask::IBV_QP_PATH_MTU
                | ibv_qp_attr_mask::IBV_QP_DEST_QPN
                | ibv_qp_attr_mask::IBV_QP_RQ_PSN
                | ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC
                | ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER,
            "ibv_modify_qp(RTR)",
        )?;

        // SAFETY: ibv_qp_attr is a plain C struct for which all-zero bytes are valid.
        let mut a: ibv_qp_attr = unsafe { zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RTS;
        // 4.096 us * 2^14 = 67 ms per try, 7 tries: a dead peer surfaces within ~0.5 s.
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.sq_psn = local.psn;
        a.max_rd_atomic = 1;
        self.modify(
            &mut a,
            ibv_qp_attr_mask::IBV_QP_STATE
                | ibv_qp_attr_mask::IBV_QP_TIMEOUT
                | ibv_qp_attr_mask::IBV_QP_RETRY_CNT
                | ibv_qp_attr_mask::IBV_QP_RNR_RETRY
                | ibv_qp_attr_mask::IBV_QP_SQ_PSN
                | ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC,
            "ibv_modify_qp(RTS)",
        )
    }

    fn post(&self, wr: &mut ibv_send_wr) -> Result<()> {
        let mut bad = null_mut();
        // SAFETY: wr and its sge live across the call; posting copies them.
        check("ibv_post_send", unsafe {
            ibv_post_send(self.qp, wr, &mut bad)
        })
    }

    /// RDMA WRITE of `len` bytes at `offset` in `mr` to `remote_offset` in the remote buffer.
    pub fn write(
        &self,
        mr: &MemoryRegion,
        offset: usize,
        len: usize,
        remote: &Endpoint,
        remote_offset: u64,
        flags: WriteFlags,
    ) -> Result<()> {
        match remote_offset.checked_add(len as u64) {
            Some(end) if end <= remote.len => {}
            _ => {
                return Err(VerbsError::Invalid(format!(
                    "remote range {remote_offset}+{len} is outside the peer's {}-byte buffer",
                    remote.len
                )))
            }
        }
        if flags.inline && len as u32 > self.max_inline {
            return Err(VerbsError::Invalid(format!(
                "{len} bytes inline exceeds the queue pair's inline limit of {}",
                self.max_inline
            )));
        }
        let mut sge = mr.sge(offset, len)?;
        // SAFETY: ibv_send_wr is plain data; zero is valid for every field.
        let mut wr: ibv_send_wr = unsafe { zeroed() };
        wr.wr_id = flags.wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = match flags.imm {
            Some(imm) => {
                wr.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
                ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM
            }
            None => ibv_wr_opcode::IBV_WR_RDMA_WRITE,
        };
        let mut send_flags = 0;
        if flags.signaled {
            send_flags |= ibv_send_flags::IBV_SEND_SIGNALED.0;
        }
        if flags.inline {
            send_flags |= ibv_send_flags::IBV_SEND_INLINE.0;
        }
        wr.send_flags = send_flags;
        wr.wr.rdma.remote_addr = remote.addr + remote_offset;
        wr.wr.rdma.rkey = remote.rkey;
        self.post(&mut wr)
    }

    /// A signaled SEND of `len` bytes at `offset` in `mr` (consumes one posted receive).
    pub fn send(&self, mr: &MemoryRegion, offset: usize, len: usize, wr_id: u64) -> Result<()> {
        let mut sge = mr.sge(offset, len)?;
        // SAFETY: as in write.
        let mut wr: ibv_send_wr = unsafe { zeroed() };
        wr.wr_id = wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = ibv_wr_opcode::IBV_WR_SEND;
        wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        if len as u32 <= self.max_inline {
            wr.send_flags |= ibv_send_flags::IBV_SEND_INLINE.0;
        }
        self.post(&mut wr)
    }

    /// Posts a receive for `len` bytes at `offset` in `mr` (len 0 for WRITE WITH IMM only).
    pub fn post_recv(
        &self,
        mr: &MemoryRegion,
        offset: usize,
        len: usize,
        wr_id: u64,
    ) -> Result<()> {
        let mut sge = mr.sge(offset, len)?;
        // SAFETY: ibv_recv_wr is plain data; zero is valid for every field.
        let mut wr: ibv_recv_wr = unsafe { zeroed() };
        wr.wr_id = wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        let mut bad = null_mut();
        // SAFETY: wr and sge live across the call.
        check("ibv_post_recv", unsafe {
            ibv_post_recv(self.qp, &mut wr, &mut bad)
        })
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // SAFETY: destroyed once, before the CQ and PD it holds Arcs of.
        unsafe { ibv_destroy_qp(self.qp) };
    }
}
