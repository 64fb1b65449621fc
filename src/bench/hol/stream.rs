//! The stream `hol` runs on the queue: a transformer layer's GEMM and layernorm in turn, each
//! reading the previous op's output, on two activation buffers. Both kernels are verified at
//! the stream's size before anything is timed.

use anyhow::Result;

use super::plan::HolPlan;
use crate::gpu::kernels::gemm::gemm_pass;
use crate::gpu::kernels::layernorm::layernorm_pass;
use crate::gpu::kernels::select::{choose, first_fitting};
use crate::gpu::kernels::{
    random_vec, DispatchPass, GemmKernel, GemmSize, GpuKernel, LayernormKernel, LayernormSize,
    GEMM_VARIANTS, LAYERNORM_VARIANTS,
};
use crate::gpu::Gpu;

/// The GEMM -> layernorm -> GEMM ... chain on two activation buffers.
pub struct Stream {
    gemm: DispatchPass,
    layernorm: DispatchPass,
    /// GEMM input and layernorm output.
    act_a: wgpu::Buffer,
    /// GEMM output and layernorm input.
    pub act_c: wgpu::Buffer,
    input: wgpu::Buffer,
}

impl Stream {
    pub fn output_of(&self, op: u32) -> &wgpu::Buffer {
        if op.is_multiple_of(2) {
            &self.act_c
        } else {
            &self.act_a
        }
    }

    /// Op `op`'s pass: GEMM on even ops, layernorm on odd ones.
    pub fn pass(&self, op: u32) -> &DispatchPass {
        if op.is_multiple_of(2) {
            &self.gemm
        } else {
            &self.layernorm
        }
    }

    pub fn reset(&self, gpu: &Gpu) -> Result<()> {
        gpu.submit_wait(|enc| {
            enc.copy_buffer_to_buffer(&self.input, 0, &self.act_a, 0, self.input.size());
        })?;
        Ok(())
    }
}

pub fn build_stream(gpu: &Gpu, plan: &HolPlan) -> Result<Stream> {
    let (m, h) = (plan.tokens, plan.hidden);
    let gsize = GemmSize { m, n: h, k: h };
    let lsize = LayernormSize { rows: m, hidden: h };
    // The same choice as `kernels`: a forced variant, or the measured ranking at this size.
    let make_gemm = |v| GemmKernel::new(gpu, v, gsize);
    let make_ln = |v| LayernormKernel::new(gpu, v, lsize);
    let wanted = plan.gemm_variant.as_deref();
    let (ranked, _) = choose(
        gpu,
        "gemm",
        GEMM_VARIANTS,
        wanted,
        gsize.to_string(),
        false,
        make_gemm,
    )?;
    let (gemm, gv) = first_fitting(&ranked, make_gemm)?;
    let wanted = plan.layernorm_variant.as_deref();
    let (ranked, _) = choose(
        gpu,
        "layernorm",
        LAYERNORM_VARIANTS,
        wanted,
        lsize.to_string(),
        false,
        make_ln,
    )?;
    let (layernorm, lv) = first_fitting(&ranked, make_ln)?;
    // Each kernel is verified at this size against the f64 reference before any timing.
    gemm.verify()?;
    layernorm.verify()?;
    let elems = m as usize * h as usize;
    let input_data = random_vec(elems);
    let input = gpu.storage_from("hol input", &input_data);
    let act_a = gpu.storage_from("hol act a", &input_data);
    let act_c = gpu.storage_from("hol act c", &vec![0.0f32; elems]);
    // Weights scaled by 1/sqrt(hidden) keep activations of order 1 through the chain.
    let scale = 1.0 / (h as f32).sqrt();
    let weight: Vec<f32> = random_vec(h as usize * h as usize)
        .iter()
        .map(|w| w * scale)
        .collect();
    let weight = gpu.storage_from("hol weight", &weight);
    let gamma = gpu.storage_from("hol gamma", &random_vec(h as usize));
    let beta = gpu.storage_from("hol beta", &random_vec(h as usize));
    Ok(Stream {
        gemm: gemm_pass(gpu, gv, gsize, &act_a, &weight, &act_c)?,
        layernorm: layernorm_pass(gpu, lv, lsize, &act_c, &gamma, &beta, &act_a)?,
        act_a,
        act_c,
        input,
    })
}
