// Like gemm_broadcast8.wgsl (8-lane subgroups) with 32 rows x vec4 per invocation, and A read
// as vec4s too: each lane loads four consecutive k of each row, so a subgroup covers 32 k per
// load of A. On CPU drivers every load whose address differs across lanes is done lane by
// lane, and vec4 loads cost about what scalar ones do, so this quarters the cost of A.
// Needs k to be a multiple of 4 (A is read as vec4 rows of k / 4). How A and B are read comes
// from parts the host puts in front (`load_a`, `load_b`): gemm_a_storage.wgsl with
// gemm_b_storage.wgsl or gemm_b_texture.wgsl, or gemm_ab_images.wgsl.

struct Dims {
    m: u32,
    n: u32,
    k: u32,
    ldc: u32,
}

@group(0) @binding(2) var<storage, read_write> c: array<vec4<f32>>;
@group(0) @binding(3) var<uniform> dims: Dims;

const ROWS: u32 = 32u;

var<private> acc: array<vec4<f32>, ROWS>;

// Four k steps from one broadcast vec4 of A per row.
fn quad(p: u32, col4: u32, ld4: u32, q: array<vec4<f32>, ROWS>) {
    let last = dims.k - 1u;
    let b0 = load_b(min(p, last), col4, ld4);
    let b1 = load_b(min(p + 1u, last), col4, ld4);
    let b2 = load_b(min(p + 2u, last), col4, ld4);
    let b3 = load_b(min(p + 3u, last), col4, ld4);
    for (var i = 0u; i < ROWS; i++) {
        var s = fma(vec4<f32>(q[i].x), b0, acc[i]);
        s = fma(vec4<f32>(q[i].y), b1, s);
        s = fma(vec4<f32>(q[i].z), b2, s);
        acc[i] = fma(vec4<f32>(q[i].w), b3, s);
    }
}

@compute @workgroup_size(32, 1, 1)
fn gemm_bq(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let ld4 = dims.ldc / 4u;
    let k4 = dims.k / 4u;
    let col4 = min(gid.x, ld4 - 1u);
    let row0 = gid.y * ROWS;
    var a_row: array<u32, ROWS>;
    for (var i = 0u; i < ROWS; i++) {
        a_row[i] = min(row0 + i, dims.m - 1u);
    }
    var a4: array<vec4<f32>, ROWS>;
    var q: array<vec4<f32>, ROWS>;
    for (var p0 = 0u; p0 < dims.k; p0 += 32u) {
        let kq = p0 / 4u + lane;
        for (var i = 0u; i < ROWS; i++) {
            a4[i] = select(vec4<f32>(0.0), load_a(a_row[i], min(kq, k4 - 1u), k4), kq < k4);
        }
        for (var i = 0u; i < ROWS; i++) { q[i] = subgroupBroadcast(a4[i], 0u); }
        quad(p0, col4, ld4, q);
        for (var i = 0u; i < ROWS; i++) { q[i] = subgroupBroadcast(a4[i], 1u); }
        quad(p0 + 4u, col4, ld4, q);
        for (var i = 0u; i < ROWS; i++) { q[i] = subgroupBroadcast(a4[i], 2u); }
        quad(p0 + 8u, col4, ld4, q);
        for (var i = 0u; i < ROWS; i++) { q[i] = subgroupBroadcast(a4[i], 3u); }
        quad(p0 + 12u, col4, ld4, q);
        for (var i = 0u; i < ROWS; i++) { q[i] = subgroupBroadcast(a4[i], 4u); }
        quad(p0 + 16u, col4, ld4, q);
        for (var i = 0u; i < ROWS; i++) { q[i] = subgroupBroadcast(a4[i], 5u); }
        quad(p0 + 20u, col4, ld4, q);
        for (var i = 0u; i < ROWS; i++) { q[i] = subgroupBroadcast(a4[i], 6u); }
        quad(p0 + 24u, col4, ld4, q);
        for (var i = 0u; i < ROWS; i++) { q[i] = subgroupBroadcast(a4[i], 7u); }
        quad(p0 + 28u, col4, ld4, q);
    }
    if (gid.x < ld4) {
        for (var i = 0u; i < ROWS; i++) {
            if (row0 + i < dims.m) {
                c[(row0 + i) * ld4 + col4] = acc[i];
            }
        }
    }
}
