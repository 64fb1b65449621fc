// Register-blocked GEMM (16 rows x vec4 per invocation) for adapters whose subgroups are
// exactly 8 lanes wide (CPU drivers such as lavapipe): each lane loads a different k of the
// same A rows, and eight subgroupBroadcasts with constant lanes hand them round, which CPU
// compilers turn into plain vector shuffles. Layout as in gemm_vec4.wgsl. Lanes past the last
// column still run (subgroup operations need every lane) and skip only the store; k past the
// end reads zero from A, so clamped rows of B add nothing.

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

const ROWS: u32 = 16u;

var<private> acc: array<vec4<f32>, ROWS>;
var<private> a_lane: array<f32, ROWS>;

fn step(p: u32, col4: u32, ld4: u32, av: array<f32, ROWS>) {
    let bv = b[min(p, dims.k - 1u) * ld4 + col4];
    for (var i = 0u; i < ROWS; i++) {
        acc[i] = fma(vec4<f32>(av[i]), bv, acc[i]);
    }
}

@compute @workgroup_size(64, 1, 1)
fn gemm_broadcast8(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let ld4 = dims.ldc / 4u;
    let col4 = min(gid.x, ld4 - 1u);
    let row0 = gid.y * ROWS;
    var a_row: array<u32, ROWS>;
    for (var i = 0u; i < ROWS; i++) {
        a_row[i] = min(row0 + i, dims.m - 1u) * dims.k;
    }
    for (var p0 = 0u; p0 < dims.k; p0 += 8u) {
        let p = p0 + lane;
        for (var i = 0u; i < ROWS; i++) {
            a_lane[i] = select(0.0, a[a_row[i] + min(p, dims.k - 1u)], p < dims.k);
        }
        var av: array<f32, ROWS>;
        for (var i = 0u; i < ROWS; i++) { av[i] = subgroupBroadcast(a_lane[i], 0u); }
        step(p0, col4, ld4, av);
        for (var i = 0u; i < ROWS; i++) { av[i] = subgroupBroadcast(a_lane[i], 1u); }
        step(p0 + 1u, col4, ld4, av);
        for (var i = 0u; i < ROWS; i++) { av[i] = subgroupBroadcast(a_lane[i], 2u); }
        step(p0 + 2u, col4, ld4, av);
        for (var i = 0u; i < ROWS; i++) { av[i] = subgroupBroadcast(a_lane[i], 3u); }
        step(p0 + 3u, col4, ld4, av);
        for (var i = 0u; i < ROWS; i++) { av[i] = subgroupBroadcast(a_lane[i], 4u); }
        step(p0 + 4u, col4, ld4, av);
        for (var i = 0u; i < ROWS; i++) { av[i] = subgroupBroadcast(a_lane[i], 5u); }
        step(p0 + 5u, col4, ld4, av);
        for (var i = 0u; i < ROWS; i++) { av[i] = subgroupBroadcast(a_lane[i], 6u); }
        step(p0 + 6u, col4, ld4, av);
        for (var i = 0u; i < ROWS; i++) { av[i] = subgroupBroadcast(a_lane[i], 7u); }
        step(p0 + 7u, col4, ld4, av);
    }
    if (gid.x < ld4) {
        for (var i = 0u; i < ROWS; i++) {
            if (row0 + i < dims.m) {
                c[(row0 + i) * ld4 + col4] = acc[i];
            }
        }
    }
}
