// What every peak kernel shares: the uniform, the grid's flat index, and the chunk length of
// the `_chunk` kernels. Every input that could let a compiler fold the work away (the
// multiplier, the addend, the trip count) comes from the uniform, so the work is done as
// written.

struct Params {
    // FMA: loop trips per invocation. Bandwidth: elements in the buffers.
    count: u32,
    // FMA: the multiplier (1.0) and addend (0.0), so each chain keeps its start value and the
    // result can be checked exactly.
    mul: f32,
    add: f32,
    // Bandwidth: the invocations in the grid (the stride of the grid-stride loop).
    threads: u32,
}

@group(0) @binding(0) var<uniform> params: Params;

const WG: u32 = 256u;

fn flat(gid: vec3<u32>, groups: vec3<u32>) -> u32 {
    return gid.x + gid.y * groups.x * WG;
}

// Contiguous elements per invocation in the `_chunk` kernels.
const CHUNK: u32 = 8u;
