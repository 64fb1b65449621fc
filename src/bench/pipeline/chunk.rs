//! One model chunk on a rank's GPU (a virtual stage): its layers, the buffers and bindings
//! of every microbatch, and its f64 reference. A rank runs one chunk, or V of them under an
//! interleaved schedule ([`super::stage::Stage`] holds them).

use anyhow::{anyhow, Result};

use super::shape::{seeded, target, Shape};
use crate::gpu::kernels::train::{layernorm_pipeline, reference, TrainGemm};
use crate::gpu::kernels::DispatchPass;
use crate::gpu::Gpu;

pub(super) struct Layer {
    pub(super) weights: Vec<f32>,
    pub(super) grad: wgpu::Buffer,
    /// Per microbatch: y (this layer's output), 1/std per row, dZ.
    pub(super) y: Vec<wgpu::Buffer>,
    /// Held for the bindings above (as are `_dz` and the stage's `_z`).
    pub(super) _rstd: Vec<wgpu::Buffer>,
    pub(super) _dz: Vec<wgpu::Buffer>,
    pub(super) fwd: Vec<(DispatchPass, DispatchPass)>,
    /// Layernorm backward then dX = dZ W^T, per microbatch.
    pub(super) bwd: Vec<(DispatchPass, DispatchPass)>,
    /// dW += X^T dZ, per microbatch.
    pub(super) wgrad: Vec<DispatchPass>,
}

/// One model chunk a rank runs (a virtual stage): its layers and per microbatch its input,
/// the gradient arriving at its top and the one leaving its bottom. A rank runs one chunk,
/// or V under an interleaved schedule.
pub(super) struct Chunk {
    /// Which virtual stage of the model this is.
    pub(super) virtual_stage: u32,
    /// The model's first chunk makes its own inputs; its last computes the loss.
    pub(super) first: bool,
    pub(super) last: bool,
    pub(super) layers: Vec<Layer>,
    /// Per microbatch: the chunk's input x0.
    pub(super) inputs: Vec<wgpu::Buffer>,
    /// Per microbatch: the gradient arriving at the top layer (dY), and the bottom's dX.
    pub(super) dy: Vec<wgpu::Buffer>,
    pub(super) dx: Vec<wgpu::Buffer>,
    /// The last chunk's dY = y - t per microbatch.
    pub(super) loss_grad: Vec<DispatchPass>,
    pub(super) _targets: Vec<wgpu::Buffer>,
    /// The last iteration's inputs and incoming gradients, for the reference.
    pub(super) seen_inputs: Vec<Option<Vec<f32>>>,
    pub(super) seen_dy: Vec<Option<Vec<f32>>>,
}

pub(super) fn storage(gpu: &Gpu, label: &str, elements: usize) -> wgpu::Buffer {
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

/// The last chunk's targets and its loss-gradient passes (top layer's y against the target
/// into dy); none on the other chunks.
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

/// The compute pipelines every layer binds (one per kernel shape), made once per rank.
pub(super) struct Kernels {
    gemms: [TrainGemm; 3],
    fwd: wgpu::ComputePipeline,
    dx: wgpu::ComputePipeline,
    dw: wgpu::ComputePipeline,
    ln: wgpu::ComputePipeline,
    ln_back: wgpu::ComputePipeline,
}

impl Kernels {
    pub(super) fn new(gpu: &Gpu, shape: &Shape) -> Result<Kernels> {
        let gemms = train_gemms(shape);
        let (t, h) = (shape.tokens, shape.hidden);
        Ok(Kernels {
            fwd: gemms[0].pipeline(gpu)?,
            dx: gemms[1].pipeline(gpu)?,
            dw: gemms[2].pipeline(gpu)?,
            ln: layernorm_pipeline(gpu, t, h, false)?,
            ln_back: layernorm_pipeline(gpu, t, h, true)?,
            gemms,
        })
    }
}

/// Per microbatch, the buffers a layer binds besides its own: its input x, the gradient
/// arriving at its output (dY) and where its input gradient (dX) goes.
struct LayerIo<'a> {
    x: Vec<&'a wgpu::Buffer>,
    dy_in: Vec<&'a wgpu::Buffer>,
    dx_out: Vec<&'a wgpu::Buffer>,
}

