// The bandwidth buffers as vec4<u64>, eight floats per access (for peak_copy.wgsl), on adapters
// with 64-bit shader integers: the widest access the kernels use (layernorm's u64x4 variants),
// so the copy ceiling bounds them too. CPU drivers move storage buffers lane by lane and
// component by component, where a wider component carries more bytes per step.
alias Elem = vec4<u64>;

@group(0) @binding(1) var<storage, read> src: array<Elem>;
@group(0) @binding(2) var<storage, read_write> dst: array<Elem>;
