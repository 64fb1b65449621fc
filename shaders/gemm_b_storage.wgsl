// B read from a storage buffer of vec4 rows (for gemm_bq.wgsl).
@group(0) @binding(1) var<storage, read> b: array<vec4<f32>>;

fn load_b(k: u32, col4: u32, ld4: u32) -> vec4<f32> {
    return b[k * ld4 + col4];
}
