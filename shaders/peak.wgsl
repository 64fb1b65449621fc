// The device's own ceilings: FMA throughput, memory bandwidth, and an empty kernel for
// dispatch cost. Parts in front: peak_grid.wgsl (the uniform and the grid), peak_f32.wgsl (the
// buffers), peak_copy.wgsl (the copy kernels), and peak_fma.wgsl or peak_mad.wgsl, which
// define `step` and `step4`, the multiply-add measured.

// Eight independent scalar chains, four steps each per loop trip (64 flops): enough in flight
// to hide FMA latency, and enough per trip that the loop's own cost does not count (with one
// step per trip, a CPU driver measured half the rate). `step` is the multiply-add under test,
// from the part in front (peak_fma.wgsl or peak_mad.wgsl).
@compute @workgroup_size(64)
fn chains_scalar(@builtin(global_invocation_id) gid: vec3<u32>,
                 @builtin(num_workgroups) groups: vec3<u32>) {
    let i = flat(gid, groups);
    let m = params.mul;
    let c = params.add;
    let x = f32(i % 7u);
    var a0 = x; var a1 = x + 1.0; var a2 = x + 2.0; var a3 = x + 3.0;
    var a4 = x + 4.0; var a5 = x + 5.0; var a6 = x + 6.0; var a7 = x + 7.0;
    for (var t = 0u; t < params.count; t++) {
        a0 = step(a0, m, c); a1 = step(a1, m, c); a2 = step(a2, m, c); a3 = step(a3, m, c);
        a4 = step(a4, m, c); a5 = step(a5, m, c); a6 = step(a6, m, c); a7 = step(a7, m, c);
        a0 = step(a0, m, c); a1 = step(a1, m, c); a2 = step(a2, m, c); a3 = step(a3, m, c);
        a4 = step(a4, m, c); a5 = step(a5, m, c); a6 = step(a6, m, c); a7 = step(a7, m, c);
        a0 = step(a0, m, c); a1 = step(a1, m, c); a2 = step(a2, m, c); a3 = step(a3, m, c);
        a4 = step(a4, m, c); a5 = step(a5, m, c); a6 = step(a6, m, c); a7 = step(a7, m, c);
        a0 = step(a0, m, c); a1 = step(a1, m, c); a2 = step(a2, m, c); a3 = step(a3, m, c);
        a4 = step(a4, m, c); a5 = step(a5, m, c); a6 = step(a6, m, c); a7 = step(a7, m, c);
    }
    dst[i] = vec4<f32>(a0 + a1, a2 + a3, a4 + a5, a6 + a7);
}

// Four independent vec4 chains, eight steps each per trip: 256 flops per trip. Four, not
// eight: a CPU driver keeps each vec4 component in its own SIMD register, and 32 would spill.
@compute @workgroup_size(64)
fn chains_vec4(@builtin(global_invocation_id) gid: vec3<u32>,
               @builtin(num_workgroups) groups: vec3<u32>) {
    let i = flat(gid, groups);
    let m = vec4<f32>(params.mul);
    let c = vec4<f32>(params.add);
    let x = vec4<f32>(f32(i % 7u), 1.0, 2.0, 3.0);
    var a0 = x; var a1 = x + 1.0; var a2 = x + 2.0; var a3 = x + 3.0;
    for (var t = 0u; t < params.count; t++) {
        a0 = step4(a0, m, c); a1 = step4(a1, m, c); a2 = step4(a2, m, c); a3 = step4(a3, m, c);
        a0 = step4(a0, m, c); a1 = step4(a1, m, c); a2 = step4(a2, m, c); a3 = step4(a3, m, c);
        a0 = step4(a0, m, c); a1 = step4(a1, m, c); a2 = step4(a2, m, c); a3 = step4(a3, m, c);
        a0 = step4(a0, m, c); a1 = step4(a1, m, c); a2 = step4(a2, m, c); a3 = step4(a3, m, c);
        a0 = step4(a0, m, c); a1 = step4(a1, m, c); a2 = step4(a2, m, c); a3 = step4(a3, m, c);
        a0 = step4(a0, m, c); a1 = step4(a1, m, c); a2 = step4(a2, m, c); a3 = step4(a3, m, c);
        a0 = step4(a0, m, c); a1 = step4(a1, m, c); a2 = step4(a2, m, c); a3 = step4(a3, m, c);
        a0 = step4(a0, m, c); a1 = step4(a1, m, c); a2 = step4(a2, m, c); a3 = step4(a3, m, c);
    }
    dst[i] = a0 + a1 + a2 + a3;
}

// Reads every element once (grid-stride) and writes one vec4 per invocation: the writes are
// 1/(elements per invocation) of the traffic.
@compute @workgroup_size(256)
fn read_only(@builtin(global_invocation_id) gid: vec3<u32>,
             @builtin(num_workgroups) groups: vec3<u32>) {
    let i = flat(gid, groups);
    var s = vec4<f32>(0.0);
    for (var e = i; e < params.count; e += params.threads) {
        s += src[e];
    }
    dst[i] = s;
}

// Writes every element once.
@compute @workgroup_size(256)
fn write_only(@builtin(global_invocation_id) gid: vec3<u32>,
              @builtin(num_workgroups) groups: vec3<u32>) {
    let i = flat(gid, groups);
    let v = vec4<f32>(params.mul);
    for (var e = i; e < params.count; e += params.threads) {
        dst[e] = v;
    }
}

// The same two (and the copy, in peak_copy.wgsl) with eight contiguous elements per invocation, grid-stride over chunks: the
// access a CPU driver streams best (one invocation per SIMD lane walks its own cache lines),
// where the element-strided form above is what a GPU coalesces best.
@compute @workgroup_size(256)
fn read_chunk(@builtin(global_invocation_id) gid: vec3<u32>,
              @builtin(num_workgroups) groups: vec3<u32>) {
    let i = flat(gid, groups);
    var s = vec4<f32>(0.0);
    for (var base = i * CHUNK; base < params.count; base += params.threads * CHUNK) {
        for (var j = 0u; j < CHUNK; j++) {
            if (base + j < params.count) {
                s += src[base + j];
            }
        }
    }
    dst[i] = s;
}

@compute @workgroup_size(256)
fn write_chunk(@builtin(global_invocation_id) gid: vec3<u32>,
               @builtin(num_workgroups) groups: vec3<u32>) {
    let i = flat(gid, groups);
    let v = vec4<f32>(params.mul);
    for (var base = i * CHUNK; base < params.count; base += params.threads * CHUNK) {
        for (var j = 0u; j < CHUNK; j++) {
            if (base + j < params.count) {
                dst[base + j] = v;
            }
        }
    }
}

// Nothing: the cost of a dispatch.
@compute @workgroup_size(1)
fn empty() {
}
