//! The `d2h` bench: device-to-host and host-to-device latency and bandwidth over sizes, as
//! nvbandwidth measures copies (N copies between two GPU timestamps in one submission), with
//! the map wait, the host copy and the end-to-end latency of one transfer reported apart, and
//! host memcpy of the same sizes as the ceiling row.

use std::time::Instant;

use anyhow::{ensure, Context, Result};

use serde::{Deserialize, Serialize};

use super::descriptor::{command, from_toml, Descriptor, Settings};
use super::flags::{parse_iters, parse_size_list, parse_warmup, SizeList};
use super::shared::{check_iters, time_host};
use crate::gpu::transfer::{pattern, touched, COPY_ALIGN};
use crate::gpu::Gpu;
use crate::output::Progress;
use crate::record::csv::{sig4, SamplesTable};
use crate::record::{CsvSink, Line, RunDir, TableSpec};
use crate::stats::Summary;
use crate::units::human_bytes;

mod table;
mod views;

pub use table::{D2hFigures, D2hParams, D2hTable, BENCH};

#[derive(Debug, Clone, serde::Serialize)]
pub struct D2hPlan {
    pub sizes: Vec<u64>,
    pub iters: u32,
    pub warmup: u32,
}

/// `d2h`'s settings: `morphbench d2h`'s flags, `[d2h]`'s keys and their defaults, declared once.
#[derive(Debug, Clone, clap::Args, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct D2hSettings {
    /// Transfer sizes, comma separated, with optional K/M/G units [default: 4 B to 256 MiB, powers of two].
    #[arg(long, value_name = "SIZE[,SIZE...]", value_parser = parse_size_list)]
    pub sizes: Option<SizeList>,
    /// Timed iterations per point.
    #[arg(long, default_value_t = D2hSettings::default().iters, value_parser = parse_iters)]
    pub iters: u32,
    /// Untimed warm-up iterations per point (at most 100000).
    #[arg(long, default_value_t = D2hSettings::default().warmup, value_parser = parse_warmup)]
    pub warmup: u32,
    /// Also write every iteration's sample to d2h_samples.csv.
    #[arg(long)]
    #[serde(skip)]
    pub raw: bool,
}

impl Default for D2hSettings {
    fn default() -> Self {
        D2hSettings {
            sizes: None,
            iters: 20,
            warmup: 3,
            raw: false,
        }
    }
}

impl Settings for D2hSettings {
    type Plan = D2hPlan;
    fn plan(&self) -> anyhow::Result<D2hPlan> {
        let plan = D2hPlan {
            sizes: self
                .sizes
                .as_ref()
                .map_or_else(default_sizes, |s| s.0.clone()),
            iters: self.iters,
            warmup: self.warmup,
        };
        check_iters("d2h.iters", plan.iters)?;
        super::shared::check_warmup("d2h.warmup", plan.warmup)?;
        plan.check_cost()?;
        Ok(plan)
    }
    fn raw(&self) -> bool {
        self.raw
    }
}

/// The `d2h` bench, for the registry.
pub const DESCRIPTOR: Descriptor = Descriptor {
    name: BENCH,
    from_toml: Some(from_toml::<D2hSettings>),
    command: command::<D2hSettings>(
        "Device-to-host and host-to-device latency and bandwidth; writes d2h.csv",
        "Examples:\n  morphbench d2h                                  # 4 B to 256 MiB, powers of two\n  morphbench d2h --sizes 4,64K,16M --iters 50",
    ),
    tables: || {
        vec![TableSpec::compared::<D2hTable>()
            .single_node()
            .headlines(views::headlines)
            .charts(crate::record::Charts::Compared(views::d2h_charts))]
    },
};

impl D2hPlan {
    /// Refuses, before anything runs, a sweep that would move more than
    /// [`super::kernels::MAX_BYTES`] (each size is copied several ways, many times).
    pub fn check_cost(&self) -> anyhow::Result<()> {
        let per_iter: f64 = self
            .sizes
            .iter()
            .map(|&b| b as f64 * (6.0 + copies_for(b) as f64 * 2.0))
            .sum();
        let bytes = per_iter * (self.iters + self.warmup) as f64;
        let cap = super::kernels::MAX_BYTES;
        if bytes > cap {
            return Err(anyhow::anyhow!(
                "this d2h sweep moves {bytes:.2e} bytes, over the cap of {cap:.0e}: fewer sizes \
                 or iterations"
            ));
        }
        Ok(())
    }
}

