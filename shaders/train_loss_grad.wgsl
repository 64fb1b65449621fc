// The gradient of the last stage's loss 0.5 ||y - t||^2: dy = y - t (t a fixed target).
override LEN: u32;

@group(0) @binding(0) var<storage, read> y: array<f32>;
@group(0) @binding(1) var<storage, read> t: array<f32>;
@group(0) @binding(2) var<storage, read_write> dy: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x < LEN) {
        dy[g.x] = y[g.x] - t[g.x];
    }
}
