//! The GEMM's CPU references: an f64 reference for verification, matrixmultiply's sgemm as the CPU baseline.

use super::GemmSize;
use crate::gpu::kernels::{compare, judge, KernelError, Verification};

/// f64 reference C = A·B for dense row-major A (m x k) and B (k x n).
/// Panics when a slice is shorter than its matrix.
#[allow(unsafe_code)]
pub fn reference(size: GemmSize, a: &[f32], b: &[f32]) -> Vec<f64> {
    let (m, n, k) = (size.m as usize, size.n as usize, size.k as usize);
    assert!(
        a.len() >= m * k && b.len() >= k * n,
        "gemm reference: A has {} of {} elements, B {} of {}",
        a.len(),
        m * k,
        b.len(),
        k * n
    );
    let a64: Vec<f64> = a.iter().map(|&x| x as f64).collect();
    let b64: Vec<f64> = b.iter().map(|&x| x as f64).collect();
    let mut c = vec![0.0f64; m * n];
    // SAFETY: pointers and strides describe the three dense row-major buffers above, whose
    // lengths (m x k, k x n, m x n) are asserted or allocated here.
    unsafe {
        matrixmultiply::dgemm(
            m,
            k,
            n,
            1.0,
            a64.as_ptr(),
            k as isize,
            1,
            b64.as_ptr(),
            n as isize,
            1,
            0.0,
            c.as_mut_ptr(),
            n as isize,
            1,
        );
    }
    c
}

/// Native CPU SGEMM (matrixmultiply with its thread pool) on dense row-major inputs.
/// Panics when a slice is shorter than its matrix.
#[allow(unsafe_code)]
pub fn cpu_sgemm(size: GemmSize, a: &[f32], b: &[f32], c: &mut [f32]) {
    let (m, n, k) = (size.m as usize, size.n as usize, size.k as usize);
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    // SAFETY: dense row-major buffers of m x k, k x n and m x n elements (asserted above).
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.as_ptr(),
            k as isize,
            1,
            b.as_ptr(),
            n as isize,
            1,
            0.0,
            c.as_mut_ptr(),
            n as isize,
            1,
        );
    }
}

/// Checks a dense m x n result (such as the CPU baseline's) against the reference.
pub fn verify_dense(
    size: GemmSize,
    out: &[f32],
    reference: &[f64],
    variant: &'static str,
) -> Result<Verification, KernelError> {
    let (m, n) = (size.m as usize, size.n as usize);
    let result = compare(out, n, m, n, reference, size.tolerance());
    judge("cpu_sgemm", variant, size.to_string(), m * n, result)
}
