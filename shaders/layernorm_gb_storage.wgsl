// gamma and beta as storage buffers of vec4 (for layernorm_rows.wgsl).
@group(0) @binding(1) var<storage, read> gamma: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> beta: array<vec4<f32>>;
