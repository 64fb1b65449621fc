use super::*;
use crate::gpu::BackendChoice;

#[test]
#[should_panic(expected = "A has 3 of 4 elements")]
fn reference_refuses_short_inputs() {
    reference(GemmSize { m: 2, n: 2, k: 2 }, &[0.0; 3], &[0.0; 4]);
}

#[test]
fn reference_multiplies() {
    // [1 2; 3 4] x [5 6; 7 8] = [19 22; 43 50]
    let c = reference(
        GemmSize { m: 2, n: 2, k: 2 },
        &[1., 2., 3., 4.],
        &[5., 6., 7., 8.],
    );
    assert_eq!(c, vec![19.0, 22.0, 43.0, 50.0]);
}

/// Runs `pass` once and checks C against the reference for these inputs.
fn check(gpu: &Gpu, pass: &DispatchPass, c: &wgpu::Buffer, size: GemmSize, a: &[f32], b: &[f32]) {
    gpu.poison(c);
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    super::super::record_untimed(&mut enc, pass.upload.as_ref(), |p| pass.encode(p));
    let idx = gpu.queue.submit([enc.finish()]);
    gpu.wait(idx).unwrap();
    let bytes = gpu.read_back(c).unwrap();
    let (m, n) = (size.m as usize, size.n as usize);
    let want = reference(size, a, b);
    let (v, unwritten, nan) = compare(
        bytemuck::cast_slice(&bytes),
        n,
        m,
        n,
        &want,
        size.tolerance(),
    );
    assert!(
        unwritten == 0 && nan == 0 && v.rel_err < v.tolerance,
        "{v:?} {unwritten} {nan}"
    );
}

/// A pass bound to caller buffers (as the hol bench chains them) must read A as it is when
/// the pass runs, also in variants that repack A into another layout first.
#[test]
fn every_variant_reads_the_current_a() {
    let gpu = Gpu::open(BackendChoice::Auto, None).expect("a GPU adapter");
    let size = GemmSize {
        m: 64,
        n: 64,
        k: 64,
    };
    let (a1, a2, b) = (
        random_vec(64 * 64),
        random_vec(64 * 64),
        random_vec(64 * 64),
    );
    let mut ran = 0;
    for v in GEMM_VARIANTS {
        let a_buf = gpu.storage_from("a", &a1);
        let b_buf = gpu.storage_from("b", &b);
        let c = gpu.storage_from("c", &vec![0.0f32; 64 * 64]);
        let pass = match gemm_pass(&gpu, v, size, &a_buf, &b_buf, &c) {
            Ok(pass) => pass,
            Err(KernelError::Invalid(why)) => {
                eprintln!("{} skipped: {why}", v.name);
                continue;
            }
            Err(e) => panic!("{}: {e}", v.name),
        };
        check(&gpu, &pass, &c, size, &a1, &b);
        gpu.queue.write_buffer(&a_buf, 0, bytemuck::cast_slice(&a2));
        check(&gpu, &pass, &c, size, &a2, &b);
        ran += 1;
    }
    assert!(ran >= 4, "only {ran} GEMM variants could run here");
}
