//! The training-stage kernels (issue 15) against their f64 references at sizes that are not
//! multiples of the 16 x 16 tile or the 64-wide row reduction, outputs poisoned first, on
//! whatever adapter is present (lavapipe in CI).

use morphbench::gpu::kernels::random_vec;
use morphbench::gpu::kernels::train::{
    layernorm_backward, layernorm_forward, reference, TrainGemm,
};
use morphbench::gpu::{BackendChoice, Gpu};

fn gpu() -> Gpu {
    Gpu::open(BackendChoice::Auto, None).expect("a GPU adapter (install mesa-vulkan-drivers)")
}

fn run(gpu: &Gpu, pass: &morphbench::gpu::kernels::DispatchPass) {
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    morphbench::gpu::kernels::record_untimed(&mut enc, None, |p| pass.encode(p));
    let idx = gpu.queue.submit([enc.finish()]);
    gpu.wait(idx).unwrap();
}

fn read(gpu: &Gpu, b: &wgpu::Buffer) -> Vec<f32> {
    bytemuck::cast_slice(&gpu.read_back(b).unwrap()).to_vec()
}

/// f32 GEMMs of depth k: the relative error bound the project's GEMM check uses (about
/// sqrt(k) units of rounding, with room), here 1e-5 * sqrt(k) + 1e-6.
fn gemm_tolerance(k: u32) -> f64 {
    1e-5 * (k as f64).sqrt() + 1e-6
}

#[test]
fn the_gemm_verifies_in_every_transpose_and_accumulates() {
    let gpu = gpu();
    for &(m, n, k) in &[(1, 1, 1), (17, 33, 65), (64, 48, 40), (5, 130, 9)] {
        for ta in [false, true] {
            for tb in [false, true] {
                for acc in [false, true] {
                    let g = TrainGemm {
                        m,
                        n,
                        k,
                        trans_a: ta,
                        trans_b: tb,
                        accumulate: acc,
                    };
                    let a = random_vec((m * k) as usize);
                    let b = random_vec((k * n) as usize);
                    let c0 = random_vec((m * n) as usize);
                    let (ab, bb) = (gpu.storage_from("a", &a), gpu.storage_from("b", &b));
                    let cb = gpu.storage_from("c", &c0);
                    if !acc {
                        gpu.poison(&cb);
                    }
                    run(&gpu, &g.pass(&gpu, &ab, &bb, &cb).unwrap());
                    let c0d: Vec<f64> = c0.iter().map(|&x| x as f64).collect();
                    let want = reference::gemm(&g, &a, &b, acc.then_some(&c0d[..]));
                    let err = reference::rel_err(&read(&gpu, &cb), &want);
                    assert!(err <= gemm_tolerance(k), "{g:?}: rel err {err}");
                }
            }
        }
    }
}

#[test]
fn layernorm_forward_and_backward_verify() {
    let gpu = gpu();
    for &(rows, h) in &[(1, 1), (3, 7), (17, 65), (8, 1000)] {
        let z = random_vec(rows * h);
        let dy = random_vec(rows * h);
        let zb = gpu.storage_from("z", &z);
        let yb = gpu.storage_from("y", &vec![0f32; rows * h]);
        let rb = gpu.storage_from("rstd", &vec![0f32; rows]);
        gpu.poison(&yb);
        gpu.poison(&rb);
        run(
            &gpu,
            &layernorm_forward(&gpu, rows as u32, h as u32, &zb, &yb, &rb).unwrap(),
        );
        let zd: Vec<f64> = z.iter().map(|&x| x as f64).collect();
        let (y_want, r_want) = reference::layernorm_forward(h, &zd);
        let (y, r) = (read(&gpu, &yb), read(&gpu, &rb));
        // A row of one element normalizes to 0 exactly; rstd is then 1/sqrt(eps).
        let tol = 1e-5;
        let ey = reference::rel_err(&y, &y_want);
        let er = reference::rel_err(&r, &r_want);
        assert!(ey <= tol && er <= tol, "{rows}x{h}: y {ey}, rstd {er}");
        // Backward from the GPU's own y and rstd (what a stage keeps), against f64 from the same.
        let dyb = gpu.storage_from("dy", &dy);
        let dzb = gpu.storage_from("dz", &vec![0f32; rows * h]);
        gpu.poison(&dzb);
        run(
            &gpu,
            &layernorm_backward(&gpu, rows as u32, h as u32, &dyb, &yb, &rb, &dzb).unwrap(),
        );
        let f = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<f64>>();
        let dz_want = reference::layernorm_backward(h, &f(&dy), &f(&y), &f(&r));
        let e = reference::rel_err(&read(&gpu, &dzb), &dz_want);
        assert!(e <= 1e-4 || h == 1, "{rows}x{h}: dz rel err {e}");
    }
}

#[test]
fn the_layernorm_backward_is_the_gradient_of_the_forward() {
    // Finite differences in f64 on the reference: guards the formula the shader implements.
    let h = 6;
    let z: Vec<f64> = (0..h)
        .map(|i| (i as f64 * 0.7).sin() + 0.1 * i as f64)
        .collect();
    let dy: Vec<f64> = (0..h).map(|i| (i as f64 * 1.3).cos()).collect();
    let loss = |z: &[f64]| -> f64 {
        let (y, _) = reference::layernorm_forward(h, z);
        y.iter().zip(&dy).map(|(a, b)| a * b).sum()
    };
    let (y, r) = reference::layernorm_forward(h, &z);
    let dz = reference::layernorm_backward(h, &dy, &y, &r);
    for i in 0..h {
        let mut zp = z.clone();
        zp[i] += 1e-6;
        let mut zm = z.clone();
        zm[i] -= 1e-6;
        let fd = (loss(&zp) - loss(&zm)) / 2e-6;
        assert!((fd - dz[i]).abs() < 1e-6, "{i}: {fd} vs {}", dz[i]);
    }
}
