//! Timing GPU work two ways at once: timestamp queries written at the start and end of each
//! compute pass (the GPU's own clock), and the host clock from submit to completion.

use std::time::Instant;

use super::kernels::{record_untimed, Upload};
use super::{Gpu, GpuError};
use crate::host::process_cpu_us;
use crate::stats::Summary;

/// At most 4096 queries fit one set; two per timed pass.
const MAX_PAIRS: u32 = 2048;

/// Per-iteration durations in microseconds.
#[derive(Debug, Clone)]
pub struct IterationTimes {
    /// `None` when the adapter has no timestamp queries inside passes, or when they were
    /// rejected (`gpu_rejected` says why).
    pub gpu_us: Option<Vec<f64>>,
    pub host_us: Vec<f64>,
    pub gpu_rejected: Option<String>,
}

/// Why GPU timestamps cannot be what they claim, if so: on every driver, a span longer than
/// the host's submit-to-done span that contains it; and on a CPU driver, one too short for
/// the work. Seen on lavapipe, whose timestamps are taken at the wrong point once anything has
/// rendered in the process (e.g. a texture cleared through a render pass): 48 µs for a GEMM
/// whose work took 8 ms.
///
/// The test is the CPU time this process used per iteration (`cpu_us`). A CPU driver does the
/// kernel's work on this process's threads, so timestamps that span the work cover at least
/// that CPU time spread over all `cores`; a real GPU leaves the process little CPU time to
/// explain. Rejected when the CPU time exceeds twice what the GPU span allows, plus 1 ms for
/// submission. The host clock is no test: on a busy machine it grows with waiting for a core,
/// while the work does not.
pub fn implausible_gpu_times(
    gpu_us: &[f64],
    host_us: &[f64],
    cpu_us: &[f64],
    cores: usize,
) -> Option<String> {
    let gpu = Summary::of(gpu_us)?.p50;
    let host = Summary::of(host_us)?.p50;
    // On every driver: the pass runs between the submit and the wait's return, so its span
    // cannot be longer than theirs (2% and 20 µs allowed for two clocks' rates and reads).
    if gpu > 1.02 * host + 20.0 {
        return Some(format!(
            "GPU timestamps rejected: median {gpu:.1} µs, longer than the {host:.1} µs from \
             submit to done that contain them (a wrong timestamp period, or a driver bug), so \
             the host clock is used"
        ));
    }
    let cpu = Summary::of(cpu_us)?.p50;
    (cpu > 2.0 * cores as f64 * gpu + 1000.0).then(|| {
        format!(
            "GPU timestamps rejected: median {gpu:.1} µs, yet each iteration used {cpu:.0} µs \
             of CPU time on {cores} cores ({host:.1} µs from submit to done); a driver bug \
             can misplace them, so the host clock is used"
        )
    })
}

/// A query set with its resolve and readback buffers, reused across iterations.
pub struct PassTimer {
    query_set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    readback: wgpu::Buffer,
    capacity: u32,
    period_ns: f64,
}

impl PassTimer {
    pub fn new(gpu: &Gpu, pairs: u32) -> PassTimer {
        let capacity = pairs.clamp(1, MAX_PAIRS);
        let bytes = capacity as u64 * 16;
        PassTimer {
            query_set: gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("pass timestamps"),
                ty: wgpu::QueryType::Timestamp,
                count: capacity * 2,
            }),
            resolve: gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("timestamp resolve"),
                size: bytes,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            }),
            readback: gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("timestamp readback"),
                size: bytes,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
            capacity,
            period_ns: gpu.queue.get_timestamp_period() as f64,
        }
    }

    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Timestamp writes for pass `slot` (start at 2*slot, end at 2*slot + 1).
    pub fn writes(&self, slot: u32) -> wgpu::ComputePassTimestampWrites<'_> {
        wgpu::ComputePassTimestampWrites {
            query_set: &self.query_set,
            beginning_of_pass_write_index: Some(2 * slot),
            end_of_pass_write_index: Some(2 * slot + 1),
        }
    }

    /// Records `upload` (if any), then one compute pass filled by `encode`. Slot `slot` spans
    /// both: with an upload, its start is written on the encoder before the copy (which needs
    /// timestamps inside encoders), otherwise at the start of the pass.
    pub fn record_pass(
        &self,
        enc: &mut wgpu::CommandEncoder,
        slot: u32,
        upload: Option<&Upload>,
        encode: impl FnOnce(&mut wgpu::ComputePass<'_>),
    ) {
        let mut writes = self.writes(slot);
        if let Some(upload) = upload {
            self.encoder_write(enc, slot, false);
            writes.beginning_of_pass_write_index = None;
            upload.record(enc);
        }
        encode(&mut enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: None,
            timestamp_writes: Some(writes),
        }));
    }

    /// Writes slot `slot`'s start (`end` false) or end timestamp from an encoder, for work
    /// that is not a pass (buffer copies).
    pub fn encoder_write(&self, enc: &mut wgpu::CommandEncoder, slot: u32, end: bool) {
        enc.write_timestamp(&self.query_set, 2 * slot + end as u32);
    }

    /// Reads the raw (start, end) ticks of slots `0..count`.
    fn read_ticks(&self, gpu: &Gpu, count: u32) -> Result<Vec<(u64, u64)>, GpuError> {
        gpu.submit_wait(|enc| {
            enc.resolve_query_set(&self.query_set, 0..2 * count, &self.resolve, 0);
            enc.copy_buffer_to_buffer(&self.resolve, 0, &self.readback, 0, count as u64 * 16);
        })?;
        let bytes = gpu.map_read(&self.readback)?;
        let ticks: &[u64] = bytemuck::cast_slice(&bytes);
        Ok((0..count as usize)
            .map(|i| (ticks[2 * i], ticks[2 * i + 1]))
            .collect())
    }

    /// Reads the (start, end) of slots `0..count` in microseconds on the GPU clock, from the
    /// first slot's start.
    pub fn read_spans(&self, gpu: &Gpu, count: u32) -> Result<Vec<(f64, f64)>, GpuError> {
        let ticks = self.read_ticks(gpu, count)?;
        let base = ticks.first().map_or(0, |t| t.0);
        let us = |t: u64| t.wrapping_sub(base) as i64 as f64 * self.period_ns / 1e3;
        Ok(ticks.iter().map(|&(a, b)| (us(a), us(b))).collect())
    }

    /// Reads the (start, end) of slots `0..count` in microseconds since the GPU clock's own
    /// zero, for mapping onto a host clock.
    pub fn read_absolute(&self, gpu: &Gpu, count: u32) -> Result<Vec<(f64, f64)>, GpuError> {
        let us = |t: u64| t as f64 * self.period_ns / 1e3;
        Ok(self
            .read_ticks(gpu, count)?
            .into_iter()
            .map(|(a, b)| (us(a), us(b)))
            .collect())
    }

    /// Reads the durations of slots `0..count` in microseconds.
    pub fn read(&self, gpu: &Gpu, count: u32) -> Result<Vec<f64>, GpuError> {
        Ok(self
            .read_spans(gpu, count)?
            .into_iter()
            .map(|(start, end)| end - start)
            .collect())
    }
}

