// The multiply-add of shaders/peak.wgsl as the fma() builtin.
fn step(a: f32, m: f32, c: f32) -> f32 { return fma(a, m, c); }
fn step4(a: vec4<f32>, m: vec4<f32>, c: vec4<f32>) -> vec4<f32> { return fma(a, m, c); }

