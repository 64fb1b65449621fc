//! Every kernel variant, verified against the f64 CPU reference at sizes that are not
//! multiples of any tile, on whatever adapter is present (lavapipe in CI).

use morphbench::gpu::kernels::{
    GemmKernel, GemmSize, GpuKernel, KernelError, LayernormKernel, LayernormSize, Variant,
    GEMM_VARIANTS, LAYERNORM_VARIANTS,
};
use morphbench::gpu::{BackendChoice, Gpu};

fn gpu() -> Gpu {
    Gpu::open(BackendChoice::Auto, None).expect("a GPU adapter (install mesa-vulkan-drivers)")
}

/// A kernel, or `None` where the variant declines this shape or adapter for a stated reason
/// (vec4 rows need a multiple of 4, the B texture a multiple of 64 columns; the broadcast GEMM
/// needs 8-lane subgroups).
fn supported<K>(made: Result<K, KernelError>) -> Option<K> {
    match made {
        Ok(k) => Some(k),
        Err(KernelError::Invalid(msg))
            if msg.contains("multiple of") || msg.contains("exactly 8 lanes") =>
        {
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// A variant must verify at two or more sizes, so one that declines every size cannot pass
/// silently. Subgroup variants are held to it where subgroups have 8 lanes, the size their
/// shapes are written for.
fn assert_verified_enough(gpu: &Gpu, v: &Variant, verified: usize) {
    let lanes8 = gpu.report.subgroup_min_size == 8 && gpu.report.subgroup_max_size == 8;
    if lanes8 || !v.needs.contains(wgpu::Features::SUBGROUP) {
        assert!(
            verified >= 2,
            "{} verified at only {verified} sizes",
            v.name
        );
    }
}

#[test]
fn every_gemm_variant_verifies_at_odd_sizes() {
    let gpu = gpu();
    let sizes = [
        (1, 1, 1),
        (17, 33, 65),
        (127, 1, 255),
        (64, 64, 64),
        (5, 130, 9),
        // Multiples of 4 (and of 64 for K where img32x4 copies A) that are not of any tile or
        // panel (32 rows, 32 columns).
        (33, 70, 36),
        (33, 70, 128),
        (100, 256, 132),
    ];
    for v in GEMM_VARIANTS {
        if v.unsupported(&gpu).is_some() {
            continue;
        }
        let mut verified = 0;
        for &(m, n, k) in &sizes {
            let size = GemmSize { m, n, k };
            let Some(kernel) = supported(GemmKernel::new(&gpu, v, size)) else {
                continue;
            };
            let check = kernel.verify();
            assert!(check.is_ok(), "{} {size}: {:?}", v.name, check.err());
            // The same kernel again on its fresh poison must still pass: no stale output.
            kernel.verify().unwrap();
            verified += 1;
        }
        assert_verified_enough(&gpu, v, verified);
    }
}

#[test]
fn every_layernorm_variant_verifies_at_odd_sizes() {
    let gpu = gpu();
    let sizes = [
        (1, 4096),
        (3, 1000),
        (1, 1),
        (67, 33),
        (130, 257),
        (9, 4),
        (67, 36),
        // Multiples of 8 (u64x4 moves eight floats per access): a row shorter than one
        // subgroup's reach, and one that ends partway through it.
        (67, 40),
        (5, 1032),
    ];
    for v in LAYERNORM_VARIANTS {
        if v.unsupported(&gpu).is_some() {
            continue;
        }
        let mut verified = 0;
        for &(rows, hidden) in &sizes {
            let size = LayernormSize { rows, hidden };
            let Some(kernel) = supported(LayernormKernel::new(&gpu, v, size)) else {
                continue;
            };
            let check = kernel.verify();
            assert!(check.is_ok(), "{} {size}: {:?}", v.name, check.err());
            verified += 1;
        }
        assert_verified_enough(&gpu, v, verified);
    }
}

#[test]
fn sizes_over_the_binding_limit_name_the_limit() {
    let gpu = gpu();
    let limit = gpu.limits.max_storage_buffer_binding_size;
    let rows = (limit / 4 / 1024 + 1) as u32;
    let err = LayernormKernel::new(
        &gpu,
        &LAYERNORM_VARIANTS[0],
        LayernormSize { rows, hidden: 1024 },
    )
    .err()
    .expect("too large");
    let msg = err.to_string();
    assert!(matches!(err, KernelError::Gpu(_)), "{msg}");
    assert!(msg.contains("max_storage_buffer_binding_size"), "{msg}");
    assert!(msg.contains(&limit.to_string()), "{msg}");
}

#[test]
fn zero_sizes_are_refused() {
    let gpu = gpu();
    let err = GemmKernel::new(&gpu, &GEMM_VARIANTS[0], GemmSize { m: 0, n: 4, k: 4 })
        .err()
        .expect("zero size");
    assert!(err.to_string().contains(">= 1"));
}
