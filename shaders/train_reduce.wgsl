// The part both training layernorm shaders share (each is this file, then its own): the
// sum of one value per invocation over a workgroup of WG = 64, in workgroup memory.
const WG: u32 = 64u;

var<workgroup> part: array<f32, 64>;

fn reduce(l: u32, v: f32) -> f32 {
    part[l] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (l < s) {
            part[l] = part[l] + part[l + s];
        }
        workgroupBarrier();
    }
    let total = part[0];
    workgroupBarrier();
    return total;
}