/// Runs `warmup` untimed then `iters` timed submissions of one compute pass each, recorded by
/// `encode` after `upload` (a copy the kernel needs first, timed with it). Encoding happens
/// before the clock starts; the host time covers submit to done.
pub fn time_compute_passes(
    gpu: &Gpu,
    warmup: u32,
    iters: u32,
    upload: Option<&Upload>,
    mut encode: impl FnMut(&mut wgpu::ComputePass<'_>),
) -> Result<IterationTimes, GpuError> {
    // GPU time must cover the upload too; without encoder timestamps only the host clock does.
    let timeable = upload.is_none() || gpu.has_encoder_timestamps();
    let timer = (gpu.has_timestamps() && timeable).then(|| PassTimer::new(gpu, iters));
    let mut host_us = Vec::with_capacity(iters as usize);
    let mut cpu_us = Vec::with_capacity(iters as usize);
    let mut gpu_us = Vec::with_capacity(iters as usize);
    for _ in 0..warmup {
        gpu.submit_wait(|enc| record_untimed(enc, upload, &mut encode))?;
    }
    let mut slot = 0;
    for _ in 0..iters {
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        match &timer {
            Some(t) => t.record_pass(&mut enc, slot, upload, &mut encode),
            None => record_untimed(&mut enc, upload, &mut encode),
        }
        let cmd = enc.finish();
        let cpu0 = process_cpu_us();
        let t0 = Instant::now();
        let idx = gpu.queue.submit([cmd]);
        gpu.wait(idx)?;
        host_us.push(t0.elapsed().as_secs_f64() * 1e6);
        if let (Some(a), Some(b)) = (cpu0, process_cpu_us()) {
            cpu_us.push(b - a);
        }
        slot += 1;
        if let Some(t) = &timer {
            if slot == t.capacity() {
                gpu_us.extend(t.read(gpu, slot)?);
                slot = 0;
            }
        }
    }
    if let Some(t) = &timer {
        if slot > 0 {
            gpu_us.extend(t.read(gpu, slot)?);
        }
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let gpu_rejected = timer
        .as_ref()
        .and_then(|_| implausible_gpu_times(&gpu_us, &host_us, &cpu_us, cores));
    if let Some(why) = &gpu_rejected {
        tracing::warn!("{why}");
    }
    Ok(IterationTimes {
        gpu_us: (timer.is_some() && gpu_rejected.is_none()).then_some(gpu_us),
        host_us,
        gpu_rejected,
    })
}

#[cfg(test)]
mod tests {
    use super::implausible_gpu_times;

    #[test]
    fn gpu_times_that_cannot_cover_the_work_are_rejected() {
        let host = [8000.0, 8100.0, 7900.0];
        // 20 µs on the GPU clock while two cores worked 8 ms each: misplaced timestamps.
        let busy = [16000.0, 16100.0, 15900.0];
        assert!(implausible_gpu_times(&[20.0, 25.0, 18.0], &host, &busy, 2).is_some());
        // Timestamps that span the work are kept.
        assert!(implausible_gpu_times(&[7600.0, 7700.0, 7650.0], &host, &busy, 2).is_none());
        // A small kernel on a busy machine: the host clock waited for a core, the work did
        // not grow. Kept.
        let slow_host = [2400.0, 1700.0];
        assert!(implausible_gpu_times(&[120.0, 130.0], &slow_host, &[400.0, 380.0], 2).is_none());
        // A real GPU: the process idles while it works. Kept.
        assert!(implausible_gpu_times(&[900.0], &[1000.0], &[60.0], 64).is_none());
        // Nothing to judge by: kept.
        // Longer than the host's submit-to-done span that contains them, on any driver (no
        // CPU time read: a real GPU's).
        let why = implausible_gpu_times(&[9000.0, 9100.0], &host, &[], 2).unwrap();
        assert!(why.contains("longer than the 8000.0 µs"), "{why}");
        assert!(implausible_gpu_times(&[7990.0, 8050.0], &host, &[], 2).is_none());
        assert!(implausible_gpu_times(&[], &host, &busy, 2).is_none());
        assert!(implausible_gpu_times(&[20.0], &host, &[], 2).is_none());
    }
}
