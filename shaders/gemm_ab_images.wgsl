// A and B read from read-only rgba32float storage images (for gemm_bq.wgsl). CPU drivers load
// image texels with vector gathers, while storage-buffer loads whose address differs across
// lanes run lane by lane, and sampled-texture fetches also look up a mip level per lane.
// A: copied from its buffer, one layer, texel (kq, row). B: packed by gemm_pack.wgsl into
// 32-column panels, layer col4 / 8.
@group(0) @binding(0) var a: texture_storage_2d_array<rgba32float, read>;
@group(0) @binding(1) var b: texture_storage_2d_array<rgba32float, read>;

fn load_a(row: u32, kq: u32, k4: u32) -> vec4<f32> {
    return textureLoad(a, vec2<u32>(kq, row), 0);
}

fn load_b(k: u32, col4: u32, ld4: u32) -> vec4<f32> {
    return textureLoad(b, vec2<u32>(col4 % 8u, k), col4 / 8u);
}
