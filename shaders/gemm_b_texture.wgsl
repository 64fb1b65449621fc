// B read from an rgba32float texture whose texel (col4, k) holds columns 4*col4..4*col4+3 of
// row k (for gemm_bq.wgsl): CPU drivers fetch texels with vector gathers, cheaper than their
// lane-by-lane storage loads.
@group(0) @binding(1) var b: texture_2d<f32>;

fn load_b(k: u32, col4: u32, ld4: u32) -> vec4<f32> {
    return textureLoad(b, vec2<u32>(col4, k), 0);
}
