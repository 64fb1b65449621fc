//! What every bench's plan and run share: reading its config table, the bounds of its
//! counts, the GPU it was given, its notes for meta.json.

use anyhow::Result;

use crate::suite::Notes;

/// Deserializes a bench's config table, naming the key that is wrong.
pub(crate) fn table<T: serde::de::DeserializeOwned>(v: toml::Value) -> anyhow::Result<T> {
    // Through text, so the error quotes the offending `key = value` line.
    let text = toml::to_string(&v)?;
    toml::from_str(&text).map_err(|e: toml::de::Error| {
        let full = e.to_string();
        let lines: Vec<&str> = full
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        anyhow::anyhow!(lines.join(" "))
    })
}

/// Iteration counts: at least one, and a bounded run.
pub fn check_iters(key: &str, iters: u32) -> anyhow::Result<()> {
    if iters == 0 || iters > 100_000 {
        return Err(anyhow::anyhow!(
            "{key} = {iters}: expected a count from 1 to 100000"
        ));
    }
    Ok(())
}

/// Warm-up counts: bounded like iterations (zero allowed).
pub fn check_warmup(key: &str, warmup: u32) -> anyhow::Result<()> {
    if warmup > 100_000 {
        return Err(anyhow::anyhow!(
            "{key} = {warmup}: expected a count from 0 to 100000"
        ));
    }
    Ok(())
}

/// Times `f` on the host: `warmup` untimed calls, then `iters` timed ones, each in µs.
pub(crate) fn time_host(warmup: u32, iters: u32, mut f: impl FnMut()) -> Vec<f64> {
    for _ in 0..warmup {
        f();
    }
    (0..iters)
        .map(|_| {
            let t0 = std::time::Instant::now();
            f();
            t0.elapsed().as_secs_f64() * 1e6
        })
        .collect()
}

/// One note.
pub(crate) fn note(key: &str, value: impl serde::Serialize) -> Result<Notes> {
    let mut n = Notes::new();
    n.insert(key.into(), serde_json::to_value(value)?);
    Ok(n)
}
