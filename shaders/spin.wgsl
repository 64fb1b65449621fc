// A calibrated busy-wait: the stand-in for a communication kernel stalled on a slow link.
// One invocation runs a dependent chain of `iterations` fused multiply-adds, so its duration
// is linear in the count. It binds the activation being "sent" read-write, so the queue orders
// it after the op that produced the activation and before the next op that touches it, as a
// stream orders a real send kernel. It never changes the activation.

struct Params {
    iterations: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read_write> activation: array<f32>;
@group(0) @binding(1) var<storage, read_write> result: array<f32>;
@group(0) @binding(2) var<uniform> params: Params;

// 64 invocations: on CPU drivers the SIMD batches of one workgroup run one after another,
// so a dispatch lasts 8x longer and a stand-in needs fewer of them (less dispatch jitter);
// on GPUs they run side by side and change nothing.
@compute @workgroup_size(64)
fn spin() {
    var x = activation[0];
    for (var i = 0u; i < params.iterations; i++) {
        x = fma(x, 0.99999994, 1.0e-7);
    }
    result[0] = x;
}
