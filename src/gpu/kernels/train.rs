//! The kernels of a training pipeline stage (issue 15): y = layernorm(x W) forward and
//! backward. A GEMM with either operand transposed and optional accumulation (forward X W,
//! input gradient dZ W^T, weight gradient X^T dZ summed over microbatches), layernorm forward
//! keeping 1/std per row (no affine part), and its backward. Each is checked against the f64
//! references below (`tests/train_kernels.rs`).

use super::{DispatchPass, KernelError};
use crate::gpu::Gpu;

/// The layernorm shaders, each after the reduction they share.
const LAYERNORM_FWD: &str = concat!(
    include_str!("../../../shaders/train_reduce.wgsl"),
    include_str!("../../../shaders/train_layernorm_fwd.wgsl")
);
const LAYERNORM_BWD: &str = concat!(
    include_str!("../../../shaders/train_reduce.wgsl"),
    include_str!("../../../shaders/train_layernorm_bwd.wgsl")
);

/// A GEMM of the stage: C (+)= op(A) op(B), op(A) M x K, op(B) K x N, all row-major.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrainGemm {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    /// A is stored K x M and used transposed.
    pub trans_a: bool,
    /// B is stored N x K and used transposed.
    pub trans_b: bool,
    /// C += instead of C =.
    pub accumulate: bool,
}

fn check_dims(what: &str, dims: &[u32]) -> Result<(), KernelError> {
    if dims.contains(&0) {
        return Err(KernelError::Invalid(format!(
            "{what} has a zero dimension ({dims:?})"
        )));
    }
    Ok(())
}

