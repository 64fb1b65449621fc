// The multiply-add of shaders/peak.wgsl written as a multiply and an add, which a compiler
// may fuse: on drivers that lower fma() to something slower, this is the faster form.
fn step(a: f32, m: f32, c: f32) -> f32 { return a * m + c; }
fn step4(a: vec4<f32>, m: vec4<f32>, c: vec4<f32>) -> vec4<f32> { return a * m + c; }

