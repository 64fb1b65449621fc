// Chunk access for layernorm_rows.wgsl: x and y read and written as whole vec4<f32> (hidden
// must be a multiple of 4).

@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<vec4<f32>>;

const FLOATS: u32 = 4u;
alias Chunk = vec4<f32>;

struct ChunkParams {
    gamma: vec4<f32>,
    beta: vec4<f32>,
}

fn load_chunk(i: u32) -> Chunk {
    return x[i];
}

fn store_chunk(i: u32, c: Chunk) {
    y[i] = c;
}

fn chunk_params(i: u32) -> ChunkParams {
    return ChunkParams(gamma[i], beta[i]);
}

// Moments of four values at once (two-pass inside the vec4, exact).
fn chunk_moments(v: Chunk) -> Moments {
    let mean = (v.x + v.y + v.z + v.w) * 0.25;
    let d = v - vec4<f32>(mean);
    return Moments(4.0, mean, dot(d, d));
}

fn normalise(v: Chunk, mean: f32, inv: f32, p: ChunkParams) -> Chunk {
    return (v - vec4<f32>(mean)) * inv * p.gamma + p.beta;
}

@compute @workgroup_size(SG_WG)
fn layernorm_vec4(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    layernorm_rows(wg, lane);
}
