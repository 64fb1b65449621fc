//! Completion queues: polled with a deadline, each failed completion an error naming it.

use std::ffi::CStr;
use std::mem::zeroed;
use std::ptr::null_mut;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_sys::*;

use super::device::Device;
use super::error::{last_os_error, Result, VerbsError};

/// What a completion reports, for a successful work request.
#[derive(Debug, Clone, Copy)]
pub struct Completion {
    pub wr_id: u64,
    /// The immediate value of a received RDMA WRITE WITH IMM or SEND WITH IMM.
    pub imm: Option<u32>,
}

pub struct CompletionQueue {
    pub(super) cq: *mut ibv_cq,
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

    /// Busy-polls (as perftest does, with no pause hint between polls: see `perf.rs`'s
    /// `spin_until`) for the next completion, up to `timeout`.
    pub fn wait(&self, timeout: Duration) -> Result<Completion> {
        // The clock is first read once the completion is late (a read can cost microseconds).
        let mut start = None;
        loop {
            for _ in 0..POLLS_PER_CLOCK_CHECK {
                if let Some(c) = self.poll()? {
                    return Ok(c);
                }
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
