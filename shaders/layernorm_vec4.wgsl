// Layernorm reading and writing whole vec4s (hidden must be a multiple of 4): workgroups of
// exactly one subgroup (SG_WG is the adapter's subgroup size), each normalising four rows side
// by side. Welford moments per lane are merged across the subgroup. The normalising pass loads
// gamma and beta once for all four rows: on CPU drivers, whose loads with lane-varying
// addresses run lane by lane, that is 14 such loads and stores per 16 values instead of 20.
// gamma and beta come from a part the host puts in front: layernorm_gb_storage.wgsl or
// layernorm_gb_uniform.wgsl.

struct Dims {
    rows: u32,
    hidden: u32,
    eps: f32,
    groups_x: u32,
}

@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<vec4<f32>>;
@group(0) @binding(4) var<uniform> dims: Dims;

override SG_WG: u32 = 32u;
const R: u32 = 4u;


// Moments of four values at once (two-pass inside the vec4, exact).
fn moments4(v: vec4<f32>) -> Moments {
    let mean = (v.x + v.y + v.z + v.w) * 0.25;
    let d = v - vec4<f32>(mean);
    return Moments(4.0, mean, dot(d, d));
}

@compute @workgroup_size(SG_WG)
fn layernorm_vec4(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let h4 = dims.hidden / 4u;
    let first = (wg.y * dims.groups_x + wg.x) * R;
    // Rows past the end are clamped for reads (every lane stays in uniform control flow for
    // the subgroup operations) and skipped for writes.
    var base: array<u32, R>;
    for (var r = 0u; r < R; r++) {
        base[r] = min(first + r, dims.rows - 1u) * h4;
    }
    var mo: array<Moments, R>;
    for (var i0 = 0u; i0 < h4; i0 += SG_WG) {
        let i = i0 + lane;
        if (i < h4) {
            for (var r = 0u; r < R; r++) {
                mo[r] = merge(mo[r], moments4(x[base[r] + i]));
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
    for (var i0 = 0u; i0 < h4; i0 += SG_WG) {
        let i = i0 + lane;
        if (i < h4) {
            let g = gamma[i];
            let b = beta[i];
            for (var r = 0u; r < R; r++) {
                if (first + r < dims.rows) {
                    y[base[r] + i] = (x[base[r] + i] - mean[r]) * inv[r] * g + b;
                }
            }
        }
    }
}
