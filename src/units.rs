//! Byte counts and sizes as people type and read them: `64K`, `16MiB`, `4 KiB`.

use crate::gpu::transfer::COPY_ALIGN;

pub fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// Parses a transfer size such as `4`, `4K`, `64KiB`, `1M`, `1G`: positive, 4-byte aligned.
pub fn parse_size(text: &str) -> anyhow::Result<u64> {
    let v = parse_byte_count(text)?;
    if v % COPY_ALIGN != 0 {
        return Err(anyhow::anyhow!(
            "'{}': transfer sizes must be a positive multiple of {COPY_ALIGN} bytes",
            text.trim()
        ));
    }
    Ok(v)
}

/// Parses a positive byte count with an optional K/M/G unit.
pub fn parse_byte_count(text: &str) -> anyhow::Result<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| anyhow::anyhow!("'{t}' is not a size (e.g. 4096, 64K, 16MiB)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" | "kb" => 1 << 10,
        "m" | "mib" | "mb" => 1 << 20,
        "g" | "gib" | "gb" => 1 << 30,
        u => {
            return Err(anyhow::anyhow!(
                "'{t}': unknown unit '{u}' (use B, K, M or G)"
            ))
        }
    };
    let v = n
        .checked_mul(mult)
        .ok_or_else(|| anyhow::anyhow!("'{t}' is too large"))?;
    if v == 0 {
        return Err(anyhow::anyhow!("'{t}': sizes must be at least 1 byte"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::err_text;

    #[test]
    fn sizes_parse_with_units_and_alignment() {
        assert_eq!(parse_size("4").unwrap(), 4);
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size("16MiB").unwrap(), 16 << 20);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert!(err_text(parse_size("3")).contains("multiple of 4"));
        assert!(parse_size("0").is_err());
        assert!(err_text(parse_size("12Q")).contains("unknown unit"));
        assert!(err_text(parse_size("99999999999999G")).contains("too large"));
        assert_eq!(human_bytes(65536), "64 KiB");
    }
}
