//! Reliable-connected queue pairs: their state transitions, posted sends, receives and
//! RDMA writes.

use std::mem::zeroed;
use std::ptr::null_mut;
use std::sync::Arc;

use rdma_sys::*;

use super::device::port_state_name;
use super::error::{check, last_os_error, Result, VerbsError};
use super::memory::{MemoryRegion, ProtectionDomain};
use super::queue::CompletionQueue;

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
