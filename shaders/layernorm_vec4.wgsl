// Layernorm reading and writing whole vec4s (hidden must be a multiple of 4): workgroups of
// exactly one subgroup (SG_WG is the adapter's subgroup size), each normalising
// ROWS_PER_GROUP rows in turn. Welford moments per lane are merged across the subgroup, then
// one pass normalises. A quarter of the load and store instructions of the scalar variants.

struct Dims {
    rows: u32,
    hidden: u32,
    eps: f32,
    groups_x: u32,
}

@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> gamma: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> beta: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<vec4<f32>>;
@group(0) @binding(4) var<uniform> dims: Dims;

override SG_WG: u32 = 32u;
// Rows per workgroup: amortises the per-workgroup cost of CPU drivers.
const ROWS_PER_GROUP: u32 = 4u;

struct Moments {
    n: f32,
    mean: f32,
    m2: f32,
}

fn merge(a: Moments, b: Moments) -> Moments {
    let n = a.n + b.n;
    if (n == 0.0) {
        return a;
    }
    let delta = b.mean - a.mean;
    let wb = b.n / n;
    return Moments(n, a.mean + delta * wb, a.m2 + b.m2 + delta * delta * a.n * wb);
}

// Moments of four values at once (two-pass inside the vec4, exact).
fn moments4(v: vec4<f32>) -> Moments {
    let mean = (v.x + v.y + v.z + v.w) * 0.25;
    let d = v - vec4<f32>(mean);
    return Moments(4.0, mean, dot(d, d));
}

fn normalize_row(row: u32, lane: u32) {
    let h4 = dims.hidden / 4u;
    let base = row * h4;
    var mo = Moments(0.0, 0.0, 0.0);
    for (var i0 = 0u; i0 < h4; i0 += SG_WG) {
        let i = i0 + lane;
        if (i < h4) {
            mo = merge(mo, moments4(x[base + i]));
        }
    }
    for (var off = SG_WG / 2u; off > 0u; off >>= 1u) {
        let other = Moments(
            subgroupShuffleXor(mo.n, off),
            subgroupShuffleXor(mo.mean, off),
            subgroupShuffleXor(mo.m2, off),
        );
        mo = merge(mo, other);
    }
    let inv = inverseSqrt(mo.m2 / f32(dims.hidden) + dims.eps);
    let mean = vec4<f32>(mo.mean);
    for (var i0 = 0u; i0 < h4; i0 += SG_WG) {
        let i = i0 + lane;
        if (i < h4) {
            y[base + i] = (x[base + i] - mean) * inv * gamma[i] + beta[i];
        }
    }
}

@compute @workgroup_size(SG_WG)
fn layernorm_vec4(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    // `row` is the same for the whole workgroup, so the branch is uniform.
    let first = (wg.y * dims.groups_x + wg.x) * ROWS_PER_GROUP;
    for (var r = 0u; r < ROWS_PER_GROUP; r++) {
        let row = first + r;
        if (row < dims.rows) {
            normalize_row(row, lane);
        }
    }
}
