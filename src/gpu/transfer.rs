//! Moving bytes between device buffers and host memory: staging buffers, mapping with the wait
//! and the host copy timed apart, and a pool so no timed region allocates or first-touches.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::Instant;

use super::{Gpu, GpuError};

/// Copies must be whole 4-byte words.
pub const COPY_ALIGN: u64 = wgpu::COPY_BUFFER_ALIGNMENT;

/// Where the time of one mapped host copy went, in microseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct MapTiming {
    /// From the map request until the buffer is mapped.
    pub map_us: f64,
    /// The host copy into or out of the mapping.
    pub copy_us: f64,
}

impl Gpu {
    pub fn staging(&self, label: &str, size: u64, mode: wgpu::MapMode) -> wgpu::Buffer {
        let usage = match mode {
            wgpu::MapMode::Read => wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            wgpu::MapMode::Write => wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
        };
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage,
            mapped_at_creation: false,
        })
    }

    /// Maps a buffer whose last use was submission `after` (or the latest one), waiting only
    /// for that submission, so work submitted later is not waited for.
    fn map_wait(
        &self,
        buffer: &wgpu::Buffer,
        mode: wgpu::MapMode,
        after: Option<wgpu::SubmissionIndex>,
    ) -> Result<(), GpuError> {
        let (tx, rx) = std::sync::mpsc::channel();
        buffer.slice(..).map_async(mode, move |r| {
            let _ = tx.send(r);
        });
        let deadline = Instant::now() + super::WAIT_LIMIT;
        let mut wait = Some(after);
        loop {
            let poll = match wait.take() {
                Some(index) => wgpu::PollType::Wait {
                    submission_index: index,
                    timeout: Some(super::WAIT_LIMIT),
                },
                None => wgpu::PollType::Poll,
            };
            self.device
                .poll(poll)
                .map_err(|e| GpuError::Device(e.to_string()))?;
            match rx.try_recv() {
                Ok(r) => return r.map_err(|e| GpuError::Device(format!("map failed: {e}"))),
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    return Err(GpuError::Device("map callback never ran".into()))
                }
                Err(std::sync::mpsc::TryRecvError::Empty) if Instant::now() > deadline => {
                    return Err(GpuError::Timeout(super::WAIT_LIMIT))
                }
                Err(std::sync::mpsc::TryRecvError::Empty) => std::thread::yield_now(),
            }
        }
    }

    /// Maps a finished MAP_READ staging buffer and copies its first `host.len()` bytes out.
    pub fn map_read_into(
        &self,
        staging: &wgpu::Buffer,
        host: &mut [u8],
        after: Option<wgpu::SubmissionIndex>,
    ) -> Result<MapTiming, GpuError> {
        let t0 = Instant::now();
        self.map_wait(staging, wgpu::MapMode::Read, after)?;
        let t1 = Instant::now();
        {
            let view = staging
                .slice(..)
                .get_mapped_range()
                .map_err(|e| GpuError::Device(format!("mapped range: {e}")))?;
            host.copy_from_slice(&view[..host.len()]);
        }
        let t2 = Instant::now();
        staging.unmap();
        Ok(MapTiming {
            map_us: (t1 - t0).as_secs_f64() * 1e6,
            copy_us: (t2 - t1).as_secs_f64() * 1e6,
        })
    }

    /// Maps a MAP_WRITE staging buffer and copies `host` into it.
    pub fn map_write_from(
        &self,
        staging: &wgpu::Buffer,
        host: &[u8],
    ) -> Result<MapTiming, GpuError> {
        let t0 = Instant::now();
        self.map_wait(staging, wgpu::MapMode::Write, None)?;
        let t1 = Instant::now();
        {
            let mut view = staging
                .slice(..host.len() as u64)
                .get_mapped_range_mut()
                .map_err(|e| GpuError::Device(format!("mapped range: {e}")))?;
            view.copy_from_slice(host);
        }
        let t2 = Instant::now();
        staging.unmap();
        Ok(MapTiming {
            map_us: (t1 - t0).as_secs_f64() * 1e6,
            copy_us: (t2 - t1).as_secs_f64() * 1e6,
        })
    }
}

/// A fixed set of MAP_READ staging buffers and pre-touched host buffers of one size, handed
/// out and returned through channels so the poller and sender threads can recycle them.
pub struct StagingPool {
    free_tx: Sender<usize>,
    free_rx: Receiver<usize>,
    pub buffers: Vec<wgpu::Buffer>,
}

impl StagingPool {
    pub fn new(gpu: &Gpu, slots: usize, size: u64) -> StagingPool {
        let (free_tx, free_rx) = channel();
        let buffers = (0..slots)
            .map(|i| {
                free_tx.send(i).expect("receiver alive");
                gpu.staging(&format!("staging {i}"), size, wgpu::MapMode::Read)
            })
            .collect();
        StagingPool {
            free_tx,
            free_rx,
            buffers,
        }
    }

    /// Waits for a free slot (`None` if none came back in time).
    pub fn take(&self, timeout: std::time::Duration) -> Option<usize> {
        self.free_rx.recv_timeout(timeout).ok()
    }

    /// A handle another thread uses to give slots back.
    pub fn returner(&self) -> Sender<usize> {
        self.free_tx.clone()
    }
}

/// A host buffer written end to end (a non-zero fill, so not lazily zero-mapped pages) so its
/// pages exist before any timed copy.
pub fn touched(len: usize) -> Vec<u8> {
    vec![0xA5; len]
}

/// A deterministic, position-dependent byte pattern (so a shifted or partial copy shows).
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(7) as u8 ^ seed)
        .collect()
}
