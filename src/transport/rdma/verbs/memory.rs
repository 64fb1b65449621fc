//! Protection domains and registered memory (written by the NIC, so never lent out as a
//! slice).

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::{self};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use rdma_sys::*;

use super::device::Device;
use super::error::{last_os_error, Result, VerbsError};

pub struct ProtectionDomain {
    pub(super) pd: *mut ibv_pd,
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
    pub(super) fn sge(&self, offset: usize, len: usize) -> Result<ibv_sge> {
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
