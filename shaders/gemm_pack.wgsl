// Packs B, a dense row-major f32 matrix (rows x cols, cols a multiple of 4), into 32-column
// panels of an rgba32float image for gemm_ab_images.wgsl: texel (x, y, layer) holds columns
// 4t..4t+3 of row y, where t = layer * width + x (width = 8), and zeros past the last column.
// The 8 lanes of a subgroup then read one 128-byte texel row per k and walk their panel front to
// back, where in row-major order each k step jumps a whole row of B (2-4 KiB at n = 512-1024),
// which defeats the CPU's prefetchers on CPU drivers. Runs once per pass, when it is built.

struct PackDims {
    rows: u32,
    cols: u32,
    width: u32,
    layers: u32,
}

@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(1) var dst: texture_storage_2d_array<rgba32float, write>;
@group(0) @binding(2) var<uniform> dims: PackDims;

@compute @workgroup_size(64, 1, 1)
fn gemm_pack(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.x;
    let row = gid.y;
    let texels = dims.cols / 4u;
    if (t >= dims.width * dims.layers || row >= dims.rows) {
        return;
    }
    let v = src[row * texels + min(t, texels - 1u)];
    let at = vec2<u32>(t % dims.width, row);
    textureStore(dst, at, t / dims.width, select(vec4<f32>(0.0), v, t < texels));
}
