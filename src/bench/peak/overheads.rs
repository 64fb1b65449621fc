//! What a dispatch and a timestamp cost.

use std::time::Instant;

use anyhow::Result;

use super::plan::PeakPlan;
use super::shader::{samples, Rate, Rows, WGSL};
use crate::gpu::timing::{time_compute_passes, PassTimer};
use crate::gpu::Gpu;

/// An empty kernel: one dispatch submitted and waited for (latency), and `dispatches` of them
/// in one pass between timestamps (the back-to-back rate).
pub(super) fn dispatch_cost(gpu: &Gpu, plan: &PeakPlan, rows: &mut Rows) -> Result<()> {
    let pipeline = gpu.compute_pipeline("peak empty", WGSL, "empty", true, &[])?;
    let record = |pass: &mut wgpu::ComputePass<'_>, count: u32| {
        pass.set_pipeline(&pipeline);
        for _ in 0..count {
            pass.dispatch_workgroups(1, 1, 1);
        }
    };
    let mut latency = Vec::new();
    for rep in 0..plan.warmup + plan.iters.max(20) {
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        record(&mut enc.begin_compute_pass(&Default::default()), 1);
        let cmd = enc.finish();
        let t0 = Instant::now();
        let idx = gpu.queue.submit([cmd]);
        gpu.wait(idx)?;
        if rep >= plan.warmup {
            latency.push(t0.elapsed().as_secs_f64() * 1e6);
        }
    }
    rows.write("dispatch", "latency", 0.0, &latency, "host", Rate::None)?;
    let t = time_compute_passes(gpu, plan.warmup, plan.iters, None, |p| {
        record(p, plan.dispatches)
    })?;
    let (s, timer) = samples(&t);
    let per: Vec<f64> = s.iter().map(|x| x / plan.dispatches as f64).collect();
    rows.write("dispatch", "back_to_back", 0.0, &per, timer, Rate::None)?;
    Ok(())
}

/// The smallest step the GPU clock shows: two timestamps written back to back, many times.
pub(super) fn timestamp_tick(gpu: &Gpu, plan: &PeakPlan, rows: &mut Rows) -> Result<()> {
    let period_us = gpu.queue.get_timestamp_period() as f64 / 1e3;
    if !gpu.has_encoder_timestamps() {
        rows.progress.inc();
        return Ok(());
    }
    let timer = PassTimer::new(gpu, 1);
    let mut gaps = Vec::new();
    for _ in 0..plan.iters.max(20) {
        gpu.submit_wait(|enc| {
            timer.encoder_write(enc, 0, false);
            timer.encoder_write(enc, 0, true);
        })?;
        // A gap of zero ticks still tells the resolution: one tick is the floor.
        gaps.push(timer.read(gpu, 1)?[0].max(period_us));
    }
    rows.write("timestamp", "tick", 0.0, &gaps, "gpu", Rate::None)?;
    Ok(())
}
