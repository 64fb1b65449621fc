// The copy kernels, over whichever element the part in front declares (peak_f32.wgsl or
// peak_u64.wgsl): element-strided across the grid (what a GPU coalesces) and CHUNK contiguous
// elements per invocation (what a CPU driver streams).

// Copies every element once.
@compute @workgroup_size(256)
fn copy(@builtin(global_invocation_id) gid: vec3<u32>,
        @builtin(num_workgroups) groups: vec3<u32>) {
    let i = flat(gid, groups);
    for (var e = i; e < params.count; e += params.threads) {
        dst[e] = src[e];
    }
}

@compute @workgroup_size(256)
fn copy_chunk(@builtin(global_invocation_id) gid: vec3<u32>,
              @builtin(num_workgroups) groups: vec3<u32>) {
    let i = flat(gid, groups);
    for (var base = i * CHUNK; base < params.count; base += params.threads * CHUNK) {
        for (var j = 0u; j < CHUNK; j++) {
            if (base + j < params.count) {
                dst[base + j] = src[base + j];
            }
        }
    }
}

