//! The measured compute kernels (GEMM and layernorm), their variants, and the check of every
//! prepared kernel against a CPU reference computed in f64. Kernels never time themselves.

pub mod gemm;
pub mod layernorm;
// Generates shaders/layernorm_resident.wgsl; its test checks the file is what it generates.
#[cfg(test)]
pub mod resident_gen;
pub mod select;
pub mod sizes;
pub mod train;

use rand::{Rng, SeedableRng};
use thiserror::Error;

use super::buffers::POISON_BITS;
use super::GpuError;

pub use gemm::{GemmKernel, GemmSize, GEMM_VARIANTS};
pub use layernorm::{LayernormKernel, LayernormSize, LAYERNORM_VARIANTS};

/// One shader entry point a kernel can run as: one row of a family's variant table. Everything
/// that differs between variants is a field here, so code never matches on variant names.
#[derive(Debug, Clone, Copy)]
pub struct Variant {
    pub name: &'static str,
    /// One line for `--help` and the README.
    pub about: &'static str,
    pub wgsl: &'static str,
    pub entry: &'static str,
    /// Optional device features the shader uses (subgroups, 64-bit integers).
    pub needs: wgpu::Features,
    /// The subgroup size the shader is written for.
    pub lanes: Lanes,
    /// A size dimension that must be a multiple of something (vector loads).
    pub multiple_of: &'static [(Dim, u32)],
    /// A size dimension that must be at most something (what registers hold).
    pub at_most: &'static [(Dim, u32)],
    /// What each workgroup covers and how the inputs are bound.
    pub geometry: Geometry,
}

impl Variant {
    /// A variant with no optional feature, any subgroup size and no size requirement; the
    /// methods below add what it needs.
    pub const fn new(
        name: &'static str,
        about: &'static str,
        wgsl: &'static str,
        entry: &'static str,
        geometry: Geometry,
    ) -> Variant {
        Variant {
            name,
            about,
            wgsl,
            entry,
            needs: wgpu::Features::empty(),
            lanes: Lanes::Any,
            multiple_of: &[],
            at_most: &[],
            geometry,
        }
    }

    pub const fn needs(self, needs: wgpu::Features) -> Variant {
        Variant { needs, ..self }
    }

    pub const fn lanes(self, lanes: Lanes) -> Variant {
        Variant { lanes, ..self }
    }

    pub const fn multiple_of(self, multiple_of: &'static [(Dim, u32)]) -> Variant {
        Variant {
            multiple_of,
            ..self
        }
    }

    pub const fn at_most(self, at_most: &'static [(Dim, u32)]) -> Variant {
        Variant { at_most, ..self }
    }
}

/// The subgroup sizes a variant runs correctly with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lanes {
    Any,
    /// Exactly this many lanes (the shader hands values round by lane index).
    Exactly(u32),
    /// Any one size, as long as the adapter never varies it (workgroup = one subgroup).
    Fixed,
    /// Like `Fixed`, and at least this many lanes (what a row held in registers needs).
    FixedAtLeast(u32),
    /// At most this many (a workgroup of 64 holds a whole number of subgroups).
    AtMost(u32),
}

/// A size dimension named in a requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dim {
    /// GEMM's inner dimension.
    K,
    /// GEMM's columns.
    N,
    /// Layernorm's row length.
    Hidden,
}

/// What one workgroup of a variant covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Geometry {
    /// A GEMM tile of `cols` x `rows` outputs, with inputs bound as `inputs`.
    Gemm {
        cols: u32,
        rows: u32,
        inputs: GemmInputs,
    },
    /// Layernorm rows per workgroup, and where gamma and beta are read from.
    Layernorm {
        rows: RowsPerGroup,
        gamma_beta: GammaBeta,
    },
}

impl Geometry {
    pub const fn gemm(cols: u32, rows: u32, inputs: GemmInputs) -> Geometry {
        Geometry::Gemm { cols, rows, inputs }
    }

