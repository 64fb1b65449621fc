//! One pipeline stage on its GPU: `layers` layers of y = layernorm(x W) (hidden H, T tokens
//! per microbatch), with what backward needs kept per microbatch. The last stage's loss is
//! 0.5 ||y - t||^2 with t a fixed seeded target: 0.5 ||y||^2 alone is constant under a
//! layernorm without affine part (its gradient is eps / (var + eps) y, about 1e-5 y), so its
//! gradients would be rounding noise and no check could tell a right one from a wrong one. F runs the layers forward;
//! B computes the input gradient (layernorm backward, then dZ W^T) and keeps dZ; W adds
//! X^T dZ into each layer's weight gradient. With backward fused (1F1B), B does both.
//! Every kernel is verified in `tests/train_kernels.rs`; after a run, the weight gradients
//! are checked against an f64 reference of the same layers and inputs ([`Stage::verify`]).

use std::time::Instant;

use anyhow::{anyhow, Result};

use crate::gpu::kernels::train::{layernorm_pipeline, reference, TrainGemm};
use crate::gpu::kernels::{record_untimed, DispatchPass};
use crate::gpu::timing::PassTimer;
use crate::gpu::Gpu;

/// The model's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Shape {
    pub layers: u32,
    pub hidden: u32,
    pub tokens: u32,
    pub microbatches: u32,
}

impl Shape {
    /// Elements of one activation (tokens x hidden).
    pub fn elements(&self) -> usize {
        self.tokens as usize * self.hidden as usize
    }

    /// Bytes of a stage's buffers (`Stage::new`'s allocations): per microbatch its input, dy
    /// and dx, and per layer and microbatch y, dz and a layer's dy (activation-sized) and rstd
    /// (a float per token); per layer the weights and their gradient; the staging copy and z.
    pub fn stage_bytes(&self) -> u64 {
        let (l, n) = (self.layers as u64, self.microbatches as u64);
        let e = self.elements() as u64;
        let h = self.hidden as u64;
        let floats = e * (3 * n + 2) + l * n * (3 * e + self.tokens as u64) + l * 2 * h * h;
        4 * floats
    }
}

