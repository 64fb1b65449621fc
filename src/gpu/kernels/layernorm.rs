//! Layer normalisation over rows x hidden, f32, with eps = 1e-5.

use std::fmt;

use super::Verification;
use super::{
    compare, judge, random_vec, run_once, Dim, DispatchPass, GammaBeta, Geometry, GpuKernel,
    KernelError, Lanes, RowsPerGroup, Variant,
};
use crate::gpu::Gpu;

const LAYERNORM_WGSL: &str = include_str!("../../../shaders/layernorm.wgsl");
const LAYERNORM_SUBGROUP_WGSL: &str = concat!(
    include_str!("../../../shaders/welford.wgsl"),
    include_str!("../../../shaders/layernorm_subgroup.wgsl")
);
const LAYERNORM_VEC4_WGSL: &str = concat!(
    include_str!("../../../shaders/welford.wgsl"),
    include_str!("../../../shaders/layernorm_dims.wgsl"),
    include_str!("../../../shaders/layernorm_gb_storage.wgsl"),
    include_str!("../../../shaders/layernorm_vec4.wgsl"),
    include_str!("../../../shaders/layernorm_rows.wgsl")
);
const LAYERNORM_VEC4_UNIFORM_WGSL: &str = concat!(
    include_str!("../../../shaders/welford.wgsl"),
    include_str!("../../../shaders/layernorm_dims.wgsl"),
    include_str!("../../../shaders/layernorm_gb_uniform.wgsl"),
    include_str!("../../../shaders/layernorm_vec4.wgsl"),
    include_str!("../../../shaders/layernorm_rows.wgsl")
);
const LAYERNORM_U64_WGSL: &str = concat!(
    include_str!("../../../shaders/welford.wgsl"),
    include_str!("../../../shaders/layernorm_dims.wgsl"),
    include_str!("../../../shaders/layernorm_gb_uniform.wgsl"),
    include_str!("../../../shaders/layernorm_u64.wgsl"),
    include_str!("../../../shaders/layernorm_rows.wgsl")
);
const LAYERNORM_RESIDENT_WGSL: &str = concat!(
    include_str!("../../../shaders/welford.wgsl"),
    include_str!("../../../shaders/layernorm_dims.wgsl"),
    include_str!("../../../shaders/layernorm_gb_uniform.wgsl"),
    include_str!("../../../shaders/layernorm_u64.wgsl"),
    include_str!("../../../shaders/layernorm_resident.wgsl")
);
/// Bytes of each uniform array in layernorm_gb_uniform.wgsl (4096 vec4).
const UNIFORM_GB_BYTES: u64 = 4096 * 16;

pub const EPS: f32 = 1e-5;

