//! Short probes of one node, each verified before it is timed and each stopping at its
//! deadline with the samples it has: a GEMM, device-to-host and host-to-device copies (map
//! included), and a host memcpy. `links` fingerprints nodes with two of them; `fleet` judges
//! every node with all of them.

use std::time::Instant;

use crate::gpu::kernels::gemm::{GemmKernel, GemmSize, GEMM_VARIANTS};
use crate::gpu::kernels::{find_variant, run_once, GpuKernel};
use crate::gpu::Gpu;
use crate::stats::Summary;

/// The portable GEMM variant (workgroup tiles, no optional features).
const GEMM_VARIANT: &str = "tiled64";
/// Untimed runs first: page faults and first-use costs stay out of the samples.
const WARMUP: usize = 3;
/// Fewer samples than this and a probe cut by its deadline has no figure.
pub const MIN_SAMPLES: usize = 3;

/// How long a probe may run and how many samples it takes.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub iters: usize,
    pub deadline: Instant,
}

/// A probe's samples (µs per operation) and whether its deadline cut it short.
#[derive(Debug, Clone)]
pub struct Probed {
    pub summary: Summary,
    pub cut: bool,
}

/// Times `op` (after [`WARMUP`] untimed calls) until `budget.iters` samples or the deadline.
pub(crate) fn sample(
    budget: Budget,
    mut op: impl FnMut() -> Result<f64, String>,
) -> Result<Probed, String> {
    let mut us = Vec::with_capacity(budget.iters);
    let mut cut = false;
    for i in 0..WARMUP + budget.iters {
        if Instant::now() >= budget.deadline {
            cut = true;
            break;
        }
        let t = op()?;
        if i >= WARMUP {
            us.push(t);
        }
    }
    if us.len() < MIN_SAMPLES {
        return Err(format!(
            "cut by its deadline after {} samples (fewer than {MIN_SAMPLES})",
            us.len()
        ));
    }
    let summary = Summary::of(&us).ok_or("no samples")?;
    Ok(Probed { summary, cut })
}

fn elapsed_us(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64() * 1e6
}

/// µs per GEMM of `size`, host-timed submit to done, verified against the f64 reference
/// (output poisoned first) before any timing.
pub fn gemm(gpu: &Gpu, size: GemmSize, budget: Budget) -> Result<Probed, String> {
    let variant = find_variant(GEMM_VARIANTS, GEMM_VARIANT).expect("a built-in variant");
    let kernel = GemmKernel::new(gpu, variant, size).map_err(|e| e.to_string())?;
    kernel.verify().map_err(|e| e.to_string())?;
    sample(budget, || {
        let t0 = Instant::now();
        run_once(gpu, &kernel).map_err(|e| e.to_string())?;
        Ok(elapsed_us(t0))
    })
}

/// The bytes every copy probe moves (a pattern no zeroed or stale buffer holds).
fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

/// µs per device-to-host copy of `bytes` and its map; the first copy's bytes are checked.
pub fn d2h(gpu: &Gpu, bytes: u64, budget: Budget) -> Result<Probed, String> {
    let want = pattern(bytes as usize);
    let device = gpu.storage_from("probe d2h", &want);
    let staging = gpu.staging("probe d2h staging", bytes, wgpu::MapMode::Read);
    let mut host = vec![0u8; bytes as usize];
    let mut first = true;
    sample(budget, || {
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&device, 0, &staging, 0, bytes);
        let t0 = Instant::now();
        let idx = gpu.queue.submit([enc.finish()]);
        gpu.wait(idx.clone()).map_err(|e| e.to_string())?;
        gpu.map_read_into(&staging, &mut host, Some(idx))
            .map_err(|e| e.to_string())?;
        let t = elapsed_us(t0);
        if std::mem::take(&mut first) && host != want {
            return Err("the device-to-host copy delivered wrong bytes".into());
        }
        Ok(t)
    })
}

/// µs per host-to-device copy of `bytes` (mapped write, then the copy to a device buffer);
/// the first copy is read back and checked.
pub fn h2d(gpu: &Gpu, bytes: u64, budget: Budget) -> Result<Probed, String> {
    let want = pattern(bytes as usize);
    let staging = gpu.staging("probe h2d staging", bytes, wgpu::MapMode::Write);
    let device = gpu.storage_from("probe h2d", &vec![0u8; bytes as usize]);
    let mut first = true;
    sample(budget, || {
        let t0 = Instant::now();
        gpu.map_write_from(&staging, &want)
            .map_err(|e| e.to_string())?;
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&staging, 0, &device, 0, bytes);
        let idx = gpu.queue.submit([enc.finish()]);
        gpu.wait(idx).map_err(|e| e.to_string())?;
        let t = elapsed_us(t0);
        if std::mem::take(&mut first) {
            let back = gpu.staging("probe h2d check", bytes, wgpu::MapMode::Read);
            let mut enc = gpu.device.create_command_encoder(&Default::default());
            enc.copy_buffer_to_buffer(&device, 0, &back, 0, bytes);
            let idx = gpu.queue.submit([enc.finish()]);
            let mut got = vec![0u8; bytes as usize];
            gpu.map_read_into(&back, &mut got, Some(idx))
                .map_err(|e| e.to_string())?;
            if got != want {
                return Err("the host-to-device copy delivered wrong bytes".into());
            }
        }
        Ok(t)
    })
}

/// µs per host memcpy of `bytes` (the host's memory bandwidth as a copy sees it); each copy
/// is checked at a few places, the first one whole.
pub fn memcpy(bytes: u64, budget: Budget) -> Result<Probed, String> {
    memcpy_placed(bytes, budget, false).map(|p| p.probed)
}