impl crate::suite::Bench for D2hPlan {
    fn needs_gpu(&self) -> bool {
        true
    }
    fn points(&self) -> u64 {
        self.sizes.len() as u64
    }
    fn run(&self, cx: &crate::suite::Context) -> Result<crate::suite::Notes> {
        let sizes = run(cx.gpu(BENCH)?, self, cx.dir, cx.progress)?;
        super::shared::note(BENCH, sizes)
    }
}

/// 4 B to 256 MiB, powers of two.
pub fn default_sizes() -> Vec<u64> {
    (2..=28).map(|p| 1u64 << p).collect()
}

/// How many copies go between the two timestamps: enough to make small copies measurable,
/// few enough that large ones stay short.
fn copies_for(bytes: u64) -> u32 {
    (64u64 << 20).div_ceil(bytes).clamp(1, 64) as u32
}

struct Rows<'a> {
    run: &'a RunDir,
    table: CsvSink<D2hTable>,
    samples: Option<CsvSink<SamplesTable>>,
    progress: &'a Progress,
}

impl Rows<'_> {
    /// A part timed on the host, one transfer per sample.
    fn host(
        &mut self,
        direction: &str,
        method: &str,
        bytes: u64,
        part: &str,
        samples: &[f64],
    ) -> Result<f64> {
        let params = D2hParams {
            direction: direction.into(),
            method: method.into(),
            bytes,
            part: part.into(),
            copies: 1,
        };
        self.write(params, "host", samples)
    }

    /// The device's copies alone, `copies` per sample, timed by `timer`.
    fn device_copies(
        &mut self,
        direction: &str,
        bytes: u64,
        copies: u32,
        timer: &str,
        samples: &[f64],
    ) -> Result<f64> {
        let params = D2hParams {
            direction: direction.into(),
            method: "copy".into(),
            bytes,
            part: "gpu_copy".into(),
            copies,
        };
        self.write(params, timer, samples)
    }

    /// Writes one row (and its samples when kept); returns its p50 (µs).
    fn write(&mut self, params: D2hParams, timer: &str, samples: &[f64]) -> Result<f64> {
        let s = Summary::of(samples).context("no samples")?;
        let D2hParams {
            direction,
            method,
            bytes,
            part,
            ..
        } = &params;
        let gbps = *bytes as f64 / s.p50 / 1e3;
        let case = format!("{direction} {method} {bytes} {part}");
        // The parts a reader compares; the rest are in the CSV.
        let shown = (part == "end_to_end" || part == "gpu_copy").then(|| {
            format!(
                "{direction:<7} {method:<15} {:>10} {part:<10} p50 {:>11.2} µs {:>9.3} GB/s [{timer}]",
                human_bytes(*bytes),
                s.p50,
                gbps
            )
        });
        let figures = D2hFigures {
            gbps: sig4(gbps),
            timer: timer.into(),
            verified: true,
        };
        let line = Line::new(&self.run.id, &case, params, Some(&s), figures);
        self.table.write(&line)?;
        if let Some(raw) = &mut self.samples {
            raw.samples(&self.run.id, BENCH, &case, timer, samples)?;
        }
        if let Some(shown) = shown {
            self.progress.println(shown);
        }
        Ok(s.p50)
    }
}

/// Times `copies` buffer copies between two encoder timestamps, `reps` times; returns the
/// per-copy time in µs and the timer used. Without timestamps in encoders, the host clock
/// around submit and completion.
fn time_copies(
    gpu: &Gpu,
    src: &wgpu::Buffer,
    dst: &wgpu::Buffer,
    bytes: u64,
    copies: u32,
    warmup: u32,
    reps: u32,
) -> Result<(Vec<f64>, &'static str)> {
    let ts = gpu.has_encoder_timestamps();
    let query = ts.then(|| {
        gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("copy timestamps"),
            ty: wgpu::QueryType::Timestamp,
            count: 2,
        })
    });
    let resolve = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("copy resolve"),
        size: 16,
        usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let readback = gpu.staging("copy readback", 16, wgpu::MapMode::Read);
    let period = gpu.queue.get_timestamp_period() as f64;
    let mut out = Vec::with_capacity(reps as usize);
    let mut ticks = [0u8; 16];
    for rep in 0..warmup + reps {
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        if let Some(q) = &query {
            enc.write_timestamp(q, 0);
        }
        for _ in 0..copies {
            enc.copy_buffer_to_buffer(src, 0, dst, 0, bytes);
        }
        if let Some(q) = &query {
            enc.write_timestamp(q, 1);
            enc.resolve_query_set(q, 0..2, &resolve, 0);
            enc.copy_buffer_to_buffer(&resolve, 0, &readback, 0, 16);
        }
        let cmd = enc.finish();
        let t0 = Instant::now();
        let idx = gpu.queue.submit([cmd]);
        gpu.wait(idx)?;
        let host_us = t0.elapsed().as_secs_f64() * 1e6;
        if rep < warmup {
            continue;
        }
        if query.is_some() {
            gpu.map_read_into(&readback, &mut ticks, None)?;
            let t: &[u64] = bytemuck::cast_slice(&ticks);
            out.push(t[1].wrapping_sub(t[0]) as f64 * period / 1e3 / copies as f64);
        } else {
            out.push(host_us / copies as f64);
        }
    }
    Ok((out, if ts { "gpu" } else { "host" }))
}