/// The layernorm variant table: each row carries its requirements and its rows per workgroup.
pub static LAYERNORM_VARIANTS: &[Variant] = &[
    Variant::new(
        "row",
        "one invocation per row, two passes",
        LAYERNORM_WGSL,
        "layernorm_row",
        Geometry::layernorm(RowsPerGroup::Fixed(64), GammaBeta::Storage),
    ),
    Variant::new(
        "workgroup256",
        "one 256-lane workgroup per row, tree reduction",
        LAYERNORM_WGSL,
        "layernorm_workgroup",
        Geometry::layernorm(RowsPerGroup::Fixed(1), GammaBeta::Storage),
    ),
    Variant::new(
        "subgroup",
        "one subgroup per row, two-pass",
        LAYERNORM_SUBGROUP_WGSL,
        "layernorm_subgroup",
        Geometry::layernorm(RowsPerGroup::OnePerSubgroup, GammaBeta::Storage),
    )
    .needs(wgpu::Features::SUBGROUP)
    .lanes(Lanes::AtMost(64)),
    Variant::new(
        "subgroup_welford",
        "one subgroup per row, Welford plus Chan's merge",
        LAYERNORM_SUBGROUP_WGSL,
        "layernorm_subgroup_welford",
        Geometry::layernorm(RowsPerGroup::OnePerSubgroup, GammaBeta::Storage),
    )
    .needs(wgpu::Features::SUBGROUP)
    .lanes(Lanes::AtMost(64)),
    Variant::new(
        "one_subgroup",
        "a workgroup of one subgroup per row",
        LAYERNORM_SUBGROUP_WGSL,
        "layernorm_one_subgroup",
        Geometry::layernorm(RowsPerGroup::Fixed(1), GammaBeta::Storage),
    )
    .needs(wgpu::Features::SUBGROUP)
    .lanes(Lanes::Fixed),
    Variant::new(
        "vec4_subgroup",
        "four rows per subgroup, read and written as vec4",
        LAYERNORM_VEC4_WGSL,
        "layernorm_vec4",
        Geometry::layernorm(RowsPerGroup::Fixed(4), GammaBeta::Storage),
    )
    .needs(wgpu::Features::SUBGROUP)
    .lanes(Lanes::Fixed)
    .multiple_of(&[(Dim::Hidden, 4)]),
    Variant::new(
        "vec4_uniform_gb",
        "vec4_subgroup with gamma and beta in uniform buffers (hidden <= 16384)",
        LAYERNORM_VEC4_UNIFORM_WGSL,
        "layernorm_vec4",
        Geometry::layernorm(RowsPerGroup::Fixed(4), GammaBeta::Uniform),
    )
    .needs(wgpu::Features::SUBGROUP)
    .lanes(Lanes::Fixed)
    .multiple_of(&[(Dim::Hidden, 4)]),
    Variant::new(
        "u64x4_uniform_gb",
        "vec4_uniform_gb moving x and y as vec4<u64>, eight floats per access",
        LAYERNORM_U64_WGSL,
        "layernorm_u64",
        Geometry::layernorm(RowsPerGroup::Fixed(4), GammaBeta::Uniform),
    )
    .needs(wgpu::Features::SUBGROUP.union(wgpu::Features::SHADER_INT64))
    .lanes(Lanes::Fixed)
    .multiple_of(&[(Dim::Hidden, 8)]),
    Variant::new(
        "u64x4_resident",
        "u64x4 reading x once: a row and its gamma and beta kept in registers (hidden <= 1024)",
        LAYERNORM_RESIDENT_WGSL,
        "layernorm_u64",
        Geometry::layernorm(RowsPerGroup::Fixed(16), GammaBeta::Uniform),
    )
    .needs(wgpu::Features::SUBGROUP.union(wgpu::Features::SHADER_INT64))
    .lanes(Lanes::FixedAtLeast(8))
    .multiple_of(&[(Dim::Hidden, 8)])
    // FLOATS (8) x SLOTS (16) x the smallest subgroup it runs with (8 lanes).
    .at_most(&[(Dim::Hidden, 1024)]),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct LayernormSize {
    pub rows: u32,
    pub hidden: u32,
}

impl fmt::Display for LayernormSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.rows, self.hidden)
    }
}

