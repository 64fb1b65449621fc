// Layernorm with one subgroup per row: lanes stride over the row (contiguous loads across the
// subgroup) and reduce with subgroupAdd, with no workgroup barriers (they are costly on CPU
// drivers). A workgroup of 64 holds 64 / subgroup_size rows. Rows past the end are clamped
// for reads so every lane stays in uniform control flow; only the store is skipped.

struct Dims {
    rows: u32,
    hidden: u32,
    eps: f32,
    groups_x: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> gamma: array<f32>;
@group(0) @binding(2) var<storage, read> beta: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> dims: Dims;

@compute @workgroup_size(64)
fn layernorm_subgroup(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) sg_size: u32,
) {
    let rows_per_group = 64u / sg_size;
    let wanted = (wg.y * dims.groups_x + wg.x) * rows_per_group + t / sg_size;
    let row = min(wanted, dims.rows - 1u);
    let base = row * dims.hidden;
    let h = f32(dims.hidden);
    var s = 0.0;
    for (var i = lane; i < dims.hidden; i += sg_size) {
        s += x[base + i];
    }
    let mean = subgroupAdd(s) / h;
    var q = 0.0;
    for (var i = lane; i < dims.hidden; i += sg_size) {
        let d = x[base + i] - mean;
        q = fma(d, d, q);
    }
    let inv = inverseSqrt(subgroupAdd(q) / h + dims.eps);
    if (wanted < dims.rows) {
        for (var i = lane; i < dims.hidden; i += sg_size) {
            y[base + i] = (x[base + i] - mean) * inv * gamma[i] + beta[i];
        }
    }
}


@compute @workgroup_size(64)
fn layernorm_subgroup_welford(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) sg_size: u32,
) {
    let rows_per_group = 64u / sg_size;
    let wanted = (wg.y * dims.groups_x + wg.x) * rows_per_group + t / sg_size;
    let row = min(wanted, dims.rows - 1u);
    let base = row * dims.hidden;
    var mo = Moments(0.0, 0.0, 0.0);
    for (var i0 = 0u; i0 < dims.hidden; i0 += sg_size) {
        let i = min(i0 + lane, dims.hidden - 1u);
        let v = x[base + i];
        if (i0 + lane >= dims.hidden) {
            continue;
        }
        mo.n += 1.0;
        let d = v - mo.mean;
        mo.mean += d / mo.n;
        mo.m2 = fma(d, v - mo.mean, mo.m2);
    }
    mo = subgroup_merge(mo, sg_size);
    let inv = inverseSqrt(mo.m2 / f32(dims.hidden) + dims.eps);
    if (wanted < dims.rows) {
        for (var i0 = 0u; i0 < dims.hidden; i0 += sg_size) {
            let i = i0 + lane;
            if (i < dims.hidden) {
                y[base + i] = (x[base + i] - mo.mean) * inv * gamma[i] + beta[i];
            }
        }
    }
}

// One workgroup of exactly one subgroup per row (SG_WG is set to the adapter's subgroup size
// through a pipeline-overridable constant): the row, and so every base address, is uniform.
override SG_WG: u32 = 32u;

@compute @workgroup_size(SG_WG)
fn layernorm_one_subgroup(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let row = wg.y * dims.groups_x + wg.x;
    if (row >= dims.rows) {
        return;
    }
    let base = row * dims.hidden;
    var mo = Moments(0.0, 0.0, 0.0);
    for (var i0 = 0u; i0 < dims.hidden; i0 += SG_WG) {
        let i = i0 + lane;
        if (i < dims.hidden) {
            let v = x[base + i];
            mo.n += 1.0;
            let d = v - mo.mean;
            mo.mean += d / mo.n;
            mo.m2 = fma(d, v - mo.mean, mo.m2);
        }
    }
    mo = subgroup_merge(mo, SG_WG);
    let inv = inverseSqrt(mo.m2 / f32(dims.hidden) + dims.eps);
    for (var i0 = 0u; i0 < dims.hidden; i0 += SG_WG) {
        let i = i0 + lane;
        if (i < dims.hidden) {
            y[base + i] = (x[base + i] - mo.mean) * inv * gamma[i] + beta[i];
        }
    }
}