/// Summary per size for the closing figures: (bytes, d2h gpu_copy GB/s, memcpy GB/s, d2h e2e µs).
#[derive(Debug, Clone, serde::Serialize)]
pub struct SizeSummary {
    pub bytes: u64,
    pub d2h_copy_gbps: f64,
    pub h2d_copy_gbps: f64,
    pub memcpy_gbps: f64,
    pub d2h_end_to_end_us: f64,
}

pub fn run(
    gpu: &Gpu,
    plan: &D2hPlan,
    run: &RunDir,
    progress: &Progress,
) -> Result<Vec<SizeSummary>> {
    for &bytes in &plan.sizes {
        ensure!(
            bytes % COPY_ALIGN == 0 && bytes > 0,
            "transfer size {bytes} is not a positive multiple of {COPY_ALIGN} bytes"
        );
        gpu.check_buffer(&format!("a {} transfer", human_bytes(bytes)), bytes)?;
    }
    let mut rows = Rows {
        run,
        table: run.table()?,
        samples: run.samples_table(BENCH)?,
        progress,
    };
    let mut summaries = Vec::new();
    for &bytes in &plan.sizes {
        progress.set_message(format!("d2h {}", human_bytes(bytes)));
        let n = bytes as usize;
        // Everything is allocated and touched here, before any clock starts.
        let down = pattern(n, 0x3c);
        let mut b = Buffers {
            device: gpu.storage_from("d2h device", &down),
            read_staging: gpu.staging("d2h staging", bytes, wgpu::MapMode::Read),
            write_staging: gpu.staging("h2d staging", bytes, wgpu::MapMode::Write),
            host: touched(n),
            up: pattern(n, 0xc3),
            down,
            bytes,
            copies: copies_for(bytes),
        };
        let (d2h_gbps, d2h_e2e) = measure_d2h(gpu, plan, &mut b, &mut rows)?;
        let h2d_gbps = measure_h2d(gpu, plan, &b, &mut rows)?;
        let memcpy_us = measure_memcpy(plan, &b, &mut rows)?;
        summaries.push(SizeSummary {
            bytes,
            d2h_copy_gbps: d2h_gbps,
            h2d_copy_gbps: h2d_gbps,
            memcpy_gbps: bytes as f64 / memcpy_us / 1e3,
            d2h_end_to_end_us: d2h_e2e,
        });
        progress.inc();
    }
    Ok(summaries)
}

/// One size's buffers, made and touched before any clock starts.
struct Buffers {
    device: wgpu::Buffer,
    read_staging: wgpu::Buffer,
    write_staging: wgpu::Buffer,
    /// The host side of D2H.
    host: Vec<u8>,
    /// What the device holds, and what H2D uploads.
    down: Vec<u8>,
    up: Vec<u8>,
    bytes: u64,
    copies: u32,
}