    pub const fn layernorm(rows: RowsPerGroup, gamma_beta: GammaBeta) -> Geometry {
        Geometry::Layernorm { rows, gamma_beta }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmInputs {
    Buffers,
    /// B copied once into an rgba32float texture.
    BTexture,
    /// A and B read as rgba32float storage images (B packed once, A by a copy each run).
    Images,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowsPerGroup {
    Fixed(u32),
    /// 64 / subgroup size: one row per subgroup in a 64-lane workgroup.
    OnePerSubgroup,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GammaBeta {
    Storage,
    /// Copied once into fixed-size uniform buffers.
    Uniform,
}

impl Dim {
    fn name(self) -> &'static str {
        match self {
            Dim::K => "K",
            Dim::N => "N",
            Dim::Hidden => "hidden",
        }
    }
}

impl Variant {
    /// Why this adapter cannot run the variant: the features it needs and the device lacks,
    /// or a subgroup size the shader is not written for.
    pub fn unsupported(&self, gpu: &super::Gpu) -> Option<String> {
        let missing = self.needs - gpu.features;
        if !missing.is_empty() {
            return Some(format!(
                "variant {} needs {}, which this adapter lacks",
                self.name,
                super::feature_names(missing)
            ));
        }
        let (lo, hi) = (gpu.report.subgroup_min_size, gpu.report.subgroup_max_size);
        let lanes_ok = match self.lanes {
            Lanes::Any => true,
            Lanes::Exactly(n) => lo == n && hi == n,
            Lanes::Fixed => lo == hi && hi <= 256,
            Lanes::FixedAtLeast(n) => lo == hi && hi <= 256 && lo >= n,
            Lanes::AtMost(n) => hi.max(1) <= n,
        };
        (!lanes_ok).then(|| {
            let want = match self.lanes {
                Lanes::Exactly(n) => format!("subgroups of exactly {n} lanes"),
                Lanes::Fixed => "one fixed subgroup size".to_string(),
                Lanes::FixedAtLeast(n) => format!("one fixed subgroup size of at least {n} lanes"),
                Lanes::AtMost(n) => format!("subgroups of at most {n} lanes"),
                Lanes::Any => unreachable!(),
            };
            format!(
                "variant {} needs {want}; this adapter's are {lo} to {hi}: choose another --variant",
                self.name
            )
        })
    }

    /// Why a size cannot run with this variant: a dimension that is not a multiple of what
    /// its vector loads need, or over what its registers hold. `dim` gives the size's value
    /// of each dimension.
    pub fn misfit(&self, dim: impl Fn(Dim) -> u32) -> Option<String> {
        let not_multiple = self.multiple_of.iter().find_map(|&(d, m)| {
            let v = dim(d);
            (!v.is_multiple_of(m)).then(|| {
                format!(
                    "variant {} needs {} to be a multiple of {m} (got {v})",
                    self.name,
                    d.name()
                )
            })
        });
        not_multiple.or_else(|| {
            self.at_most.iter().find_map(|&(d, most)| {
                let v = dim(d);
                (v > most).then(|| {
                    format!(
                        "variant {} needs {} to be at most {most} (got {v})",
                        self.name,
                        d.name()
                    )
                })
            })
        })
    }
}

/// `-h` text for a variant flag: every variant's name, from the table.
pub fn variant_help(kernel: &str, list: &[Variant]) -> String {
    format!(
        "Force a {kernel} variant instead of the measured selection: auto, {}",
        variant_names(list)
    )
}

/// `--help` text for a variant flag: every variant of the table with its line.
pub fn variant_long_help(kernel: &str, list: &[Variant]) -> String {
    let mut s = format!(
        "Force a {kernel} variant instead of the measured selection (auto, the default, \
         probes the variants this adapter can run and keeps the fastest verified one):"
    );
    for v in list {
        s.push_str(&format!("\n  {:<18} {}", v.name, v.about));
    }
    s
}

pub fn find_variant(list: &'static [Variant], name: &str) -> Option<&'static Variant> {
    list.iter().find(|v| v.name == name)
}

pub fn variant_names(list: &[Variant]) -> String {
    list.iter().map(|v| v.name).collect::<Vec<_>>().join(", ")
}

/// The outcome of checking a kernel's output against its reference.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Verification {
    /// ||out - ref||_2 / ||ref||_2 over the valid elements.
    pub rel_err: f64,
    pub tolerance: f64,
}

#[derive(Debug, Error)]
pub enum KernelError {
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error(
        "{kernel} [{variant}] at {size} FAILED verification: {unwritten} of {total} elements never \
         written, {nan} NaN/inf, relative error {rel_err:.3e} (bound {tolerance:.1e}). Its timings \
         are not reported; try another --variant or report a driver bug"
    )]
    Mismatch {
        kernel: &'static str,
        variant: &'static str,
        size: String,
        unwritten: usize,
        nan: usize,
        total: usize,
        rel_err: f64,
        tolerance: f64,
    },
    #[error("{0}")]
    Invalid(String),
}

/// Fresh random inputs in [-1, 1): each kernel draws new ones, seeded from the OS.
pub fn random_vec(len: usize) -> Vec<f32> {
    let mut rng = rand::rngs::SmallRng::from_entropy();
    (0..len).map(|_| rng.gen_range(-1.0f32..1.0)).collect()
}

/// Compares `out` (row stride `ld`, `cols` valid columns) with the dense `reference`.
/// Returns the verification and the counts of unwritten (still poisoned) and non-finite values.
pub(crate) fn compare(
    out: &[f32],
    ld: usize,
    rows: usize,
    cols: usize,
    reference: &[f64],
    tolerance: f64,
) -> (Verification, usize, usize) {
    let (mut diff2, mut ref2, mut unwritten, mut nan) = (0.0f64, 0.0f64, 0, 0);
    for r in 0..rows {
        for c in 0..cols {
            let v = out[r * ld + c];
            let want = reference[r * cols + c];
            if v.to_bits() == POISON_BITS {
                unwritten += 1;
            } else if !v.is_finite() {
                nan += 1;
            } else {
                diff2 += (v as f64 - want).powi(2);
            }
            ref2 += want * want;
        }
    }
    let rel_err = if ref2 > 0.0 {
        (diff2 / ref2).sqrt()
    } else {
        diff2.sqrt()
    };
    (Verification { rel_err, tolerance }, unwritten, nan)
}

/// Fails unless every element was written, finite, and within the bound.
pub(crate) fn judge(
    kernel: &'static str,
    variant: &'static str,
    size: String,
    total: usize,
    (v, unwritten, nan): (Verification, usize, usize),
) -> Result<Verification, KernelError> {
    if unwritten > 0 || nan > 0 || v.rel_err.is_nan() || v.rel_err >= v.tolerance {
        return Err(KernelError::Mismatch {
            kernel,
            variant,
            size,
            unwritten,
            nan,
            total,
            rel_err: v.rel_err,
            tolerance: v.tolerance,
        });
    }
    Ok(v)
}

/// A pipeline bound to its buffers, ready to record: what every kernel becomes.
pub struct DispatchPass {
    pub pipeline: wgpu::ComputePipeline,
    pub bind_group: wgpu::BindGroup,
    pub workgroups: (u32, u32),
    /// A copy the pass needs recorded on its encoder first (see [`Upload`]).
    pub upload: Option<Upload>,
}

/// A copy of a buffer into a texture that a pass records on the encoder before its dispatch: a
/// variant's repacking of an input into the layout it reads. It is part of the kernel's work,
/// done on every run (so the kernel always sees the buffer's current contents) and timed with
/// it.
pub struct Upload {
    pub buffer: wgpu::Buffer,
    pub texture: wgpu::Texture,
    pub bytes_per_row: u32,
    pub extent: wgpu::Extent3d,
}

impl Upload {
    pub fn record(&self, enc: &mut wgpu::CommandEncoder) {
        enc.copy_buffer_to_texture(
            wgpu::TexelCopyBufferInfo {
                buffer: &self.buffer,
                layout: wgpu::TexelCopyBufferLayout {
                    offset: 0,
                    bytes_per_row: Some(self.bytes_per_row),
                    rows_per_image: Some(self.extent.height),
                },
            },
            self.texture.as_image_copy(),
            self.extent,
        );
    }
}

/// Records `upload` (if any), then one untimed compute pass filled by `encode`.
pub fn record_untimed(
    enc: &mut wgpu::CommandEncoder,
    upload: Option<&Upload>,
    encode: impl FnOnce(&mut wgpu::ComputePass<'_>),
) {
    if let Some(upload) = upload {
        upload.record(enc);
    }
    encode(&mut enc.begin_compute_pass(&Default::default()));
}

impl DispatchPass {
    pub fn encode(&self, pass: &mut wgpu::ComputePass<'_>) {
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &self.bind_group, &[]);
        pass.dispatch_workgroups(self.workgroups.0, self.workgroups.1, 1);
    }

    /// Binds `buffers` in order (binding 0, 1, ...) to a new pipeline's group 0.
    pub fn new(
        gpu: &super::Gpu,
        label: &str,
        wgsl: &str,
        entry: &str,
        constants: &[(&str, f64)],
        buffers: &[&wgpu::Buffer],
        workgroups: (u32, u32),
    ) -> Result<DispatchPass, GpuError> {
        let pipeline = gpu.compute_pipeline(label, wgsl, entry, true, constants)?;
        Self::with_pipeline(gpu, label, pipeline, buffers, workgroups)
    }

    /// Binds buffers to an existing pipeline (no new shader compile: CPU drivers compile at
    /// a pipeline's first dispatch, which must never land in a timed region).
    pub fn with_pipeline(
        gpu: &super::Gpu,
        label: &str,
        pipeline: wgpu::ComputePipeline,
        buffers: &[&wgpu::Buffer],
        workgroups: (u32, u32),
    ) -> Result<DispatchPass, GpuError> {
        let resources: Vec<_> = buffers.iter().map(|b| b.as_entire_binding()).collect();
        Self::with_resources(gpu, label, pipeline, resources, workgroups)
    }

    /// Binds any resources (buffers, texture views) in order to an existing pipeline.
    pub fn with_resources(
        gpu: &super::Gpu,
        label: &str,
        pipeline: wgpu::ComputePipeline,
        resources: Vec<wgpu::BindingResource<'_>>,
        workgroups: (u32, u32),
    ) -> Result<DispatchPass, GpuError> {
        let entries: Vec<_> = resources
            .into_iter()
            .enumerate()
            .map(|(i, resource)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource,
            })
            .collect();
        let bind_group = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(label),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        });
        gpu.check()?;
        Ok(DispatchPass {
            pipeline,
            bind_group,
            workgroups,
            upload: None,
        })
    }
}

