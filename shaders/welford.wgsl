// Running moments (count, mean, M2) for layernorm: Welford's update, merged across lanes with
// Chan's formula, so one read of x gives a numerically stable variance. Put in front of the
// layernorm shaders that use it.
struct Moments {
    n: f32,
    mean: f32,
    m2: f32,
}

fn merge(a: Moments, b: Moments) -> Moments {
    let n = a.n + b.n;
    if (n == 0.0) {
        return a;
    }
    let delta = b.mean - a.mean;
    let wb = b.n / n;
    return Moments(n, a.mean + delta * wb, a.m2 + b.m2 + delta * delta * a.n * wb);
}

// Merges the moments of all `width` lanes of a subgroup (a power of two) into every lane.
fn subgroup_merge(m: Moments, width: u32) -> Moments {
    var mo = m;
    for (var off = width / 2u; off > 0u; off >>= 1u) {
        let other = Moments(
            subgroupShuffleXor(mo.n, off),
            subgroupShuffleXor(mo.mean, off),
            subgroupShuffleXor(mo.m2, off),
        );
        mo = merge(mo, other);
    }
    return mo;
}

