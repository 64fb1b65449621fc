// y = (x - mean) / sqrt(var + eps) * gamma + beta over each row of a rows x hidden matrix.
// Two passes over the row (mean, then the mean of squared deviations) keep the variance
// accurate where one-pass sum-of-squares would cancel.

struct Dims {
    rows: u32,
    hidden: u32,
    eps: f32,
    // Workgroups along x; rows beyond 65535 workgroups spill into y.
    groups_x: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> gamma: array<f32>;
@group(0) @binding(2) var<storage, read> beta: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> dims: Dims;

// One invocation per row.
@compute @workgroup_size(64)
fn layernorm_row(@builtin(global_invocation_id) gid: vec3<u32>) {
    let row = gid.y * dims.groups_x * 64u + gid.x;
    if (row >= dims.rows) {
        return;
    }
    let base = row * dims.hidden;
    let h = f32(dims.hidden);
    var sum = 0.0;
    for (var i = 0u; i < dims.hidden; i++) {
        sum += x[base + i];
    }
    let mean = sum / h;
    var sq = 0.0;
    for (var i = 0u; i < dims.hidden; i++) {
        let d = x[base + i] - mean;
        sq = fma(d, d, sq);
    }
    let inv = inverseSqrt(sq / h + dims.eps);
    for (var i = 0u; i < dims.hidden; i++) {
        y[base + i] = (x[base + i] - mean) * inv * gamma[i] + beta[i];
    }
}

// One workgroup of 256 per row with a tree reduction in workgroup memory: coalesced loads,
// the usual shape on GPUs.
const WG: u32 = 256u;
var<workgroup> partial: array<f32, WG>;

fn workgroup_sum(t: u32, v: f32) -> f32 {
    partial[t] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (t < s) {
            partial[t] += partial[t + s];
        }
        workgroupBarrier();
    }
    let total = partial[0];
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(256)
fn layernorm_workgroup(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    // The whole workgroup shares `row`, so this early return is uniform.
    let row = wg.y * dims.groups_x + wg.x;
    if (row >= dims.rows) {
        return;
    }
    let base = row * dims.hidden;
    let h = f32(dims.hidden);
    var s = 0.0;
    for (var i = t; i < dims.hidden; i += WG) {
        s += x[base + i];
    }
    let mean = workgroup_sum(t, s) / h;
    var q = 0.0;
    for (var i = t; i < dims.hidden; i += WG) {
        let d = x[base + i] - mean;
        q = fma(d, d, q);
    }
    let inv = inverseSqrt(workgroup_sum(t, q) / h + dims.eps);
    for (var i = t; i < dims.hidden; i += WG) {
        y[base + i] = (x[base + i] - mean) * inv * gamma[i] + beta[i];
    }
}
