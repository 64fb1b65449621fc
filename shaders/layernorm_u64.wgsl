// Chunk access for layernorm_rows.wgsl: x and y read and written as vec4<u64>, eight floats
// per lane per access (hidden must be a multiple of 8). The floats and their layout are
// unchanged; only the access width differs. CPU drivers move a storage buffer lane by lane and
// component by component, so a 64-bit component carries two floats for the cost of one
// (llvmpipe: +19% at 4096x1024).

@group(0) @binding(0) var<storage, read> x: array<vec4<u64>>;
@group(0) @binding(3) var<storage, read_write> y: array<vec4<u64>>;

const FLOATS: u32 = 8u;
alias Chunk = vec4<u64>;

// gamma and beta for the chunk's first and second four floats.
struct ChunkParams {
    gamma_a: vec4<f32>,
    gamma_b: vec4<f32>,
    beta_a: vec4<f32>,
    beta_b: vec4<f32>,
}

// Eight floats as two vec4<f32>, in memory order (little-endian: the low half comes first).
struct Floats8 {
    a: vec4<f32>,
    b: vec4<f32>,
}

fn unpack8(q: vec4<u64>) -> Floats8 {
    let low = bitcast<vec4<f32>>(vec4<u32>(q));
    let high = bitcast<vec4<f32>>(vec4<u32>(q >> vec4<u32>(32u)));
    return Floats8(
        vec4<f32>(low.x, high.x, low.y, high.y),
        vec4<f32>(low.z, high.z, low.w, high.w),
    );
}

fn pack8(f: Floats8) -> vec4<u64> {
    let a = vec4<u64>(bitcast<vec4<u32>>(f.a));
    let b = vec4<u64>(bitcast<vec4<u32>>(f.b));
    return vec4<u64>(a.x | (a.y << 32u), a.z | (a.w << 32u), b.x | (b.y << 32u), b.z | (b.w << 32u));
}

fn load_chunk(i: u32) -> Chunk {
    return x[i];
}

fn store_chunk(i: u32, c: Chunk) {
    y[i] = c;
}

fn chunk_params(i: u32) -> ChunkParams {
    return ChunkParams(gamma[2u * i], gamma[2u * i + 1u], beta[2u * i], beta[2u * i + 1u]);
}

// Moments of eight values at once (two-pass inside the eight, exact).
fn chunk_moments(q: Chunk) -> Moments {
    let f = unpack8(q);
    let s = f.a + f.b;
    let mean = (s.x + s.y + s.z + s.w) * 0.125;
    let da = f.a - vec4<f32>(mean);
    let db = f.b - vec4<f32>(mean);
    return Moments(8.0, mean, dot(da, da) + dot(db, db));
}

fn normalise(q: Chunk, mean: f32, inv: f32, p: ChunkParams) -> Chunk {
    let f = unpack8(q);
    let m = vec4<f32>(mean);
    return pack8(Floats8((f.a - m) * inv * p.gamma_a + p.beta_a, (f.b - m) * inv * p.gamma_b + p.beta_b));
}

@compute @workgroup_size(SG_WG)
fn layernorm_u64(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    layernorm_rows(wg, lane);
}