/// D2H: the copy alone, then whole mapped transfers with their parts. Returns the copy's
/// GB/s and the end-to-end p50 in µs.
fn measure_d2h(
    gpu: &Gpu,
    plan: &D2hPlan,
    b: &mut Buffers,
    rows: &mut Rows<'_>,
) -> Result<(f64, f64)> {
    let (bytes, copies) = (b.bytes, b.copies);
    let (device, read_staging, down) = (&b.device, &b.read_staging, &b.down);
    let host = &mut b.host;
    let (copy_us, timer) = time_copies(
        gpu,
        device,
        read_staging,
        bytes,
        copies,
        plan.warmup,
        plan.iters,
    )?;
    let gbps = bytes as f64 / rows.device_copies("d2h", bytes, copies, timer, &copy_us)? / 1e3;
    let (mut map, mut copy_out, mut e2e) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..plan.warmup + plan.iters {
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(device, 0, read_staging, 0, bytes);
        let cmd = enc.finish();
        let t0 = Instant::now();
        let idx = gpu.queue.submit([cmd]);
        gpu.wait(idx.clone())?;
        let m = gpu.map_read_into(read_staging, host, Some(idx))?;
        let total = t0.elapsed().as_secs_f64() * 1e6;
        if i == 0 {
            ensure!(
                *host == *down,
                "D2H of {} delivered wrong bytes",
                human_bytes(bytes)
            );
            host.fill(0xA5);
        }
        if i >= plan.warmup {
            map.push(m.map_us);
            copy_out.push(m.copy_us);
            e2e.push(total);
        }
    }
    ensure!(
        *host == *down,
        "D2H of {} delivered wrong bytes",
        human_bytes(bytes)
    );
    rows.host("d2h", "mapped", bytes, "map", &map)?;
    rows.host("d2h", "mapped", bytes, "copy_out", &copy_out)?;
    let e2e_p50 = rows.host("d2h", "mapped", bytes, "end_to_end", &e2e)?;

    Ok((gbps, e2e_p50))
}

/// H2D: the copy alone, a mapped upload, and write_buffer. Returns the copy's GB/s.
fn measure_h2d(gpu: &Gpu, plan: &D2hPlan, b: &Buffers, rows: &mut Rows<'_>) -> Result<f64> {
    let (bytes, copies) = (b.bytes, b.copies);
    let (device, write_staging, down, up) = (&b.device, &b.write_staging, &b.down, &b.up);
    let (copy_us, timer) = time_copies(
        gpu,
        write_staging,
        device,
        bytes,
        copies,
        plan.warmup,
        plan.iters,
    )?;
    let gbps = bytes as f64 / rows.device_copies("h2d", bytes, copies, timer, &copy_us)? / 1e3;
    let (mut map, mut copy_in, mut e2e) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..plan.warmup + plan.iters {
        let t0 = Instant::now();
        let m = gpu.map_write_from(write_staging, up)?;
        gpu.submit_wait(|enc| enc.copy_buffer_to_buffer(write_staging, 0, device, 0, bytes))?;
        let total = t0.elapsed().as_secs_f64() * 1e6;
        if i >= plan.warmup {
            map.push(m.map_us);
            copy_in.push(m.copy_us);
            e2e.push(total);
        }
    }
    ensure!(
        gpu.read_back(device)? == *up,
        "H2D (mapped) of {} delivered wrong bytes",
        human_bytes(bytes)
    );
    rows.host("h2d", "mapped", bytes, "map", &map)?;
    // For H2D this part is the host copy into the mapped staging buffer.
    rows.host("h2d", "mapped", bytes, "copy_out", &copy_in)?;
    rows.host("h2d", "mapped", bytes, "end_to_end", &e2e)?;
    let mut e2e = Vec::new();
    for i in 0..plan.warmup + plan.iters {
        let t0 = Instant::now();
        gpu.queue.write_buffer(device, 0, down);
        let idx = gpu.queue.submit([]);
        gpu.wait(idx)?;
        if i >= plan.warmup {
            e2e.push(t0.elapsed().as_secs_f64() * 1e6);
        }
    }
    ensure!(
        gpu.read_back(device)? == *down,
        "H2D (write_buffer) of {} delivered wrong bytes",
        human_bytes(bytes)
    );
    rows.host("h2d", "write_buffer", bytes, "end_to_end", &e2e)?;

    Ok(gbps)
}

/// The ceiling: host memcpy of the same bytes between touched buffers. Returns its p50 in µs.
fn measure_memcpy(plan: &D2hPlan, b: &Buffers, rows: &mut Rows<'_>) -> Result<f64> {
    let (bytes, down) = (b.bytes, &b.down);
    let n = bytes as usize;
    let mut dst = touched(n);
    let t = time_host(plan.warmup, plan.iters, || {
        dst.copy_from_slice(std::hint::black_box(down))
    });
    ensure!(dst == *down, "memcpy baseline produced different bytes");
    rows.host("memcpy", "copy_from_slice", bytes, "end_to_end", &t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_sizes_span_4_bytes_to_256_mib() {
        assert_eq!(default_sizes().first(), Some(&4));
        assert_eq!(default_sizes().last(), Some(&(256 << 20)));
    }
}
