// A read from its storage buffer as vec4 rows of k / 4 (for gemm_bq.wgsl, with
// gemm_b_storage.wgsl or gemm_b_texture.wgsl).
@group(0) @binding(0) var<storage, read> a: array<vec4<f32>>;

fn load_a(row: u32, kq: u32, k4: u32) -> vec4<f32> {
    return a[row * k4 + kq];
}
