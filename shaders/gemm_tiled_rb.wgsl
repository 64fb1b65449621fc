// The shape that wins on discrete GPUs (as in public WGSL GEMMs that reach 70% of a laptop
// GPU's peak): a 128x128 tile of C per workgroup of 16x16 invocations, each computing an 8x8
// register block (8 rows, two vec4 column groups), with A and B staged through workgroup
// memory 8 k-columns at a time. The k-tiles are double-buffered: the next tile is read from
// memory into registers while the current one is computed on, then stored into the other
// buffer, so one barrier per k-tile suffices. Layout as in gemm.wgsl (ldc a multiple of 4, so
// B and C are whole vec4s); every index is guarded.

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

const TILE: u32 = 128u;
const TILE_K: u32 = 8u;
// [buffer][kk][row] of A and [buffer][kk][col4] of B: 8 KiB each, 16 KiB in all (WebGPU's
// default workgroup storage limit).
var<workgroup> a_tile: array<f32, 2048>;
var<workgroup> b_tile: array<vec4<f32>, 512>;

// One k-tile's share of this invocation: four A elements and one B vec4.
struct Staged {
    a: array<f32, 4>,
    b: vec4<f32>,
}

fn load(p0: u32, row0: u32, col4_0: u32, tid: u32) -> Staged {
    var s: Staged;
    for (var i = 0u; i < 4u; i++) {
        let e = tid + i * 256u;
        let ar = e / TILE_K;
        let ak = e % TILE_K;
        var v = 0.0;
        if (row0 + ar < dims.m && p0 + ak < dims.k) {
            v = a[(row0 + ar) * dims.k + p0 + ak];
        }
        s.a[i] = v;
    }
    let bk = tid / 32u;
    let bc = tid % 32u;
    let ld4 = dims.ldc / 4u;
    s.b = vec4<f32>(0.0);
    if (p0 + bk < dims.k && col4_0 + bc < ld4) {
        s.b = b[(p0 + bk) * ld4 + col4_0 + bc];
    }
    return s;
}

fn store(s: Staged, buf: u32, tid: u32) {
    for (var i = 0u; i < 4u; i++) {
        let e = tid + i * 256u;
        a_tile[buf * 1024u + (e % TILE_K) * TILE + e / TILE_K] = s.a[i];
    }
    b_tile[buf * 256u + (tid / 32u) * 32u + tid % 32u] = s.b;
}

@compute @workgroup_size(16, 16)
fn gemm_tiled_rb(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row0 = wg.y * TILE;
    let col4_0 = wg.x * (TILE / 4u);
    let tid = lid.y * 16u + lid.x;
    var acc: array<vec4<f32>, 16>; // [row i][column group j] at 2 * i + j
    let tiles = (dims.k + TILE_K - 1u) / TILE_K;
    store(load(0u, row0, col4_0, tid), 0u, tid);
    workgroupBarrier();
    for (var t = 0u; t < tiles; t++) {
        let cur = t % 2u;
        let more = t + 1u < tiles;
        var next: Staged;
        if (more) {
            next = load((t + 1u) * TILE_K, row0, col4_0, tid);
        }
        for (var kk = 0u; kk < TILE_K; kk++) {
            let b0 = b_tile[cur * 256u + kk * 32u + lid.x];
            let b1 = b_tile[cur * 256u + kk * 32u + 16u + lid.x];
            for (var i = 0u; i < 8u; i++) {
                let av = vec4<f32>(a_tile[cur * 1024u + kk * TILE + lid.y + 16u * i]);
                acc[2u * i] = fma(av, b0, acc[2u * i]);
                acc[2u * i + 1u] = fma(av, b1, acc[2u * i + 1u]);
            }
        }
        if (more) {
            store(next, 1u - cur, tid);
        }
        workgroupBarrier();
    }
    let ld4 = dims.ldc / 4u;
    for (var i = 0u; i < 8u; i++) {
        let row = row0 + lid.y + 16u * i;
        if (row < dims.m) {
            let c0 = col4_0 + lid.x;
            let c1 = col4_0 + 16u + lid.x;
            if (c0 < ld4) {
                c[row * ld4 + c0] = acc[2u * i];
            }
            if (c1 < ld4) {
                c[row * ld4 + c1] = acc[2u * i + 1u];
            }
        }
    }
}
