//! C = A·B in f32 on the GPU, with the variants the selection chooses among.

use std::fmt;

use super::Verification;
use super::{
    compare, judge, random_vec, run_once, Dim, DispatchPass, GemmInputs, Geometry, GpuKernel,
    KernelError, Lanes, Upload, Variant,
};
use crate::gpu::Gpu;

mod reference;
pub use reference::{cpu_sgemm, reference, verify_dense};

const GEMM_WGSL: &str = include_str!("../../../shaders/gemm.wgsl");
const GEMM_VEC4_WGSL: &str = include_str!("../../../shaders/gemm_vec4.wgsl");
const GEMM_TILED_RB_WGSL: &str = include_str!("../../../shaders/gemm_tiled_rb.wgsl");
const GEMM_SUBGROUP_WGSL: &str = include_str!("../../../shaders/gemm_subgroup.wgsl");
const GEMM_BROADCAST8_WGSL: &str = include_str!("../../../shaders/gemm_broadcast8.wgsl");
// The bq kernels share one body; the parts in front say how A and B are read.
const GEMM_BQ_STORAGE_WGSL: &str = concat!(
    include_str!("../../../shaders/gemm_a_storage.wgsl"),
    include_str!("../../../shaders/gemm_b_storage.wgsl"),
    include_str!("../../../shaders/gemm_bq.wgsl")
);
const GEMM_BQ_TEXTURE_WGSL: &str = concat!(
    include_str!("../../../shaders/gemm_a_storage.wgsl"),
    include_str!("../../../shaders/gemm_b_texture.wgsl"),
    include_str!("../../../shaders/gemm_bq.wgsl")
);
const GEMM_BQ_IMAGES_WGSL: &str = concat!(
    include_str!("../../../shaders/gemm_ab_images.wgsl"),
    include_str!("../../../shaders/gemm_bq.wgsl")
);
const GEMM_PACK_WGSL: &str = include_str!("../../../shaders/gemm_pack.wgsl");

/// The GEMM variant table: each row carries its requirements and its tile.
pub static GEMM_VARIANTS: &[Variant] = &[
    Variant::new(
        "naive",
        "one output per invocation, 8x8 workgroups",
        GEMM_WGSL,
        "gemm_naive",
        Geometry::gemm(8, 8, GemmInputs::Buffers),
    ),
    Variant::new(
        "tiled64",
        "64x64 shared-memory tiles, 4x4 per invocation (the usual GPU winner)",
        GEMM_WGSL,
        "gemm_tiled",
        Geometry::gemm(64, 64, GemmInputs::Buffers),
    ),
    Variant::new(
        "wg128r8",
        "128x128 workgroup tiles, 8x8 register blocks with vec4 loads, double-buffered k-tiles (the discrete-GPU shape)",
        GEMM_TILED_RB_WGSL,
        "gemm_tiled_rb",
        Geometry::gemm(128, 128, GemmInputs::Buffers),
    ),
    Variant::new(
        "rb4x4",
        "register blocking, 4 rows x vec4 columns, no shared memory",
        GEMM_VEC4_WGSL,
        "gemm_rb4x4",
        Geometry::gemm(256, 4, GemmInputs::Buffers),
    ),
    Variant::new(
        "rb8x4",
        "register blocking, 8 rows x vec4 columns, no shared memory",
        GEMM_VEC4_WGSL,
        "gemm_rb8x4",
        Geometry::gemm(256, 8, GemmInputs::Buffers),
    ),
    Variant::new(
        "sg8x4",
        "8x4 register blocks, A shared across the subgroup by subgroupShuffle",
        GEMM_SUBGROUP_WGSL,
        "gemm_sg8x4",
        Geometry::gemm(256, 8, GemmInputs::Buffers),
    )
    .needs(wgpu::Features::SUBGROUP),
    Variant::new(
        "bc16x4",
        "16 rows per invocation, A handed round by subgroupBroadcast",
        GEMM_BROADCAST8_WGSL,
        "gemm_broadcast8",
        Geometry::gemm(256, 16, GemmInputs::Buffers),
    )
    .needs(wgpu::Features::SUBGROUP)
    .lanes(Lanes::Exactly(8)),
    Variant::new(
        "img32x4",
        "32 rows, A and B read as rgba32float storage images",
        GEMM_BQ_IMAGES_WGSL,
        "gemm_bq",
        Geometry::gemm(128, 32, GemmInputs::Images),
    )
    .needs(wgpu::Features::SUBGROUP)
    .lanes(Lanes::Exactly(8))
    .multiple_of(&[(Dim::K, 64)]),
    Variant::new(
        "bt32x4",
        "32 rows, A as vec4, B from an rgba32float texture",
        GEMM_BQ_TEXTURE_WGSL,
        "gemm_bq",
        Geometry::gemm(128, 32, GemmInputs::BTexture),
    )
    .needs(wgpu::Features::SUBGROUP)
    .lanes(Lanes::Exactly(8))
    .multiple_of(&[(Dim::K, 4)]),
    Variant::new(
        "bq32x4",
        "32 rows, A read as vec4 (four k per load)",
        GEMM_BQ_STORAGE_WGSL,
        "gemm_bq",
        Geometry::gemm(128, 32, GemmInputs::Buffers),
    )
    .needs(wgpu::Features::SUBGROUP)
    .lanes(Lanes::Exactly(8))
    .multiple_of(&[(Dim::K, 4)]),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct GemmSize {
    pub m: u32,
    pub n: u32,
    pub k: u32,
}

impl fmt::Display for GemmSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}x{}", self.m, self.n, self.k)
    }
}

