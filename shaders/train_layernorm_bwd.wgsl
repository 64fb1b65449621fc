// The input gradient of y = layernorm(z) (no affine part), from the output gradient dy, the
// normalized output y and 1 / sqrt(var + eps) per row:
//   dz = rstd * (dy - mean(dy) - y * mean(dy * y)).
// One workgroup per row.
// Compiled after train_reduce.wgsl (WG, reduce).
override ROWS: u32;
override H: u32;

@group(0) @binding(0) var<storage, read> dy: array<f32>;
@group(0) @binding(1) var<storage, read> y: array<f32>;
@group(0) @binding(2) var<storage, read> rstd: array<f32>;
@group(0) @binding(3) var<storage, read_write> dz: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) w: vec3<u32>) {
    let row = w.x;
    if (row >= ROWS) {
        return;
    }
    let l = lid.x;
    let base = row * H;
    var sd = 0.0;
    var sdy = 0.0;
    for (var i = l; i < H; i += WG) {
        sd += dy[base + i];
        sdy = fma(dy[base + i], y[base + i], sdy);
    }
    let mean_dy = reduce(l, sd) / f32(H);
    let mean_dyy = reduce(l, sdy) / f32(H);
    let r = rstd[row];
    for (var i = l; i < H; i += WG) {
        dz[base + i] = r * (dy[base + i] - mean_dy - y[base + i] * mean_dyy);
    }
}