impl Layer {
    /// One layer: weights seeded by `seed`, its buffers, and per microbatch its forward,
    /// backward and weight-gradient bindings; `z` is the rank's scratch for Z = X W, shared.
    fn build(
        gpu: &Gpu,
        k: &Kernels,
        shape: &Shape,
        seed: u64,
        io: &LayerIo,
        z: &wgpu::Buffer,
    ) -> Result<Layer> {
        let (t, h, n) = (shape.tokens, shape.hidden, shape.microbatches as usize);
        let e = shape.elements();
        let [fwd_gemm, dx_gemm, dw_gemm] = k.gemms;
        let bind = |label: &str, p: &wgpu::ComputePipeline, b: &[&wgpu::Buffer], wg| {
            DispatchPass::with_pipeline(gpu, label, p.clone(), b, wg)
        };
        let weights = seeded(seed, (h * h) as usize, 1.0 / (h as f32).sqrt());
        let w = gpu.storage_from("weights", &weights);
        let grad = storage(gpu, "weight grad", (h * h) as usize);
        let y: Vec<_> = (0..n).map(|_| storage(gpu, "layer y", e)).collect();
        let rstd: Vec<_> = (0..n)
            .map(|_| storage(gpu, "layer rstd", t as usize))
            .collect();
        let dz: Vec<_> = (0..n).map(|_| storage(gpu, "layer dz", e)).collect();
        let mut fwd = Vec::new();
        let mut bwd = Vec::new();
        let mut wgrad = Vec::new();
        for mb in 0..n {
            let (x, dy_in, dx_out) = (io.x[mb], io.dy_in[mb], io.dx_out[mb]);
            fwd.push((
                bind("fwd gemm", &k.fwd, &[x, &w, z], fwd_gemm.workgroups())?,
                bind("ln fwd", &k.ln, &[z, &y[mb], &rstd[mb]], (t, 1))?,
            ));
            bwd.push((
                bind(
                    "ln bwd",
                    &k.ln_back,
                    &[dy_in, &y[mb], &rstd[mb], &dz[mb]],
                    (t, 1),
                )?,
                bind(
                    "dx gemm",
                    &k.dx,
                    &[&dz[mb], &w, dx_out],
                    dx_gemm.workgroups(),
                )?,
            ));
            wgrad.push(bind(
                "dw gemm",
                &k.dw,
                &[x, &dz[mb], &grad],
                dw_gemm.workgroups(),
            )?);
        }
        Ok(Layer {
            weights,
            grad,
            y,
            _rstd: rstd,
            _dz: dz,
            fwd,
            bwd,
            wgrad,
        })
    }
}

impl Chunk {
    /// Builds virtual stage `virtual_stage` of `total`: `layers` layers, weights seeded by
    /// (virtual stage, layer), every buffer and binding made before anything is timed.
    pub(super) fn new(
        gpu: &Gpu,
        k: &Kernels,
        (shape, layers_here): (&Shape, u32),
        (virtual_stage, total): (u32, u32),
        z: &wgpu::Buffer,
    ) -> Result<Chunk> {
        let n = shape.microbatches as usize;
        let e = shape.elements();
        let inputs: Vec<_> = (0..n).map(|_| storage(gpu, "stage input", e)).collect();
        let dy: Vec<_> = (0..n).map(|_| storage(gpu, "stage dy", e)).collect();
        let dx: Vec<_> = (0..n).map(|_| storage(gpu, "stage dx", e)).collect();
        let mut layers: Vec<Layer> = Vec::new();
        // dZ W^T of a layer above feeds the layernorm backward of the layer below; the bottom
        // layer writes dx.
        let scratch_dy: Vec<Vec<wgpu::Buffer>> = (0..layers_here)
            .map(|_| (0..n).map(|_| storage(gpu, "layer dy", e)).collect())
            .collect();
        for l in 0..layers_here as usize {
            let top = l + 1 == layers_here as usize;
            let io = LayerIo {
                x: if l == 0 {
                    inputs.iter().collect()
                } else {
                    layers[l - 1].y.iter().collect()
                },
                dy_in: if top {
                    dy.iter().collect()
                } else {
                    scratch_dy[l].iter().collect()
                },
                dx_out: if l == 0 {
                    dx.iter().collect()
                } else {
                    scratch_dy[l - 1].iter().collect()
                },
            };
            let seed = 7_919 * (virtual_stage as u64 + 1) + l as u64;
            let layer = Layer::build(gpu, k, shape, seed, &io, z)?;
            layers.push(layer);
        }
        let last = virtual_stage + 1 == total;
        let top = layers.last().expect("at least one layer");
        let (targets, loss_grad) = loss_grads(gpu, shape, last, top, &dy)?;
        Ok(Chunk {
            virtual_stage,
            first: virtual_stage == 0,
            last,
            layers,
            inputs,
            dy,
            dx,
            loss_grad,
            _targets: targets,
            seen_inputs: vec![None; n],
            seen_dy: vec![None; n],
        })
    }

    /// The weight gradients against an f64 reference of this chunk's layers from the inputs
    /// and gradients it saw in the last iteration: the largest relative error over layers.
    pub(super) fn verify(&self, gpu: &Gpu, shape: &Shape) -> Result<f64> {
        let (h, t) = (shape.hidden as usize, shape.tokens as usize);
        let e = shape.elements();
        let mut grads = vec![vec![0f64; h * h]; self.layers.len()];
        let to64 = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<f64>>();
        for mb in 0..shape.microbatches as usize {
            let x0 = self.seen_inputs[mb].as_ref().ok_or_else(|| {
                anyhow!(
                    "virtual stage {}: no input seen for microbatch {mb}",
                    self.virtual_stage
                )
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
                    let t = target(shape, mb as u32);
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
                bytemuck::pod_collect_to_vec::<u8, f32>(&gpu.read_back(&layer.grad)?);
            worst = worst.max(reference::rel_err(&got, &grads[l]));
        }
        Ok(worst)
    }
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
