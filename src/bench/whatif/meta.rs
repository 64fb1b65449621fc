//! The job's sizes: from its meta YAML (the artifact's `JobMeta`), from flags, or inferred
//! from the trace.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::job::Sizes;
use super::trace::Record;

/// Largest size accepted for any dimension (far above real jobs; keeps products small).
const MAX_SIZE: u32 = 1 << 16;
/// A meta file is a handful of lines.
const MAX_META_BYTES: u64 = 64 * 1024;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SizeFlags {
    pub dp: Option<u32>,
    pub pp: Option<u32>,
    pub tp: Option<u32>,
    pub vpp: Option<u32>,
}

/// The artifact's meta file.
#[derive(Debug, Deserialize)]
struct JobMeta {
    #[serde(default)]
    #[allow(dead_code)]
    trial_name: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    run_id: Option<u64>,
    dp_size: u32,
    pp_size: u32,
    #[serde(default = "one")]
    tp_size: u32,
    #[serde(default = "one")]
    dsp_size: u32,
    #[serde(default = "one")]
    vpp_size: u32,
    world_size: Option<u64>,
}

fn one() -> u32 {
    1
}

pub fn sizes(meta: Option<&Path>, flags: &SizeFlags, records: &[Record]) -> Result<Sizes> {
    let inferred = Sizes {
        dp: records.iter().map(|r| r.dp_rank).max().unwrap_or(0) + 1,
        pp: records.iter().map(|r| r.stage).max().unwrap_or(0) + 1,
        tp: 1,
        vpp: records.iter().map(|r| r.mc).max().unwrap_or(0).max(0) as u32 + 1,
        dsp: 1,
    };
    let sizes = match meta {
        Some(path) => read_meta(path)?,
        None => Sizes {
            dp: flags.dp.unwrap_or(inferred.dp),
            pp: flags.pp.unwrap_or(inferred.pp),
            tp: flags.tp.unwrap_or(1),
            vpp: flags.vpp.unwrap_or(inferred.vpp),
            dsp: 1,
        },
    };
    for (name, v) in [
        ("dp", sizes.dp),
        ("pp", sizes.pp),
        ("tp", sizes.tp),
        ("vpp", sizes.vpp),
        ("dsp", sizes.dsp),
    ] {
        if v == 0 || v > MAX_SIZE {
            bail!("the job's {name} size is {v}: give 1 to {MAX_SIZE}");
        }
    }
    Ok(sizes)
}

fn read_meta(path: &Path) -> Result<Sizes> {
    let len = std::fs::metadata(path)
        .with_context(|| format!("--meta {}: cannot read it", path.display()))?
        .len();
    if len > MAX_META_BYTES {
        bail!(
            "--meta {}: {len} bytes is not a job's meta file",
            path.display()
        );
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--meta {}: cannot read it", path.display()))?;
    let m: JobMeta = serde_norway::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "--meta {}: {e}; a meta file has dp_size, pp_size (and tp_size, vpp_size, dsp_size, \
             world_size) as integers",
            path.display()
        )
    })?;
    let product = m.dp_size as u64 * m.pp_size as u64 * m.tp_size as u64 * m.dsp_size as u64;
    if let Some(w) = m.world_size.filter(|&w| w != product) {
        bail!(
            "--meta {}: world_size {w} is not dp x pp x tp x dsp = {product}",
            path.display()
        );
    }
    Ok(Sizes {
        dp: m.dp_size,
        pp: m.pp_size,
        tp: m.tp_size,
        vpp: m.vpp_size,
        dsp: m.dsp_size,
    })
}
