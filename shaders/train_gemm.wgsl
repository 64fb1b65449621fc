// C (+)= op(A) . op(B) for training a pipeline stage: op(A) is M x K (A row-major, or A^T with
// A stored K x M), op(B) is K x N (B, or B^T with B stored N x K). The backward pass needs
// both transposes (dX = dZ W^T, dW += X^T dZ) and accumulation over microbatches. Plain 16 x 16
// tiles staged in workgroup memory: correctness and portability first, one kernel for all
// three products.
override M: u32;
override N: u32;
override K: u32;
override TRANS_A: bool = false;
override TRANS_B: bool = false;
override ACCUMULATE: bool = false;

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;

const T: u32 = 16u;
var<workgroup> ta: array<array<f32, 16>, 16>;
var<workgroup> tb: array<array<f32, 16>, 16>;

fn op_a(row: u32, col: u32) -> f32 {
    if (row >= M || col >= K) {
        return 0.0;
    }
    if (TRANS_A) {
        return a[col * M + row];
    }
    return a[row * K + col];
}

fn op_b(row: u32, col: u32) -> f32 {
    if (row >= K || col >= N) {
        return 0.0;
    }
    if (TRANS_B) {
        return b[col * K + row];
    }
    return b[row * N + col];
}

@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) l: vec3<u32>, @builtin(workgroup_id) w: vec3<u32>) {
    let row = w.y * T + l.y;
    let col = w.x * T + l.x;
    var acc = 0.0;
    for (var k0 = 0u; k0 < K; k0 += T) {
        ta[l.y][l.x] = op_a(row, k0 + l.x);
        tb[l.y][l.x] = op_b(k0 + l.y, col);
        workgroupBarrier();
        for (var k = 0u; k < T; k++) {
            acc = fma(ta[l.y][k], tb[k][l.x], acc);
        }
        workgroupBarrier();
    }
    if (row < M && col < N) {
        let i = row * N + col;
        if (ACCUMULATE) {
            c[i] = c[i] + acc;
        } else {
            c[i] = acc;
        }
    }
}
