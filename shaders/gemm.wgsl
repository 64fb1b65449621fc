// C = A * B, f32, row-major. A is m x k (leading dimension k); B is k x n and C is m x n,
// both with leading dimension ldc (n rounded up to a multiple of 4, padding columns of B are
// zero). Every variant guards or clamps every index, so it is safe without runtime checks.

struct Dims {
    m: u32,
    n: u32,
    k: u32,
    ldc: u32,
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> dims: Dims;

// One invocation per output element: the reference point every other variant must beat.
@compute @workgroup_size(8, 8)
fn gemm_naive(@builtin(global_invocation_id) gid: vec3<u32>) {
    let col = gid.x;
    let row = gid.y;
    if (row >= dims.m || col >= dims.n) {
        return;
    }
    var acc = 0.0;
    for (var p = 0u; p < dims.k; p++) {
        acc = fma(a[row * dims.k + p], b[p * dims.ldc + col], acc);
    }
    c[row * dims.ldc + col] = acc;
}

// Shared-memory tiling: a 64x64 tile of C per workgroup of 16x16, each invocation 4x4 outputs,
// A and B staged through workgroup memory 16 columns of k at a time. The usual winner on GPUs
// with real on-chip shared memory.
const TILE: u32 = 64u;
const TILE_K: u32 = 16u;
var<workgroup> a_tile: array<f32, 1024>; // [kk][row] (TILE_K x TILE)
var<workgroup> b_tile: array<f32, 1024>; // [kk][col] (TILE_K x TILE)

@compute @workgroup_size(16, 16)
fn gemm_tiled(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row0 = wg.y * TILE;
    let col0 = wg.x * TILE;
    let tid = lid.y * 16u + lid.x;
    var acc: array<f32, 16>;
    for (var p0 = 0u; p0 < dims.k; p0 += TILE_K) {
        for (var i = 0u; i < 4u; i++) {
            let e = tid + i * 256u;
            let ar = e / TILE_K;
            let ak = e % TILE_K;
            var av = 0.0;
            if (row0 + ar < dims.m && p0 + ak < dims.k) {
                av = a[(row0 + ar) * dims.k + p0 + ak];
            }
            a_tile[ak * TILE + ar] = av;
            let bk = e / TILE;
            let bc = e % TILE;
            var bv = 0.0;
            if (p0 + bk < dims.k && col0 + bc < dims.n) {
                bv = b[(p0 + bk) * dims.ldc + col0 + bc];
            }
            b_tile[bk * TILE + bc] = bv;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TILE_K; kk++) {
            var ar: array<f32, 4>;
            var br: array<f32, 4>;
            for (var i = 0u; i < 4u; i++) {
                ar[i] = a_tile[kk * TILE + lid.y * 4u + i];
                br[i] = b_tile[kk * TILE + lid.x * 4u + i];
            }
            for (var i = 0u; i < 4u; i++) {
                for (var j = 0u; j < 4u; j++) {
                    acc[i * 4u + j] = fma(ar[i], br[j], acc[i * 4u + j]);
                }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let row = row0 + lid.y * 4u + i;
        for (var j = 0u; j < 4u; j++) {
            let col = col0 + lid.x * 4u + j;
            if (row < dims.m && col < dims.n) {
                c[row * dims.ldc + col] = acc[i * 4u + j];
            }
        }
    }
}
