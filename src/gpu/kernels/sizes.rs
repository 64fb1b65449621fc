//! Parsing of size lists such as `512x512x512,17x33x65` and `4096x1024`.

use crate::gpu::kernels::{GemmSize, LayernormSize};

fn dims<const N: usize>(text: &str, what: &str, form: &str) -> anyhow::Result<[u32; N]> {
    let parts: Vec<&str> = text.trim().split(['x', 'X']).collect();
    if parts.len() != N {
        return Err(anyhow::anyhow!(
            "'{text}' is not a {what} size: expected {form}"
        ));
    }
    let mut out = [0u32; N];
    for (slot, part) in out.iter_mut().zip(&parts) {
        let v: u64 = part.trim().parse().map_err(|_| {
            anyhow::anyhow!("'{text}': '{part}' is not a whole number (expected {form})")
        })?;
        if v == 0 {
            return Err(anyhow::anyhow!("'{text}': every dimension must be >= 1"));
        }
        *slot = u32::try_from(v)
            .map_err(|_| anyhow::anyhow!("'{text}': {v} is too large (at most {})", u32::MAX))?;
    }
    Ok(out)
}

pub fn parse_gemm(text: &str) -> anyhow::Result<GemmSize> {
    let [m, n, k] = dims::<3>(text, "GEMM", "MxNxK, e.g. 512x512x512")?;
    let size = GemmSize { m, n, k };
    let elems = [
        m as u64 * k as u64,
        k as u64 * n as u64,
        m as u64 * n as u64,
    ];
    if elems.iter().any(|&e| e > (u32::MAX / 4) as u64) {
        return Err(anyhow::anyhow!(
            "'{text}': a matrix of this size exceeds 4 GiB, beyond what a GPU buffer binding can hold"
        ));
    }
    Ok(size)
}

pub fn parse_layernorm(text: &str) -> anyhow::Result<LayernormSize> {
    let [rows, hidden] = dims::<2>(text, "layernorm", "ROWSxHIDDEN, e.g. 4096x1024")?;
    if rows as u64 * hidden as u64 > (u32::MAX / 4) as u64 {
        return Err(anyhow::anyhow!(
            "'{text}': the matrix exceeds 4 GiB, beyond what a GPU buffer binding can hold"
        ));
    }
    Ok(LayernormSize { rows, hidden })
}

/// A comma-separated list; empty text gives an empty list.
pub fn parse_list<T>(text: &str, one: fn(&str) -> anyhow::Result<T>) -> anyhow::Result<Vec<T>> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(one)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::err_text;

    #[test]
    fn parses_good_sizes() {
        assert_eq!(
            parse_gemm("17x33x65").unwrap(),
            GemmSize {
                m: 17,
                n: 33,
                k: 65
            }
        );
        assert_eq!(
            parse_layernorm("4096X1024").unwrap(),
            LayernormSize {
                rows: 4096,
                hidden: 1024
            }
        );
        assert_eq!(parse_list("1x1x1, 2x2x2", parse_gemm).unwrap().len(), 2);
    }

    #[test]
    fn rejects_bad_sizes_with_reasons() {
        let gemm = |text: &str| err_text(parse_gemm(text));
        assert!(gemm("0x4x4").contains(">= 1"));
        assert!(gemm("4x4").contains("MxNxK"));
        assert!(gemm("4x4xq").contains("whole number"));
        assert!(gemm("99999999999x1x1").contains("too large"));
        assert!(gemm("100000x100000x1").contains("4 GiB"));
        assert!(err_text(parse_layernorm("-3x10")).contains("whole number"));
    }
}
