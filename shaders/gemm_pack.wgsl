// Repacks a dense row-major f32 matrix (rows x cols, cols a multiple of 4) into an rgba32float
// image for gemm_ab_images.wgsl: texel (x, y, layer) holds columns 4t..4t+3 of row y, where
// t = layer * width + x, and zeros past the last column. A becomes one layer as wide as its rows
// (width = cols / 4). B becomes layers of 32-column panels (width = 8): the 8 lanes of a
// subgroup then read one 128-byte texel row per k and walk their panel front to back, where in
// row-major order each k step jumps a whole row of B (2-4 KiB at n = 512-1024), which defeats
// the CPU's prefetchers on CPU drivers.

struct PackDims {
    rows: u32,
    cols: u32,
    width: u32,
    layers: u32,
}

@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(1) var dst: texture_storage_2d_array<rgba32float, write>;
@group(0) @binding(2) var<uniform> dims: PackDims;

// Each invocation packs one texel column of ROWS rows: CPU drivers pay a fixed cost per
// workgroup, which one texel per invocation would pay M times over.
const ROWS: u32 = 16u;

@compute @workgroup_size(64, 1, 1)
fn gemm_pack(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.x;
    let texels = dims.cols / 4u;
    if (t >= dims.width * dims.layers) {
        return;
    }
    let at = vec2<u32>(t % dims.width, 0u);
    let layer = t / dims.width;
    let row_end = min(gid.y * ROWS + ROWS, dims.rows);
    for (var row = gid.y * ROWS; row < row_end; row++) {
        let v = src[row * texels + min(t, texels - 1u)];
        textureStore(dst, at + vec2<u32>(0u, row), layer, select(vec4<f32>(0.0), v, t < texels));
    }
}
