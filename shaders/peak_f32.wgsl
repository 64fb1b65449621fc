// The bandwidth buffers of the peak kernels as vec4<f32> (for peak.wgsl and peak_copy.wgsl).
alias Elem = vec4<f32>;

@group(0) @binding(1) var<storage, read> src: array<Elem>;
@group(0) @binding(2) var<storage, read_write> dst: array<Elem>;