/// Deterministic pseudo-random values in [-1, 1) (splitmix64), so every rank can make any
/// stage's weights and the first stage's inputs from a seed alone.
pub fn seeded(seed: u64, len: usize, scale: f32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    (0..len)
        .map(|_| {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// The last stage's target for microbatch `mb`.
pub fn target(shape: &Shape, mb: u32) -> Vec<f32> {
    seeded(2_000_003 + mb as u64, shape.elements(), 1.0)
}

/// The first stage's input for microbatch `mb`.
pub fn input(shape: &Shape, mb: u32) -> Vec<f32> {
    seeded(1_000_003 + mb as u64, shape.elements(), 1.0)
}

struct Layer {
    weights: Vec<f32>,
    grad: wgpu::Buffer,
    /// Per microbatch: y (this layer's output), 1/std per row, dZ.
    y: Vec<wgpu::Buffer>,
    /// Held for the bindings above (as are `_dz` and the stage's `_z`).
    _rstd: Vec<wgpu::Buffer>,
    _dz: Vec<wgpu::Buffer>,
    fwd: Vec<(DispatchPass, DispatchPass)>,
    /// Layernorm backward then dX = dZ W^T, per microbatch.
    bwd: Vec<(DispatchPass, DispatchPass)>,
    /// dW += X^T dZ, per microbatch.
    wgrad: Vec<DispatchPass>,
}

pub struct Stage {
    pub gpu: Gpu,
    pub shape: Shape,
    pub index: u32,
    pub last: bool,
    layers: Vec<Layer>,
    /// Per microbatch: the stage's input x0.
    inputs: Vec<wgpu::Buffer>,
    /// Per microbatch: the gradient arriving at the top layer (dY), and the bottom's dX.
    dy: Vec<wgpu::Buffer>,
    /// The last stage's dY = y - t per microbatch.
    loss_grad: Vec<DispatchPass>,
    _targets: Vec<wgpu::Buffer>,
    dx: Vec<wgpu::Buffer>,
    /// Scratch for Z = X W (consumed by layernorm at once).
    _z: wgpu::Buffer,
    staging: wgpu::Buffer,
    /// Timestamps at the start and end of each op's pass (one slot per op since
    /// [`Stage::start_timing`]), where the device has them.
    timer: Option<PassTimer>,
    slots: u32,
    /// The last iteration's inputs and incoming gradients, for the reference.
    pub seen_inputs: Vec<Option<Vec<f32>>>,
    pub seen_dy: Vec<Option<Vec<f32>>>,
}

fn storage(gpu: &Gpu, label: &str, elements: usize) -> wgpu::Buffer {
    gpu.storage_from(label, &vec![0f32; elements.max(1)])
}

/// The three GEMMs of a layer: forward (x W), the input gradient (dZ W^T) and the weight
/// gradient (x^T dZ, accumulated over microbatches).
fn train_gemms(shape: &Shape) -> [TrainGemm; 3] {
    let (t, h) = (shape.tokens, shape.hidden);
    let fwd_gemm = TrainGemm {
        m: t,
        n: h,
        k: h,
        trans_a: false,
        trans_b: false,
        accumulate: false,
    };
    let dx_gemm = TrainGemm {
        trans_b: true,
        ..fwd_gemm
    };
    let dw_gemm = TrainGemm {
        m: h,
        n: h,
        k: t,
        trans_a: true,
        trans_b: false,
        accumulate: true,
    };
    [fwd_gemm, dx_gemm, dw_gemm]
}

/// The last stage's targets and its loss-gradient passes (top layer's y against the target
/// into dy); none on the other stages.
fn loss_grads(
    gpu: &Gpu,
    shape: &Shape,
    last: bool,
    top: &Layer,
    dy: &[wgpu::Buffer],
) -> Result<(Vec<wgpu::Buffer>, Vec<DispatchPass>)> {
    let e = shape.elements();
    let targets: Vec<wgpu::Buffer> = if last {
        (0..shape.microbatches)
            .map(|mb| gpu.storage_from("target", &target(shape, mb)))
            .collect()
    } else {
        Vec::new()
    };
    let p_loss = gpu.compute_pipeline(
        "loss grad",
        include_str!("../../../shaders/train_loss_grad.wgsl"),
        "main",
        true,
        &[("LEN", e as f64)],
    )?;
    let loss_grad = targets
        .iter()
        .enumerate()
        .map(|(mb, t)| {
            DispatchPass::with_pipeline(
                gpu,
                "loss grad",
                p_loss.clone(),
                &[&top.y[mb], t, &dy[mb]],
                ((e as u32).div_ceil(64), 1),
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((targets, loss_grad))
}

impl Stage {
    /// Builds stage `index` of `stages`: weights seeded by (stage, layer), one pipeline per
    /// kernel shape, and every buffer and binding made before anything is timed.
    pub fn new(gpu: Gpu, shape: Shape, index: u32, stages: u32) -> Result<Stage> {
        let (t, h, n) = (shape.tokens, shape.hidden, shape.microbatches as usize);
        let e = shape.elements();
        let [fwd_gemm, dx_gemm, dw_gemm] = train_gemms(&shape);
        let p_fwd = fwd_gemm.pipeline(&gpu)?;
        let p_dx = dx_gemm.pipeline(&gpu)?;
        let p_dw = dw_gemm.pipeline(&gpu)?;
        let p_ln = layernorm_pipeline(&gpu, t, h, false)?;
        let p_lnb = layernorm_pipeline(&gpu, t, h, true)?;
        let inputs: Vec<_> = (0..n).map(|_| storage(&gpu, "stage input", e)).collect();
        let dy: Vec<_> = (0..n).map(|_| storage(&gpu, "stage dy", e)).collect();
        let dx: Vec<_> = (0..n).map(|_| storage(&gpu, "stage dx", e)).collect();
        let z = storage(&gpu, "stage z", e);
        let bind = |label: &str, p: &wgpu::ComputePipeline, b: &[&wgpu::Buffer], wg| {
            DispatchPass::with_pipeline(&gpu, label, p.clone(), b, wg)
        };
        let mut layers: Vec<Layer> = Vec::new();
        // dZ W^T of a layer above feeds the layernorm backward of the layer below; the bottom
        // layer writes dx.
        let scratch_dy: Vec<Vec<wgpu::Buffer>> = (0..shape.layers)
            .map(|_| (0..n).map(|_| storage(&gpu, "layer dy", e)).collect())
            .collect();
        for l in 0..shape.layers as usize {
            let weights = seeded(
                7_919 * (index as u64 + 1) + l as u64,
                (h * h) as usize,
                1.0 / (h as f32).sqrt(),
            );
            let w = gpu.storage_from("weights", &weights);
            let grad = storage(&gpu, "weight grad", (h * h) as usize);
            let y: Vec<_> = (0..n).map(|_| storage(&gpu, "layer y", e)).collect();
            let rstd: Vec<_> = (0..n)
                .map(|_| storage(&gpu, "layer rstd", t as usize))
                .collect();
            let dz: Vec<_> = (0..n).map(|_| storage(&gpu, "layer dz", e)).collect();
            let mut fwd = Vec::new();
            let mut bwd = Vec::new();
            let mut wgrad = Vec::new();
            for mb in 0..n {
                let x = if l == 0 {
                    &inputs[mb]
                } else {
                    &layers[l - 1].y[mb]
                };
                fwd.push((
                    bind("fwd gemm", &p_fwd, &[x, &w, &z], fwd_gemm.workgroups())?,
                    bind("ln fwd", &p_ln, &[&z, &y[mb], &rstd[mb]], (t, 1))?,
                ));
                let top = l + 1 == shape.layers as usize;
                let dy_in = if top { &dy[mb] } else { &scratch_dy[l][mb] };
                let dx_out = if l == 0 {
                    &dx[mb]
                } else {
                    &scratch_dy[l - 1][mb]
                };
                bwd.push((
                    bind(
                        "ln bwd",
                        &p_lnb,
                        &[dy_in, &y[mb], &rstd[mb], &dz[mb]],
                        (t, 1),
                    )?,
                    bind(
                        "dx gemm",
                        &p_dx,
                        &[&dz[mb], &w, dx_out],
                        dx_gemm.workgroups(),
                    )?,
                ));
                wgrad.push(bind(
                    "dw gemm",
                    &p_dw,
                    &[x, &dz[mb], &grad],
                    dw_gemm.workgroups(),
                )?);
            }
            layers.push(Layer {
                weights,
                grad,
                y,
                _rstd: rstd,
                _dz: dz,
                fwd,
                bwd,
                wgrad,
            });
        }
        let staging = gpu.staging("stage send", (e * 4) as u64, wgpu::MapMode::Read);
        let last = index + 1 == stages;
        let top = layers.last().expect("at least one layer");
        let (targets, loss_grad) = loss_grads(&gpu, &shape, last, top, &dy)?;
        // An iteration runs at most F, B and W of every microbatch.
        let timer = gpu
            .has_timestamps()
            .then(|| PassTimer::new(&gpu, 3 * shape.microbatches));
        Ok(Stage {
            gpu,
            shape,
            index,
            last,
            layers,
            loss_grad,
            _targets: targets,
            inputs,
            dy,
            dx,
            _z: z,
            staging,
            timer,
            slots: 0,
            seen_inputs: vec![None; n],
            seen_dy: vec![None; n],
        })
    }

    /// Starts a new sequence of timestamped ops (slot 0 is the next op's).
    pub fn start_timing(&mut self) {
        self.slots = 0;
    }

    /// The GPU's (start, end) of each op since [`Stage::start_timing`], in µs on the GPU's
    /// clock; `None` without timestamps, or when more ops ran than there are slots.
    pub fn gpu_spans(&self, ops: usize) -> Result<Option<Vec<(f64, f64)>>> {
        match &self.timer {
            Some(t) if self.slots as usize == ops && ops > 0 => {
                Ok(Some(t.read_absolute(&self.gpu, self.slots)?))
            }
            _ => Ok(None),
        }
    }

    /// Zeroes the weight gradients (each iteration accumulates over its microbatches).
    pub fn zero_grads(&self) -> Result<()> {
        let zeros = vec![0u8; (self.shape.hidden * self.shape.hidden * 4) as usize];
        for l in &self.layers {
            self.gpu.queue.write_buffer(&l.grad, 0, &zeros);
        }
        let idx = self.gpu.queue.submit([]);
        self.gpu.wait(idx)?;
        Ok(())
    }

    /// F for `mb`: writes the input (given, or the first stage's own), runs every layer.
    pub fn forward(&mut self, mb: u32, input: Option<Vec<f32>>) -> Result<()> {
        let m = mb as usize;
        let x = match input {
            Some(x) => x,
            None if self.index == 0 => super::stage::input(&self.shape, mb),
            None => return Err(anyhow!("stage {} ran F {mb} without its input", self.index)),
        };
        self.gpu
            .queue
            .write_buffer(&self.inputs[m], 0, bytemuck::cast_slice(&x));
        self.seen_inputs[m] = Some(x);
        let passes: Vec<&DispatchPass> = self
            .layers
            .iter()
            .flat_map(|l| [&l.fwd[m].0, &l.fwd[m].1])
            .collect();
        submit(&self.gpu, self.timer.as_ref(), &mut self.slots, &passes)
    }

    /// B for `mb` (and W when `fused`): dY given by the next stage, or the stage's own output
    /// on the last (the loss is 0.5 ||y||^2).
    pub fn backward(&mut self, mb: u32, dy: Option<Vec<f32>>, fused: bool) -> Result<()> {
        let m = mb as usize;
        match dy {
            Some(d) => {
                self.gpu
                    .queue
                    .write_buffer(&self.dy[m], 0, bytemuck::cast_slice(&d));
                self.seen_dy[m] = Some(d);
            }
            None if self.last => self.seen_dy[m] = None,
            None => {
                return Err(anyhow!(
                    "stage {} ran B {mb} without its gradient",
                    self.index
                ))
            }
        }
        let mut passes: Vec<&DispatchPass> = Vec::new();
        if self.last {
            passes.push(&self.loss_grad[m]);
        }
        for l in self.layers.iter().rev() {
            passes.push(&l.bwd[m].0);
            passes.push(&l.bwd[m].1);
        }
        if fused {
            passes.extend(self.layers.iter().map(|l| &l.wgrad[m]));
        }
        submit(&self.gpu, self.timer.as_ref(), &mut self.slots, &passes)
    }

    /// W for `mb`.
    pub fn weight(&mut self, mb: u32) -> Result<()> {
        let m = mb as usize;
        let passes: Vec<&DispatchPass> = self.layers.iter().map(|l| &l.wgrad[m]).collect();
        submit(&self.gpu, self.timer.as_ref(), &mut self.slots, &passes)
    }

    /// Copies the output of F (`grad: false`) or B (`grad: true`) for `mb` to the host; returns
    /// the values and the µs the copy and map took (the queue time of an offloaded send).
    pub fn read_out(&self, mb: u32, grad: bool) -> Result<(Vec<f32>, f64)> {
        let m = mb as usize;
        let src = if grad {
            &self.dx[m]
        } else {
            &self.layers.last().expect("at least one layer").y[m]
        };
        // The host buffer is made before the clock starts, and the copy lands in it directly.
        let mut out = vec![0f32; src.size() as usize / 4];
        let t0 = Instant::now();
        let mut enc = self.gpu.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(src, 0, &self.staging, 0, src.size());
        let idx = self.gpu.queue.submit([enc.finish()]);
        self.gpu
            .map_read_into(&self.staging, bytemuck::cast_slice_mut(&mut out), Some(idx))?;
        Ok((out, t0.elapsed().as_secs_f64() * 1e6))
    }

    /// The weight gradients against an f64 reference of this stage's layers from the inputs
    /// and gradients it saw in the last iteration: the largest relative error over layers.
    pub fn verify(&self) -> Result<f64> {
        let (h, t) = (self.shape.hidden as usize, self.shape.tokens as usize);
        let e = self.shape.elements();
        let mut grads = vec![vec![0f64; h * h]; self.layers.len()];
        let to64 = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<f64>>();
        for mb in 0..self.shape.microbatches as usize {
            let x0 = self.seen_inputs[mb].as_ref().ok_or_else(|| {
                anyhow!("stage {}: no input seen for microbatch {mb}", self.index)
            })?;
            // Forward in f64: the input of each layer, its output and 1/std.
            let mut xs = vec![to64(x0)];
            let mut ys = Vec::new();
            let mut rs = Vec::new();
            for l in &self.layers {
                let w = to64(&l.weights);
                let z = gemm64(xs.last().expect("input"), &w, t, h, h, false, false);
                let (y, r) = reference::layernorm_forward(h, &z);
                xs.push(y.clone());
                ys.push(y);
                rs.push(r);
            }
            let mut dy = match &self.seen_dy[mb] {
                Some(d) => to64(d),
                None => {
                    let t = target(&self.shape, mb as u32);
                    ys.last()
                        .expect("a layer")
                        .iter()
                        .zip(&t)
                        .map(|(y, t)| y - *t as f64)
                        .collect()
                }
            };
            for (l, layer) in self.layers.iter().enumerate().rev() {
                let dz = reference::layernorm_backward(h, &dy, &ys[l], &rs[l]);
                let g = gemm64(&xs[l], &dz, h, h, t, true, false);
                for (a, b) in grads[l].iter_mut().zip(g) {
                    *a += b;
                }
                dy = gemm64(&dz, &to64(&layer.weights), t, h, h, false, true);
            }
            debug_assert_eq!(dy.len(), e);
        }
        let mut worst = 0f64;
        for (l, layer) in self.layers.iter().enumerate() {
            let got: Vec<f32> =
                bytemuck::pod_collect_to_vec::<u8, f32>(&self.gpu.read_back(&layer.grad)?);
            worst = worst.max(reference::rel_err(&got, &grads[l]));
        }
        Ok(worst)
    }
}

/// Runs one op: its passes in one compute pass, timestamped in the next slot if one is left.
fn submit(
    gpu: &Gpu,
    timer: Option<&PassTimer>,
    slots: &mut u32,
    passes: &[&DispatchPass],
) -> Result<()> {
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    let encode = |p: &mut wgpu::ComputePass<'_>| {
        for pass in passes {
            pass.encode(p);
        }
    };
    match timer {
        Some(t) if *slots < t.capacity() => {
            t.record_pass(&mut enc, *slots, None, encode);
            *slots += 1;
        }
        _ => record_untimed(&mut enc, None, encode),
    }
    let idx = gpu.queue.submit([enc.finish()]);
    gpu.wait(idx)?;
    Ok(())
}

/// C = op(A) op(B) in f64, op(A) m x k, op(B) k x n (A stored k x m when `ta`, B n x k when
/// `tb`).
fn gemm64(a: &[f64], b: &[f64], m: usize, n: usize, k: usize, ta: bool, tb: bool) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for p in 0..k {
            let av = if ta { a[p * m + i] } else { a[i * k + p] };
            if av == 0.0 {
                continue;
            }
            let row = &mut c[i * n..(i + 1) * n];
            for (j, cv) in row.iter_mut().enumerate() {
                let bv = if tb { b[j * k + p] } else { b[p * n + j] };
                *cv += av * bv;
            }
        }
    }
    c
}
