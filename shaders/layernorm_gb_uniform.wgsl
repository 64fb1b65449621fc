// gamma and beta as uniform buffers (for layernorm_rows.wgsl), which bound hidden to 16384.
// CPU drivers read uniforms at lane-varying offsets with one vector gather, where storage
// buffers are read lane by lane.
@group(0) @binding(1) var<uniform> gamma: array<vec4<f32>, 4096>;
@group(0) @binding(2) var<uniform> beta: array<vec4<f32>, 4096>;
