// layernorm_vec4.wgsl's scheme with x and y read and written as vec4<u64>: eight floats per lane
// per access (hidden must be a multiple of 8). The floats and their layout are unchanged;
// only the access width differs. CPU drivers move a storage buffer lane by lane and component
// by component, so a 64-bit component carries two floats for the cost of one (llvmpipe: +19%
// at 4096x1024). gamma and beta come from a part the host puts in front
// (layernorm_gb_uniform.wgsl).

struct Dims {
    rows: u32,
    hidden: u32,
    eps: f32,
    groups_x: u32,
}

@group(0) @binding(0) var<storage, read> x: array<vec4<u64>>;
@group(0) @binding(3) var<storage, read_write> y: array<vec4<u64>>;
@group(0) @binding(4) var<uniform> dims: Dims;

override SG_WG: u32 = 32u;
const R: u32 = 4u;

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

// Moments of eight values at once (two-pass inside the eight, exact).
fn moments8(f: Floats8) -> Moments {
    let s = f.a + f.b;
    let mean = (s.x + s.y + s.z + s.w) * 0.125;
    let da = f.a - vec4<f32>(mean);
    let db = f.b - vec4<f32>(mean);
    return Moments(8.0, mean, dot(da, da) + dot(db, db));
}

@compute @workgroup_size(SG_WG)
fn layernorm_u64(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let h8 = dims.hidden / 8u;
    let first = (wg.y * dims.groups_x + wg.x) * R;
    // Rows past the end are clamped for reads (every lane stays in uniform control flow for
    // the subgroup operations) and skipped for writes.
    var base: array<u32, R>;
    for (var r = 0u; r < R; r++) {
        base[r] = min(first + r, dims.rows - 1u) * h8;
    }
    var mo: array<Moments, R>;
    for (var i0 = 0u; i0 < h8; i0 += SG_WG) {
        let i = i0 + lane;
        if (i < h8) {
            for (var r = 0u; r < R; r++) {
                mo[r] = merge(mo[r], moments8(unpack8(x[base[r] + i])));
            }
        }
    }
    var mean: array<vec4<f32>, R>;
    var inv: array<f32, R>;
    for (var r = 0u; r < R; r++) {
        let m = subgroup_merge(mo[r], SG_WG);
        mean[r] = vec4<f32>(m.mean);
        inv[r] = inverseSqrt(m.m2 / f32(dims.hidden) + dims.eps);
    }
    for (var i0 = 0u; i0 < h8; i0 += SG_WG) {
        let i = i0 + lane;
        if (i < h8) {
            let ga = gamma[2u * i];
            let gb = gamma[2u * i + 1u];
            let ba = beta[2u * i];
            let bb = beta[2u * i + 1u];
            for (var r = 0u; r < R; r++) {
                if (first + r < dims.rows) {
                    let f = unpack8(x[base[r] + i]);
                    y[base[r] + i] = pack8(Floats8(
                        (f.a - mean[r]) * inv[r] * ga + ba,
                        (f.b - mean[r]) * inv[r] * gb + bb,
                    ));
                }
            }
        }
    }
}