fn flag(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

impl TrainGemm {
    /// The compiled pipeline of this shape (bind it to many buffers with `bind`: a CPU driver
    /// compiles each pipeline, so a stage compiles each shape once).
    pub fn pipeline(&self, gpu: &Gpu) -> Result<wgpu::ComputePipeline, KernelError> {
        check_dims("a training GEMM", &[self.m, self.n, self.k])?;
        Ok(gpu.compute_pipeline(
            "train gemm",
            include_str!("../../../shaders/train_gemm.wgsl"),
            "main",
            true,
            &self.constants(),
        )?)
    }

    fn constants(&self) -> [(&'static str, f64); 6] {
        [
            ("M", self.m as f64),
            ("N", self.n as f64),
            ("K", self.k as f64),
            ("TRANS_A", flag(self.trans_a)),
            ("TRANS_B", flag(self.trans_b)),
            ("ACCUMULATE", flag(self.accumulate)),
        ]
    }

    pub fn workgroups(&self) -> (u32, u32) {
        (self.n.div_ceil(16), self.m.div_ceil(16))
    }

    /// Binds the GEMM to caller-owned buffers `a`, `b` and `c`.
    pub fn pass(
        &self,
        gpu: &Gpu,
        a: &wgpu::Buffer,
        b: &wgpu::Buffer,
        c: &wgpu::Buffer,
    ) -> Result<DispatchPass, KernelError> {
        check_dims("a training GEMM", &[self.m, self.n, self.k])?;
        for (what, bytes) in [
            ("A", self.m as u64 * self.k as u64 * 4),
            ("B", self.k as u64 * self.n as u64 * 4),
            ("C", self.m as u64 * self.n as u64 * 4),
        ] {
            gpu.check_binding(&format!("training GEMM {what}"), bytes)?;
        }
        Ok(DispatchPass::new(
            gpu,
            "train gemm",
            include_str!("../../../shaders/train_gemm.wgsl"),
            "main",
            &self.constants(),
            &[a, b, c],
            self.workgroups(),
        )?)
    }
}

/// y = layernorm(z) over `rows` rows of `hidden`, and 1/std per row into `rstd`.
pub fn layernorm_forward(
    gpu: &Gpu,
    rows: u32,
    hidden: u32,
    z: &wgpu::Buffer,
    y: &wgpu::Buffer,
    rstd: &wgpu::Buffer,
) -> Result<DispatchPass, KernelError> {
    check_dims("a training layernorm", &[rows, hidden])?;
    Ok(DispatchPass::new(
        gpu,
        "train layernorm forward",
        LAYERNORM_FWD,
        "main",
        &[("ROWS", rows as f64), ("H", hidden as f64)],
        &[z, y, rstd],
        (rows, 1),
    )?)
}

/// dz from dy, the normalized output y and 1/std per row.
pub fn layernorm_backward(
    gpu: &Gpu,
    rows: u32,
    hidden: u32,
    dy: &wgpu::Buffer,
    y: &wgpu::Buffer,
    rstd: &wgpu::Buffer,
    dz: &wgpu::Buffer,
) -> Result<DispatchPass, KernelError> {
    check_dims("a training layernorm", &[rows, hidden])?;
    Ok(DispatchPass::new(
        gpu,
        "train layernorm backward",
        LAYERNORM_BWD,
        "main",
        &[("ROWS", rows as f64), ("H", hidden as f64)],
        &[dy, y, rstd, dz],
        (rows, 1),
    )?)
}

/// The compiled layernorm forward (`backward: false`) or backward pipeline for rows x hidden;
/// both dispatch (rows, 1) workgroups.
pub fn layernorm_pipeline(
    gpu: &Gpu,
    rows: u32,
    hidden: u32,
    backward: bool,
) -> Result<wgpu::ComputePipeline, KernelError> {
    check_dims("a training layernorm", &[rows, hidden])?;
    let wgsl = if backward {
        LAYERNORM_BWD
    } else {
        LAYERNORM_FWD
    };
    Ok(gpu.compute_pipeline(
        "train layernorm",
        wgsl,
        "main",
        true,
        &[("ROWS", rows as f64), ("H", hidden as f64)],
    )?)
}

/// The f64 references of the kernels above (inputs are the f32 values the GPU saw).
pub mod reference {
    /// The layernorm epsilon the shaders use.
    pub const EPS: f64 = 1e-5;

    pub fn gemm(g: &super::TrainGemm, a: &[f32], b: &[f32], c0: Option<&[f64]>) -> Vec<f64> {
        let (m, n, k) = (g.m as usize, g.n as usize, g.k as usize);
        let at = |r: usize, c: usize| -> f64 {
            if g.trans_a {
                a[c * m + r] as f64
            } else {
                a[r * k + c] as f64
            }
        };
        let bt = |r: usize, c: usize| -> f64 {
            if g.trans_b {
                b[c * k + r] as f64
            } else {
                b[r * n + c] as f64
            }
        };
        let mut out = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (0..k).map(|p| at(i, p) * bt(p, j)).sum();
                out[i * n + j] = s + c0.map_or(0.0, |c| c[i * n + j]);
            }
        }
        out
    }

    /// (y, 1/std per row).
    pub fn layernorm_forward(hidden: usize, z: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let mut y = Vec::with_capacity(z.len());
        let mut rstd = Vec::new();
        for row in z.chunks(hidden) {
            let mean = row.iter().sum::<f64>() / hidden as f64;
            let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / hidden as f64;
            let r = 1.0 / (var + EPS).sqrt();
            y.extend(row.iter().map(|v| (v - mean) * r));
            rstd.push(r);
        }
        (y, rstd)
    }

    pub fn layernorm_backward(hidden: usize, dy: &[f64], y: &[f64], rstd: &[f64]) -> Vec<f64> {
        let mut dz = Vec::with_capacity(dy.len());
        for ((d, yr), &r) in dy.chunks(hidden).zip(y.chunks(hidden)).zip(rstd) {
            let md = d.iter().sum::<f64>() / hidden as f64;
            let mdy = d.iter().zip(yr).map(|(a, b)| a * b).sum::<f64>() / hidden as f64;
            dz.extend(d.iter().zip(yr).map(|(a, b)| r * (a - md - b * mdy)));
        }
        dz
    }

    /// ||got - want||_2 / ||want||_2 (0 when both are 0).
    pub fn rel_err(got: &[f32], want: &[f64]) -> f64 {
        let num: f64 = got
            .iter()
            .zip(want)
            .map(|(g, w)| (*g as f64 - w).powi(2))
            .sum();
        let den: f64 = want.iter().map(|w| w * w).sum();
        if den == 0.0 {
            num.sqrt()
        } else {
            (num / den).sqrt()
        }
    }
}