/// A memcpy's samples with where its buffers and thread were, and each placement tried.
#[derive(Debug, Clone)]
pub struct Placed {
    pub probed: Probed,
    pub placement: crate::host::Placement,
    /// Every placement measured (a retest tries several) and its p50 (µs).
    pub tried: Vec<(crate::host::Placement, f64)>,
}

/// The most placements a retest tries.
const MAX_PLACEMENTS: usize = 4;

/// [`memcpy`] with its placement. With `spread` (a retest that must be able to disagree), it
/// measures on fresh buffers once on each CPU the thread may use (up to [`MAX_PLACEMENTS`]),
/// the earlier buffers held meanwhile so the new ones land on other pages, and keeps the
/// fastest: a copy's speed on a VM or a NUMA host depends on the vCPU and the pages it got,
/// and a retest in the conditions of the first measurement only repeats them.
pub fn memcpy_placed(bytes: u64, budget: Budget, spread: bool) -> Result<Placed, String> {
    let all = crate::host::allowed_cpus();
    let cpus: Vec<Option<usize>> = match spread && all.len() > 1 {
        true => all.iter().take(MAX_PLACEMENTS).map(|&c| Some(c)).collect(),
        false => vec![None],
    };
    let started = Instant::now();
    let span = budget.deadline.saturating_duration_since(started);
    let mut held = Vec::new();
    let mut best: Option<Placed> = None;
    let mut tried = Vec::new();
    for (i, cpu) in cpus.iter().enumerate() {
        if let Some(c) = cpu {
            crate::host::bind_thread(&[*c]);
        }
        let share = Budget {
            iters: budget.iters,
            deadline: started + span.mul_f64((i + 1) as f64 / cpus.len() as f64),
        };
        let (src, dst) = (pattern(bytes as usize), vec![0u8; bytes as usize]);
        let run = copy_between(&src, dst, share);
        held.push(src);
        let (probed, dst) = match run {
            Ok(r) => r,
            Err(e) if best.is_none() && i + 1 == cpus.len() => return Err(e),
            Err(_) => continue,
        };
        let placement = crate::host::placement_of(&dst);
        held.push(dst);
        tried.push((placement, probed.summary.p50));
        if best
            .as_ref()
            .is_none_or(|b| probed.summary.p50 < b.probed.summary.p50)
        {
            best = Some(Placed {
                probed,
                placement,
                tried: Vec::new(),
            });
        }
    }
    if spread && all.len() > 1 {
        crate::host::bind_thread(&all);
    }
    let mut best = best.ok_or_else(|| "no placement could be measured".to_string())?;
    best.tried = tried;
    Ok(best)
}

/// Times copies of `src` into `dst` (see [`memcpy`]); returns `dst` for its placement.
fn copy_between(src: &[u8], mut dst: Vec<u8>, budget: Budget) -> Result<(Probed, Vec<u8>), String> {
    let mut first = true;
    sample(budget, || {
        dst[0] = !src[0];
        let t0 = Instant::now();
        dst.copy_from_slice(src);
        let t = elapsed_us(t0);
        let whole = std::mem::take(&mut first);
        let ok = match whole {
            true => dst == src,
            false => dst[0] == src[0] && dst[dst.len() / 2] == src[src.len() / 2],
        };
        if !ok {
            return Err("the memcpy delivered wrong bytes".into());
        }
        std::hint::black_box(&dst);
        Ok(t)
    })
    .map(|p| (p, dst))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_spread_memcpy_tries_fresh_buffers_on_each_cpu_and_keeps_the_fastest() {
        let before = crate::host::allowed_cpus();
        let budget = Budget {
            iters: 3,
            deadline: Instant::now() + Duration::from_secs(20),
        };
        let p = memcpy_placed(1 << 20, budget, true).unwrap();
        let want = if before.len() > 1 {
            before.len().min(MAX_PLACEMENTS)
        } else {
            1
        };
        assert_eq!(p.tried.len(), want, "{:?}", p.tried);
        let best = p.tried.iter().map(|t| t.1).fold(f64::INFINITY, f64::min);
        assert_eq!(p.probed.summary.p50, best);
        if before.len() > 1 {
            let cpus: Vec<Option<u32>> = p.tried.iter().map(|t| t.0.cpu).collect();
            let want: Vec<Option<u32>> = before
                .iter()
                .take(MAX_PLACEMENTS)
                .map(|&c| Some(c as u32))
                .collect();
            assert_eq!(cpus, want, "each placement on its own CPU");
        }
        assert_eq!(
            crate::host::allowed_cpus(),
            before,
            "the thread's CPUs are given back"
        );
        let one = memcpy_placed(1 << 20, budget, false).unwrap();
        assert_eq!(one.tried.len(), 1);
    }

    #[test]
    fn a_probe_stops_at_its_deadline_with_what_it_has() {
        let far = Budget {
            iters: 5,
            deadline: Instant::now() + Duration::from_secs(60),
        };
        let p = memcpy(1 << 16, far).unwrap();
        assert_eq!((p.summary.n, p.cut), (5, false));
        // A deadline already past: no samples, and the probe says it was cut.
        let past = Budget {
            iters: 5,
            deadline: Instant::now(),
        };
        let e = memcpy(1 << 16, past).unwrap_err();
        assert!(e.contains("cut by its deadline"), "{e}");
        // Some samples, then the deadline: a figure, marked cut.
        let mut n = 0;
        let p = sample(
            Budget {
                iters: 1000,
                deadline: Instant::now() + Duration::from_millis(200),
            },
            || {
                n += 1;
                std::thread::sleep(Duration::from_millis(10));
                Ok(10_000.0)
            },
        )
        .unwrap();
        assert!(p.cut && p.summary.n >= MIN_SAMPLES && n < 1000, "{n}");
    }
}