impl LayernormSize {
    pub fn elements(&self) -> usize {
        self.rows as usize * self.hidden as usize
    }
    /// Bytes a pass must move: x read, y written, gamma and beta read.
    pub fn bytes_moved(&self) -> f64 {
        (2 * self.elements() + 2 * self.hidden as usize) as f64 * 4.0
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Dims {
    rows: u32,
    hidden: u32,
    eps: f32,
    groups_x: u32,
}

/// f64 reference, two-pass per row.
pub fn reference(size: LayernormSize, x: &[f32], gamma: &[f32], beta: &[f32]) -> Vec<f64> {
    let h = size.hidden as usize;
    let mut y = Vec::with_capacity(size.elements());
    for row in x.chunks(h) {
        let mean = row.iter().map(|&v| v as f64).sum::<f64>() / h as f64;
        let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / h as f64;
        let inv = 1.0 / (var + EPS as f64).sqrt();
        y.extend(
            row.iter()
                .enumerate()
                .map(|(i, &v)| (v as f64 - mean) * inv * gamma[i] as f64 + beta[i] as f64),
        );
    }
    y
}

pub struct LayernormKernel<'g> {
    gpu: &'g Gpu,
    variant: &'static Variant,
    pub size: LayernormSize,
    pass: DispatchPass,
    y: wgpu::Buffer,
    reference: Vec<f64>,
}

/// Binds a layernorm variant to caller-owned buffers: `x` and `y` (rows x hidden), `gamma`
/// and `beta` (hidden).
pub fn layernorm_pass(
    gpu: &Gpu,
    variant: &Variant,
    size: LayernormSize,
    x: &wgpu::Buffer,
    gamma: &wgpu::Buffer,
    beta: &wgpu::Buffer,
    y: &wgpu::Buffer,
) -> Result<DispatchPass, KernelError> {
    if size.rows == 0 || size.hidden == 0 {
        return Err(KernelError::Invalid(format!(
            "layernorm size {size} has a zero dimension: ROWS and HIDDEN must be >= 1"
        )));
    }
    if let Some(why) = variant.unsupported(gpu) {
        return Err(KernelError::Invalid(format!("layernorm {why}")));
    }
    LayernormKernel::check_fits(gpu, size)?;
    let Geometry::Layernorm { rows, gamma_beta } = variant.geometry else {
        return Err(KernelError::Invalid(format!(
            "{} is not a layernorm variant",
            variant.name
        )));
    };
    if let Some(why) = variant.misfit(|d| if d == Dim::Hidden { size.hidden } else { 0 }) {
        return Err(KernelError::Invalid(format!("layernorm {why}")));
    }
    // Rows each workgroup covers. One row per subgroup covers 64 / subgroup_size rows;
    // planning with the largest size the adapter may pick never leaves a row out.
    let rows_per_group = match rows {
        RowsPerGroup::Fixed(r) => r,
        RowsPerGroup::OnePerSubgroup => 64 / gpu.report.subgroup_max_size.max(1),
    };
    let groups = size.rows.div_ceil(rows_per_group);
    let max = gpu.limits.max_compute_workgroups_per_dimension;
    let groups_x = groups.min(max);
    let workgroups = (groups_x, groups.div_ceil(groups_x));
    if workgroups.1 > max {
        return Err(KernelError::Invalid(format!(
            "layernorm {size} needs more workgroups than this adapter dispatches \
             (max_compute_workgroups_per_dimension {max}): choose fewer rows"
        )));
    }
    // A shader written for the subgroup size gets it as its workgroup size.
    let sg = gpu.report.subgroup_max_size as f64;
    let overrides: &[(&str, f64)] = match variant.lanes {
        Lanes::Any => &[],
        _ => &[("SG_WG", sg)],
    };
    let dims = gpu.uniform_from(
        "layernorm dims",
        &Dims {
            rows: size.rows,
            hidden: size.hidden,
            eps: EPS,
            groups_x,
        },
    );
    let uniforms = (gamma_beta == GammaBeta::Uniform)
        .then(|| uniform_parameters(gpu, variant, size, gamma, beta))
        .transpose()?;
    let (gamma, beta) = match &uniforms {
        Some((g, b)) => (g, b),
        None => (gamma, beta),
    };
    Ok(DispatchPass::new(
        gpu,
        &format!("layernorm {}", variant.name),
        variant.wgsl,
        variant.entry,
        overrides,
        &[x, gamma, beta, y, &dims],
        workgroups,
    )?)
}

/// gamma and beta copied into the fixed-size uniform buffers of layernorm_gb_uniform.wgsl.
/// They are parameters: the copy is made once, here, like a weight upload.
fn uniform_parameters(
    gpu: &Gpu,
    variant: &Variant,
    size: LayernormSize,
    gamma: &wgpu::Buffer,
    beta: &wgpu::Buffer,
) -> Result<(wgpu::Buffer, wgpu::Buffer), KernelError> {
    let bytes = size.hidden as u64 * 4;
    let max = gpu.limits.max_uniform_buffer_binding_size;
    if bytes > UNIFORM_GB_BYTES || UNIFORM_GB_BYTES > max {
        return Err(KernelError::Invalid(format!(
            "layernorm variant {} holds gamma and beta in {UNIFORM_GB_BYTES}-byte uniform \
             buffers: hidden must be at most {} (got {}) and the adapter's \
             max_uniform_buffer_binding_size ({max}) at least that: choose another --variant",
            variant.name,
            UNIFORM_GB_BYTES / 4,
            size.hidden
        )));
    }
    let copy = |src: &wgpu::Buffer, label: &str, enc: &mut wgpu::CommandEncoder| {
        let dst = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: UNIFORM_GB_BYTES,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        enc.copy_buffer_to_buffer(src, 0, &dst, 0, bytes.next_multiple_of(4));
        dst
    };
    let pair = gpu.submit_wait(|enc| {
        (
            copy(gamma, "layernorm gamma uniform", enc),
            copy(beta, "layernorm beta uniform", enc),
        )
    })?;
    Ok(pair)
}

impl<'g> LayernormKernel<'g> {
    /// Refuses sizes whose buffers exceed the adapter's limits, naming the limit.
    pub fn check_fits(gpu: &Gpu, size: LayernormSize) -> Result<(), KernelError> {
        let bytes = size.elements() as u64 * 4;
        gpu.check_binding(&format!("layernorm {size} input"), bytes)?;
        Ok(())
    }

