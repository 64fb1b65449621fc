//! Every kernel variant, verified against the f64 CPU reference at sizes that are not
//! multiples of any tile, on whatever adapter is present (lavapipe in CI). One test per
//! variant: a variant this adapter cannot run shows as ignored, with the reason its table
//! entry gives, and every test is ignored where no adapter opens (never passed).

use std::sync::Arc;

use libtest_mimic::{Arguments, Failed, Trial};
use morphbench::gpu::kernels::{
    Dim, GemmInputs, GemmKernel, GemmSize, Geometry, GpuKernel, KernelError, LayernormKernel,
    LayernormSize, Variant, GEMM_VARIANTS, LAYERNORM_VARIANTS,
};
use morphbench::gpu::{BackendChoice, Gpu};

fn main() {
    let args = Arguments::from_args();
    let gpu = match Gpu::open(BackendChoice::Auto, None) {
        Ok(g) => Some(Arc::new(g)),
        Err(e) => {
            eprintln!("no GPU adapter, every kernel test is ignored: {e}");
            None
        }
    };
    let mut trials = Vec::new();
    let mut add = |name: String, unsupported: Option<String>, run: Box<dyn FnOnce(&Gpu) + Send>| {
        let ignored = gpu.is_none() || unsupported.is_some();
        if let (Some(g), Some(why)) = (&gpu, &unsupported) {
            eprintln!("{name}: ignored on {}: {why}", g.report.name);
        }
        let gpu = gpu.clone();
        trials.push(
            Trial::test(name, move || -> Result<(), Failed> {
                let gpu = gpu.ok_or("no GPU adapter")?;
                run(&gpu);
                Ok(())
            })
            .with_ignored_flag(ignored),
        );
    };
    for v in GEMM_VARIANTS {
        let why = gpu.as_ref().and_then(|g| v.unsupported(g));
        add(
            format!("gemm_variant_verifies_at_odd_sizes::{}", v.name),
            why,
            Box::new(move |g| gemm_variant(g, v)),
        );
    }
    for v in LAYERNORM_VARIANTS {
        let why = gpu.as_ref().and_then(|g| v.unsupported(g));
        add(
            format!("layernorm_variant_verifies_at_odd_sizes::{}", v.name),
            why,
            Box::new(move |g| layernorm_variant(g, v)),
        );
    }
    add(
        "sizes_over_the_binding_limit_name_the_limit".into(),
        None,
        Box::new(sizes_over_the_binding_limit_name_the_limit),
    );
    add(
        "zero_sizes_are_refused".into(),
        None,
        Box::new(zero_sizes_are_refused),
    );
    add(
        "the_fleets_ceiling_probes_verify_and_stop_at_their_deadline".into(),
        None,
        Box::new(the_fleets_ceiling_probes_verify_and_stop_at_their_deadline),
    );
    libtest_mimic::run(&args, trials).exit();
}

/// Builds and verifies `v` at `size` when its table entry says the size fits (a misfit is
/// skipped, and any other refusal fails the test). Returns whether it verified.
fn verify_if_fits<K: GpuKernel>(
    v: &Variant,
    misfit: Option<String>,
    size: impl std::fmt::Display,
    make: impl FnOnce() -> Result<K, KernelError>,
) -> bool {
    if misfit.is_some() {
        return false;
    }
    let kernel = make().unwrap_or_else(|e| panic!("{} {size}: {e}", v.name));
    let check = kernel.verify();
    assert!(check.is_ok(), "{} {size}: {:?}", v.name, check.err());
    // The same kernel again on its fresh poison must still pass: no stale output.
    kernel.verify().unwrap();
    true
}

/// One GEMM variant at every size it fits: at least two must verify.
fn gemm_variant(gpu: &Gpu, v: &'static Variant) {
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
    let mut verified = 0;
    for &(m, n, k) in &sizes {
        let size = GemmSize { m, n, k };
        let misfit = v.misfit(|d| match d {
            Dim::K => k,
            Dim::N => n,
            Dim::Hidden => unreachable!("a GEMM variant asks for hidden"),
        });
        // bt32x4's texture rows must be whole multiples of 256 bytes (N up to 64).
        let texture_rows = matches!(
            v.geometry,
            Geometry::Gemm {
                inputs: GemmInputs::BTexture,
                ..
            }
        ) && !size.ldc().is_multiple_of(64);
        if texture_rows {
            assert!(GemmKernel::new(gpu, v, size).is_err());
            continue;
        }
        verified += verify_if_fits(v, misfit, size, || GemmKernel::new(gpu, v, size)) as usize;
    }
    assert!(
        verified >= 2,
        "{} verified at only {verified} sizes",
        v.name
    );
}

/// One layernorm variant at every size it fits: at least two must verify.
fn layernorm_variant(gpu: &Gpu, v: &'static Variant) {
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
        // The longest row u64x4_resident holds in registers, over rows that do not fill its
        // 16-row workgroups.
        (17, 1024),
    ];
    let mut verified = 0;
    for &(rows, hidden) in &sizes {
        let size = LayernormSize { rows, hidden };
        let misfit = v.misfit(|_| hidden);
        let make = || LayernormKernel::new(gpu, v, size);
        verified += verify_if_fits(v, misfit, size, make) as usize;
    }
    assert!(
        verified >= 2,
        "{} verified at only {verified} sizes",
        v.name
    );
}

/// The fleet gate's `fma` and `bandwidth` probes: each kernel verified, then timed until its
/// samples (the copy, 5) or its deadline (the FMA: 1000 dispatches of about 30 ms each do not
/// fit 1.5 s on any adapter), with a positive rate.
fn the_fleets_ceiling_probes_verify_and_stop_at_their_deadline(gpu: &Gpu) {
    use morphbench::bench::peak::probe;
    use morphbench::bench::probe::Budget;
    use std::time::{Duration, Instant};
    let budget = |iters| Budget {
        iters,
        deadline: Instant::now() + Duration::from_millis(1500),
    };
    // More iterations than 1.5 s can hold on any adapter: the deadline is what stops it (the
    // probe sizes its dispatch to the adapter; 1000 of them once took only 0.4 s here).
    let (p, flops) = probe::fma(gpu, budget(1_000_000)).unwrap();
    assert!(p.cut && p.summary.n >= 3 && flops > 0.0, "{p:?}");
    let (p, bytes) = probe::copy(gpu, 8 << 20, budget(5)).unwrap();
    assert_eq!(
        (p.cut, p.summary.n, bytes),
        (false, 5, 2.0 * (8 << 20) as f64)
    );
    assert!(p.summary.p50 > 0.0);
}

fn sizes_over_the_binding_limit_name_the_limit(gpu: &Gpu) {
    let limit = gpu.limits.max_storage_buffer_binding_size;
    let rows = (limit / 4 / 1024 + 1) as u32;
    let err = LayernormKernel::new(
        gpu,
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

fn zero_sizes_are_refused(gpu: &Gpu) {
    let err = GemmKernel::new(gpu, &GEMM_VARIANTS[0], GemmSize { m: 0, n: 4, k: 4 })
        .err()
        .expect("zero size");
    assert!(err.to_string().contains(">= 1"));
}
