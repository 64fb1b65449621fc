// y = (z - mean) / sqrt(var + EPS) per row (no affine part), keeping 1 / sqrt(var + EPS) per
// row for the backward pass. One workgroup per row; two passes over the row (mean, then the
// variance about it) for accuracy.
// Compiled after train_reduce.wgsl (WG, reduce).
override ROWS: u32;
override H: u32;
const EPS: f32 = 1e-5;

@group(0) @binding(0) var<storage, read> z: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read_write> rstd: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) w: vec3<u32>) {
    let row = w.x;
    if (row >= ROWS) {
        return;
    }
    let l = lid.x;
    let base = row * H;
    var s = 0.0;
    for (var i = l; i < H; i += WG) {
        s += z[base + i];
    }
    let mean = reduce(l, s) / f32(H);
    var q = 0.0;
    for (var i = l; i < H; i += WG) {
        let d = z[base + i] - mean;
        q = fma(d, d, q);
    }
    let r = inverseSqrt(reduce(l, q) / f32(H) + EPS);
    for (var i = l; i < H; i += WG) {
        y[base + i] = (z[base + i] - mean) * r;
    }
    if (l == 0u) {
        rstd[row] = r;
    }
}
