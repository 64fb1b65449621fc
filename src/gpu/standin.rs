//! The blocking stand-in for a transfer on the GPU queue: a busy-wait kernel calibrated so a
//! requested duration becomes an iteration count (how the PipeMorph authors injected delay on
//! the GPU path).

use super::kernels::DispatchPass;
use super::timing::time_compute_passes;
use super::{Gpu, GpuError};

const SPIN_WGSL: &str = include_str!("../../shaders/spin.wgsl");

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    iterations: u32,
    _pad: [u32; 3],
}

/// The fitted line duration = offset + per_iteration * iterations (µs).
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct SpinModel {
    pub offset_us: f64,
    pub per_iteration_us: f64,
    /// Which clock measured it: "gpu" (timestamps) or "host".
    pub timer: &'static str,
}

/// One requested duration and what the calibrated kernel achieved.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct CalibrationPoint {
    pub asked_us: f64,
    pub achieved_us: f64,
}

pub struct StandIn {
    spinner: Spinner,
    pub model: SpinModel,
    /// Iteration counts refined by measurement, per asked duration (µs, rounded).
    tuned: std::sync::Mutex<std::collections::HashMap<u64, u64>>,
}

/// Iterations one dispatch spins at most (llvmpipe ends any loop after 65535).
pub const BLOCK: u64 = 65_535;

/// A stand-in of a given length: `repeats` dispatches of a full block, then the remainder.
pub struct SpinPass {
    block: DispatchPass,
    repeats: u64,
    rest: Option<DispatchPass>,
}

impl SpinPass {
    pub fn encode(&self, pass: &mut wgpu::ComputePass<'_>) {
        for _ in 0..self.repeats {
            self.block.encode(pass);
        }
        if let Some(r) = &self.rest {
            r.encode(pass);
        }
    }
}

fn spin_pass(
    gpu: &Gpu,
    activation: &wgpu::Buffer,
    spinner: &Spinner,
    iterations: u64,
) -> Result<SpinPass, GpuError> {
    let rest = iterations % BLOCK;
    Ok(SpinPass {
        block: spinner.bind(gpu, activation, BLOCK as u32)?,
        repeats: iterations / BLOCK,
        rest: (rest > 0)
            .then(|| spinner.bind(gpu, activation, rest as u32))
            .transpose()?,
    })
}

/// Median duration of the stand-in with `iterations`, in µs.
fn measure(
    gpu: &Gpu,
    activation: &wgpu::Buffer,
    spinner: &Spinner,
    iterations: u64,
) -> Result<f64, GpuError> {
    let pass = spin_pass(gpu, activation, spinner, iterations)?;
    let t = time_compute_passes(gpu, 1, 5, None, |p| pass.encode(p))?;
    let mut samples = t.gpu_us.unwrap_or(t.host_us);
    samples.sort_by(f64::total_cmp);
    Ok(samples[samples.len() / 2])
}

/// The spin pipeline and its output buffer, compiled once.
struct Spinner {
    pipeline: wgpu::ComputePipeline,
    result: wgpu::Buffer,
}

impl Spinner {
    fn bind(
        &self,
        gpu: &Gpu,
        activation: &wgpu::Buffer,
        iterations: u32,
    ) -> Result<DispatchPass, GpuError> {
        let params = gpu.uniform_from(
            "spin params",
            &Params {
                iterations,
                _pad: [0; 3],
            },
        );
        DispatchPass::with_pipeline(
            gpu,
            "spin",
            self.pipeline.clone(),
            &[activation, &self.result, &params],
            (1, 1),
        )
    }
}

impl StandIn {
    /// Calibrates on this adapter: the cost of an empty pass, and the cost per iteration from
    /// a run of at least 20 ms.
    pub fn calibrate(gpu: &Gpu, activation: &wgpu::Buffer) -> Result<StandIn, GpuError> {
        let spinner = Spinner {
            pipeline: gpu.compute_pipeline("spin", SPIN_WGSL, "spin", true, &[])?,
            result: gpu.storage_from("spin result", &[0.0f32; 4]),
        };
        // The fixed cost of an empty stand-in pass, then one long run (>= 20 ms, so noise is
        // small against it) for the cost per iteration.
        let offset = measure(gpu, activation, &spinner, 0)?;
        let mut n: u64 = BLOCK;
        let mut t = measure(gpu, activation, &spinner, n)?;
        while t < 20_000.0 && n < 1 << 40 {
            n *= if t < 2_000.0 { 8 } else { 2 };
            t = measure(gpu, activation, &spinner, n)?;
        }
        let per = ((t - offset) / n as f64).max(1e-9);
        Ok(StandIn {
            spinner,
            model: SpinModel {
                offset_us: offset,
                per_iteration_us: per,
                timer: if gpu.has_timestamps() { "gpu" } else { "host" },
            },
            tuned: Default::default(),
        })
    }

    /// The iteration count for `us`: the line's estimate, then up to three measured
    /// corrections until the kernel lands within 3% (the line alone misses by up to ~20% on
    /// CPU drivers, whose per-dispatch cost is not quite linear).
    pub fn tuned_iterations(
        &self,
        gpu: &Gpu,
        activation: &wgpu::Buffer,
        us: f64,
    ) -> Result<u64, GpuError> {
        let key = us.round() as u64;
        if let Some(&n) = self.tuned.lock().unwrap().get(&key) {
            return Ok(n);
        }
        let mut n = self.iterations_for(us).max(1);
        // Very short stand-ins are dominated by dispatch cost; refine only what is measurable.
        if us >= 200.0 {
            for _ in 0..4 {
                let got = measure(gpu, activation, &self.spinner, n)?;
                if (got / us - 1.0).abs() < 0.03 {
                    break;
                }
                // Bounded steps, so one disturbed measurement cannot throw the count far off.
                n = ((n as f64) * (us / got.max(1.0)).clamp(0.5, 2.0)).round() as u64;
            }
        }
        self.tuned.lock().unwrap().insert(key, n);
        Ok(n)
    }

    pub fn iterations_for(&self, us: f64) -> u64 {
        ((us - self.model.offset_us) / self.model.per_iteration_us)
            .max(0.0)
            .round() as u64
    }

    /// A pass that occupies the queue for about `us` microseconds, ordered after the op that
    /// wrote `activation` and before the next that touches it.
    pub fn pass(
        &self,
        gpu: &Gpu,
        activation: &wgpu::Buffer,
        us: f64,
    ) -> Result<SpinPass, GpuError> {
        spin_pass(
            gpu,
            activation,
            &self.spinner,
            self.tuned_iterations(gpu, activation, us)?,
        )
    }

    /// Runs the calibrated kernel for each asked duration and reports what it achieved.
    pub fn check(
        &self,
        gpu: &Gpu,
        activation: &wgpu::Buffer,
        asked_ms: &[f64],
    ) -> Result<Vec<CalibrationPoint>, GpuError> {
        asked_ms
            .iter()
            .map(|&ms| {
                let n = self.tuned_iterations(gpu, activation, ms * 1e3)?;
                // The median of three medians: one disturbed burst on a shared machine does
                // not decide the figure.
                let mut runs = (0..3)
                    .map(|_| measure(gpu, activation, &self.spinner, n))
                    .collect::<Result<Vec<_>, _>>()?;
                runs.sort_by(f64::total_cmp);
                let achieved = runs[1];
                Ok(CalibrationPoint {
                    asked_us: ms * 1e3,
                    achieved_us: achieved,
                })
            })
            .collect()
    }
}
