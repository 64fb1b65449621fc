// Layernorm of four rows side by side per workgroup of exactly one subgroup (SG_WG is the
// adapter's subgroup size). Each lane reads x in chunks of FLOATS values; how a chunk is read,
// written and normalised comes from an access part put in front (layernorm_vec4.wgsl or
// layernorm_u64.wgsl), gamma and beta from layernorm_gb_storage.wgsl or
// layernorm_gb_uniform.wgsl, the sizes from layernorm_dims.wgsl. Welford moments per lane are
// merged across the subgroup. The normalising pass loads a chunk's gamma and beta once for all
// four rows: on CPU drivers, whose loads with lane-varying addresses run lane by lane, that
// saves a load per row.

const R: u32 = 4u;

fn layernorm_rows(wg: vec3<u32>, lane: u32) {
    let chunks = dims.hidden / FLOATS;
    let first = (wg.y * dims.groups_x + wg.x) * R;
    // Rows past the end are clamped for reads (every lane stays in uniform control flow for
    // the subgroup operations) and skipped for writes.
    var base: array<u32, R>;
    for (var r = 0u; r < R; r++) {
        base[r] = min(first + r, dims.rows - 1u) * chunks;
    }
    var mo: array<Moments, R>;
    for (var i0 = 0u; i0 < chunks; i0 += SG_WG) {
        let i = i0 + lane;
        if (i < chunks) {
            for (var r = 0u; r < R; r++) {
                mo[r] = merge(mo[r], chunk_moments(load_chunk(base[r] + i)));
            }
        }
    }
    var mean: array<f32, R>;
    var inv: array<f32, R>;
    for (var r = 0u; r < R; r++) {
        let m = subgroup_merge(mo[r], SG_WG);
        mean[r] = m.mean;
        inv[r] = inverseSqrt(m.m2 / f32(dims.hidden) + dims.eps);
    }
    for (var i0 = 0u; i0 < chunks; i0 += SG_WG) {
        let i = i0 + lane;
        if (i < chunks) {
            let p = chunk_params(i);
            for (var r = 0u; r < R; r++) {
                if (first + r < dims.rows) {
                    let c = load_chunk(base[r] + i);
                    store_chunk(base[r] + i, normalise(c, mean[r], inv[r], p));
                }
            }
        }
    }
}
