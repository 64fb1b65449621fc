// Register-blocked GEMM without shared memory: each invocation computes ROWS rows x 4 columns
// of C (one vec4), reading B as vec4 and A as scalars. Layout as in gemm.wgsl; ldc is a
// multiple of 4, so B and C are read and written as whole vec4s. On CPU Vulkan drivers
// (lavapipe) barriers are expensive and this beats shared-memory tiling.

struct Dims {
    m: u32,
    n: u32,
    k: u32,
    ldc: u32,
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> c: array<vec4<f32>>;
@group(0) @binding(3) var<uniform> dims: Dims;

const ROWS: u32 = 8u;

@compute @workgroup_size(64, 1, 1)
fn gemm_rb8x4(@builtin(global_invocation_id) gid: vec3<u32>) {
    let ld4 = dims.ldc / 4u;
    let col4 = gid.x;
    let row0 = gid.y * ROWS;
    if (col4 >= ld4 || row0 >= dims.m) {
        return;
    }
    var a_row: array<u32, ROWS>;
    for (var i = 0u; i < ROWS; i++) {
        a_row[i] = min(row0 + i, dims.m - 1u) * dims.k;
    }
    var acc: array<vec4<f32>, ROWS>;
    for (var p = 0u; p < dims.k; p++) {
        let bv = b[p * ld4 + col4];
        for (var i = 0u; i < ROWS; i++) {
            acc[i] = fma(vec4<f32>(a[a_row[i] + p]), bv, acc[i]);
        }
    }
    for (var i = 0u; i < ROWS; i++) {
        if (row0 + i < dims.m) {
            c[(row0 + i) * ld4 + col4] = acc[i];
        }
    }
}

@compute @workgroup_size(64, 1, 1)
fn gemm_rb4x4(@builtin(global_invocation_id) gid: vec3<u32>) {
    let ld4 = dims.ldc / 4u;
    let col4 = gid.x;
    let row0 = gid.y * 4u;
    if (col4 >= ld4 || row0 >= dims.m) {
        return;
    }
    var a_row: array<u32, 4>;
    for (var i = 0u; i < 4u; i++) {
        a_row[i] = min(row0 + i, dims.m - 1u) * dims.k;
    }
    var acc: array<vec4<f32>, 4>;
    for (var p = 0u; p < dims.k; p++) {
        let bv = b[p * ld4 + col4];
        for (var i = 0u; i < 4u; i++) {
            acc[i] = fma(vec4<f32>(a[a_row[i] + p]), bv, acc[i]);
        }
    }
    for (var i = 0u; i < 4u; i++) {
        if (row0 + i < dims.m) {
            c[(row0 + i) * ld4 + col4] = acc[i];
        }
    }
}
