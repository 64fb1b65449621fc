// Register-blocked GEMM (8 rows x vec4 per invocation) that shares A through the subgroup:
// each lane loads a different element of the same A rows, then the subgroup walks them with
// subgroupShuffle, so A is read once per subgroup instead of once per lane. All lanes of a
// workgroup share its rows (workgroup is 64 x 1), so this holds for any subgroup size <= 64.
// Lanes past the last column still run the loop (subgroup operations need every lane) and
// only skip the store.

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
fn gemm_sg8x4(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) sg_size: u32,
) {
    let ld4 = dims.ldc / 4u;
    let col4 = min(gid.x, ld4 - 1u);
    let row0 = gid.y * ROWS;
    var a_row: array<u32, ROWS>;
    for (var i = 0u; i < ROWS; i++) {
        a_row[i] = min(row0 + i, dims.m - 1u) * dims.k;
    }
    var acc: array<vec4<f32>, ROWS>;
    for (var p0 = 0u; p0 < dims.k; p0 += sg_size) {
        let p_lane = min(p0 + lane, dims.k - 1u);
        var a_lane: array<f32, ROWS>;
        for (var i = 0u; i < ROWS; i++) {
            a_lane[i] = a[a_row[i] + p_lane];
        }
        let steps = min(sg_size, dims.k - p0);
        for (var j = 0u; j < steps; j++) {
            let bv = b[(p0 + j) * ld4 + col4];
            for (var i = 0u; i < ROWS; i++) {
                acc[i] = fma(vec4<f32>(subgroupShuffle(a_lane[i], j)), bv, acc[i]);
            }
        }
    }
    if (gid.x < ld4) {
        for (var i = 0u; i < ROWS; i++) {
            if (row0 + i < dims.m) {
                c[(row0 + i) * ld4 + col4] = acc[i];
            }
        }
    }
}