    pub fn new(
        gpu: &'g Gpu,
        variant: &'static Variant,
        size: LayernormSize,
    ) -> Result<Self, KernelError> {
        if size.rows == 0 || size.hidden == 0 {
            return Err(KernelError::Invalid(format!(
                "layernorm size {size} has a zero dimension: ROWS and HIDDEN must be >= 1"
            )));
        }
        Self::check_fits(gpu, size)?;
        let x = random_vec(size.elements());
        let gamma = random_vec(size.hidden as usize);
        let beta = random_vec(size.hidden as usize);
        let reference = reference(size, &x, &gamma, &beta);
        let x_buf = gpu.storage_from("layernorm x", &x);
        let g_buf = gpu.storage_from("layernorm gamma", &gamma);
        let b_buf = gpu.storage_from("layernorm beta", &beta);
        let y = gpu.storage_from("layernorm y", &vec![0.0f32; size.elements()]);
        let pass = layernorm_pass(gpu, variant, size, &x_buf, &g_buf, &b_buf, &y)?;
        Ok(LayernormKernel {
            gpu,
            variant,
            size,
            pass,
            y,
            reference,
        })
    }
}

impl GpuKernel for LayernormKernel<'_> {
    fn encode(&self, pass: &mut wgpu::ComputePass<'_>) {
        self.pass.encode(pass);
    }

    fn verify(&self) -> Result<Verification, KernelError> {
        self.gpu.poison(&self.y);
        run_once(self.gpu, self)?;
        let bytes = self.gpu.read_back(&self.y)?;
        let out: &[f32] = bytemuck::cast_slice(&bytes);
        let (rows, h) = (self.size.rows as usize, self.size.hidden as usize);
        let result = compare(out, h, rows, h, &self.reference, 1e-5);
        judge(
            "layernorm",
            self.variant.name,
            self.size.to_string(),
            rows * h,
            result,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The resident variant's bound in the table must be what its generated shader holds:
    /// FLOATS (8) x SLOTS x the fewest lanes it runs with.
    #[test]
    fn resident_bound_matches_its_shader() {
        let v = LAYERNORM_VARIANTS
            .iter()
            .find(|v| v.name == "u64x4_resident")
            .unwrap();
        let slots: u32 = LAYERNORM_RESIDENT_WGSL
            .lines()
            .find_map(|l| l.strip_prefix("const SLOTS: u32 = "))
            .and_then(|rest| rest.strip_suffix("u;"))
            .expect("SLOTS in layernorm_resident.wgsl")
            .parse()
            .unwrap();
        let Lanes::FixedAtLeast(lanes) = v.lanes else {
            panic!("u64x4_resident needs a least subgroup size")
        };
        assert_eq!(v.at_most, &[(Dim::Hidden, 8 * slots * lanes)]);
        // Every slot is written out, and no more.
        let last = slots - 1;
        assert!(LAYERNORM_RESIDENT_WGSL.contains(&format!("var x{last}: Chunk;")));
        assert!(!LAYERNORM_RESIDENT_WGSL.contains(&format!("var x{slots}: Chunk;")));
    }
}
