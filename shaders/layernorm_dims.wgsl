// The sizes and the workgroup width of the layernorms written for one subgroup per workgroup
// (layernorm_rows.wgsl, layernorm_resident.wgsl). SG_WG is the adapter's subgroup size.
struct Dims {
    rows: u32,
    hidden: u32,
    eps: f32,
    groups_x: u32,
}

@group(0) @binding(4) var<uniform> dims: Dims;

override SG_WG: u32 = 32u;
