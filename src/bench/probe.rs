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
/// A probe its deadline cut before [`MIN_SAMPLES`] samples: no figure. A retest passes over
/// such a placement, where any other error (wrong bytes) ends it.
#[derive(Debug, thiserror::Error)]
#[error("cut by its deadline after {samples} samples (fewer than {MIN_SAMPLES})")]
pub struct Cut {
    pub samples: usize,
}

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
    mut op: impl FnMut() -> anyhow::Result<f64>,
) -> anyhow::Result<Probed> {
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
        return Err(Cut { samples: us.len() }.into());
    }
    let summary = Summary::of(&us).ok_or_else(|| anyhow::anyhow!("no samples"))?;
    Ok(Probed { summary, cut })
}

fn elapsed_us(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64() * 1e6
}

/// µs per GEMM of `size`, host-timed submit to done, verified against the f64 reference
/// (output poisoned first) before any timing.
pub fn gemm(gpu: &Gpu, size: GemmSize, budget: Budget) -> anyhow::Result<Probed> {
    let variant = find_variant(GEMM_VARIANTS, GEMM_VARIANT).expect("a built-in variant");
    let kernel = GemmKernel::new(gpu, variant, size)?;
    kernel.verify()?;
    sample(budget, || {
        let t0 = Instant::now();
        run_once(gpu, &kernel)?;
        Ok(elapsed_us(t0))
    })
}

/// The bytes every copy probe moves (a pattern no zeroed or stale buffer holds).
fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

/// µs per device-to-host copy of `bytes` and its map; the first copy's bytes are checked.
pub fn d2h(gpu: &Gpu, bytes: u64, budget: Budget) -> anyhow::Result<Probed> {
    d2h_placed(gpu, bytes, budget, false).map(|p| p.probed)
}

/// [`d2h`] with the placement of the host buffer the mapped bytes land in; with `spread`,
/// on fresh buffers several times ([`spread_tries`]).
pub fn d2h_placed(gpu: &Gpu, bytes: u64, budget: Budget, spread: bool) -> anyhow::Result<Placed> {
    let want = pattern(bytes as usize);
    let mut held = Vec::new();
    spread_tries(budget, spread, |share| {
        let device = gpu.storage_from("probe d2h", &want);
        let staging = gpu.staging("probe d2h staging", bytes, wgpu::MapMode::Read);
        let mut host = vec![0u8; bytes as usize];
        let mut first = true;
        let probed = sample(share, || {
            let mut enc = gpu.device.create_command_encoder(&Default::default());
            enc.copy_buffer_to_buffer(&device, 0, &staging, 0, bytes);
            let t0 = Instant::now();
            let idx = gpu.queue.submit([enc.finish()]);
            gpu.wait(idx.clone())?;
            gpu.map_read_into(&staging, &mut host, Some(idx))?;
            let t = elapsed_us(t0);
            if std::mem::take(&mut first) && host != want {
                return Err(anyhow::anyhow!(
                    "the device-to-host copy delivered wrong bytes"
                ));
            }
            Ok(t)
        })?;
        let at = crate::host::placement_of(&host);
        held.push((device, staging, host));
        Ok((probed, at))
    })
}

/// µs per host-to-device copy of `bytes` (mapped write, then the copy to a device buffer);
/// the first copy is read back and checked.
pub fn h2d(gpu: &Gpu, bytes: u64, budget: Budget) -> anyhow::Result<Probed> {
    h2d_placed(gpu, bytes, budget, false).map(|p| p.probed)
}

/// [`h2d`] with the placement of the host buffer the bytes are written from; with `spread`,
/// on fresh buffers several times ([`spread_tries`]).
pub fn h2d_placed(gpu: &Gpu, bytes: u64, budget: Budget, spread: bool) -> anyhow::Result<Placed> {
    let mut held = Vec::new();
    spread_tries(budget, spread, |share| {
        let want = pattern(bytes as usize);
        let staging = gpu.staging("probe h2d staging", bytes, wgpu::MapMode::Write);
        let device = gpu.storage_from("probe h2d", &vec![0u8; bytes as usize]);
        let mut first = true;
        let probed = sample(share, || {
            let t0 = Instant::now();
            gpu.map_write_from(&staging, &want)?;
            gpu.submit_wait(|enc| enc.copy_buffer_to_buffer(&staging, 0, &device, 0, bytes))?;
            let t = elapsed_us(t0);
            if std::mem::take(&mut first) {
                check_h2d(gpu, &device, &want)?;
            }
            Ok(t)
        })?;
        let at = crate::host::placement_of(&want);
        held.push((device, staging, want));
        Ok((probed, at))
    })
}