impl GemmSize {
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }
    /// Row stride of B and C: n rounded up to whole vec4s.
    pub fn ldc(&self) -> usize {
        (self.n as usize).div_ceil(4) * 4
    }
    /// Relative-error bound. Rounding errors of a length-k dot product in f32 grow like
    /// sqrt(k) * 2^-24 for random inputs, so the 1e-5 bound is widened by sqrt(k / 256)
    /// beyond k = 256 (k = 4096 allows 4e-5).
    pub fn tolerance(&self) -> f64 {
        1e-5 * (self.k as f64 / 256.0).sqrt().max(1.0)
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Dims {
    m: u32,
    n: u32,
    k: u32,
    ldc: u32,
}

/// Refuses sizes and variants this adapter cannot run.
fn check_size(gpu: &Gpu, variant: &Variant, size: GemmSize) -> Result<(), KernelError> {
    if size.m == 0 || size.n == 0 || size.k == 0 {
        return Err(KernelError::Invalid(format!(
            "GEMM size {size} has a zero dimension: M, N and K must each be >= 1"
        )));
    }
    if let Some(why) = variant.unsupported(gpu) {
        return Err(KernelError::Invalid(format!("GEMM {why}")));
    }
    GemmKernel::check_fits(gpu, size)
}

/// Binds a GEMM variant to caller-owned buffers: `a` (m x k, leading dimension k), `b` and `c`
/// (leading dimension `size.ldc()`, padding columns of `b` zero).
pub fn gemm_pass(
    gpu: &Gpu,
    variant: &Variant,
    size: GemmSize,
    a: &wgpu::Buffer,
    b: &wgpu::Buffer,
    c: &wgpu::Buffer,
) -> Result<DispatchPass, KernelError> {
    check_size(gpu, variant, size)?;
    let Geometry::Gemm { cols, rows, inputs } = variant.geometry else {
        return Err(KernelError::Invalid(format!(
            "{} is not a GEMM variant",
            variant.name
        )));
    };
    if let Some(why) = variant.misfit(|d| match d {
        Dim::K => size.k,
        Dim::N => size.n,
        Dim::Hidden => 0,
    }) {
        return Err(KernelError::Invalid(format!("GEMM {why}")));
    }
    let ldc = size.ldc();
    let workgroups = (size.n.div_ceil(cols), size.m.div_ceil(rows));
    let max = gpu.limits.max_compute_workgroups_per_dimension;
    if workgroups.0 > max || workgroups.1 > max {
        return Err(KernelError::Invalid(format!(
            "GEMM {size} with variant {} needs {}x{} workgroups, over this adapter's \
             max_compute_workgroups_per_dimension of {max}: choose a smaller size",
            variant.name, workgroups.0, workgroups.1
        )));
    }
    let dims = gpu.uniform_from(
        "gemm dims",
        &Dims {
            m: size.m,
            n: size.n,
            k: size.k,
            ldc: ldc as u32,
        },
    );
    let label = format!("gemm {}", variant.name);
    let buffers = [a, b, c, &dims];
    match inputs {
        GemmInputs::BTexture => texture_pass(gpu, variant, size, &label, buffers, workgroups),
        GemmInputs::Images => image_pass(gpu, variant, size, &label, buffers, workgroups),
        GemmInputs::Buffers => Ok(DispatchPass::new(
            gpu,
            &label,
            variant.wgsl,
            variant.entry,
            &[],
            &buffers,
            workgroups,
        )?),
    }
}

/// The texture variant: B is copied once into an rgba32float texture (one texel per vec4 of a
/// row) and bound in its place.
fn texture_pass(
    gpu: &Gpu,
    variant: &Variant,
    size: GemmSize,
    label: &str,
    [a, b, c, dims]: [&wgpu::Buffer; 4],
    workgroups: (u32, u32),
) -> Result<DispatchPass, KernelError> {
    let texture = gpu
        .texture_from("gemm b texture", b, size.ldc() as u32 / 4, size.k)?
        .ok_or_else(|| {
            KernelError::Invalid(format!(
                "GEMM variant {} needs N/4 and K within max_texture_dimension_2d ({}) and N a \
                 multiple of 64 (got {size})",
                variant.name, gpu.limits.max_texture_dimension_2d
            ))
        })?;
    let pipeline = gpu.compute_pipeline(label, variant.wgsl, variant.entry, true, &[])?;
    let view = texture.create_view(&Default::default());
    let resources = vec![
        a.as_entire_binding(),
        wgpu::BindingResource::TextureView(&view),
        c.as_entire_binding(),
        dims.as_entire_binding(),
    ];
    Ok(DispatchPass::with_resources(
        gpu, label, pipeline, resources, workgroups,
    )?)
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct PackDims {
    rows: u32,
    cols: u32,
    width: u32,
    layers: u32,
}

/// A new rgba32float storage image of `width` x `rows` x `layers` texels, or why it does not fit.
fn storage_image(
    gpu: &Gpu,
    label: &str,
    (width, rows, layers): (u32, u32, u32),
) -> Result<wgpu::Texture, KernelError> {
    let l = &gpu.limits;
    if width.max(rows) > l.max_texture_dimension_2d || layers > l.max_texture_array_layers {
        return Err(KernelError::Invalid(format!(
            "{label}: a {width} x {rows} x {layers} image exceeds this adapter's \
             max_texture_dimension_2d ({}) or max_texture_array_layers ({}): choose a smaller \
             size or another --variant",
            l.max_texture_dimension_2d, l.max_texture_array_layers
        )));
    }
    Ok(gpu.device.create_texture(&wgpu::TextureDescriptor {
        label: Some(label),
        size: wgpu::Extent3d {
            width,
            height: rows,
            depth_or_array_layers: layers,
        },
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format: wgpu::TextureFormat::Rgba32Float,
        // COPY_DST also lets wgpu zero-initialise it with a buffer copy. Without it wgpu clears
        // through a render pass, after which lavapipe misplaces every GPU timestamp.
        usage: wgpu::TextureUsages::STORAGE_BINDING | wgpu::TextureUsages::COPY_DST,
        view_formats: &[],
    }))
}

/// B (`rows` x `cols`, cols a multiple of 4) packed into 32-column panels by
/// shaders/gemm_pack.wgsl, once.
fn packed_panels(
    gpu: &Gpu,
    b: &wgpu::Buffer,
    (rows, cols): (u32, u32),
) -> Result<wgpu::Texture, KernelError> {
    let label = "gemm b panels";
    let (width, layers) = (8, cols.div_ceil(32));
    let texture = storage_image(gpu, label, (width, rows, layers))?;
    let max_groups = gpu.limits.max_compute_workgroups_per_dimension;
    let workgroups = ((width * layers).div_ceil(64), rows);
    if workgroups.0 > max_groups || workgroups.1 > max_groups {
        return Err(KernelError::Invalid(format!(
            "{label}: packing needs {}x{} workgroups, over this adapter's \
             max_compute_workgroups_per_dimension of {max_groups}: choose a smaller size",
            workgroups.0, workgroups.1
        )));
    }
    let view = array_view(&texture);
    let dims = gpu.uniform_from(
        label,
        &PackDims {
            rows,
            cols,
            width,
            layers,
        },
    );
    let pipeline = gpu.compute_pipeline(label, GEMM_PACK_WGSL, "gemm_pack", true, &[])?;
    let resources = vec![
        b.as_entire_binding(),
        wgpu::BindingResource::TextureView(&view),
        dims.as_entire_binding(),
    ];
    let pack = DispatchPass::with_resources(gpu, label, pipeline, resources, workgroups)?;
    gpu.submit_wait(|enc| pack.encode(&mut enc.begin_compute_pass(&Default::default())))?;
    Ok(texture)
}

fn array_view(texture: &wgpu::Texture) -> wgpu::TextureView {
    texture.create_view(&wgpu::TextureViewDescriptor {
        dimension: Some(wgpu::TextureViewDimension::D2Array),
        ..Default::default()
    })
}

/// The image variant. B (the weights) is packed into 32-column panels once, here. A is copied
/// into its image by an [`Upload`] recorded before the GEMM in every run: it is timed with the
/// GEMM, and a pass chained after another (as in hol) reads the current A.
fn image_pass(
    gpu: &Gpu,
    variant: &Variant,
    size: GemmSize,
    label: &str,
    [a, b, c, dims]: [&wgpu::Buffer; 4],
    workgroups: (u32, u32),
) -> Result<DispatchPass, KernelError> {
    if gpu.has_timestamps() && !gpu.has_encoder_timestamps() {
        return Err(KernelError::Invalid(format!(
            "GEMM variant {} needs timestamps inside command encoders to time its copy of A, \
             which this adapter lacks: choose another --variant",
            variant.name
        )));
    }
    let b_image = packed_panels(gpu, b, (size.k, size.ldc() as u32))?;
    let extent = wgpu::Extent3d {
        width: size.k / 4,
        height: size.m,
        depth_or_array_layers: 1,
    };
    let a_image = storage_image(gpu, "gemm a image", (extent.width, extent.height, 1))?;
    let pipeline = gpu.compute_pipeline(label, variant.wgsl, variant.entry, true, &[])?;
    let (a_view, b_view) = (array_view(&a_image), array_view(&b_image));
    let resources = vec![
        wgpu::BindingResource::TextureView(&a_view),
        wgpu::BindingResource::TextureView(&b_view),
        c.as_entire_binding(),
        dims.as_entire_binding(),
    ];
    let mut pass = DispatchPass::with_resources(gpu, label, pipeline, resources, workgroups)?;
    pass.upload = Some(Upload {
        buffer: a.clone(),
        texture: a_image,
        bytes_per_row: size.k * 4,
        extent,
    });
    Ok(pass)
}

/// A GEMM ready to run: pipeline, buffers holding random inputs, and its f64 reference.
pub struct GemmKernel<'g> {
    gpu: &'g Gpu,
    variant: &'static Variant,
    pub size: GemmSize,
    pass: DispatchPass,
    c: wgpu::Buffer,
    /// Dense inputs (B without padding), kept for the CPU baseline.
    pub a: Vec<f32>,
    pub b: Vec<f32>,
    pub reference: Vec<f64>,
}

impl<'g> GemmKernel<'g> {
    /// Refuses sizes whose matrices exceed the adapter's buffer limits, naming the limit.
    pub fn check_fits(gpu: &Gpu, size: GemmSize) -> Result<(), KernelError> {
        let ldc = size.ldc() as u64;
        let (m, k) = (size.m as u64, size.k as u64);
        gpu.check_binding(&format!("GEMM {size} matrix A"), m * k * 4)?;
        gpu.check_binding(&format!("GEMM {size} matrix B"), k * ldc * 4)?;
        gpu.check_binding(&format!("GEMM {size} matrix C"), m * ldc * 4)?;
        Ok(())
    }

    pub fn new(
        gpu: &'g Gpu,
        variant: &'static Variant,
        size: GemmSize,
    ) -> Result<Self, KernelError> {
        check_size(gpu, variant, size)?;
        let (m, n, k) = (size.m as u64, size.n as u64, size.k as u64);
        let ldc = size.ldc();
        let a = random_vec((m * k) as usize);
        let b = random_vec((k * n) as usize);
        let mut b_padded = vec![0.0f32; k as usize * ldc];
        for (row, src) in b_padded.chunks_mut(ldc).zip(b.chunks(n as usize)) {
            row[..src.len()].copy_from_slice(src);
        }
        let reference = reference(size, &a, &b);
        let a_buf = gpu.storage_from("gemm a", &a);
        let b_buf = gpu.storage_from("gemm b", &b_padded);
        let c = gpu.storage_from("gemm c", &vec![0.0f32; m as usize * ldc]);
        let pass = gemm_pass(gpu, variant, size, &a_buf, &b_buf, &c)?;
        Ok(GemmKernel {
            gpu,
            variant,
            size,
            pass,
            c,
            a,
            b,
            reference,
        })
    }
}

impl GpuKernel for GemmKernel<'_> {
    fn encode(&self, pass: &mut wgpu::ComputePass<'_>) {
        self.pass.encode(pass);
    }

    fn upload(&self) -> Option<&Upload> {
        self.pass.upload.as_ref()
    }

    fn verify(&self) -> Result<Verification, KernelError> {
        self.gpu.poison(&self.c);
        run_once(self.gpu, self)?;
        let bytes = self.gpu.read_back(&self.c)?;
        let out: &[f32] = bytemuck::cast_slice(&bytes);
        let (m, n) = (self.size.m as usize, self.size.n as usize);
        let result = compare(
            out,
            self.size.ldc(),
            m,
            n,
            &self.reference,
            self.size.tolerance(),
        );
        judge(
            "gemm",
            self.variant.name,
            self.size.to_string(),
            m * n,
            result,
        )
    }
}

#[cfg(test)]
mod tests;