/// What every prepared GPU kernel offers the benches.
pub trait GpuKernel {
    /// Records one run of the kernel into a compute pass.
    fn encode(&self, pass: &mut wgpu::ComputePass<'_>);
    /// The copy to record on the encoder before the pass, if the kernel has one.
    fn upload(&self) -> Option<&Upload> {
        None
    }
    /// Poisons the output, runs once on the current inputs, and checks against the reference.
    fn verify(&self) -> Result<Verification, KernelError>;
}

/// Runs a kernel once on its own submission (for verification and warm-up).
pub(crate) fn run_once(gpu: &super::Gpu, kernel: &dyn GpuKernel) -> Result<(), GpuError> {
    gpu.submit_wait(|enc| record_untimed(enc, kernel.upload(), |pass| kernel.encode(pass)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misfit_names_a_dimension_over_its_bound_or_off_its_multiple() {
        let v = LAYERNORM_VARIANTS
            .iter()
            .find(|v| !v.at_most.is_empty())
            .expect("a variant with an upper bound");
        let (dim, most) = v.at_most[0];
        assert_eq!(dim, Dim::Hidden);
        assert!(v.misfit(|_| most).is_none());
        let over = v.misfit(|_| most + 8).expect("over the bound");
        assert!(over.contains(&format!("at most {most}")), "{over}");
        let off = v.misfit(|_| most - 3).expect("not a multiple of 8");
        assert!(off.contains("multiple of 8"), "{off}");
    }
}