/// Reads `device` back and compares it with what was written.
fn check_h2d(gpu: &Gpu, device: &wgpu::Buffer, want: &[u8]) -> anyhow::Result<()> {
    let bytes = want.len() as u64;
    let back = gpu.staging("probe h2d check", bytes, wgpu::MapMode::Read);
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(device, 0, &back, 0, bytes);
    let idx = gpu.queue.submit([enc.finish()]);
    let mut got = vec![0u8; want.len()];
    gpu.map_read_into(&back, &mut got, Some(idx))?;
    if got != want {
        return Err(anyhow::anyhow!(
            "the host-to-device copy delivered wrong bytes"
        ));
    }
    Ok(())
}

/// µs per host memcpy of `bytes` (the host's memory bandwidth as a copy sees it); each copy
/// is checked at a few places, the first one whole.
pub fn memcpy(bytes: u64, budget: Budget) -> anyhow::Result<Probed> {
    memcpy_placed(bytes, budget, false).map(|p| p.probed)
}

/// A copy's samples with where its host buffer and thread were, and each placement tried.
#[derive(Debug, Clone)]
pub struct Placed {
    pub probed: Probed,
    pub placement: crate::host::Placement,
    /// Every placement measured (a retest tries several) and its p50 (µs).
    pub tried: Vec<(crate::host::Placement, f64)>,
}

/// The fewest and the most placements a retest tries.
const MIN_PLACEMENTS: usize = 3;
const MAX_PLACEMENTS: usize = 4;

/// [`memcpy`] with its placement; with `spread`, on fresh buffers several times
/// ([`spread_tries`]).
pub fn memcpy_placed(bytes: u64, budget: Budget, spread: bool) -> anyhow::Result<Placed> {
    let mut held = Vec::new();
    spread_tries(budget, spread, |share| {
        let (src, dst) = (pattern(bytes as usize), vec![0u8; bytes as usize]);
        let (probed, dst) = copy_between(&src, dst, share)?;
        let at = crate::host::placement_of(&dst);
        held.push((src, dst));
        Ok((probed, at))
    })
}

/// Runs `measure` once, or with `spread` (a retest that must be able to disagree) on fresh
/// buffers [`MIN_PLACEMENTS`] to [`MAX_PLACEMENTS`] times, one per CPU the thread may use
/// in turn, each in its own slice of the deadline, and keeps the fastest. A try starts no
/// sooner than its slice does, so the tries spread over the whole deadline: a dip of the
/// machine shorter than that cannot confirm a FAIL (a healthy lavapipe rank read d2h at 0.3x
/// through three back-to-back tries, about 20 ms, and was drained). `measure` holds its
/// earlier buffers meanwhile so the new ones land on other pages: a copy's speed on a VM or
/// a NUMA host depends on the vCPU and the pages it got, and a retest in the conditions of
/// the first measurement only repeats them. A try cut by its slice of the deadline is passed
/// over; any other error (wrong bytes) ends it.
fn spread_tries(
    budget: Budget,
    spread: bool,
    mut measure: impl FnMut(Budget) -> anyhow::Result<(Probed, crate::host::Placement)>,
) -> anyhow::Result<Placed> {
    let all = crate::host::allowed_cpus();
    let tries = if spread {
        all.len().clamp(MIN_PLACEMENTS, MAX_PLACEMENTS)
    } else {
        1
    };
    let bind = spread && all.len() > 1;
    let started = Instant::now();
    let span = budget.deadline.saturating_duration_since(started);
    let mut best: Option<Placed> = None;
    let mut tried = Vec::new();
    let (mut cut, mut failed) = (None, None);
    let slice = |k: usize| started + span.mul_f64(k as f64 / tries as f64);
    for i in 0..tries {
        if bind {
            crate::host::bind_thread(&[all[i % all.len()]]);
        }
        if let Some(wait) = slice(i).checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let share = Budget {
            iters: budget.iters,
            deadline: slice(i + 1),
        };
        let (probed, placement) = match measure(share) {
            Ok(r) => r,
            Err(e) if e.is::<Cut>() => {
                cut = Some(e);
                continue;
            }
            Err(e) => {
                failed = Some(e);
                break;
            }
        };
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
    if bind {
        crate::host::bind_thread(&all);
    }
    if let Some(e) = failed {
        return Err(e);
    }
    let mut best = best
        .ok_or_else(|| cut.unwrap_or_else(|| anyhow::anyhow!("no placement could be measured")))?;
    best.tried = tried;
    Ok(best)
}

/// Times copies of `src` into `dst` (see [`memcpy`]); returns `dst` for its placement.
fn copy_between(src: &[u8], mut dst: Vec<u8>, budget: Budget) -> anyhow::Result<(Probed, Vec<u8>)> {
    let mut first = true;
    sample(budget, || {
        dst[0] = !src[0];
        let t0 = Instant::now();
        dst.copy_from_slice(src);
        let t = elapsed_us(t0);
        let whole = std::mem::take(&mut first);
        let ok = if whole {
            dst == src
        } else {
            dst[0] == src[0] && dst[dst.len() / 2] == src[src.len() / 2]
        };
        if !ok {
            return Err(anyhow::anyhow!("the memcpy delivered wrong bytes"));
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

    /// `iters` samples, due `within` from now.
    fn budget(iters: usize, within: Duration) -> Budget {
        Budget {
            iters,
            deadline: Instant::now() + within,
        }
    }

    #[test]
    fn a_spread_memcpy_tries_fresh_buffers_on_each_cpu_and_keeps_the_fastest() {
        let before = crate::host::allowed_cpus();
        let budget = budget(3, Duration::from_secs(20));
        let p = memcpy_placed(1 << 20, budget, true).unwrap();
        let want = before.len().clamp(MIN_PLACEMENTS, MAX_PLACEMENTS);
        assert_eq!(p.tried.len(), want, "{:?}", p.tried);
        let best = p.tried.iter().map(|t| t.1).fold(f64::INFINITY, f64::min);
        assert_eq!(p.probed.summary.p50, best);
        if before.len() > 1 {
            let cpus: Vec<Option<u32>> = p.tried.iter().map(|t| t.0.cpu).collect();
            let want: Vec<Option<u32>> = (0..want)
                .map(|i| Some(before[i % before.len()] as u32))
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
    fn a_spread_copy_to_and_from_the_device_tries_fresh_buffers_and_keeps_the_fastest() {
        let gpu = Gpu::open(crate::gpu::BackendChoice::Auto, None).expect("a GPU adapter");
        let budget = || budget(3, Duration::from_secs(20));
        let tries = crate::host::allowed_cpus()
            .len()
            .clamp(MIN_PLACEMENTS, MAX_PLACEMENTS);
        for p in [
            d2h_placed(&gpu, 1 << 20, budget(), true).unwrap(),
            h2d_placed(&gpu, 1 << 20, budget(), true).unwrap(),
        ] {
            assert_eq!(p.tried.len(), tries, "{:?}", p.tried);
            let best = p.tried.iter().map(|t| t.1).fold(f64::INFINITY, f64::min);
            assert_eq!(p.probed.summary.p50, best);
        }
        assert_eq!(
            d2h_placed(&gpu, 1 << 20, budget(), false)
                .unwrap()
                .tried
                .len(),
            1
        );
        // Every try shares the one deadline: a retest costs what the first measurement did.
        let t0 = Instant::now();
        let short = Budget {
            iters: 1_000_000,
            deadline: t0 + Duration::from_millis(600),
        };
        let p = h2d_placed(&gpu, 1 << 16, short, true).unwrap();
        assert!(
            p.probed.cut && t0.elapsed() < Duration::from_secs(3),
            "{:?}",
            t0.elapsed()
        );
    }

    #[test]
    fn a_probe_stops_at_its_deadline_with_what_it_has() {
        let far = budget(5, Duration::from_secs(60));
        let p = memcpy(1 << 16, far).unwrap();
        assert_eq!((p.summary.n, p.cut), (5, false));
        // A deadline already past: no samples, and the probe says it was cut.
        let past = budget(5, Duration::ZERO);
        let e = memcpy(1 << 16, past).unwrap_err();
        assert!(e.to_string().contains("cut by its deadline"), "{e}");
        // Some samples, then the deadline: a figure, marked cut.
        let mut n = 0;
        let p = sample(budget(1000, Duration::from_millis(200)), || {
            n += 1;
            std::thread::sleep(Duration::from_millis(10));
            Ok(10_000.0)
        })
        .unwrap();
        assert!(p.cut && p.summary.n >= MIN_SAMPLES && n < 1000, "{n}");
    }

    #[test]
    fn a_retests_tries_spread_over_its_deadline() {
        let t0 = Instant::now();
        let span = Duration::from_millis(400);
        let budget = Budget {
            iters: 3,
            deadline: t0 + span,
        };
        let mut starts = Vec::new();
        let placed = spread_tries(budget, true, |share| {
            starts.push(t0.elapsed());
            let probed = sample(share, || Ok(1.0))?;
            Ok((probed, crate::host::Placement::default()))
        })
        .unwrap();
        // Each try waits for its slice: the last starts in the deadline's last slice, though
        // every try is done in microseconds.
        let tries = starts.len();
        assert!(
            (MIN_PLACEMENTS..=MAX_PLACEMENTS).contains(&tries),
            "{starts:?}"
        );
        assert_eq!(placed.tried.len(), tries);
        for (i, at) in starts.iter().enumerate() {
            assert!(*at >= span.mul_f64(i as f64 / tries as f64), "{starts:?}");
        }
        // Once is once: no wait.
        let t1 = Instant::now();
        let once = Budget {
            iters: 3,
            deadline: t1 + span,
        };
        spread_tries(once, false, |share| {
            Ok((
                sample(share, || Ok(1.0))?,
                crate::host::Placement::default(),
            ))
        })
        .unwrap();
        assert!(t1.elapsed() < span / 2, "{:?}", t1.elapsed());
    }
}
